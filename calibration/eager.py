"""The eager per-op host overhead: what a whole model run op by op pays beyond each op's dispatch.

A bare op timed in a loop costs its dispatch (``launch_overhead``) and its work. Inside a model run
eagerly, each op also pays the module call around it, argument handling and the Python glue between
ops (views, reshapes, residual bookkeeping): on a CPU with small tensors this is several
microseconds per op, the same size as the dispatch itself. It is measured on a small model built
from plain torch modules (a GPT-style stack whose ops are tiny, so their bare times are mostly
dispatch): overhead = (measured forward - predicted forward without it - its module calls at the
cost :mod:`.module_calls` measured) / launched kernels.
"""

from __future__ import annotations

from typing import Any

from ..backends import Target
from ..costmodel.analyze import analyze
from .measurement import Case, Measurement

__all__ = ["EAGER_MODEL", "eager_model", "eager_case", "fit_eager_overhead", "eager_reference"]

#: (layers, hidden, heads, sequence) of the calibration model.
EAGER_MODEL: tuple[int, int, int, int] = (4, 64, 4, 16)


def eager_model(layers: int, hidden: int, heads: int, seq: int) -> tuple[Any, tuple[Any, ...]]:
    """A pre-norm transformer stack in plain torch (no transformers), and its input."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv, self.out = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.up, self.down = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x: Any) -> Any:
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (t.view(b, s, heads, d // heads).transpose(1, 2) for t in (q, k, v))
            a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(a.transpose(1, 2).reshape(b, s, d))
            return x + self.down(nn.functional.gelu(self.up(self.ln2(x))))

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.LayerNorm(hidden)

        def forward(self, x: Any) -> Any:
            for block in self.blocks:
                x = block(x)
            return self.norm(x)

    torch.manual_seed(0)
    return Stack().eval(), (torch.randn(1, seq, hidden),)


def eager_case(shape: tuple[int, int, int, int] = EAGER_MODEL) -> Case:
    """The calibration model's eager forward on the CPU, a hot loop in each turn (kind ``eager_model``)."""
    model, args = eager_model(*shape)
    return Case("eager_model", "fp32", shape, 0, 0, lambda: model(*args), min_seconds=0.01)


def eager_reference(measurements: list[Measurement]) -> Measurement | None:
    """The measurement of the calibration stack the eager overhead is fitted to: its record from the
    cold-call depths (:mod:`.cold_calls`, kind ``eager_cold`` at :data:`EAGER_MODEL`'s shape), timed in
    interleaved rounds spread over seconds, where there is one; else the hot-loop ``eager_model``
    record. A hot loop lasts ~20 ms, so one burst of other processes' cache and memory traffic can
    set it: on this shared VM one read 988 us where the interleaved rounds a second later read 554."""
    rounds = [m for m in measurements if m.kind == "eager_cold" and tuple(m.shape) == EAGER_MODEL]
    loop = [m for m in measurements if m.kind == "eager_model"]
    return rounds[-1] if rounds else loop[-1] if loop else None


def fit_eager_overhead(target: Target, m: Measurement, module_call_s: float = 0.0) -> tuple[float, int, float]:
    """(overhead per launched kernel, kernels, predicted seconds without it) for measurement ``m``;
    the stack's ``nn.Module`` calls at ``module_call_s`` each (measured apart) are taken out first,
    so the per-op overhead is what remains per op."""
    from ..frontends.torch.frontend import MODULE_CALLS_META, from_torch
    model, args = eager_model(*m.shape)
    graph = from_torch(model, args)
    report = analyze(graph, target, fusion="none", eager_overhead=False)
    assert report.time_s is not None and report.timing is not None
    kernels = report.timing.kernels
    modules = int(graph.meta.get(MODULE_CALLS_META, 0)) * module_call_s
    return max(0.0, (m.seconds - report.time_s - modules) / max(kernels, 1)), kernels, report.time_s
