"""Elementwise steps a training runtime runs as one fused kernel that saves less than eager torch.

Why it matters: what a step keeps for its backward is decided by the kernel that runs it, not by the
arithmetic. Eager torch saves, for each op, what that op's backward reads; a fused kernel saves what
its one backward reads, and computes the rest again there. The graph a frontend gives spells the
steps out, so the runtime's form says which of them run fused:

* ``fused_norm``: an RMS norm spelled as steps, as a Hugging Face ``RMSNorm`` exports (``x.float()``,
  ``pow(2).mean(-1, keepdim)``, ``+ eps``, ``rsqrt``, ``x * r``, ``.to(bf16)``, ``weight * ...``),
  becomes one ``RMS_NORM(x, weight)``: the fused kernel (Transformer Engine's, Apex's) saves its
  input, where the steps save the fp32 copy, the normalized value and the cast beside it.
* ``fused_glu``: the activation of a gated MLP (``act(gate) * up``, SiLU or GeLU) is marked
  :data:`~narrowpipe.costmodel.training.recompute.IN_BACKWARD_KERNEL`: Megatron-Core's fused SwiGLU
  saves its input (gate and up) and computes SiLU again in its backward, so the activation's output
  is not kept from the forward (eager torch keeps it for the product's backward).
"""

from __future__ import annotations

from ...ir import Graph, Node, Op, TensorType, Value, ValueKind
from ..training.recompute import IN_BACKWARD_KERNEL

__all__ = ["fuse_rms_norms", "mark_fused_glu"]

#: Activations of a gated MLP that Megatron-Core fuses with the gate product (SwiGLU, GeGLU).
_GLU_ACTIVATIONS = frozenset({Op.SILU, Op.GELU})


def mark_fused_glu(g: Graph) -> bool:
    """Mark each gated MLP's activation as computed again inside the product's fused backward; whether
    any was marked. A gated activation: its output feeds one ``MUL`` with a tensor of its own shape."""
    changed = False
    for node in g.nodes:
        if node.op not in _GLU_ACTIVATIONS or node.attrs.get(IN_BACKWARD_KERNEL) or not node.outputs:
            continue
        out = node.outputs[0]
        readers = [u.node for u in out.uses]
        if len(readers) != 1 or readers[0].op is not Op.MUL or len(readers[0].inputs) != 2:
            continue
        other = next((v for v in readers[0].inputs if v is not out), None)
        if other is None or other.type != out.type or other.kind is not ValueKind.ACTIVATION:
            continue
        g.set_attr(node, IN_BACKWARD_KERNEL, True)
        changed = True
    return changed


def fuse_rms_norms(g: Graph) -> bool:
    """Replace every RMS norm spelled as steps by one ``RMS_NORM`` node; whether any was replaced (the
    new nodes are appended: the caller restores topological order)."""
    changed = False
    for node in list(g.nodes):
        if node.op is Op.RSQRT and node.owner is g:
            found = _rms_steps(node)
            if found is not None:
                _replace(g, *found)
                changed = True
    return changed


def _rms_steps(rsqrt: Node) -> tuple[Value, Value, float, Value, list[Node]] | None:
    """``(x, weight, eps, output, step nodes)`` of the RMS norm whose ``rsqrt`` this is, or None when
    the steps around it are not exactly one (any intermediate read elsewhere, a weight that is not a
    parameter of the normalized dim's size, a mean over another axis)."""
    add = _producer(rsqrt.inputs[0], Op.ADD)
    mean = _producer(add.inputs[0], Op.REDUCE_MEAN) if add is not None and len(add.inputs) == 1 else None
    if add is None or mean is None or "scalar" not in add.attrs:
        return None
    square = mean.inputs[0].producer if mean.inputs[0] is not None else None
    if square is None or not _is_square(square):
        return None
    x32 = square.inputs[0]
    assert x32 is not None
    rank = x32.type.rank
    axes = mean.attrs.get("axes")
    axes = (axes,) if isinstance(axes, int) else tuple(axes or ())
    if rank == 0 or tuple(a % rank for a in axes) != (rank - 1,) or not mean.attrs.get("keepdims"):
        return None
    scale = _only_reader(rsqrt.outputs[0])
    if scale is None or scale.op is not Op.MUL or set(scale.inputs) != {x32, rsqrt.outputs[0]}:
        return None
    steps = [square, mean, add, rsqrt, scale]
    cur, weighted = scale.outputs[0], None
    while weighted is None:
        reader = _only_reader(cur)
        if reader is None:
            return None
        if reader.op is Op.CAST:
            steps.append(reader)
            cur = reader.outputs[0]
            continue
        if reader.op is not Op.MUL or len(reader.inputs) != 2:
            return None
        found = _parameter(next((v for v in reader.inputs if v is not cur), None), x32.shape[-1])
        if found is None:
            return None
        weighted, path = found
        steps += [n for n in path if {u.node for o in n.outputs for u in o.uses} <= {reader, *path}]
        steps.append(reader)
        cur = reader.outputs[0]
    while (reader := _only_reader(cur)) is not None and reader.op is Op.CAST:
        steps.append(reader)
        cur = reader.outputs[0]
    x = x32
    cast = x32.producer
    if cast is not None and cast.op is Op.CAST and cast.inputs[0] is not None and \
            {u.node for u in x32.uses} <= set(steps):
        steps.insert(0, cast)
        x = cast.inputs[0]
    inside = set(steps)
    for n in steps:                                 # nothing outside reads a step (the output aside)
        for o in n.outputs:
            if o is not cur and any(u.node not in inside for u in o.uses):
                return None
    return x, weighted, float(add.attrs["scalar"]), cur, steps


def _replace(g: Graph, x: Value, weight: Value, eps: float, out: Value, steps: list[Node]) -> None:
    last = steps[-1]
    phase = {"phase": last.attrs["phase"]} if "phase" in last.attrs else {}
    norm = g.add_node(Op.RMS_NORM, [x, weight], [TensorType(out.dtype, tuple(x.shape))],
                      {"axis": x.type.rank - 1, "eps": eps, **phase}, name=f"{last.name}_rms_norm",
                      source=last.source)
    g.replace_all_uses(out, norm.outputs[0])
    for n in reversed(steps):                       # readers before what they read
        g.remove(n)


def _is_square(n: Node) -> bool:
    if n.op is Op.POW:
        return len(n.inputs) == 1 and float(n.attrs.get("scalar", 0)) == 2.0
    return n.op is Op.MUL and len(n.inputs) == 2 and n.inputs[0] is n.inputs[1] and n.inputs[0] is not None


def _producer(v: Value | None, op: Op) -> Node | None:
    p = v.producer if v is not None else None
    return p if p is not None and p.op is op else None


def _only_reader(v: Value) -> Node | None:
    readers = {u.node for u in v.uses}
    return next(iter(readers)) if len(readers) == 1 else None


def _parameter(v: Value | None, size: object) -> tuple[Value, list[Node]] | None:
    """The parameter ``v`` is, through a cast or a ``1 + w`` of it (those steps, in order), when it
    has the normalized dim's size."""
    path: list[Node] = []
    while v is not None and v.producer is not None and v.producer.op in (Op.CAST, Op.ADD) and \
            len(v.producer.inputs) == 1:
        path.insert(0, v.producer)
        v = v.producer.inputs[0]
    if v is None or v.kind is not ValueKind.PARAM or tuple(v.shape) != (size,):
        return None
    return v, path
