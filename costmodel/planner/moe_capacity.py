"""A mixture of experts as a capacity-factor ("token dropping") runtime computes it: GShard's dense
dispatch and combine einsums over ``[experts, capacity]`` buckets, per sequence.

Why a form of its own: a dropless runtime (Megatron-Core's grouped GEMM, MaxText's megablox) sorts the
``k x tokens`` routed rows and runs each expert on exactly its rows, which is what a traced graph
spells (``gather`` with ``role="dispatch"``, two :attr:`~narrowpipe.ir.Op.GROUPED_DOT`, a weighted sum
over the ``k`` picks). MaxText with ``capacity_factor > 0`` and ``megablox: False`` (the published
``mixtral_8x7b_dropped`` runs) computes something else (MaxText@e7292a3a MaxText/layers/linears.py,
``MoeBlock.generate_masks`` and ``dense_matmul``):

* per sequence of ``S`` tokens each expert gets ``C = int(S k / E x capacity_factor)`` slots, padded
  or truncated, so the expert GEMMs run ``E x C`` rows per sequence, not ``k x S``
  (``capacity_factor`` times the routed rows when ``E C = k S cf``);
* the rows reach the buckets by a dense einsum ``BSM,BSEC -> EBCM`` with a one-hot dispatch mask
  (``2 B S E C M`` FLOPs, no gradient to the boolean mask) and leave them by ``EBCM,BSEC -> BSM``
  with the combine mask (the router probabilities times the one-hot: its backward has both operand
  gradients);
* the masks themselves are ``[B, S, E, C]`` tensors written per layer.

The rewrite replaces the traced dispatch gather and the weighted sum by those two DOTs (batched over
the sequences), retypes the expert chain to ``B x E x C`` rows, and marks the grouped GEMMs
``capacity`` so their rows split evenly over the experts whatever the assumed routing balance (a
bucket is padded to ``C`` whether or not its expert is hot).
"""

from __future__ import annotations

from fractions import Fraction

from ...errors import NarrowpipeError
from ...ir import Graph, Node, Op, TensorType, Value
from ...ir.dims import dim_floordiv, dim_mul

__all__ = ["capacity_dispatch"]


def capacity_dispatch(g: Graph, capacity_factor: float) -> bool:
    """Rewrite every routed expert block of ``g`` to the capacity-factor form (module docstring);
    True when something changed. ``capacity_factor <= 0`` is dropless: nothing changes."""
    if capacity_factor <= 0:
        return False
    changed = False
    for ga in [n for n in g.nodes if n.op is Op.GATHER and n.attrs.get("role") == "dispatch"]:
        changed = _rewrite(g, ga, Fraction(capacity_factor).limit_denominator(1000)) or changed
    return changed


def _only_reader(v: Value) -> Node | None:
    nodes = {id(u.node): u.node for u in v.uses}
    return next(iter(nodes.values())) if len(nodes) == 1 else None


