"""Per-op type rules the verifier checks: a node's output types against its operands and attrs.

Why a separate module: the structural checks (definitions, uses, order) hold for every op, while
these rules are written per canonical op and grow with the op set. Symbolic dims compare
structurally: two equal expressions agree, two ints must be equal, and anything else (an int
against a symbol, two different expressions) is undecidable without bindings and so accepted,
so a check never raises a false alarm on a graph that is right for some binding of its dims.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .attention import WINDOW
from .dims import Dim, Shape, dim_eq
from .dtypes import DType
from .graph import Node, Value
from .ops import MAJORS, OPERAND_MAJOR, Op, OpGroup
from .shapes import format_shape
from .window_checks import check_window

__all__ = ["type_problems", "may_equal", "elementwise_shape_problem", "broadcast_operands", "broadcast_conflicts",
           "REQUIRED_ATTRS"]

#: Attributes a node of the op must carry; cost rules read them unconditionally.
REQUIRED_ATTRS: dict[Op, tuple[str, ...]] = {
    Op.DOT: ("lhs_contract", "rhs_contract"),
    Op.GROUPED_DOT: ("rhs_contract",),
    Op.CONV: ("stride", "padding", "dilation", "groups"),
}
_MIN_INPUTS: dict[Op, int] = {Op.DOT: 2, Op.GROUPED_DOT: 2, Op.CONV: 2, Op.ATTENTION: 3}
#: Elementwise ops whose operands do not broadcast numpy-style: per-axis scales and zero points
#: (``axis`` attr), and PReLU's per-channel slope (torch keeps it as ``[C]`` against ``[N, C, ...]``).
_NOT_BROADCAST: frozenset[Op] = frozenset({Op.QUANTIZE, Op.DEQUANTIZE, Op.PRELU})
#: Elementwise ops whose result is boolean whatever the operand type.
_BOOL_RESULT: frozenset[Op] = frozenset({Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE, Op.ISNAN, Op.ISINF})


def may_equal(a: Dim, b: Dim) -> bool:
    """False only when ``a`` and ``b`` certainly differ (two different ints)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return True


def _broadcast_dim(a: Dim, b: Dim) -> Dim | None:
    """The broadcast of two dims; ``None`` when they certainly do not broadcast."""
    if a == 1:
        return b
    if b == 1 or a == b:
        return a
    if isinstance(a, int) and isinstance(b, int):
        return None
    return a if isinstance(a, int) else b   # undecidable: keep the one that carries more facts


