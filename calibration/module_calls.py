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

from .measurement import Case, Measurement, bound
from .rounds import measure_in_rounds

__all__ = ["CHAIN", "module_chain", "module_call_cases", "module_call_from", "measure_module_call"]

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


def module_call_cases(n: int = CHAIN) -> list[Case]:
    """The nested and the inline chain (kind ``module_chain``, shape (module calls, adds); the inline
    one has no module calls), timed in turns of repeated calls with no warm-up."""
    import torch
    x = torch.randn(16)
    nested, inline = module_chain(True, n), module_chain(False, n)
    return [Case("module_chain", "fp32", (calls, n), 0, 0, bound(m, x), warmup=0, min_seconds=0.002)
            for calls, m in ((2 * n, nested), (0, inline))]


def module_call_from(ms: list[Measurement]) -> Measurement | None:
    """Seconds per module call, (nested - inline) / (2 n), from the two chains' records (the last
    of each): kind ``module_call``, shape (module calls, adds). None without both."""
    nested = [m for m in ms if m.kind == "module_chain" and m.shape[0] > 0]
    inline = [m for m in ms if m.kind == "module_chain" and m.shape[0] == 0]
    if not nested or not inline:
        return None
    calls, n = nested[-1].shape
    return Measurement("module_call", "fp32", (calls, n), 0, 0,
                       max(0.0, (nested[-1].seconds - inline[-1].seconds) / calls))


def measure_module_call(n: int = CHAIN, rounds: int = 15) -> Measurement:
    """:func:`module_call_from` the two chains measured alone in ``rounds`` interleaved rounds."""
    import torch
    with torch.no_grad():
        m = module_call_from(measure_in_rounds(module_call_cases(n), rounds))
    assert m is not None
    return m
