"""Fusion under the pass manager: the kernel list as a cached analysis and a ``fuse`` pass.

Why: fusion annotates a program (which nodes launch together) without changing it, so it is an
analysis of the graph, cached by the :class:`~narrowpipe.ir.AnalysisManager` and dropped by the
first mutation like any other. The ``fuse`` pass picks the mode (``fuse{mode=none}`` for eager
PyTorch) and hands its kernel list on as the ``kernels`` analysis; without it, ``kernels`` fuses
fully. Both count the graph under its dims' default values (the export's example sizes, or those
a ``bind-dims`` pass earlier in the pipeline set); callers with their own bindings keep calling
:func:`~.kernels.fuse` on their cost table.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import PassError, UnboundDimError
from ..ir import ALL, AnalysisManager, Graph, PassResult, register_analysis, register_pass
from .interpreter import CostTable, interpret
from .kernels import FUSION_MODES, Kernel, fuse

__all__ = ["Fuse", "cost_table", "kernels"]


@register_analysis("cost-table")
def cost_table(graph: Graph, am: AnalysisManager) -> CostTable:
    """Per-node costs under the graph's default dim values (a ``bind-dims`` pass sets them)."""
    bindings = graph.default_bindings()
    missing = sorted(graph.symbols() - set(bindings))
    if missing:
        raise UnboundDimError(f"graph {graph.name!r} has dims without a default: {', '.join(missing)}; "
                              f"bind them first in the pipeline: 'bind-dims{{{missing[0]}=N}},...'")
    return interpret(graph, bindings)


@register_analysis("kernels")
def kernels(graph: Graph, am: AnalysisManager) -> list[Kernel]:
    """The kernels a fully fusing compiler launches (what the ``fuse`` pass gives by default)."""
    return fuse(am.get("cost-table", graph), "full")


@register_pass("fuse")
@dataclass(frozen=True)
class Fuse:
    """Pipeline form: ``fuse`` or ``fuse{mode=none}``; the graph is unchanged."""

    mode: str = "full"

    def __post_init__(self) -> None:
        if self.mode not in FUSION_MODES:
            raise PassError(f"pass 'fuse': unknown mode {self.mode!r}; choose from {', '.join(FUSION_MODES)}")

    def run(self, graph: Graph, am: AnalysisManager) -> PassResult:
        am.put("kernels", graph, fuse(am.get("cost-table", graph), self.mode))
        return PassResult(graph, ALL)