def broadcast_shapes(shapes: Sequence[Shape]) -> Shape | None:
    """Numpy broadcast of ``shapes`` (symbolic dims as above); ``None`` when they cannot broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = [1] * rank
    for s in shapes:
        for i, d in enumerate(s):
            j = rank - len(s) + i
            b = _broadcast_dim(out[j], d)
            if b is None:
                return None
            out[j] = b
    return tuple(out)


def _shape_mismatch(expected: Shape, got: Shape) -> bool:
    return len(expected) != len(got) or not all(may_equal(a, b) for a, b in zip(expected, got))


def _check_dot(node: Node) -> list[str]:
    lhs, rhs = node.inputs[0], node.inputs[1]
    assert lhs is not None and rhs is not None
    a = node.attrs
    lc, rc = tuple(a["lhs_contract"]), tuple(a["rhs_contract"])
    lb, rb = tuple(a.get("lhs_batch", ())), tuple(a.get("rhs_batch", ()))
    out: list[str] = []
    for side, value, dims in (("lhs", lhs, lc + lb), ("rhs", rhs, rc + rb)):
        bad = [d for d in dims if not (isinstance(d, int) and 0 <= d < value.type.rank)]
        if bad:
            out.append(f"{side} dims {bad} out of range for rank {value.type.rank}")
        if len(set(dims)) != len(dims):
            out.append(f"{side} batch/contracting dims repeat: {list(dims)}")
    if len(lc) != len(rc):
        out.append("lhs_contract and rhs_contract differ in length")
    if len(lb) != len(rb):
        out.append("lhs_batch and rhs_batch differ in length")
    major = a.get(OPERAND_MAJOR)
    if major is not None and (not isinstance(major, tuple) or len(major) != 2 or any(x not in MAJORS for x in major)):
        out.append(f"{OPERAND_MAJOR} {major!r} is not a pair (lhs, rhs) of {' or '.join(map(repr, MAJORS))}")
    if out:
        return out
    ls, rs = lhs.shape, rhs.shape
    for i, j in zip(lc, rc):
        if not may_equal(ls[i], rs[j]):
            out.append(f"contracting dims differ: lhs dim {i} is {ls[i]}, rhs dim {j} is {rs[j]}")
    batch: list[Dim] = []
    for i, j in zip(lb, rb):
        d = _broadcast_dim(ls[i], rs[j])
        if d is None:
            out.append(f"batch dims do not broadcast: lhs dim {i} is {ls[i]}, rhs dim {j} is {rs[j]}")
            d = ls[i]
        batch.append(d)
    free_l = [d for i, d in enumerate(ls) if i not in lc and i not in lb]
    free_r = [d for i, d in enumerate(rs) if i not in rc and i not in rb]
    expected = (*batch, *free_l, *free_r)
    got = node.outputs[0].shape if node.outputs else None
    if got is not None and _shape_mismatch(expected, got):
        out.append(f"output shape {format_shape(got)} is not batch+lhs free+rhs free "
                   f"{format_shape(expected)} of {format_shape(ls)} x {format_shape(rs)}")
    return out


def _check_grouped_dot(node: Node) -> list[str]:
    """``x [S, K]`` times ``w [G, K, N]`` (or ``[G, N, K]``) by group gives ``[S, N]``; offsets ``[G]``."""
    x, w = node.inputs[0], node.inputs[1]
    assert x is not None and w is not None
    rc = node.attrs["rhs_contract"]
    if node.attrs.get("role") == "grad_weight":
        return _check_grouped_grad_weight(node, x, w, rc)
    if x.type.rank != 2 or w.type.rank != 3:
        return [f"grouped_dot needs rows [S, K] and weights [G, K, N], got ranks {x.type.rank} and {w.type.rank}"]
    if rc not in (1, 2):
        return [f"rhs_contract must be 1 or 2, got {rc!r}"]
    out: list[str] = []
    xs, ws = x.shape, w.shape
    if not may_equal(xs[1], ws[rc]):
        out.append(f"contracting dims differ: rows have {xs[1]}, weights dim {rc} is {ws[rc]}")
    offsets = node.inputs[2] if len(node.inputs) > 2 else None
    if offsets is not None and (offsets.type.rank != 1 or not may_equal(offsets.shape[0], ws[0])):
        out.append(f"offsets {format_shape(offsets.shape)} should be one per group [{ws[0]}]")
    top_k = node.attrs.get("top_k")
    ep = node.attrs.get("expert_parallel")      # a serving shard's (ep, dp): it holds groups / ep of them
    shards = int(ep[0]) if isinstance(ep, (tuple, list)) and ep else 1
    groups = ws[0] * shards if isinstance(ws[0], int) else ws[0]
    bad_k = not isinstance(top_k, int) or top_k <= 0 or (isinstance(groups, int) and top_k > groups)
    if top_k is not None and bad_k:
        out.append(f"top_k {top_k!r} must be in 1..groups ({groups})")
    expected = (xs[0], ws[3 - rc])
    got = node.outputs[0].shape if node.outputs else None
    if got is not None and _shape_mismatch(expected, got):
        out.append(f"output shape {format_shape(got)} is not [rows, N] {format_shape(expected)} of "
                   f"{format_shape(xs)} x {format_shape(ws)}")
    return out + _check_expert_rows(node, xs[0], ws[0])


def _check_grouped_grad_weight(node: Node, x: Value, dy: Value, rc: object) -> list[str]:
    """The weight gradient: rows ``x [S, K]`` and ``dy [S, N]`` give ``[G, N, K]`` (``rhs_contract=2``)
    or ``[G, K, N]``, one ``dy^T x`` per group."""
    if x.type.rank != 2 or dy.type.rank != 2:
        return [f"grouped_dot grad_weight needs rows [S, K] and [S, N], got ranks {x.type.rank} and {dy.type.rank}"]
    if rc not in (1, 2):
        return [f"rhs_contract must be 1 or 2, got {rc!r}"]
    out: list[str] = []
    if not may_equal(x.shape[0], dy.shape[0]):
        out.append(f"row counts differ: {x.shape[0]} and {dy.shape[0]}")
    got = node.outputs[0].shape if node.outputs else None
    if got is None or len(got) != 3:
        return out + ["grouped_dot grad_weight must give one [G, N, K] (or [G, K, N]) gradient"]
    expected = (got[0], dy.shape[1], x.shape[1]) if rc == 2 else (got[0], x.shape[1], dy.shape[1])
    if _shape_mismatch(expected, got):
        out.append(f"gradient shape {format_shape(got)} is not {format_shape(expected)} of "
                   f"{format_shape(x.shape)} and {format_shape(dy.shape)}")
    return out + _check_expert_rows(node, x.shape[0], got[0])


def _check_expert_rows(node: Node, rows: Dim, groups: Dim) -> list[str]:
    """A fixed split (``expert_rows``) has one count per group, summing to the rows."""
    split = node.attrs.get("expert_rows")
    if split is None:
        return []
    if not isinstance(split, tuple) or not all(isinstance(r, int) and r >= 0 for r in split):
        return [f"expert_rows must be a tuple of row counts, got {split!r}"]
    out = []
    if isinstance(groups, int) and len(split) != groups:
        out.append(f"expert_rows has {len(split)} counts for {groups} groups")
    if isinstance(rows, int) and sum(split) != rows:
        out.append(f"expert_rows sum to {sum(split)}, not the {rows} rows")
    return out


def _check_elementwise(node: Node) -> list[str]:
    out: list[str] = []
    if not node.outputs:
        return ["elementwise op without an output"]
    result = node.outputs[0]
    if node.op in _BOOL_RESULT and result.dtype is not DType.BOOL:
        out.append(f"a comparison yields bool, not {result.dtype.value}")
    if node.op is Op.CAST and "to" in node.attrs:
        to = node.attrs["to"]
        try:
            want = to if isinstance(to, DType) else DType.parse(str(to))
        except (ValueError, KeyError):
            want = None
        if want is not None and want is not result.dtype:
            out.append(f"cast to {want.value} yields {result.dtype.value}")
    problem = elementwise_shape_problem(node, [v.shape for v in node.inputs if v is not None], result.shape)
    return out + ([problem] if problem else [])


def elementwise_shape_problem(node: Node, shapes: Sequence[Shape], result: Shape) -> str | None:
    """What is wrong with an elementwise node's result shape given its present operands' shapes, or
    None. Symbolic shapes (the verifier) accept what some binding makes right; the interpreter calls
    it again with bound shapes, where every comparison is decided (an edited graph file, or two dims
    an ONNX export never relates, such as a mask's length against the keys')."""
    operands = broadcast_operands(node, shapes)
    if not operands:
        return None
    expected = broadcast_shapes(operands)
    if expected is None:
        return "operands do not broadcast: " + ", ".join(format_shape(s) for s in operands)
    if _shape_mismatch(expected, result):
        return f"output shape {format_shape(result)} is not the broadcast {format_shape(expected)} of its operands"
    return None


def broadcast_operands(node: Node, shapes: Sequence[Shape]) -> list[Shape]:
    """The operand shapes an elementwise node broadcasts, lined up as it lines them up (none for an op
    that does not broadcast): lookup tables read by position and CastLike's dtype operand left out,
    a legacy ``axis`` operand aligned at its axis."""
    tables = node.attrs.get("lookup_operands", 0)
    if isinstance(tables, int) and 0 < tables < len(shapes):
        shapes = shapes[:-tables]   # read by position (rotary caches), not broadcast (see ops.py)
    if node.op is Op.CAST:
        shapes = shapes[:1]   # CastLike's second operand only names the dtype
    if node.op in _NOT_BROADCAST or not shapes:
        return []
    axis = node.attrs.get("axis")
    if isinstance(axis, int) and not isinstance(axis, bool):
        return _align_at_axis(list(shapes), axis)
    return list(shapes)


def broadcast_conflicts(shapes: Sequence[Shape]) -> list[int]:
    """The axes, counted from the right (-1 is the last), where two operands certainly disagree
    (two different sizes, neither 1)."""
    out = []
    for axis in range(-max((len(s) for s in shapes), default=0), 0):
        sizes = [s[axis] for s in shapes if len(s) >= -axis and s[axis] != 1]
        if any(not may_equal(a, b) for a in sizes for b in sizes):
            out.append(axis)
    return out


def _align_at_axis(shapes: list[Shape], axis: int) -> list[Shape]:
    """ONNX's legacy broadcast, which the frontends keep for a conv's ``[C]`` bias (``axis=1``): a
    lower-rank operand lines up with the full-rank ones from dim ``axis``, not from the right."""
    rank = max(len(s) for s in shapes)
    axis = axis + rank if axis < 0 else axis
    out: list[Shape] = []
    for s in shapes:
        if len(s) < rank and 0 <= axis <= rank - len(s):
            s = (*(1,) * axis, *s, *(1,) * (rank - axis - len(s)))
        out.append(s)
    return out


def _check_attention(node: Node) -> list[str]:
    q = node.inputs[0]
    assert q is not None
    bsd = node.attrs.get("layout", "bhsd") == "bsd"
    out: list[str] = []
    if bsd and "num_heads" not in node.attrs:
        out.append("layout 'bsd' needs num_heads")
    window = node.attrs.get(WINDOW)
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        out.append(f"{WINDOW} {window!r} is not a positive whole number of keys per query")
    rank = 3 if bsd else 4
    for i, v in enumerate(node.inputs[:3]):
        if v is not None and v.type.rank != rank:
            layout = node.attrs.get("layout", "bhsd")
            out.append(f"input {i} ({v.name!r}) has rank {v.type.rank}, layout {layout!r} needs {rank}")
    if node.outputs and not out:
        o = node.outputs[0].shape
        if len(o) != rank:
            out.append(f"output rank {len(o)}, layout needs {rank}")
        elif not all(may_equal(a, b) for a, b in zip(o[:-1], q.shape[:-1])):
            out.append(f"output {format_shape(o)} disagrees with query {format_shape(q.shape)} "
                       "outside the head dim")
    return out


def _check_same_shape(node: Node) -> list[str]:
    """Softmax and the norms keep their input's shape (statistics live inside the op)."""
    x = node.inputs[0] if node.inputs else None
    if x is None or not node.outputs:
        return []
    got = node.outputs[0].shape
    if _shape_mismatch(x.shape, got):
        return [f"output shape {format_shape(got)} differs from its input's {format_shape(x.shape)}"]
    return []


