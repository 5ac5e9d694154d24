"""Lowerings of ONNX control flow (If, Loop, Scan) and of sequences and optionals.

Bodies are lowered recursively into nested IR graphs (attrs ``then_branch``/``else_branch`` or
``body``) that see the enclosing scope, so the cost interpreter can take the costlier branch or
multiply a body by its trip count. An ONNX sequence is held as its elements stacked along a new
leading dim (``[length, *element]``), which is what a runtime moves when it copies the sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...ir import DimSpec, DType, Op, Sym, TensorType, Value
from .fold import as_dims
from .node import NodeCx
from .shapes import Bounded, OutSpec
from .symdims import DimLike, Poly, dim_add, dim_ceildiv, dim_eq, dim_max, dim_mul, dim_sub, sanitize_symbol, to_dim

__all__ = ["CONTROL_LOWERINGS", "merge_shapes", "trip_attr"]


def merge_shapes(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The shape covering both (an If's two branches): equal dims kept, else the larger."""
    if len(a) != len(b):
        return None
    return tuple(x if dim_eq(x, y) else to_dim(dim_max(x, y)) for x, y in zip(a, b))


def trip_attr(n: Any) -> int | str | None:
    """A trip count the interpreter understands: an int, or the name of one dim."""
    if isinstance(n, int):
        return n
    d = to_dim(n) if isinstance(n, Poly) else n
    if isinstance(d, int):
        return d
    if isinstance(d, Sym) and d.symbols == {d.expr}:
        return d.expr
    return None


def _if(cx: NodeCx) -> None:
    then_g = cx.lower_body("then_branch", [])
    else_g = cx.lower_body("else_branch", [])
    own: list[OutSpec | None] = []
    for a, b in zip(then_g.outputs, else_g.outputs):
        own.append((a.type.dtype, merge_shapes(a.type.shape, b.type.shape)))
    seq = any(_output_is_sequence(cx, k) for k in range(cx.n_outputs()))
    types = cx.settle(own, override=seq)
    cx.emit(Op.IF, cx.inputs(0), {"then_branch": then_g, "else_branch": else_g}, types=types)


def _output_is_sequence(cx: NodeCx, k: int) -> bool:
    name = cx.node.output[k] if k < cx.n_outputs() else ""
    tp = cx.scope.type_of(name) if name else None
    return tp is not None and tp.WhichOneof("value") in ("sequence_type", "optional_type")


def _loop(cx: NodeCx) -> None:
    carried = [cx.input(i) for i in range(2, cx.n_inputs())]
    body_in: list[TensorType | None] = [TensorType(DType.INT64, ()), TensorType(DType.BOOL, ())]
    body_in += [None if v is None else v.type for v in carried]
    body = cx.lower_body("body", body_in)
    m = as_dims(cx.known(0))
    trips: Any = m[0] if m else None
    n_carried = len(carried)
    scans = body.outputs[1 + n_carried:]
    if trips is None and scans:
        trips = _trip_dim(cx, n_carried)
    own: list[OutSpec | None] = [(v.type.dtype, v.type.shape) for v in body.outputs[1:1 + n_carried]]
    for v in scans:
        own.append((v.type.dtype, (to_dim(trips) if isinstance(trips, Poly) else trips, *v.type.shape)))
    types = cx.settle(own, override=True)
    cx.emit(Op.LOOP, cx.inputs(), {"body": body, "trip_count": trip_attr(trips)}, types=types)


def _trip_dim(cx: NodeCx, n_carried: int) -> Sym:
    """A trip count read at run time, as the dim ``<loop>_trips``: the scan outputs' leading dim is
    the trip count, so one binding (``--set Loop_0_trips=5``, the name the cost interpreter reads)
    sizes both the outputs and the body's repeats. Its default is 1 (the body counted once, as the
    interpreter notes), or the leading dim a scan output's declared type states."""
    state = cx.lw.state
    name = sanitize_symbol(f"{cx.name}_trips")
    if name not in state.dims:
        state.names.reserve(name)
        state.unknown.add(name)
        state.dims[name] = DimSpec(name, default=1, min=0,
                                   doc=f"trip count of {cx.source.op} node {cx.name!r}, read at run time; "
                                       "default 1 counts the body once")
    dim = Sym(name)
    for out in cx.outs[n_carried:]:   # outputs: the carried values, then the scan outputs
        raw = state.raw(cx.scope.type_of(out), out, cx.name) if out else None
        lead = raw[1][0] if raw is not None and raw[1] else None
        if isinstance(lead, int) and not isinstance(lead, bool):
            state.declare_size(dim, lead, out, cx.name, cx.source.op)
            break
    return dim