def _rewrite(g: Graph, ga: Node, cf: Fraction) -> bool:
    x2, idx = ga.inputs[0], ga.inputs[1]
    if x2 is None or idx is None or x2.producer is None or x2.producer.op is not Op.RESHAPE:
        return False
    x3 = x2.producer.inputs[0]
    if x3 is None or x3.type.rank != 3 or x2.type.rank != 2:
        return False                                # not [batch, seq, hidden] -> [tokens, hidden]
    experts = [u.node for u in ga.outputs[0].uses if u.node.op is Op.GROUPED_DOT]
    if not experts:
        return False
    first = experts[0]
    top_k = first.attrs.get("top_k")
    w = first.inputs[1]
    if not isinstance(top_k, int) or w is None or not isinstance(w.shape[0], int):
        return False                                # the expert count must be known to size the buckets
    n_exp = w.shape[0]
    chain, last = _expert_chain(experts)
    if last is None:
        return False
    tail = _weighted_sum(last.outputs[0], x2)
    if tail is None:
        return False
    out_val, removed = tail
    b, s, m = x3.shape
    cap = dim_floordiv(dim_mul(dim_mul(s, top_k), cf.numerator), n_exp * cf.denominator)
    if isinstance(cap, int) and cap < 1:
        raise NarrowpipeError(f"{ga.name}: capacity_factor {float(cf)} leaves no slot per expert "
                              f"(int({s} x {top_k} / {n_exp} x {float(cf)}) = {cap})")
    ec = dim_mul(cap, n_exp)
    rows = dim_mul(b, ec)
    phase = {"phase": ga.attrs["phase"]} if "phase" in ga.attrs else {}
    dt = x3.dtype
    # masks: the dispatch one-hot from the integer picks (no gradient), the combine mask the router
    # weights times it (generate_masks: combine_mask = softmax_probs[..., None] * one_hot)
    picks = g.add_node(Op.RESHAPE, [idx], [idx.type.with_shape((b, s, top_k))], phase,
                       source=ga.source, name=f"{ga.name}_picks").outputs[0]
    pick1 = g.add_node(Op.REDUCE_SUM, [picks], [idx.type.with_shape((b, s, 1))],
                       {"axes": (2,), "keepdims": True, **phase}, source=ga.source, name=f"{ga.name}_pick").outputs[0]
    wide = g.add_node(Op.EXPAND, [pick1], [idx.type.with_shape((b, s, ec))], phase,
                      source=ga.source, name=f"{ga.name}_onehot_view").outputs[0]
    dmask = g.add_node(Op.CAST, [wide], [TensorType(dt, (b, s, ec))], {"to": dt.value, **phase},
                       source=ga.source, name=f"{ga.name}_dispatch_mask").outputs[0]
    gate = _gate_weights(removed)
    cmask = dmask
    if gate is not None:
        gsum = g.add_node(Op.REDUCE_SUM, [gate], [gate.type.with_shape((gate.shape[0], 1))],
                          {"axes": (1,), "keepdims": True, **phase}, source=ga.source,
                          name=f"{ga.name}_gate_sum").outputs[0]
        g3 = g.add_node(Op.RESHAPE, [gsum], [gate.type.with_shape((b, s, 1))], phase,
                        source=ga.source, name=f"{ga.name}_gate3").outputs[0]
        cmask = g.add_node(Op.MUL, [dmask, g3], [TensorType(dt, (b, s, ec))], phase,
                           source=ga.source, name=f"{ga.name}_combine_mask").outputs[0]
    # dispatch einsum BSM,BSEC -> EBCM, batched over the sequences
    disp = g.add_node(Op.DOT, [dmask, x3], [TensorType(dt, (b, ec, m))],
                      {"lhs_batch": (0,), "rhs_batch": (0,), "lhs_contract": (1,), "rhs_contract": (1,), **phase},
                      source=ga.source, name=f"{ga.name}_dispatch_einsum").outputs[0]
    flat = g.add_node(Op.RESHAPE, [disp], [TensorType(dt, (rows, m))], phase,
                      source=ga.source, name=f"{ga.name}_buckets").outputs[0]
    g.replace_all_uses(ga.outputs[0], flat)
    for n in chain:                                 # the expert chain now runs B x E x C rows
        for o in n.outputs:
            o.type = o.type.with_shape((rows, *o.shape[1:]))
        if n.op is Op.GROUPED_DOT:
            g.set_attr(n, "capacity", True)
            n.attrs.pop("top_k", None)
    y = last.outputs[0]
    y3 = g.add_node(Op.RESHAPE, [y], [TensorType(y.dtype, (b, ec, m))], phase,
                    source=ga.source, name=f"{ga.name}_buckets_out").outputs[0]
    comb = g.add_node(Op.DOT, [cmask, y3], [TensorType(out_val.dtype, (b, s, m))],
                      {"lhs_batch": (0,), "rhs_batch": (0,), "lhs_contract": (2,), "rhs_contract": (1,), **phase},
                      source=ga.source, name=f"{ga.name}_combine_einsum").outputs[0]
    if tuple(out_val.shape) != (b, s, m):
        comb = g.add_node(Op.RESHAPE, [comb], [out_val.type], phase, source=ga.source,
                          name=f"{ga.name}_combined").outputs[0]
    g.replace_all_uses(out_val, comb)
    g.remove_unread([*reversed(removed), ga])
    return True


def _expert_chain(firsts: list[Node]) -> tuple[list[Node], Node | None]:
    """The nodes from the grouped GEMMs that read the dispatched rows (one fused gate-up, or gate and
    up apart) to the one that ends the chain (slices, activation, product), in order; every one
    reads and writes the routed rows."""
    first = firsts[0]
    rows = first.outputs[0].shape[0]
    chain: list[Node] = []
    frontier = list(firsts)
    last: Node | None = None
    while frontier:
        n = frontier.pop(0)
        if n in chain:
            continue
        chain.append(n)
        if n.op is Op.GROUPED_DOT and n not in firsts:
            last = n
            continue
        for o in n.outputs:
            for u in o.uses:
                if u.node.outputs and u.node.outputs[0].shape[:1] == (rows,) and u.node not in chain:
                    frontier.append(u.node)
    return chain, last


def _weighted_sum(y: Value, x2: Value) -> tuple[Value, list[Node]] | None:
    """After the experts: the weighting by the router and the sum over the ``k`` picks, up to the
    first value shaped as the tokens' (``x2``'s ``[tokens, hidden]`` or ``[batch, seq, hidden]``)."""
    removed: list[Node] = []
    cur = y
    for _ in range(6):
        reader = _only_reader(cur)
        if reader is None or reader.op not in (Op.MUL, Op.RESHAPE, Op.REDUCE_SUM, Op.CAST):
            return None
        removed.append(reader)
        cur = reader.outputs[0]
        if reader.op is Op.REDUCE_SUM:
            nxt = _only_reader(cur)
            if nxt is not None and nxt.op is Op.RESHAPE:
                removed.append(nxt)
                cur = nxt.outputs[0]
            return (cur, removed) if cur.shape[-1] == x2.shape[-1] else None
    return None


def _gate_weights(removed: list[Node]) -> Value | None:
    """The router weights ``[tokens, k]`` the weighted sum multiplied by (through a reshape)."""
    for n in removed:
        if n.op is Op.MUL:
            for v in n.inputs:
                p = v.producer if v is not None else None
                if p is not None and p.op is Op.RESHAPE and p.inputs[0] is not None and p.inputs[0].type.rank == 2:
                    removed.append(p)               # its reshape goes with the weighted sum
                    return p.inputs[0]
    return None
