"""The steps around eager attention's matmuls that its fused kernel takes in (:func:`.kernels.fuse`).

Why a module of its own: :mod:`.kernels` finds ``DOT -> scale/mask -> SOFTMAX -> DOT`` and makes it
one kernel; what else belongs to that kernel depends on how the graph was written. Exporters add a
NaN guard after the softmax (``Where(IsNaN(p), 0, p)``: torch's ``symbolic_opset14``, onnxscript's
``torch_lib``), and the legacy ONNX exporter scales Q and K each by ``sqrt(scale)`` before ``Q K^T``
(``Mul(Transpose(K), c)``). A fused attention kernel has no NaN rows and applies the scale and the
transpose while it loads its operands, so none of these is a kernel of its own.
"""

from __future__ import annotations

from ..ir import Node, Op, Value

__all__ = ["ATTN_CHAIN", "nan_guard", "operand_steps", "scores_input"]

#: the ops that may sit between ``Q K^T`` and the softmax, and between the softmax and ``P V``
ATTN_CHAIN = frozenset({Op.MUL, Op.DIV, Op.ADD, Op.SUB, Op.CAST, Op.WHERE, Op.COPY})
_LAYOUT = frozenset({Op.PERMUTE, Op.COPY, Op.CAST})


def nan_guard(p: Value, users: list[Node], consumers: dict[Value, list[Node]]) -> Node | None:
    """The ``Where`` of ``Where(IsNaN(p), 0, p)`` when ``p``'s readers are exactly that guard: what
    both torch ONNX exporters write after attention's softmax (a fused kernel has no NaN rows)."""
    if len(users) != 2:
        return None
    isnan = next((u for u in users if u.op is Op.ISNAN), None)
    where = next((u for u in users if u.op is Op.WHERE), None)
    if isnan is None or where is None or consumers.get(isnan.outputs[0], []) != [where] or \
            len(where.inputs) != 3 or where.inputs[0] is not isnan.outputs[0] or p not in where.inputs[1:]:
        return None
    return where


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
            if p.op in (Op.MUL, Op.DIV) and len(p.inputs) == 2 and all(x is not None for x in p.inputs):
                scalar = [i for i, x in enumerate(p.inputs) if x is not None and all(d == 1 for d in x.type.shape)]
                if not scalar or (p.op is Op.DIV and scalar != [1]):
                    break
                v = p.inputs[1 - scalar[-1]]
            elif p.op in _LAYOUT:
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