def _scan(cx: NodeCx) -> None:
    n_scan = int(cx.attr("num_scan_inputs", 0))
    legacy = cx.opset < 9  # opset 8: a leading sequence_lens input and a batch axis on everything
    first = 1 if legacy else 0
    values = [cx.input(i) for i in range(first, cx.n_inputs())]
    n_state = len(values) - n_scan
    states, scans = values[:n_state], values[n_state:]
    in_axes = [int(a) for a in cx.attr("scan_input_axes", [0] * n_scan)] if not legacy else [1] * n_scan
    length: Any = None
    body_in: list[TensorType | None] = []
    for v in states:
        body_in.append(None if v is None else (v.type.with_shape(v.type.shape[1:]) if legacy else v.type))
    for v, axis in zip(scans, in_axes):
        if v is None:
            body_in.append(None)
            continue
        axis = axis + v.type.rank if axis < 0 else axis
        if length is None:
            length = v.type.shape[axis]
        shape = tuple(d for i, d in enumerate(v.type.shape) if i != axis and not (legacy and i == 0))
        body_in.append(v.type.with_shape(shape))
    body = cx.lower_body("body", body_in)
    out_axes = [int(a) for a in cx.attr("scan_output_axes", [0] * (len(body.outputs) - n_state))]
    own: list[OutSpec | None] = []
    batch = values[0].type.shape[0] if legacy and values and values[0] is not None else None
    for v in body.outputs[:n_state]:
        own.append((v.type.dtype, ((batch,) if legacy else ()) + tuple(v.type.shape)))
    for k, v in enumerate(body.outputs[n_state:]):
        out_shape: list[DimLike | None] = list(v.type.shape)
        axis = out_axes[k] if k < len(out_axes) and not legacy else 0
        axis = axis + len(out_shape) + 1 if axis < 0 else axis
        out_shape.insert(axis, length)
        if legacy:
            out_shape.insert(0, batch)
        own.append((v.type.dtype, tuple(out_shape)))
    types = cx.settle(own, override=True)
    cx.emit(Op.SCAN, cx.inputs(), {"body": body, "scan_length": length if isinstance(length, int) else None,
                                   "trip_count": trip_attr(length)}, types=types)


# -- sequences ------------------------------------------------------------------------------

def _elem(v: Value) -> tuple[Any, ...]:
    return tuple(v.type.shape[1:])


def _length(v: Value) -> Any:
    """A stacked sequence's length (None when the value carries no length dim)."""
    return v.type.shape[0] if v.type.rank else None


def _seq_type(cx: NodeCx, length: Any, elem: tuple[Any, ...] | None, dtype: DType | None = None) -> list[TensorType]:
    raw_dt = dtype
    own: list[OutSpec | None] = [(raw_dt, None if elem is None else (length, *elem))]
    return cx.settle(own, override=elem is not None)


def _sequence_empty(cx: NodeCx) -> None:
    cx.emit(Op.FILL, [], {"uninitialized": True}, types=_seq_type(cx, 0, ()))


def _stack_shape(values: list[Value]) -> tuple[Any, ...]:
    shape = values[0].type.shape
    for v in values[1:]:
        shape = merge_shapes(shape, v.type.shape) or shape
    return shape


def _sequence_construct(cx: NodeCx) -> None:
    ins = cx.inputs()
    cx.emit(Op.CONCAT, ins, {"axis": 0, "stack": True}, types=_seq_type(cx, len(ins), _stack_shape(ins)))


def _sequence_insert(cx: NodeCx) -> None:
    seq, t = cx.input(0), cx.input(1)
    assert seq is not None and t is not None
    old = _elem(seq)
    elem = t.type.shape if seq.type.rank <= 1 else (merge_shapes(old, t.type.shape) or t.type.shape)
    n = _length(seq)
    cx.emit(Op.CONCAT, cx.inputs(), {"axis": 0, "stack": True},
            types=_seq_type(cx, None if n is None else to_dim(dim_add(n, 1)), elem))


def _sequence_erase(cx: NodeCx) -> None:
    seq = cx.input(0)
    assert seq is not None
    n = _length(seq)
    cx.emit(Op.COPY, cx.inputs(), {"erase": True},
            types=_seq_type(cx, None if n is None else to_dim(dim_max(dim_sub(n, 1), 0)), _elem(seq)))


def _sequence_at(cx: NodeCx) -> None:
    seq = cx.input(0)
    assert seq is not None
    types = cx.settle([(seq.type.dtype, _elem(seq))], override=True)
    cx.emit(Op.SLICE, cx.inputs(), {"axis": 0, "index": True}, types=types)


