"""The steps around eager attention's matmuls that its fused kernel takes in (:func:`.kernels.fuse`).

Why a module of its own: :func:`fuse_attention` finds ``DOT -> scale/mask -> SOFTMAX -> DOT`` and makes
it one kernel; what else belongs to that kernel depends on how the graph was written. Exporters add a
NaN guard after the softmax (``Where(IsNaN(p), 0, p)``: torch's ``symbolic_opset14``, onnxscript's
``torch_lib``), and the legacy ONNX exporter scales Q and K each by ``sqrt(scale)`` before ``Q K^T``
(``Mul(Transpose(K), c)``). A fused attention kernel has no NaN rows and applies the scale and the
transpose while it loads its operands, so none of these is a kernel of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir import Node, Op, Value

if TYPE_CHECKING:
    from .kernels import _Groups

__all__ = ["ATTN_CHAIN", "LAYOUT", "OWN_KERNEL", "fuse_attention", "nan_guard", "operand_steps", "scale_operand",
           "scores_input"]

#: Node attribute: the runtime launches this op as a kernel of its own (Megatron's fused softmax in
#: unfused attention), so fusion groups it with nothing.
OWN_KERNEL = "own_kernel"
#: the ops that may sit between ``Q K^T`` and the softmax, and between the softmax and ``P V``
ATTN_CHAIN = frozenset({Op.MUL, Op.DIV, Op.ADD, Op.SUB, Op.CAST, Op.WHERE, Op.COPY})
#: layout changes a matmul (or attention) kernel absorbs as it loads an operand
LAYOUT = frozenset({Op.PERMUTE, Op.COPY, Op.CAST})


def _readers(v: Value) -> set[Node]:
    return {u.node for u in v.uses}


def nan_guard(p: Value) -> Node | None:
    """The ``Where`` of ``Where(IsNaN(p), 0, p)`` when ``p``'s readers are exactly that guard (the
    fill a one-element constant): what both torch ONNX exporters write after attention's softmax (a
    fused kernel has no NaN rows). Kernel fusion and :mod:`.eager_attention` both ask this."""
    readers = _readers(p)
    if len(readers) != 2:
        return None
    isnan = next((n for n in readers if n.op is Op.ISNAN), None)
    where = next((n for n in readers if n.op is Op.WHERE), None)
    if isnan is None or where is None or len(where.inputs) != 3 or _readers(isnan.outputs[0]) != {where}:
        return None
    cond, a, b = where.inputs
    if cond is not isnan.outputs[0] or not ((a is p and b is not None and b.type.is_one_element) or
                                            (b is p and a is not None and a.type.is_one_element)):
        return None
    return where


def scale_operand(node: Node) -> Value | None:
    """The tensor a scalar scale step scales: ``x * c``, ``c * x`` or ``x / c`` with ``c`` of one
    element (a softmax scale, whole or split over Q and K); None for any other node."""
    ins = node.inputs
    if node.op not in (Op.MUL, Op.DIV) or len(ins) != 2 or ins[0] is None or ins[1] is None:
        return None
    if ins[1].type.is_one_element:
        return ins[0]
    return ins[1] if node.op is Op.MUL and ins[0].type.is_one_element else None


def operand_steps(qk: Node, index: dict[Node, int], base: dict[Value, Value],
                   consumers: dict[Value, list[Node]]) -> list[int]:
    """The scalar scales and layout changes that only feed QK^T's operands (the legacy exporter's
    ``Q * sqrt(s)`` and ``K^T * sqrt(s)``): the fused kernel applies them as it loads Q and K."""
    steps: list[int] = []
    for v in qk.inputs[:2]:
        for _ in range(4):
            if v is None:
                break
            b = base.get(v, v)
            p = b.producer
            if p is None or p not in index or len(consumers.get(b, ())) != 1:
                break
            scaled = scale_operand(p)
            if scaled is not None:
                v = scaled
            elif p.op in LAYOUT:
                v = p.inputs[0]
            else:
                break
            steps.append(index[p])
    return steps


def scores_input(node: Node, base: dict[Value, Value], index: dict[Node, int],
                  consumers: dict[Value, list[Node]]) -> Value | None:
    """The operand of a scale/mask step that carries the attention scores back toward QK^T: the
    one a batched DOT produced, else one from another single-use chain step. The mask operand is
    neither (shared by every layer, or built from positions); ``where(mask, scores, fill)`` puts the
    scores second, ``scores + mask`` and ``mask + scores`` either side."""
    ins = [v for v in (node.inputs[1:] if node.op is Op.WHERE else node.inputs) if v is not None]
    producers = [(v, base.get(v, v).producer) for v in ins]
    for v, p in producers:
        if p is not None and p.op is Op.DOT and p.attrs.get("lhs_batch") and p in index:
            return v
    for v, p in producers:
        if p is not None and p in index and p.op in ATTN_CHAIN and \
                len(consumers.get(base.get(v, v), ())) == 1:
            return v
    return ins[0] if ins else None


def fuse_attention(nodes: list[Node], index: dict[Node, int], base: dict[Value, Value],
                    consumers: dict[Value, list[Node]], groups: _Groups) -> None:
    """Find DOT -> [scale/mask/cast]* -> SOFTMAX -> [cast, NaN guard]* -> DOT and make it one kernel
    (with the scales and transposes that only feed the first DOT)."""
    for i, node in enumerate(nodes):
        if node.op is not Op.SOFTMAX or node.attrs.get(OWN_KERNEL):
            continue
        chain = [i]
        v = node.inputs[0]
        first_dot = None
        while v is not None:
            p = base.get(v, v).producer
            if p is None or p not in index:
                break
            if p.op is Op.DOT and p.attrs.get("lhs_batch"):
                first_dot = index[p]
                break
            if p.op not in ATTN_CHAIN or len(consumers.get(base.get(v, v), ())) != 1:
                break
            chain.append(index[p])
            v = scores_input(p, base, index, consumers)
        if first_dot is None:
            continue
        out = node.outputs[0]
        second_dot = None
        for _ in range(4):
            users = consumers.get(out, [])
            guard = nan_guard(out)
            if guard is not None:
                chain.extend(index[u] for u in users)
                out = guard.outputs[0]
                continue
            if len(users) != 1:
                break
            u = users[0]
            if u.op is Op.DOT and u.attrs.get("lhs_batch"):
                second_dot = index[u]
                break
            if u.op not in ATTN_CHAIN:
                break
            chain.append(index[u])
            out = u.outputs[0]
        if second_dot is None:
            continue
        root = groups.union(first_dot, second_dot)
        for k in chain + operand_steps(nodes[first_dot], index, base, consumers):
            root = groups.union(root, k)
        groups.heavy[groups.find(root)] = 1
