"""Eager attention written out by an exporter, rewritten into the one ``ATTENTION`` node it is.

Why: torch's ONNX exporters decompose SDPA (and transformers' eager attention) into
``Q K^T -> scale/mask -> Softmax -> P V`` with habits of their own that the kernel fusion of
:mod:`.kernels` cannot see through:

* a NaN guard after the softmax, ``Where(IsNaN(p), 0, p)`` (torch's ``symbolic_opset14`` and
  onnxscript's ``torch_lib``): the softmax then has two readers;
* the softmax scale split over both operands, ``(Q * sqrt(s)) @ (K^T * sqrt(s))`` (the legacy
  exporter), and K transposed through reshapes (``[B, H, S, D] -> [B*H, S, D] -> [B*H, D, S] ->
  [B, H, D, S]``, the dynamo exporter): each a kernel of its own writing a transposed, scaled copy
  of the whole cache;
* GQA's ``repeat_kv`` (unsqueeze, expand, reshape) in front of the matmuls, which then read every
  KV head once per query head.

A serving runtime runs all of it as one fused kernel (FlashAttention, FlashInfer, paged attention)
that reads Q, K, V and the mask once, never writes the scores, and reads each KV head once. The
torch frontend already gets that from SDPA as one ``ATTENTION`` node; this pass makes the ONNX
path say the same, so :func:`.serving.inplace.fold_repeat_kv` folds ``repeat_kv`` into GQA as it
does for SDPA, and liveness holds no score matrix (the node has none).

What is recognised: a batched ``DOT`` (``[B, H, S, D] x [B, H, D, Sk]`` or ``x [B, H, Sk, D]``),
then a chain of scalar scales, casts and at most one mask (``+ mask``, ``Where(mask, s, fill)``),
each step the only reader of the scores, then ``SOFTMAX`` over the last axis, then casts and the NaN
guard, then a batched ``DOT`` by V. Q, K and V are traced back through scalar scales, reshapes that
keep the last two dims (merging or splitting the leading ones) and swaps of the last two dims, to
the values of ``[B, H, S, D]`` layout the fused kernel reads. Anything else is left as it is.

FLOPs: the node's rule counts the two matmuls as before and one exp per score; the scale, mask and
guard's elementwise FLOPs (a few per score, next to ``2 d`` per score per matmul) are not counted,
as torch's ``sdpa_flop_count`` does not count them. The scale's value is not in the IR (it keeps
shapes, not constants) and is left out: SDPA's default, ``1/sqrt(d)``, and no cost depends on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import CAUSAL, WINDOW, Graph, Node, Op, TensorType, Value, attention_window
from .attention_fusion import nan_guard, scale_operand

__all__ = ["attention_from_eager"]

@dataclass
class _Match:
    """One recognised eager attention: its operands and the nodes it replaces."""

    q: Value
    k: Value
    v: Value
    mask: Value | None
    causal: bool
    window: int | None      # a proven sliding-window mask's (its step's ``WINDOW``)
    pv: Node
    inner: list[Node] = field(default_factory=list)   # QK^T to the guard: nothing else may read them
    nodes: list[Node] = field(default_factory=list)   # all it replaces, the operands' steps included


def _only_reader(v: Value) -> Node | None:
    readers = {u.node for u in v.uses}
    return next(iter(readers)) if len(readers) == 1 else None


def _batched_dot(node: Node | None, rhs_contract: tuple[tuple[int, ...], ...]) -> bool:
    """A rank-4 matmul batched over the first two dims, contracting the lhs's last dim."""
    if node is None or node.op is not Op.DOT or len(node.inputs) < 2 or not node.outputs:
        return False
    a = node.attrs
    return tuple(a.get("lhs_batch", ())) == (0, 1) and tuple(a.get("rhs_batch", ())) == (0, 1) and \
        tuple(a.get("lhs_contract", ())) == (3,) and tuple(a.get("rhs_contract", ())) in rhs_contract and \
        all(v is not None and v.type.rank == 4 for v in node.inputs[:2])


def _swaps_last_two(node: Node) -> bool:
    perm = tuple(node.attrs.get("perm", ()))
    n = len(perm)
    return n >= 2 and perm == (*range(n - 2), n - 1, n - 2)


def _operand(v: Value, swapped: bool, path: list[Node]) -> Value:
    """The value the fused kernel reads for operand ``v``: walks back through scalar scales,
    reshapes that keep the last two dims and swaps of the last two, and returns the furthest rank-4
    value with ``v``'s leading dims whose last two dims are ``v``'s (swapped when ``swapped``: K as
    ``K^T``). Adds the walked nodes to ``path``."""
    want = (*v.type.shape[:2], *(reversed(v.type.shape[2:]) if swapped else v.type.shape[2:]))
    best, cur, flips, walked = (v if not swapped else None), v, 0, []
    while cur.producer is not None:
        p = cur.producer
        nxt = scale_operand(p)
        if nxt is None and p.op is Op.PERMUTE and _swaps_last_two(p):
            nxt, flips = p.inputs[0], flips + 1
        elif nxt is None and p.op is Op.RESHAPE and p.inputs and p.inputs[0] is not None and \
                p.inputs[0].type.rank >= 2 and tuple(p.inputs[0].type.shape[-2:]) == tuple(cur.type.shape[-2:]):
            nxt = p.inputs[0]
        if nxt is None:
            break
        walked.append(p)
        cur = nxt
        if cur.type.rank == 4 and flips % 2 == int(swapped) and tuple(cur.type.shape) == want:
            best = cur
            path.extend(walked)
            walked = []
    return best if best is not None else v


