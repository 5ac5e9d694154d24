"""The attention of the forward graph as a given training runtime runs it: fused or unfused, the layout
it writes, dropout or not.

Why a rewrite rather than a timing switch: an unfused attention stores the ``heads x seq x seq``
scores, reads them in the softmax, writes probabilities, reads them again in the dropout and the
second matmul, and the backward differentiates all of that. As graph ops those bytes are counted by
the same rules, differentiated by the same backward and sharded by the same propagation, so the
difference between a 2021 Megatron-LM step and a flash-attention step is explainable op by op.

* ``attention="unfused"``: each fused ``ATTENTION`` becomes a batched ``DOT`` (QK^T), a ``SOFTMAX``
  that applies the scale and the causal mask in its own kernel (Megatron's fused scale-mask-softmax)
  and a batched ``DOT`` with V; the softmax is marked as its own kernel (``kernels.OWN_KERNEL``) so
  fusion does not fold the three back into one flash kernel.
* ``attention_layout="sbhd"`` (fused attention): the kernel writes ``[s, b, heads, head_dim]``, the
  layout the output projection reads, so the transpose from the graph's ``[b, heads, s, head_dim]``
  to it is a view of the attention's output (``STRIDED_VIEW``) and a ``contiguous()`` copy after it
  is dropped: the projection saves the attention's own output, not a second copy of it.
* ``dropout > 0``: a ``RANDOM`` mask and a ``MUL`` after the attention probabilities (unfused only;
  flash attention draws its mask inside the kernel) and on the projection side of every residual
  ``ADD`` (a contraction's output, possibly through a bias add): Megatron's bias-dropout-add.
"""

from __future__ import annotations

import math

from ...ir import STRIDED_VIEW, VIEW_OPS, DType, Graph, Node, Op, Source, TensorType, Value, is_causal
from ..kernels import OWN_KERNEL
from .runtime import Runtime

__all__ = ["attention_form", "add_node"]


def attention_form(g: Graph, runtime: Runtime) -> bool:
    """Rewrite ``g`` in place to ``runtime``'s attention form and dropout; whether anything changed
    (new nodes are appended: the caller restores topological order)."""
    changed = False
    for node in list(g.nodes):
        if node.op is not Op.ATTENTION or node.attrs.get("layout", "bhsd") != "bhsd":
            continue
        if runtime.attention == "unfused":
            _unfuse(g, node, runtime.dropout)
            changed = True
        elif runtime.attention_layout == "sbhd":
            changed = _output_in_projection_layout(g, node) or changed
    if runtime.dropout > 0:
        for node in list(g.nodes):
            if node.op is Op.ADD and len(node.inputs) == 2:
                changed = _residual_dropout(g, node) or changed
    return changed


def _output_in_projection_layout(g: Graph, node: Node) -> bool:
    """The transposes of ``node``'s ``[b, h, s, d]`` output that bring heads next to the head dim
    (``[b, s, h, d]``, ``[s, b, h, d]``) become views, and a copy right after one is dropped."""
    changed = False
    for t in _readers_through_views(node.outputs[0]):
        perm = tuple(t.attrs.get("perm", ()))
        if t.op is not Op.PERMUTE or len(perm) != 4 or perm[2:] != (1, 3):
            continue
        if not t.attrs.get(STRIDED_VIEW):
            g.set_attr(t, STRIDED_VIEW, True)
            changed = True
        for c in _readers_through_views(t.outputs[0]):
            if c.op is Op.COPY and c.inputs[0] is not None:
                g.replace_all_uses(c.outputs[0], c.inputs[0])
                g.remove(c)
                changed = True
    return changed


def _readers_through_views(v: Value) -> list[Node]:
    """The nodes reading ``v``, looking through reshapes and other views of it."""
    out: list[Node] = []
    for u in list(v.uses):
        if u.node.op in VIEW_OPS:
            out.extend(r for o in u.node.outputs for r in _readers_through_views(o))
        else:
            out.append(u.node)
    return out


def _unfuse(g: Graph, node: Node, dropout: float) -> None:
    q, k, v = node.inputs[0], node.inputs[1], node.inputs[2]
    assert q is not None and k is not None and v is not None
    b, h, sq, d = q.shape
    sk = k.shape[2]
    if k.shape[1] != h:                      # grouped-query: each kv head serves h / kv query heads
        k = add_node(g, Op.EXPAND, [k], TensorType(k.dtype, (b, h, sk, d)), {}, node, "k_expand")
        v = add_node(g, Op.EXPAND, [v], TensorType(v.dtype, (b, h, sk, v.shape[3])), {}, node, "v_expand")
    dims = {"lhs_batch": (0, 1), "rhs_batch": (0, 1)}
    scores = add_node(g, Op.DOT, [q, k], TensorType(q.dtype, (b, h, sq, sk)),
                  {**dims, "lhs_contract": (3,), "rhs_contract": (3,)}, node, "scores")
    probs = add_node(g, Op.SOFTMAX, [scores], TensorType(q.dtype, (b, h, sq, sk)),
                 {"axis": 3, "scale": node.attrs.get("scale", 1 / math.sqrt(d) if isinstance(d, int) else 1.0),
                  "causal": is_causal(node), OWN_KERNEL: True}, node, "softmax")
    if dropout > 0:
        probs = _dropout(g, probs, node, "attention_dropout")
    out = add_node(g, Op.DOT, [probs, v], node.outputs[0].type,
               {**dims, "lhs_contract": (3,), "rhs_contract": (2,)}, node, "context")
    g.replace_all_uses(node.outputs[0], out)
    g.remove(node)


def _residual_dropout(g: Graph, add: Node) -> bool:
    """Dropout on the branch of a residual add that comes out of a projection (optionally + bias)."""
    a, b = add.inputs
    if a is None or b is None or a.type != b.type or not a.dtype.is_float:
        return False
    for i, x in enumerate((a, b)):
        if _projection(x) and not _projection((b, a)[i]):
            y = _dropout(g, x, add, "dropout")
            g.set_input(add, i, y)
            return True
    return False


def _projection(v: Value) -> bool:
    p = v.producer
    if p is not None and p.op is Op.ADD and p.attrs.get("role") == "bias":
        p = p.inputs[0].producer if p.inputs[0] is not None else None
    return p is not None and p.op is Op.DOT and not p.attrs.get("lhs_batch")


def _dropout(g: Graph, x: Value, at: Node, name: str) -> Value:
    mask = add_node(g, Op.RANDOM, [], TensorType(DType.BOOL, tuple(x.shape)), {"role": "dropout_mask"}, at,
                    f"{name}_mask")
    return add_node(g, Op.MUL, [x, mask], x.type, {"role": "dropout"}, at, name)


def add_node(g: Graph, op: Op, inputs: list[Value], t: TensorType, attrs: dict[str, object], at: Node,
             name: str) -> Value:
    """A node standing in for part of ``at``: named after it, in its scope and training phase."""
    src = Source(op=f"{at.source.op or at.op.value}.{name}", name=name, scope=at.source.scope, file=at.source.file)
    phase = at.attrs.get("phase")
    extra = {"phase": phase} if phase is not None else {}
    return g.add_node(op, inputs, [t], {**attrs, **extra}, name=f"{at.name}_{name}", source=src).outputs[0]
