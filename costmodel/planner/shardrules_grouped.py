"""The sharding rule of a grouped GEMM (the experts of a mixture of experts): tensor parallelism inside
each expert, expert parallelism across them.

Why its own rule: an expert is a small MLP, and Megatron-Core (up to v0.9, and with
``--expert-tensor-parallel-size`` equal to ``tp`` after) splits it as the dense MLP: the up (and
gate) projection by columns, the down projection by rows with a partial sum settled after it. The
contraction rule cannot see that through the stacked ``[E, out, in]`` weights, so this rule says it
directly: the weight's layout (decided once, :meth:`.weight_layout.WeightLayouts.decide_weights`)
names where ``tp`` sits, the rows follow. Expert parallelism is the weight's first dim split over
``ep``; the rows a device holds are already its experts' (the all-to-alls of :mod:`.expert_parallel`).
The weight gradient ``dW_e = dy_e^T x_e`` takes the layout of the weight it is the gradient of: split
where ``dy`` (column) or ``x`` (row) carries ``tp``, a partial sum where the rows are split (context
parallelism), its experts over ``ep``.
"""

from __future__ import annotations

from ...ir import Node
from .shardbase import Decision, RuleContext, rest
from .shardspec import Spec

__all__ = ["grouped_dot", "expert_exchange"]


def grouped_dot(ctx: RuleContext, node: Node) -> Decision:
    ctx.decide_weights(node)
    if node.attrs.get("role") == "grad_weight":
        return _weight_grad(ctx, node)
    x, w = node.inputs[0], node.inputs[1]
    assert x is not None and w is not None
    rc = int(node.attrs["rhs_contract"])
    free = 3 - rc
    wdims = ctx.spec(w).dims
    tp_dim = next((d for d in (rc, free) if "tp" in wdims[d]), None)
    experts = tuple(a for a in wdims[0] if a == "ep")
    w_want = [experts, (), ()]
    if tp_dim is not None:
        w_want[tp_dim] = ("tp",)
    rows = _rows(ctx.spec(x).dims[0], tp_dim is not None)
    x_want = Spec((rows, ("tp",) if tp_dim == rc else ()))
    out = Spec((rows, ("tp",) if tp_dim == free else ()), "tp" if tp_dim == rc else None)
    return Decision([x_want, Spec(tuple(w_want)), *_offsets(ctx, node, experts)], [out])


def _weight_grad(ctx: RuleContext, node: Node) -> Decision:
    x, dy = node.inputs[0], node.inputs[1]
    assert x is not None and dy is not None
    rc = int(node.attrs["rhs_contract"])
    n_dim, k_dim = (1, 2) if rc == 2 else (2, 1)       # the gradient is [E, N, K] or [E, K, N]
    xs, ds = ctx.spec(x), ctx.spec(dy)
    on = "dy" if "tp" in ds.dims[1] else "x" if "tp" in xs.dims[1] else None
    rows = _rows(xs.dims[0] if xs.dims[0] == ds.dims[0] else (), on is not None)
    partial = rows[0] if len(rows) == 1 else None
    if len(rows) > 1:
        rows = ()
    experts = ("ep",) if ctx.sizes.get("ep", 1) > 1 else ()
    out: list[tuple[str, ...]] = [experts, (), ()]
    if on == "dy":
        out[n_dim] = ("tp",)
    elif on == "x":
        out[k_dim] = ("tp",)
    want = [Spec((rows, ("tp",) if on == "x" else ())), Spec((rows, ("tp",) if on == "dy" else ()))]
    return Decision([*want, *_offsets(ctx, node, experts)], [Spec(tuple(out), partial)])


def _offsets(ctx: RuleContext, node: Node, experts: tuple[str, ...]) -> list[Spec | None]:
    """The per-group offsets (``[E]``) follow the experts: each device reads its own groups' ends."""
    return [Spec((experts,)) if v is not None and len(ctx.shape(v)) == 1 else
            (Spec.replicated(len(ctx.shape(v))) if v is not None else None) for v in node.inputs[2:]]


def _rows(axes: tuple[str, ...], tp_used: bool) -> tuple[str, ...]:
    """The axes the routed rows stay split over: never ``ep`` (experts, not rows), nor ``tp`` when
    the experts use it (the rows are gathered first, as sequence parallelism's all-gather does)."""
    return tuple(a for a in axes if a != "ep" and not (tp_used and a == "tp"))


def expert_exchange(ctx: RuleContext, node: Node) -> Decision:
    """An expert-parallel all-to-all (:mod:`.expert_parallel`) moves each tensor-parallel rank's share
    of the rows when the rows are split over ``tp`` (sequence parallelism), owed a ``tp`` sum (the
    row-parallel down projection, settled by a reduce-scatter onto the rows) or held whole by every
    ``tp`` rank (no sequence parallelism: each rank takes its share by a free local slice, so the
    dispatch carries the same rows as the combine rather than ``tp`` copies of them): Megatron-Core's
    all-to-all dispatcher exchanges ``1/tp`` of the tokens per rank and all-gathers over ``tp`` after
    it. The routed rows split however many the router sent, the busiest rank's ``ceil(rows / tp)``
    setting the time (:meth:`.Spec.local_shape`); the token side must divide. Any other layout is
    exchanged whole."""
    x, out = node.inputs[0], node.outputs[0]
    if x is None or node.attrs.get("axis") != "ep":
        return Decision([Spec.replicated(len(ctx.shape(v))) if v is not None else None for v in node.inputs],
                        [Spec.replicated(len(ctx.shape(o))) for o in node.outputs])
    raw, tp = ctx.raw(x), ctx.sizes.get("tp", 1)
    rows: tuple[str, ...] = ()
    replicated = not any("tp" in d for d in raw.dims) and raw.partial != "tp"
    if tp > 1 and ("tp" in raw.dims[0] or raw.partial == "tp" or replicated) and \
            all(ctx.shape(v)[0] % tp == 0 or ctx.uneven_rows(v) for v in (x, out)):
        rows = ("tp",)
    rank = len(ctx.shape(x))
    spec = Spec((rows, *(((),) * (rank - 1))))
    return Decision([spec, *rest(ctx, node, 1)], [spec])