def _scores_chain(v: Value, nodes: list[Node], masks: list[Value]) -> Node | None:
    """Walk from the softmax's input back to the ``Q K^T`` matmul through single-reader steps;
    collects the steps and the mask operands. None when the walk meets anything else."""
    for _ in range(16):
        p = v.producer
        if p is None or _only_reader(v) is None:
            return None
        if _batched_dot(p, ((2,), (3,))):
            nodes.append(p)
            return p
        ins = list(p.inputs)
        scaled = scale_operand(p)
        if p.op is Op.CAST and ins and ins[0] is not None:
            nxt = ins[0]
        elif scaled is not None:
            nxt = scaled
        elif p.op in (Op.ADD, Op.WHERE) and len(ins) in (2, 3) and all(x is not None for x in ins):
            # the scores are the operand whose walk reaches Q K^T; the other is the mask (Where's
            # fill, a scalar, is neither). A two-operand Where has its fill as a scalar attribute
            # (aten's where.ScalarOther, masked_fill): scores and condition in either order.
            fills = p.op is Op.WHERE and len(ins) == 3
            cands = [1, 2] if fills else [0, 1]
            for i in cands:
                sub_nodes: list[Node] = []
                sub_masks: list[Value] = []
                x = ins[i]
                assert x is not None
                dot = _scores_chain(x, sub_nodes, sub_masks)
                if dot is None:
                    continue
                other = ins[0] if fills else ins[1 - i]
                fill = ins[3 - i] if fills else None
                if fill is not None and not fill.type.is_one_element:
                    return None
                assert other is not None
                nodes.extend([p, *sub_nodes])
                masks.extend([other, *sub_masks])
                return dot
            return None
        else:
            return None
        nodes.append(p)
        v = nxt
    return None


def _match(softmax: Node) -> _Match | None:
    x = softmax.inputs[0] if softmax.inputs else None
    if x is None or x.type.rank != 4 or softmax.attrs.get("axis", -1) not in (-1, 3):
        return None
    nodes: list[Node] = [softmax]
    masks: list[Value] = []
    qk = _scores_chain(x, nodes, masks)
    if qk is None or len(masks) > 1:
        return None
    out = softmax.outputs[0]
    pv = None
    for _ in range(4):
        guard = nan_guard(out)
        if guard is not None:
            nodes.extend([guard, *(u.node for u in out.uses if u.node is not guard)])
            out = guard.outputs[0]
            continue
        reader = _only_reader(out)
        if reader is not None and reader.op is Op.CAST:
            nodes.append(reader)
            out = reader.outputs[0]
            continue
        if _batched_dot(reader, ((2,),)) and reader is not None and reader.inputs[0] is out:
            pv = reader
        break
    if pv is None:
        return None
    q_in, k_in, v_in = qk.inputs[0], qk.inputs[1], pv.inputs[1]
    assert q_in is not None and k_in is not None and v_in is not None
    path: list[Node] = []
    q = _operand(q_in, False, path)
    k = _operand(k_in, tuple(qk.attrs["rhs_contract"]) == (2,), path)
    v = _operand(v_in, False, path)
    if k.type.rank != 4 or (k is k_in and tuple(qk.attrs["rhs_contract"]) == (2,)):
        return None             # K^T with no K behind it: no [B, H, Sk, D] operand to hand the kernel
    causal = any(n.attrs.get(CAUSAL) for n in nodes)
    window = min((w for w in map(attention_window, nodes) if w is not None), default=None)
    return _Match(q, k, v, masks[0] if masks else None, causal, window, pv, nodes, nodes + [pv] + path)


def attention_from_eager(graph: Graph) -> int:
    """Rewrite each recognised eager attention of ``graph`` (in place: pass a clone) into one
    ``ATTENTION`` node in the ``bhsd`` layout; returns how many were rewritten."""
    count = 0
    outputs = set(graph.outputs)
    for softmax in [n for n in graph.nodes if n.op is Op.SOFTMAX]:
        if softmax.owner is not graph:
            continue
        m = _match(softmax)
        if m is None or any(v in outputs for n in m.inner for v in n.outputs):
            continue
        out = m.pv.outputs[0]
        attrs: dict[str, object] = {"layout": "bhsd", CAUSAL: m.causal, "dropout": 0.0}
        if m.causal and m.mask is not None:
            attrs["causal_from"] = "mask"
        if m.window is not None:
            attrs[WINDOW] = m.window
        node = graph.add_node(Op.ATTENTION, [m.q, m.k, m.v] + ([m.mask] if m.mask is not None else []),
                              [TensorType(out.type.dtype, out.type.shape)], attrs, name=m.pv.name,
                              source=m.pv.source)
        graph.nodes.remove(node)                # added last: it belongs where P V was
        graph.nodes.insert(graph.nodes.index(m.pv), node)
        graph.replace_all_uses(out, node.outputs[0])
        graph.remove_unread(m.nodes)
        count += 1
    return count
