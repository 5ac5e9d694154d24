"""Recorded aten calls as one-op IR graphs, so a trace's ops are costed by :mod:`.rules` like any graph.

A profiler trace records each op's input shapes, dtypes and scalar arguments but not its outputs, so
each builder infers the output shape (shape arithmetic, never cost formulas) and emits the
canonical op the torch frontend would (``frontends/aten_*.py``). The builders live by op family:
contractions, convolutions and attention in :mod:`.matmul`; elementwise ops, norms,
softmaxes and reductions in :mod:`.vector`; copies, gathers, creation, pooling and the
zero-cost views in :mod:`.tensor`. This module holds the name tables that decide what
is free or a mere wrapper, joins the families' tables, and is the one entry point.

:func:`lower_call` returns None for an op it cannot map (or whose recorded shapes do not fit): the
diagnosis then looks inside it or lists it as unmodeled with its time, never as zero.
"""

from __future__ import annotations

from dataclasses import replace

from ...ir import Graph
from . import matmul as diagnose_aten_matmul
from . import tensor as diagnose_aten_tensor
from . import vector as diagnose_aten_vector
from .call import Builder, Call, ImpossibleCall
from .collectives import collective_graph, collective_kind
from .out_args import drops_out_arg
from .read import TensorArg
from .vector import ELEMENTWISE

__all__ = ["Call", "lower_call", "ELEMENTWISE", "VIEWS", "PASS_THROUGH", "collective_kind", "collective_graph",
           "covered"]

#: Views and allocations: no work and no traffic (their time is dispatch overhead).
VIEWS: frozenset[str] = frozenset({
    "view", "_unsafe_view", "_reshape_alias", "as_strided", "as_strided_", "t", "transpose", "permute",
    "expand", "expand_as", "slice", "select", "unsqueeze", "squeeze", "detach", "detach_", "alias",
    "lift_fresh", "split", "split_with_sizes", "chunk", "narrow", "unbind", "unflatten", "view_as",
    "resolve_conj", "resolve_neg", "empty", "empty_like", "empty_strided", "new_empty",
    "new_empty_strided", "resize_", "set_", "numpy_T", "movedim", "swapaxes", "diagonal",
    "_local_scalar_dense", "item", "is_nonzero", "size", "stride", "result_type", "_has_compatible_shallow_copy_type",
})
#: Ops that only wrap others: read through them when they have children, free when they do not.
PASS_THROUGH: frozenset[str] = frozenset({
    "contiguous", "to", "_to_copy", "type_as", "reshape", "flatten", "einsum", "dropout",
    "feature_dropout", "alpha_dropout", "lift_fresh_copy", "_autocast_to_reduced_precision",
    "_autocast_to_full_precision", "reshape_as",
})

# The join, in precedence order: named builders first; elementwise names where no builder claimed
# them; the table-driven norms, softmaxes and reductions over anything; views and wrappers last.
_BUILDERS: dict[str, Builder] = {**diagnose_aten_matmul.BUILDERS, **diagnose_aten_tensor.BUILDERS}
for _name in ELEMENTWISE:
    _BUILDERS.setdefault(_name, diagnose_aten_vector.elementwise)
_BUILDERS.update(diagnose_aten_vector.BUILDERS)
for _name in VIEWS | PASS_THROUGH:
    _BUILDERS.setdefault(_name, diagnose_aten_tensor.view)


def _key(base: str) -> str | None:
    if base in _BUILDERS:
        return base
    if base.endswith("_") and not base.endswith("__") and base[:-1] in _BUILDERS:
        return base[:-1]   # in-place variants (add_, fill_, normal_) cost as their base
    return None


def lower_call(call: Call, impossible: bool = False) -> Graph | None:
    """The recorded call as a tiny IR graph (one canonical op, plus a bias add), or None if unmapped.
    ``impossible``: a call no real run could have made (:class:`.call.ImpossibleCall`) raises instead
    of reading as unmapped (the diagnosis refuses a damaged trace)."""
    if not call.name.startswith("aten::"):
        return None
    key = _key(call.base)
    if key is None:
        return None
    if call.inputs and drops_out_arg(call.base, len(call.inputs), isinstance(call.inputs[-1], TensorArg)):
        call = replace(call, inputs=call.inputs[:-1], concrete=call.concrete[:-1])   # the out= buffer
    try:
        return _BUILDERS[key](replace(call, key=key))
    except ImpossibleCall:
        if impossible:
            raise
        return None
    except (IndexError, ValueError, ZeroDivisionError, TypeError, AttributeError):
        return None   # recorded arguments that do not fit the op's schema: unmodeled, not a crash


def covered() -> list[str]:
    """Every aten name (without in-place suffixes) the diagnosis can cost."""
    return sorted(_BUILDERS)
