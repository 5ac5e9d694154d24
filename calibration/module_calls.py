"""What an eager run pays per ``nn.Module`` call, measured on trivial modules.

A model run eagerly calls ``nn.Module.__call__`` for every module it enters (the hook checks, the
forward's Python frame, the attribute lookup of the submodule), on top of each op's dispatch. Some
architectures wrap nearly every op in a module of its own (MobileNet's conv, norm and activation
layers: about one module call per op), others several ops in one (a transformer block: about one
call per two ops), so one per-op overhead cannot serve both. Measured as the same chain of tiny
adds run through two nested modules per add and inline in one forward: the difference over the
module calls is the cost of one call.
"""

from __future__ import annotations

from typing import Any

from .interleave import interleaved_samples
from .sweeps import Measurement
from .timer import calibration_quantile, quantile

__all__ = ["CHAIN", "module_chain", "measure_module_call"]

#: Adds in the chain (each wrapped in two module calls in the nested variant).
CHAIN = 64


def module_chain(nested: bool, n: int = CHAIN) -> Any:
    """``n`` adds of a constant to a 16-element tensor: through ``2n`` module calls (a wrapper
    module calling an adding module) when ``nested``, else inline in one forward."""
    from torch import nn

    class Add(nn.Module):
        def forward(self, x: Any) -> Any:
            return x + 1.0

    class Wrap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Add()

        def forward(self, x: Any) -> Any:
            return self.inner(x)

    class Nested(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Wrap() for _ in range(n))

        def forward(self, x: Any) -> Any:
            for block in self.blocks:
                x = block(x)
            return x

    class Inline(nn.Module):
        def forward(self, x: Any) -> Any:
            for _ in range(n):
                x = x + 1.0
            return x

    return (Nested() if nested else Inline()).eval()


def measure_module_call(n: int = CHAIN, rounds: int = 15) -> Measurement:
    """Seconds per module call: (nested - inline) / (2 n), each calibration's quantile of
    interleaved rounds on the thread's CPU clock at one torch thread (else the lower quartile of the
    wall clock); kind ``module_call``,
    shape (module calls, adds)."""
    import torch
    x = torch.randn(16)
    nested, inline = module_chain(True, n), module_chain(False, n)
    one_thread = torch.get_num_threads() == 1
    with torch.no_grad():
        samples = interleaved_samples([lambda: nested(x), lambda: inline(x)], warmup=5, rounds=rounds,
                                      min_seconds=0.002, thread_clock=one_thread)
    q = calibration_quantile() if one_thread else 0.25
    low = [quantile(s.cpu if s.cpu else s.wall, q) for s in samples]
    return Measurement("module_call", "fp32", (2 * n, n), 0, 0, max(0.0, (low[0] - low[1]) / (2 * n)))