def _check_channel_norm(node: Node) -> list[str]:
    """Batch, group and instance norm keep their input ``[N, C, ...]``; their parameters (scale, bias,
    running mean and variance, in any order a frontend passes the present ones) hold one value per
    channel, or per group for ONNX's opset-18 ``GroupNormalization``; the groups divide the channels.
    A gradient (``role="grad"``: ``dy, x, w``) is held to its shape only."""
    out = _check_same_shape(node)
    x = node.inputs[0] if node.inputs else None
    if x is None or x.type.rank < 2 or node.attrs.get("role") == "grad":
        return out
    c = x.shape[1]
    per: tuple[Dim, ...] = (c,)
    if node.op is Op.GROUP_NORM:
        groups = node.attrs.get("num_groups", 1)
        if not isinstance(groups, int) or groups < 1:
            return out + [f"num_groups {groups!r} is not a positive integer"]
        if isinstance(c, int) and c % groups:
            out.append(f"{c} channels do not split into num_groups={groups}")
        per = (c, groups)
    for i, p in enumerate(node.inputs[1:], 1):
        if p is not None and (p.type.rank != 1 or all(dim_eq(p.shape[0], d) is False for d in per)):
            out.append(f"parameter {i} ({p.name!r}) is {format_shape(p.shape)}, not one value per channel "
                       f"[{c}] of input {format_shape(x.shape)}")
    return out


