"""What a serving question returns: latencies, rates, memory and cost of one deployment at one point.

Definitions (every figure is for one replica, the devices its layout uses):

* ``ttft_s``: time to first token, the prefill of the batch's prompts (static batching; a capacity
  plan's continuous batching adds the wait for an iteration and the others' work in the one that
  prefills: :mod:`.generate`); ``tpot_s``: time per output token, one decode step (or iteration)
  with the cache at the context; ``e2e_s``: prefill plus every decode step.
* ``memory``, ``kv_bytes_per_token``, ``kv_bytes_per_sequence``: per device, what one device holds:
  on a TP/PP layout its shard's, on a dataflow layout (whose chips each hold their layers) the
  layout's bytes averaged over its chips (:meth:`.replica.Replica.kv_devices`; a note gives the chip
  count and the model's bytes per token).
* ``output_tokens_per_s``: the replica's output tokens per second; ``tokens_per_s_per_device``
  the same per device; ``prompt_tokens_per_s`` for prefill.
* ``max_batch``: the largest batch whose weights + KV cache + activations + reserve fit each device;
  ``max_batch_is_lower_bound`` (JSON) when the search stopped at its cap
  (:data:`.replica.BATCH_SEARCH_LIMIT`) with room left: a small model's cap read as its limit.
* ``cost_per_million_tokens``: USD per million output tokens at the devices' hourly price; None
  for a deployment that does not fit (it runs no tokens to price: :mod:`..verdict` leaves a target
  that does not fit out of every pick for the same reason).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ...jsonout import dumps as dump_json
from .crossover import Crossover
from .memory import Memory
from .replica import BATCH_SEARCH_LIMIT
from .step import StepTime

__all__ = ["ServingReport", "SERVING_FORMAT"]

SERVING_FORMAT = "narrowpipe.serving"
#: 3: ``max_batch_is_lower_bound``. 4: ``kv_bytes_per_sequence`` (sliding windows capped).
SERVING_VERSION = 4


@dataclass
class ServingReport:
    model: str
    target: str
    mode: str
    layout: str
    devices: int
    batch: int
    context: int | None
    input_len: int | None
    output_len: int | None
    formats: dict[str, str | None]
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    output_tokens_per_s: float | None
    tokens_per_s_per_device: float | None
    prompt_tokens_per_s: float | None
    max_batch: int
    memory: Memory
    kv_bytes_per_token: int       # every cache layer's, what a token adds until sliding windows fill
    kv_bytes_per_sequence: int    # what one sequence's cache holds at its longest (windows capped)
    bound: str
    price_per_hour: float | None
    crossover: Crossover | None = None
    prefill: StepTime | None = None
    decode: StepTime | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def kv_tokens(self) -> int:
        """Tokens one sequence's cache holds at its longest (what ``kv_bytes_per_sequence`` counts):
        a decode step's context and its new token, a prefill's prompt, a request's prompt and output."""
        context = self.context or 0
        return context + 1 if self.mode == "decode" else context

    @property
    def fits(self) -> bool:
        return self.memory.fits

    @property
    def cost_per_million_tokens(self) -> float | None:
        """USD per million output (decode) or prompt (prefill) tokens; None when it does not fit."""
        rate = self.output_tokens_per_s or self.prompt_tokens_per_s
        if not rate or self.price_per_hour is None or not self.fits:
            return None
        return self.price_per_hour * self.devices / 3600 / rate * 1e6

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": SERVING_FORMAT, "version": SERVING_VERSION}
        for k, v in self.__dict__.items():
            if isinstance(v, (Memory, Crossover, StepTime)):
                out[k] = v.to_dict()
            elif v is None or isinstance(v, (int, float, str, list, dict, bool)):
                out[k] = v
            else:
                out[k] = asdict(v)
        out["fits"] = self.fits
        out["cost_per_million_tokens"] = self.cost_per_million_tokens
        out["max_batch_is_lower_bound"] = self.max_batch >= BATCH_SEARCH_LIMIT
        return out

    def to_json(self, indent: int | None = 2) -> str:
        return dump_json(self.to_dict(), indent, "serving report")
