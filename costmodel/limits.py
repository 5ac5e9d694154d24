"""Sizes a model cannot take: a binding the graph itself rules out is an error, not a number.

BERT slices its 512-entry ``position_ids`` buffer to ``seq``: at ``seq=1024`` the slice would need
rows the buffer does not have, torch would fail at run time, and counting the graph anyway gives
confident numbers for a program that cannot run. Only what the graph proves is checked here; the
softer limit, the range a dim was exported for, is a warning (see :func:`range_warnings`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

from ..errors import NarrowpipeWarning, ShapeError
from ..ir import Graph, Op, Sym, Value

__all__ = ["check_size_limits", "range_warnings", "DimRangeWarning"]


class DimRangeWarning(NarrowpipeWarning):
    """A dim bound outside the range its graph was exported for."""


def check_size_limits(graph: Graph, shapes: Mapping[Value, tuple[int, ...]]) -> None:
    """Raise when a slice asks more of an axis than its input holds (a fixed-size table indexed by
    a bound dim)."""
    for node in graph.nodes:
        if node.op is not Op.SLICE or not node.inputs or node.inputs[0] is None or not node.outputs:
            continue
        src, out = node.inputs[0], node.outputs[0]
        have, want = shapes.get(src), shapes.get(out)
        if have is None or want is None or len(have) != len(want):
            continue
        for axis, (h, w) in enumerate(zip(have, want)):
            if w > h:
                dim = out.type.shape[axis]
                names = sorted(dim.symbols) if isinstance(dim, Sym) else []
                where = node.source.scope or node.name
                if not names:   # a fixed-size slice of an input the bound dims made smaller
                    raise ShapeError(_short_input(src, axis, h, w, where), node=node.source.name or node.name,
                                     op=node.source.op or node.label, file=node.source.file or None)
                bound = ", ".join(names)
                raise ShapeError(
                    f"{bound} = {w} is more than this model supports: {where} takes {w} entries of a "
                    f"{h}-entry tensor ({src.source_name or src.name}, axis {axis}); the largest "
                    f"{bound} it can run is {h}", node=node.source.name or node.name, op=node.source.op or node.label,
                    file=node.source.file or None)


def _short_input(src: Value, axis: int, have: int, want: int, where: str) -> str:
    """The message for a slice of fixed size ``want`` from an axis the bound dims left ``have`` long:
    the dims to blame are the input's (``seq=0`` leaves nothing to take the first token of)."""
    dim = src.type.shape[axis]
    names = sorted(dim.symbols) if isinstance(dim, Sym) else []
    held = f"{dim} = {have}" if names else str(have)
    return (f"{where} takes {want} entries of axis {axis} of {src.source_name or src.name}, which holds {held} "
            f"at these sizes; " + (f"bind {', '.join(names)} so it holds at least {want}" if names
                                   else "the graph cannot run"))


def range_warnings(graph: Graph, bindings: Mapping[str, int]) -> list[str]:
    """Bindings above the range a dim was exported for, as ``DimRangeWarning`` and as notes.

    A warning, not an error: an export's upper bound is often a number the exporter picked
    (``Dim("seq", max=64)``) rather than a limit of the model, and the program usually holds past it;
    where it cannot (a position table), :func:`check_size_limits` has already refused. Below the
    range is a note only: torch exports dynamic dims from 2 up, and decode binds seq=1."""
    out = []
    for name, value in bindings.items():
        spec = graph.dims.get(name)
        if spec is None:
            continue
        lo = spec.min if spec.min is not None else "-inf"
        hi = spec.max if spec.max is not None else "inf"
        if spec.max is not None and value > spec.max:
            msg = (f"{name}={value} is above the range the graph was exported for [{lo}, {hi}]; the program "
                   f"was not checked at that size and its numbers may not hold")
            warnings.warn(msg, DimRangeWarning, stacklevel=3)
            out.append(msg)
        elif spec.min is not None and value < spec.min:
            out.append(f"{name}={value} is outside the range the graph was exported for [{lo}, {hi}]; "
                       f"the program may differ at that size")
    return out
