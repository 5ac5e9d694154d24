"""``bind-dims{batch=8,seq=2048}``: a pipeline step that fixes dim sizes for the passes after it.

Why: the analyses under the pass manager (``cost-table``, ``kernels``, and the ``fuse`` pass that
reads them) count a graph under its dims' defaults, and an ONNX export declares none (its
``dim_param`` names carry no example size), so ``fuse`` on a loaded ``.onnx`` had nothing to count at
and no pipeline text could give it sizes. The pass returns a copy whose dims default to the given
sizes (checked as :func:`~narrowpipe.analyze` checks ``dims=``: a dim of the graph, by its name or its
source's, at a size it may take); the input graph keeps its own defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import NarrowpipeError, PassError
from ..ir import AnalysisManager, DimSpec, Graph, PassResult, register_pass
from .analyze import checked_sizes

__all__ = ["BindDims"]


@register_pass("bind-dims")
@dataclass(frozen=True)
class BindDims:
    """Pipeline form: ``bind-dims{batch=8,seq=2048}``; the options are dim names, so the pass is
    built from them by :meth:`from_options` rather than from fields."""

    sizes: tuple[tuple[str, int], ...] = ()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> BindDims:
        sizes: list[tuple[str, int]] = []
        for name, raw in options.items():
            try:
                sizes.append((name, int(raw)))
            except (TypeError, ValueError):
                raise PassError(f"pass 'bind-dims': {name}={raw!r} is not an integer size") from None
        if not sizes:
            raise PassError("pass 'bind-dims' needs at least one dim: bind-dims{batch=8,seq=2048}")
        return cls(tuple(sizes))

    def run(self, graph: Graph, am: AnalysisManager) -> PassResult:
        """A new graph whose defaults are the sizes: the input's cached analyses stay valid for it."""
        try:
            sizes = checked_sizes(graph, dict(self.sizes))
        except NarrowpipeError as exc:
            raise PassError(f"pass 'bind-dims': {exc}") from None
        out = graph.clone()
        for name, n in sizes.items():
            spec = out.dims.get(name) or DimSpec(name, doc="declared by the bind-dims pass")
            out.declare_dim(dataclasses.replace(spec, default=n))
        return PassResult(out)
