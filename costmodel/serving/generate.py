"""Whole requests: a static batch generated end to end, and continuous batching in steady state.

**Static batching** (``mode="generate"``): the batch's prompts are prefilled together (the first
output token comes out of the prefill), then ``output_len - 1`` decode steps run as the cache grows
from ``input_len`` to ``input_len + output_len - 2`` tokens. A decode step's time is affine in the
cache length up to the execution models' tile rounding (attention reads grow linearly, everything
else stays), so runs of more than :data:`EXACT_STEPS` steps are timed at :data:`SAMPLES` evenly
spaced cache lengths and every step between two samples is interpolated; shorter runs time every
step. The result says which.

**Continuous batching** (vLLM, TensorRT-LLM, SGLang with chunked prefill) at a steady state of
``batch`` requests in flight, each ``input_len`` in and ``output_len`` out: every iteration gives
each running request one token, so ``batch / output_len`` requests finish per iteration and as many
must be admitted, which means ``batch x input_len / output_len`` prompt tokens are prefilled per
iteration alongside the ``batch`` decode tokens. One iteration runs the dense layers (projections,
MLP, norms: everything but attention) once over all its tokens, reading the weights once, and
attention per request: decode attention over the average cache (``input_len + output_len / 2``)
and prefill attention for the admitted prompts; TPOT is that average iteration.

TTFT is when a request's first token comes out: at the end of the iteration that prefills its prompt
(vLLM and TensorRT-LLM schedule a prompt whole into one iteration when it fits the token budget; the
prefill's last position gives the first token). That iteration runs beside the others' decodes and
beside every other prompt admitted with it: ``batch / output_len`` prompts an iteration on average,
and never fewer than the request's own, so it is an iteration with ``max(1, batch / output_len)``
prompts (the average iteration from one prompt an iteration up). A request arrives at a random time
while an iteration runs and is scheduled only when that one ends (vLLM's scheduler runs between
steps, ``EngineCore.step``: schedule, execute, update); for arrivals that see iterations of a fixed
length ``T`` at random moments (Poisson arrivals see time averages) the wait is the mean residual
time ``E[T^2] / (2 E[T]) = T / 2``, so TTFT = ``TPOT / 2`` + the prefilling iteration. What the
average leaves out: the spread of iteration lengths (a longer iteration is more likely to be the one
arrived in, adding ``Var[T] / (2 E[T])``), and queueing for a free slot when arrivals bunch (the
plan holds the batch at its steady state, admitting as many as finish).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .replica import Replica
from .step import StepTime

__all__ = ["decode_total", "Generation", "generate", "SteadyState", "steady_state", "EXACT_STEPS", "SAMPLES"]

#: Runs of at most this many decode steps are timed step by step.
EXACT_STEPS = 16
#: Cache lengths sampled for longer runs (endpoints included).
SAMPLES = 9


def decode_total(replica: Replica, batch: int, first_past: int, steps: int) -> tuple[float, str]:
    """Seconds of ``steps`` decode steps whose caches hold ``first_past``, ``first_past + 1``, ...
    tokens, and how they were timed."""
    if steps <= 0:
        return 0.0, "no decode steps"
    if steps <= EXACT_STEPS:
        return sum(replica.step(batch, 1, first_past + i).time_s for i in range(steps)), f"{steps} steps each timed"
    last = first_past + steps - 1
    points = sorted({first_past + round(i * (last - first_past) / (SAMPLES - 1)) for i in range(SAMPLES)})
    times = [replica.step(batch, 1, p).time_s for p in points]
    total = 0.0
    for (p0, t0), (p1, t1) in zip(zip(points, times), zip(points[1:], times[1:])):
        n = p1 - p0          # steps p0 .. p1 - 1, linear between the samples
        total += n * t0 + (t1 - t0) * (n - 1) / 2
    total += times[-1]       # the last step, at ``last``
    return total, f"{steps} steps, interpolated between {len(points)} timed cache lengths"


@dataclass(frozen=True)
class Generation:
    """Static batching of ``batch`` requests: prefill, then every decode step."""

    prefill: StepTime
    decode_first: StepTime
    decode_last: StepTime
    decode_s: float
    e2e_s: float
    how: str

    @property
    def ttft_s(self) -> float:
        return self.prefill.time_s


def generate(replica: Replica, batch: int, input_len: int, output_len: int) -> Generation:
    prefill = replica.step(batch, input_len, 0)
    steps = max(output_len - 1, 0)
    decode_s, how = decode_total(replica, batch, input_len, steps)
    first = replica.step(batch, 1, input_len)
    last = replica.step(batch, 1, input_len + max(steps - 1, 0))
    return Generation(prefill, first, last, decode_s, prefill.time_s + decode_s, how)


@dataclass(frozen=True)
class SteadyState:
    """One continuous-batching iteration at ``batch`` requests in flight (see the module doc)."""

    batch: int
    iteration_s: float
    ttft_s: float
    prefill_tokens: float          # prompt tokens per iteration
    dense_s: float
    decode_attention_s: float
    prefill_attention_s: float

    @property
    def tpot_s(self) -> float:
        return self.iteration_s

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__) | {"tpot_s": self.tpot_s}


def steady_state(replica: Replica, batch: int, input_len: int, output_len: int) -> SteadyState:
    """The iteration at ``batch`` requests in flight and a request's TTFT (module doc). With ``pp``
    pipeline stages the iteration's work is cut into ``pp`` microbatches kept in flight together, as a
    decode step's sequences are (vLLM's and TensorRT-LLM's pipeline-parallel scheduling): each carries
    ``1 / pp`` of the dense tokens (:meth:`.Replica.mixed_step`), of the decodes (whose attention
    :meth:`.Replica.step` already times per microbatch) and of the admitted prompts, and a token's
    iteration is its microbatch's trip through every stage. The prefilling iteration is cut the same
    way (a lone prompt's tokens too, chunked over the microbatches), so TTFT stays TPOT / 2 plus it."""
    admitted = batch / output_len                      # requests per iteration
    decode_attn = replica.step(batch, 1, input_len + output_len // 2).attention_s
    prompt_attn = replica.step(1, input_len, 0).attention_s
    dense, prefill_attn = _iteration(replica, batch, admitted, input_len, prompt_attn)
    iteration = dense + decode_attn + prefill_attn
    # the iteration that prefills the request: at least its own prompt in it
    first_dense, first_attn = _iteration(replica, batch, max(admitted, 1.0), input_len, prompt_attn)
    ttft = iteration / 2 + first_dense + decode_attn + first_attn
    return SteadyState(batch, iteration, ttft, admitted * input_len, dense, decode_attn, prefill_attn)


def _iteration(replica: Replica, batch: int, prompts: float, input_len: int,
               prompt_attn: float) -> tuple[float, float]:
    """(dense seconds, prompt attention seconds) of an iteration decoding ``batch`` requests and
    prefilling ``prompts`` prompts of ``input_len``: the dense layers once over all its tokens, the
    prompts' attention per prompt, a ``1 / pp`` share of it on a token's microbatch."""
    tokens = max(1, round(batch + prompts * input_len))
    return replica.mixed_step(tokens).dense_s, prompt_attn * prompts / (replica.layout.pp * replica.layout.dp)
