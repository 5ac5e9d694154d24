"""The forward graph as a given training runtime runs it: attention fused or unfused, dropout or not.

Why a rewrite rather than a timing switch: an unfused attention stores the ``heads x seq x seq``
scores, reads them in the softmax, writes probabilities, reads them again in the dropout and the
second matmul, and the backward differentiates all of that. As graph ops those bytes are counted by
the same rules, differentiated by the same backward and sharded by the same propagation, so the
difference between a 2021 Megatron-LM step and a flash-attention step is explainable op by op.

* ``attention="unfused"``: each fused ``ATTENTION`` becomes a batched ``DOT`` (QK^T), a ``SOFTMAX``
  that applies the scale and the causal mask in its own kernel (Megatron's fused scale-mask-softmax)
  and a batched ``DOT`` with V; the softmax is marked as its own kernel (``kernels.OWN_KERNEL``) so
  fusion does not fold the three back into one flash kernel.
* ``dropout > 0``: a ``RANDOM`` mask and a ``MUL`` after the attention probabilities (unfused only;
  flash attention draws its mask inside the kernel) and on the projection side of every residual
  ``ADD`` (a contraction's output, possibly through a bias add): Megatron's bias-dropout-add.
"""

from __future__ import annotations

import math

from ...ir import DType, Graph, Node, Op, TensorType, Value, is_causal
from ...ir.verifier import maybe_verify
from ..kernels import OWN_KERNEL
from .runtime import Runtime

__all__ = ["apply_runtime_form"]


def apply_runtime_form(graph: Graph, runtime: Runtime) -> Graph:
    """``graph`` rewritten to ``runtime``'s attention form and dropout (unchanged when neither applies)."""
    unfuse = runtime.attention == "unfused" and any(n.op is Op.ATTENTION for n in graph.nodes)
    if not unfuse and runtime.dropout <= 0:
        return graph
    out = graph.clone()
    for node in list(out.nodes):
        if node.op is Op.ATTENTION and unfuse and node.attrs.get("layout", "bhsd") == "bhsd":
            _unfuse(out, node, runtime.dropout)
    if runtime.dropout > 0:
        for node in list(out.nodes):
            if node.op is Op.ADD and len(node.inputs) == 2:
                _residual_dropout(out, node)
    out.nodes = _topological(out)
    out.version += 1
    return maybe_verify(out, "narrowpipe.planner.attention_form")


def _unfuse(g: Graph, node: Node, dropout: float) -> None:
    q, k, v = node.inputs[0], node.inputs[1], node.inputs[2]
    assert q is not None and k is not None and v is not None
    b, h, sq, d = q.shape
    sk = k.shape[2]
    if k.shape[1] != h:                      # grouped-query: each kv head serves h / kv query heads
        k = _add(g, Op.EXPAND, [k], TensorType(k.dtype, (b, h, sk, d)), {}, node, "k_expand")
        v = _add(g, Op.EXPAND, [v], TensorType(v.dtype, (b, h, sk, v.shape[3])), {}, node, "v_expand")
    dims = {"lhs_batch": (0, 1), "rhs_batch": (0, 1)}
    scores = _add(g, Op.DOT, [q, k], TensorType(q.dtype, (b, h, sq, sk)),
                  {**dims, "lhs_contract": (3,), "rhs_contract": (3,)}, node, "scores")
    probs = _add(g, Op.SOFTMAX, [scores], TensorType(q.dtype, (b, h, sq, sk)),
                 {"axis": 3, "scale": node.attrs.get("scale", 1 / math.sqrt(d) if isinstance(d, int) else 1.0),
                  "causal": is_causal(node), OWN_KERNEL: True}, node, "softmax")
    if dropout > 0:
        probs = _dropout(g, probs, node, "attention_dropout")
    out = _add(g, Op.DOT, [probs, v], node.outputs[0].type,
               {**dims, "lhs_contract": (3,), "rhs_contract": (2,)}, node, "context")
    g.replace_all_uses(node.outputs[0], out)
    g.remove(node)


def _residual_dropout(g: Graph, add: Node) -> None:
    """Dropout on the branch of a residual add that comes out of a projection (optionally + bias)."""
    a, b = add.inputs
    if a is None or b is None or a.type != b.type or not a.dtype.is_float:
        return
    for i, x in enumerate((a, b)):
        if _projection(x) and not _projection((b, a)[i]):
            y = _dropout(g, x, add, "dropout")
            g.set_input(add, i, y)
            return


def _projection(v: Value) -> bool:
    p = v.producer
    if p is not None and p.op is Op.ADD and p.attrs.get("role") == "bias":
        p = p.inputs[0].producer if p.inputs[0] is not None else None
    return p is not None and p.op is Op.DOT and not p.attrs.get("lhs_batch")


def _dropout(g: Graph, x: Value, at: Node, name: str) -> Value:
    mask = _add(g, Op.RANDOM, [], TensorType(DType.BOOL, tuple(x.shape)), {"role": "dropout_mask"}, at,
                f"{name}_mask")
    return _add(g, Op.MUL, [x, mask], x.type, {"role": "dropout"}, at, name)


def _add(g: Graph, op: Op, inputs: list[Value], t: TensorType, attrs: dict[str, object], at: Node,
         name: str) -> Value:
    from ...ir import Source
    src = Source(op=f"{at.source.op or at.op.value}.{name}", name=name, scope=at.source.scope, file=at.source.file)
    phase = at.attrs.get("phase")
    extra = {"phase": phase} if phase is not None else {}
    return g.add_node(op, inputs, [t], {**attrs, **extra}, name=f"{at.name}_{name}", source=src).outputs[0]


def _topological(g: Graph) -> list[Node]:
    """The nodes in an order where every operand is produced first (the rewrite appended new nodes
    after their readers): a depth-first walk over producers, original order kept otherwise."""
    placed: set[int] = set()
    order: list[Node] = []
    for root in g.nodes:
        stack: list[tuple[Node, bool]] = [(root, False)]
        while stack:
            n, expanded = stack.pop()
            if expanded:
                order.append(n)
                continue
            if id(n) in placed:
                continue
            placed.add(id(n))
            stack.append((n, True))
            for v in reversed(n.inputs):
                p = v.producer if v is not None else None
                if p is not None and p.owner is g and id(p) not in placed:
                    stack.append((p, False))
    return order