def _check_reshape(node: Node) -> list[str]:
    """A reshape views one tensor: operands past the data can only say how (ONNX ``Reshape``'s shape,
    ``Squeeze``/``Unsqueeze``'s axes: an integer tensor of rank 1, or 0 for one axis, as ONNX's own
    loop tests write it). A second data operand has no meaning: the bind-time checks read only the
    first and a view moves no bytes, so a frontend that packed two tensors into one "reshape"
    (com.microsoft Attention's ``present`` once did) would hide a copy behind a free op."""
    out: list[str] = []
    for i, v in enumerate(node.inputs[1:], 1):
        if v is not None and (v.type.rank > 1 or not v.type.dtype.is_int):
            out.append(f"operand {i} ({v.name!r}) is {v.type.dtype.value} {format_shape(v.shape)}: a reshape "
                       "views one tensor, and operands after it can only be an integer shape or axes (rank <= 1)")
    return out


_CHECKS: dict[Op, Callable[[Node], list[str]]] = {
    Op.RESHAPE: _check_reshape,
    Op.DOT: _check_dot, Op.GROUPED_DOT: _check_grouped_dot, Op.ATTENTION: _check_attention,
    Op.CONV: check_window, Op.POOL: check_window,
    **{op: _check_same_shape for op in (Op.SOFTMAX, Op.LOG_SOFTMAX, Op.LAYER_NORM, Op.RMS_NORM)},
    **{op: _check_channel_norm for op in (Op.BATCH_NORM, Op.GROUP_NORM, Op.INSTANCE_NORM)},
}


def type_problems(node: Node) -> list[str]:
    """Reasons ``node``'s attrs or output types disagree with its operands (empty when none)."""
    out: list[str] = []
    present = [v for v in node.inputs if v is not None]
    need = _MIN_INPUTS.get(node.op, 0)
    if len(present) < need:
        out.append(f"needs at least {need} inputs, has {len(present)}")
    out.extend(f"missing attribute {k!r}" for k in REQUIRED_ATTRS.get(node.op, ()) if k not in node.attrs)
    if node.op is Op.UNKNOWN and not (node.attrs.get("source_op") or node.source.op):
        out.append("unknown op without a source_op")
    if out:
        return out
    check = _CHECKS.get(node.op)
    if check is None and node.op.group is OpGroup.ELEMENTWISE:
        check = _check_elementwise
    return check(node) if check is not None else []

