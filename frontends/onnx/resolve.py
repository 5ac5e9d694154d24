"""The output types of one node: ONNX's whole-model answer, repaired where it has none.

Most values take the fast path: ONNX inferred a fully known type and it is converted once (cached
by its bytes). Otherwise the node's own answer is assembled, most exact first: folded values, the
op's shape rule, then ONNX's inference of this one node from our already repaired input types
(which also knows every op's output dtype), and merged into ONNX's partial answer by
:meth:`ShapeState.settle`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import AttributeProto

from ...errors import ShapeError
from ...ir import DType, Sym, TensorType
from .node import NodeCx
from .node_infer import node_inference
from .shapes import OutSpec, RawType
from .types import DTYPES

__all__ = ["resolve_types", "own_shapes", "node_specs"]

Rules = dict[str, Callable[[NodeCx], list[OutSpec | None]]]
_ONNX_DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.preview")


def resolve_types(cx: NodeCx, rules: Rules, own: list[OutSpec | None] | None = None, *,
                  override: bool = False) -> list[TensorType]:
    """Types of ``cx``'s present outputs; ``own`` are specs the lowering computed itself."""
    state = cx.lw.state
    if state.lazy is not None:   # no whole-model answer: typed node by node (.lazy_types)
        return state.lazy.resolve(cx, rules, own)
    outputs = cx.outs
    flagged = cx.name in state.errors
    if own is None and not flagged:
        fast: list[TensorType] = []
        scope = cx.scope
        type_of = scope.types.get if scope.parent is None else scope.type_of
        for o in outputs:
            if not o:
                continue
            tp = type_of(o)
            t = state.ready(tp, o, cx.name) if tp is not None else None
            if t is None:
                break
            fast.append(t)
        else:
            if state.reads_unknown(cx.values):
                _declared_sizes(cx, rules, fast)
            return fast
    raws: list[RawType | None] = [state.raw(cx.scope.type_of(o), o, cx.name) if o else None for o in outputs]
    if override and own is not None:
        for k, r in enumerate(raws):
            spec = own[k] if k < len(own) else None
            if r is not None and spec is not None and spec[1] is not None:
                raws[k] = (r[0], None)
    if own is None and (flagged or any(o and state.needs_repair(r) for o, r in zip(outputs, raws))):
        own = own_shapes(cx, rules, raws)
    out: list[TensorType] = []
    for k, (o, raw) in enumerate(zip(outputs, raws)):
        if not o:
            continue
        spec = own[k] if own is not None and k < len(own) else None
        out.append(state.settle(raw, spec, name=o, node=cx.name, op=cx.source.op, flagged=flagged,
                                upper_bound=lambda: _upper_bound(cx)))
    return out


def _declared_sizes(cx: NodeCx, rules: Rules, declared: list[TensorType]) -> None:
    """Where the file declares a size for an output dim that the node's own rule gives as a
    data-dependent dim it read (``Log`` of a ``ReduceSum`` over run-time axes, declared ``[3]``),
    that size settles the dim (:meth:`ShapeState.declare_size`); the declared types stand."""
    rule = rules.get(cx.key)
    if rule is None:
        return
    present = [o for o in cx.outs if o]
    for o, t, spec in zip(present, declared, [s for o, s in zip(cx.outs, rule(cx)) if o]):
        if spec is None or spec[1] is None or len(spec[1]) != len(t.shape):
            continue
        for mine, size in zip(spec[1], t.shape):
            if isinstance(mine, Sym) and isinstance(size, int):
                cx.lw.state.declare_size(mine, size, o, cx.name, cx.source.op)


def own_shapes(cx: NodeCx, rules: Rules, raws: list[RawType | None]) -> list[OutSpec | None]:
    """The node's own answer per output, most exact first: folded values, its rule, ONNX's
    inference of this one node (where ``raws``, ONNX's answer so far, leaves something open)."""
    outputs = cx.outs
    n = len(outputs)
    own: list[OutSpec | None] = [None] * n
    if cx.folded is not None:
        for k, arr in enumerate(cx.folded[:n]):
            own[k] = (_np_dtype(arr), tuple(arr.shape))
    rule = rules.get(cx.key)
    ruled = (rule(cx) if rule is not None and any(s is None for s in own) else []) + [None] * n
    missing = [k for k in range(n) if outputs[k] and own[k] is None and _needs_inference(ruled[k], raws[k])]
    inferred: list[OutSpec | None] = []
    if missing and cx.domain in _ONNX_DOMAINS and not _has_subgraph(cx.node):
        inferred = node_specs(cx) or []
    inferred = inferred + [None] * n
    fallback_dt = next((v.type.dtype for v in cx.inputs()), None)
    for k in range(n):
        if own[k] is not None or not outputs[k]:
            continue
        r, i = ruled[k], inferred[k]
        dtype = (r[0] if r else None) or (i[0] if i else None)
        dims = r[1] if r is not None and r[1] is not None else (i[1] if i else None)
        if dtype is None and not _has_elem_type(raws[k]):
            dtype = fallback_dt
        own[k] = (dtype, dims)
    return own


def _has_elem_type(raw: RawType | None) -> bool:
    return raw is not None and bool(raw[0])


def _needs_inference(ruled: OutSpec | None, raw: RawType | None) -> bool:
    """Whether the rule left the dims unknown, or the dtype unknown to both the rule and ONNX."""
    if ruled is None or ruled[1] is None:
        return True
    return not (_has_elem_type(raw) or ruled[0] is not None)


def node_specs(cx: NodeCx) -> list[OutSpec | None] | None:
    """ONNX's inference of this one node from its already typed inputs (None: no schema)."""
    in_types = [None if v is None else (v.type.dtype, v.type.shape) for v in cx.values]
    data = [cx.known(i) for i in range(cx.n_inputs())]
    info = cx.lw.info
    try:
        return node_inference(cx.node, cx.opset, info.opset_protos, in_types, data, info.ir_version)
    except Exception as exc:
        text = str(exc).strip().replace("\n", " ")
        raise cx.error(f"shape inference failed: {text[:400]}", ShapeError) from None


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


def _np_dtype(arr: np.ndarray) -> DType | None:
    if arr.dtype == object:
        return DType.INT64
    try:
        code = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
    except Exception:
        return None
    return DTYPES.get(code)


def _upper_bound(cx: NodeCx) -> int | None:
    """For data-dependent output sizes: the largest static input's element count."""
    best: int | None = None
    for v in cx.values:
        if v is None:
            continue
        if not v.type.is_static:
            return None
        n = v.type.numel()
        best = n if best is None else max(best, n)
    return best
