"""The one table that maps aten ops to canonical ops.

Keys are ``packet`` (``"add"``) or ``packet.overload`` (``"max.other"``) names; the overload key
wins. In-place variants (``add_``) fall back to their functional form. Ops listed in
:data:`IGNORED` carry no tensor work (assertions, size queries); anything else missing from the
table becomes an ``UNKNOWN`` node that reports list as unmodeled.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch.fx as fx

from ...ir import Graph, Op
from .aten_args import arg, scalar
from .aten_contractions import CONTRACTION_LOWERINGS
from .aten_names import ELEMENTWISE_OPS
from .aten_nn import NN_LOWERINGS
from .aten_recurrent import RECURRENT_LOWERINGS
from .aten_tensor import TENSOR_LOWERINGS
from .lowering import AtenLowerer

__all__ = ["ATEN_TABLE", "IGNORED", "covered_ops"]


def _elementwise(op: Op, **fixed: object) -> Callable[[AtenLowerer, fx.Node], None]:
    """Tensor arguments become inputs; the first Python scalar, if any, an attribute."""
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        ins = cx.values(n.args)
        attrs = dict(fixed)
        scalars = [a for a in n.args if not isinstance(a, (fx.Node, list, tuple)) and a is not None]
        if scalars:
            attrs["scalar"] = scalar(scalars[0])
        if op in (Op.ADD, Op.WHERE):
            attrs.update(cx.mask_attrs(n))
        cx.emit(op, ins, n, attrs or None)
    return fn



#: aten ops that carry no tensor work: assertions, size queries, autograd bookkeeping.
IGNORED: frozenset[str] = frozenset({
    "_assert_tensor_metadata", "_assert_scalar", "_assert_async", "_functional_assert_async",
    "_functional_assert_scalar", "sym_size", "sym_numel", "sym_stride", "sym_storage_offset",
    "sym_constrain_range", "sym_constrain_range_for_size", "_local_scalar_dense", "item",
    "python::_set_grad_enabled", "_make_dep_token", "record_stream", "_print", "_check_is_size",
    "python::sym_float", "python::sym_int", "python::sym_max", "python::sym_min", "python::sym_not",
    "python::sym_sqrt", "python::sym_ite", "python::_assert",
})


def _inline(gm_arg_index: int) -> Callable[[AtenLowerer, fx.Node], None]:
    """Higher-order wrappers (set_grad_enabled, autocast, invoke_subgraph): lower the body in place."""
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        gm_node = n.args[gm_arg_index]
        sub = cx.env.get(gm_node) if isinstance(gm_node, fx.Node) else None
        if not isinstance(sub, fx.GraphModule):
            cx.emit(Op.UNKNOWN, cx.values(n.args), n, {"source_op": str(n.target)})
            return
        operands = list(n.args[gm_arg_index + 1:])
        placeholders = [p for p in sub.graph.nodes if p.op == "placeholder"]
        mapping = {p: cx.env.get(a) if isinstance(a, fx.Node) else None for p, a in zip(placeholders, operands)}
        outs = cx.lower(sub.graph, mapping, lambda node: cx.get_attr(sub, node))
        cx.bind(n, outs)
    return fn


def _cond(cx: AtenLowerer, n: fx.Node) -> None:
    """torch.cond(pred, true_fn, false_fn, operands): an If with both branches as nested graphs."""
    pred, true_gm, false_gm = n.args[:3]
    operands = arg(n, 3, "operands")
    branches: dict[str, Graph] = {}
    for key, gm_node in (("then_branch", true_gm), ("else_branch", false_gm)):
        gm = cx.env.get(gm_node) if isinstance(gm_node, fx.Node) else None
        if not isinstance(gm, fx.GraphModule):
            cx.emit(Op.UNKNOWN, cx.values(n.args), n, {"source_op": str(n.target)})
            return
        body = Graph(f"{n.name}_{key}")
        inner = AtenLowerer(body, cx.symbols, cx.table, cx.ignored, file=cx.file, strict=cx.strict, root=gm)
        placeholders = [p for p in gm.graph.nodes if p.op == "placeholder"]
        mapping = {}
        for p, a in zip(placeholders, operands):
            outer = cx.value(a)
            if outer is not None:
                mapping[p] = body.add_input(p.name, outer.type)
        body.set_outputs(inner.lower(gm.graph, mapping, partial(inner.get_attr, gm)))
        branches[key] = body
    cx.emit(Op.IF, [cx.value(pred), *cx.values(operands)], n, branches)


def _gelu(cx: AtenLowerer, n: fx.Node) -> None:
    cx.emit(Op.GELU, [cx.value(n.args[0])], n, {"approximate": str(n.kwargs.get("approximate", "none"))})


def _build() -> dict[str, Callable[[AtenLowerer, fx.Node], None]]:
    table: dict[str, Callable[[AtenLowerer, fx.Node], None]] = {}
    for name, op in ELEMENTWISE_OPS.items():
        table[name] = _elementwise(op)
    table["gelu"] = _gelu
    table.update(CONTRACTION_LOWERINGS)
    table.update(NN_LOWERINGS)
    table.update(TENSOR_LOWERINGS)
    table.update(RECURRENT_LOWERINGS)
    table["higher_order::wrap_with_set_grad_enabled"] = _inline(1)
    table["higher_order::wrap_with_autocast"] = _inline(4)
    table["higher_order::invoke_subgraph"] = _inline(0)
    table["higher_order::cond"] = _cond
    return table


ATEN_TABLE = _build()


def covered_ops() -> list[str]:
    """Every aten op name the table lowers (for the coverage table in the docs)."""
    return sorted(ATEN_TABLE)