def _sequence_length(cx: NodeCx) -> None:
    cx.emit(Op.SHAPE_OF, cx.inputs(0), {"what": "length"})


def _split_to_sequence(cx: NodeCx) -> None:
    x = cx.input(0)
    assert x is not None
    axis = int(cx.attr("axis", 0))
    axis = axis + x.type.rank if axis < 0 else axis
    dim = x.type.shape[axis]
    split = as_dims(cx.known(1)) if cx.input(1) is not None else None
    elem: list[DimLike | Bounded] = list(x.type.shape)
    if cx.input(1) is None:
        n: Any = dim
        if cx.attr("keepdims", 1):
            elem[axis] = 1
        else:
            del elem[axis]
    elif split is not None and len(split) == 1 and cx.rank(1) == 0:
        n = dim_ceildiv(dim, split[0])
        elem[axis] = split[0]
    elif split is not None:
        n = len(split)
        biggest = split[0]
        for s in split[1:]:
            biggest = dim_max(biggest, s)
        elem[axis] = biggest
    else:  # sizes only known at run time: as many pieces as the split tensor says, sizes unknown
        shape = cx.shape(1) or ()
        n = shape[0] if len(shape) == 1 else None
        elem[axis] = Bounded(dim)
    length = to_dim(n) if isinstance(n, Poly) else n
    elem_shape = tuple(to_dim(e) if isinstance(e, Poly) else e for e in elem)
    cx.emit(Op.SPLIT, cx.inputs(), {"axis": axis}, types=_seq_type(cx, length, elem_shape))


def _concat_from_sequence(cx: NodeCx) -> None:
    seq = cx.input(0)
    assert seq is not None
    n, elem = _length(seq), list(_elem(seq))
    axis = int(cx.attr("axis", 0))
    if cx.attr("new_axis", 0):
        axis = axis + len(elem) + 1 if axis < 0 else axis
        elem.insert(axis, n if n is not None else Bounded())
    else:
        axis = axis + len(elem) if axis < 0 else axis
        if not elem:
            raise cx.error("ConcatFromSequence of scalars needs new_axis=1")
        elem[axis] = to_dim(dim_mul(elem[axis], n)) if n is not None else Bounded()
    types = cx.settle([(seq.type.dtype, tuple(elem))], override=True)
    cx.emit(Op.CONCAT, cx.inputs(), {"axis": axis, "from_sequence": True}, types=types)


def _sequence_map(cx: NodeCx) -> None:
    """SequenceMap: the body once per element (a loop over the sequence's length)."""
    seqs = [cx.input(i) for i in range(cx.n_inputs())]
    body_in: list[TensorType | None] = []
    for i, v in enumerate(seqs):
        if v is None:
            body_in.append(None)
        elif cx.is_sequence(i):
            body_in.append(v.type.with_shape(_elem(v)))
        else:
            body_in.append(v.type)
    body = cx.lower_body("body", body_in)
    first = seqs[0]
    length = first.type.shape[0] if first is not None and first.type.rank else 1
    own: list[OutSpec | None] = [(v.type.dtype, (length, *v.type.shape)) for v in body.outputs]
    types = cx.settle(own, override=True)
    cx.emit(Op.LOOP, cx.inputs(), {"body": body, "trip_count": trip_attr(length), "map": True}, types=types)


def _identity_like(op: Op) -> Callable[[NodeCx], None]:
    def fn(cx: NodeCx) -> None:
        x = cx.input(0)
        if x is not None and (cx.is_sequence(0) or _output_is_sequence(cx, 0)):
            cx.emit(op, [x], types=cx.settle([(x.type.dtype, x.type.shape)], override=True))
            return
        cx.emit(op, cx.inputs())
    return fn


def _optional_has_element(cx: NodeCx) -> None:
    cx.emit(Op.SHAPE_OF, cx.inputs(), {"what": "has_element"})


CONTROL_LOWERINGS: dict[str, Callable[[NodeCx], None]] = {
    "If": _if, "Loop": _loop, "Scan": _scan, "SequenceEmpty": _sequence_empty,
    "SequenceConstruct": _sequence_construct, "SequenceInsert": _sequence_insert,
    "SequenceErase": _sequence_erase, "SequenceAt": _sequence_at, "SequenceLength": _sequence_length,
    "SplitToSequence": _split_to_sequence, "ConcatFromSequence": _concat_from_sequence,
    "SequenceMap": _sequence_map, "Optional": _identity_like(Op.IDENTITY),
    "OptionalGetElement": _identity_like(Op.IDENTITY), "OptionalHasElement": _optional_has_element,
}
