"""Shape checks that only a binding can decide, run where the rules see bound shapes.

A reshape whose target an ONNX graph computes at run time, a contraction between two symbolic
dims, an ONNX Expand: each is consistent symbolically and can still break once dims are bound
(a sequence past a position table, ``--set k=63`` against a 64-row weight). The rules call these
checks and raise a :class:`ShapeError` naming the node, never a silently wrong count.
"""

from __future__ import annotations

from ..errors import ShapeError
from ..ir import Op
from ..ir.typecheck import broadcast_conflicts, broadcast_operands, elementwise_shape_problem
from ..ir.window_checks import window_problems
from .opview import OpView

__all__ = ["check_view", "check_contraction", "check_gather", "check_broadcast", "check_window", "shape_error"]


def shape_error(v: OpView, reason: str) -> ShapeError:
    src = v.node.source
    return ShapeError(reason, file=src.file or None, node=src.name or v.node.name, op=src.op or v.node.label)


def check_view(v: OpView) -> None:
    """A reshape keeps its element count (or its bytes where it reinterprets the dtype, as
    ``view_as_complex`` does: two fp32 become one complex64; a view whose output a format what-if
    retyped keeps its count); an ONNX Expand broadcasts numpy-style
    (frontends also emit expands that re-lay a state, which are not checked)."""
    op = v.node.op
    if op is Op.RESHAPE and v.has_input(0) and v.out_shapes:
        dt_in, dt_out = v.in_dtypes[0], v.out_dtypes[0]
        reinterpreted = dt_in is not None and dt_out is not None and \
            v.numel(0) * dt_in.bits == v.out_numel() * dt_out.bits
        if v.numel(0) != v.out_numel() and not reinterpreted:
            raise shape_error(v, f"reshape of {list(v.shape(0))} ({v.numel(0)} elements) to "
                                 f"{list(v.out_shapes[0])} ({v.out_numel()} elements) under these bindings")
    if op is Op.EXPAND and v.node.source.op.endswith("::Expand") and v.has_input(0) and v.out_shapes:
        x, out = v.shape(0), v.out_shapes[0]
        if len(x) > len(out) or any(a not in (1, b) for a, b in zip(reversed(x), reversed(out))):
            raise shape_error(v, f"cannot expand {list(x)} to {list(out)} under these bindings (a size "
                                 "past what the model holds, such as its position table?)")


def check_contraction(v: OpView) -> list[int]:
    """The contracted sizes of a dot, the same on both sides once bound (symbolic dims the frontend
    could not compare can bind to sizes that differ)."""
    lhs = v.shape(0)
    k_lhs = [lhs[d] for d in v.attrs["lhs_contract"]]
    if v.has_input(1):
        rhs = v.shape(1)
        k_rhs = [rhs[d] for d in v.attrs["rhs_contract"]]
        if k_lhs != k_rhs:
            raise shape_error(v, f"contracted dims differ once bound: {list(lhs)} @ {list(rhs)} "
                                 f"contracts {k_lhs} with {k_rhs}")
    return k_lhs


def check_gather(v: OpView) -> None:
    """A gather from a weight table along axis 0 whose indices are a constant-start range (through
    views) stays inside the table once the range's length is bound: GPT-2 at sequence 200 read
    positions 0..199 of a 128-row position table, which onnxruntime refuses."""
    node = v.node
    table = node.inputs[0] if node.inputs else None
    if table is None or table.producer is not None or node.attrs.get("axis", 0) != 0 or len(node.inputs) < 2:
        return
    rows = table.type.shape[0] if table.type.shape else None
    idx = node.inputs[1]
    while idx is not None and idx.producer is not None and idx.producer.op in (Op.RESHAPE, Op.CAST) \
            and idx.producer.inputs:
        idx = idx.producer.inputs[0]
    iota = idx.producer if idx is not None else None
    if not isinstance(rows, int) or iota is None or iota.op is not Op.IOTA or "start" not in iota.attrs:
        return
    start, delta = int(iota.attrs["start"]), int(iota.attrs.get("delta", 1))
    n = v.numel(1)
    if n < 1 or delta == 0:
        return
    last = start + (n - 1) * delta
    low, high = min(start, last), max(start, last)
    if low < -rows or high > rows - 1:
        raise shape_error(v, f"indices {start}..{last} (a range of {n}) fall outside the {rows} rows of "
                             f"{table.source_name or table.name} under these bindings (a sequence past the "
                             "model's positions?)")


def check_broadcast(v: OpView) -> None:
    """An elementwise op's operands broadcast to its result once bound (the verifier's rule,
    :func:`~narrowpipe.ir.typecheck.elementwise_shape_problem`, decided on integers). Two symbolic dims a
    frontend could not compare broadcast to their ``max``: a decoder-with-past ONNX export adds its
    ``[batch, total]`` mask to scores over ``past + sequence`` keys, and ``total`` bound to anything
    else is a model that cannot run, not a count; an edited graph file's result shape is caught too."""
    if not v.out_shapes:
        return
    problem = elementwise_shape_problem(v.node, [s for s in v.in_shapes if s is not None], v.out_shapes[0])
    if problem is not None:
        if not problem.startswith("operands"):
            hint = "the graph states a result its operands do not give: an edited graph file?"
        elif _bound_apart(v):
            hint = ("dims that must agree bound to different sizes, such as an attention mask's total length "
                    "against past + new tokens?")
        else:
            hint = "sizes the graph itself fixes, whatever the bindings: a frontend or graph-file error"
        raise shape_error(v, f"{problem} under these bindings ({hint})")


def _bound_apart(v: OpView) -> bool:
    """Whether a symbolic dim sits on an axis where the bound operands disagree: only then did the
    bindings make them disagree (two fixed sizes that differ are the graph's own error)."""
    bound = broadcast_operands(v.node, [s for s in v.in_shapes if s is not None])
    typed = broadcast_operands(v.node, [x.shape for x, s in zip(v.node.inputs, v.in_shapes)
                                        if x is not None and s is not None])
    return any(len(s) >= -axis and not isinstance(s[axis], int)
               for axis in broadcast_conflicts(bound) for s in typed)


def check_window(v: OpView) -> None:
    """A conv's or pool's output is what its window gives once bound (the verifier's rule,
    :func:`~narrowpipe.ir.window_checks.window_problems`, decided on integers): a kernel-5 Conv1d over
    ``seq`` states an output of ``seq - 4``, which ``seq=4`` makes empty, an error torch raises too,
    not a conv of no FLOPs."""
    problems = window_problems(v.node.op, v.attrs, v.in_shapes, v.out_shapes)
    if problems:
        raise shape_error(v, f"{problems[0]} under these bindings")
