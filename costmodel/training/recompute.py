"""Activation recomputation: which forward ops run again during the backward, and where.

Policies (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022):

* ``none``: the backward reads what the forward saved.
* ``selective``: the attention core (``QK^T``, scale and mask, softmax, dropout, ``PV``) of each
  eager attention is recomputed just before its backward, so its ``seq x seq`` tensors are never kept.
  A fused attention op already works this way (its backward recomputes the scores), so it adds nothing.
* ``dots``: JAX's ``jax.checkpoint_policies.dots_with_no_batch_dims_saveable`` (the same policy as
  ``checkpoint_dots_with_no_batch_dims``), which is MaxText's ``remat_policy=minimal`` (MaxText/layers/
  models.py at 76bd53b0f, 2023; at its 2025 head ``minimal`` saves the same projections by name): per
  layer, the outputs of contractions without batch dims (``lhs_batch`` empty: the weights' GEMMs) stay
  saved, with the layer's input; every other forward node of the layer (norms, activations, rotary,
  residual adds, attention, whose score and PV products have batch dims, a fused attention kernel) runs
  again before the layer's backward, if the backward reads it (:func:`drop_unread_recompute`: JAX's
  partial evaluation keeps only the residuals the backward needs, so a matmul output whose only reader is
  a residual add, e.g. the MLP's down projection, is saveable but not saved). Why it exists beside
  ``selective``: Megatron's selective keeps everything but the attention core, so a plan that calls
  MaxText's ``minimal`` selective saves far more than MaxText does.
* ``full``: every layer's forward runs again before its backward from the layer's input (the
  checkpoint); the layers are the module scopes with an index (``model.layers.3``, ``transformer.h.3``,
  ``encoder.layer.3``). Nodes outside every layer (embeddings, final norm, head) are not recomputed; a
  graph without layers is one checkpointed segment (so for ``dots``).

The recomputed copies are ordinary nodes with ``phase="recompute"``; the backward of the segment reads
them instead of the forward's values, so liveness frees the forward's and counts only the checkpoints.

Apart from the policy, a forward node marked :data:`IN_BACKWARD_KERNEL` runs inside a fused kernel
that saves only the node's inputs and computes the node again in its own backward (Megatron-Core's
SwiGLU: SiLU's output is not kept). Its copy is emitted in the backward phase (it is that kernel's
work, not activation recomputation) just before the backward of the first node that reads it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import NarrowpipeError
from ...ir import Graph, Node, Op, Value
from .context import GradContext
from .phases import BACKWARD, PHASE, RECOMPUTE

__all__ = ["RECOMPUTE_POLICIES", "IN_BACKWARD_KERNEL", "Recompute", "layer_of", "layer_of_scope",
           "attention_cores", "weight_dot", "drop_unread_recompute"]

RECOMPUTE_POLICIES = ("none", "selective", "dots", "full")
#: On a forward node: the runtime's fused kernel saves the node's inputs, not its output, and its
#: backward computes the output again (see the module doc).
IN_BACKWARD_KERNEL = "recomputed_in_backward"
#: Ops between QK^T and softmax, or softmax and PV, in an eager attention (scale, mask, dropout, casts).
_CHAIN = frozenset({Op.MUL, Op.DIV, Op.ADD, Op.SUB, Op.CAST, Op.WHERE, Op.COPY, Op.RESHAPE, Op.EXPAND})


def layer_of_scope(scope: str) -> str | None:
    """The layer of a module path: up to its first numeric part (``model.layers.3``), or None."""
    parts = scope.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return None


def layer_of(node: Node) -> str | None:
    """The layer a node belongs to, from its module scope."""
    return layer_of_scope(node.source.scope)


def _batched_dot(node: Node | None) -> bool:
    return node is not None and node.op is Op.DOT and bool(node.attrs.get("lhs_batch"))


def weight_dot(node: Node) -> bool:
    """A contraction without batch dims: what ``dots_with_no_batch_dims_saveable`` saves (JAX's
    ``jax/_src/ad_checkpoint.py``: a ``dot_general`` whose dimension numbers have no batch dims)."""
    return node.op is Op.DOT and not node.attrs.get("lhs_batch")


def _layers(nodes: Sequence[Node]) -> list[list[Node]]:
    """The forward nodes of each layer (module scope with an index), in forward order."""
    layers: dict[str, list[Node]] = {}
    for n in nodes:
        key = layer_of(n)
        if key is not None:
            layers.setdefault(key, []).append(n)
    return list(layers.values())


def _scores_operand(node: Node, inside: set[Node]) -> Value | None:
    """The operand of a scale/mask step that carries the scores (not the mask or a scalar table)."""
    ins = [v for v in node.inputs if v is not None and v.dtype.is_float]
    for v in ins:
        if _batched_dot(v.producer) or (v.producer in inside and v.producer is not None and v.producer.op in _CHAIN):
            return v
    return ins[0] if ins else None


def attention_cores(nodes: Sequence[Node]) -> list[list[Node]]:
    """Each eager attention's QK^T .. PV nodes (plus the dropout masks they draw), in forward order."""
    index = {n: i for i, n in enumerate(nodes)}
    cores = []
    for s in nodes:
        if s.op is not Op.SOFTMAX:
            continue
        chain: list[Node] = [s]
        qk = pv = None
        v = s.inputs[0]
        while v is not None and v.producer in index:
            p = v.producer
            assert p is not None
            if _batched_dot(p):
                qk = p
                break
            if p.op not in _CHAIN:
                break
            chain.append(p)
            v = _scores_operand(p, set(index))
        out = s.outputs[0]
        for _ in range(8):
            users = [u.node for u in out.uses if u.node in index]
            dots = [u for u in users if _batched_dot(u) and u.inputs[0] is out]
            if dots:
                pv = dots[0]
                break
            steps = [u for u in users if u.op in _CHAIN]
            if len(steps) != 1:
                break
            chain.append(steps[0])
            out = steps[0].outputs[0]
        if qk is None or pv is None:
            continue
        core = {qk, pv, *chain}
        for n in list(core):
            for x in n.inputs:
                src = x.producer if x is not None else None
                if src is not None and src in index and not any(i is not None for i in src.inputs):
                    core.add(src)   # a dropout mask or fill drawn again
        cores.append(sorted(core, key=index.__getitem__))
    return cores


class Recompute:
    """Emits each segment's recomputation once, before the backward of its first node to need it."""

    def __init__(self, cx: GradContext, segments: list[list[Node]], in_kernel: Sequence[Node] = (),
                 kept: Sequence[Sequence[Node]] = ()) -> None:
        """``kept[i]``: nodes of segment ``i``'s region that are not recomputed but whose backward
        reads the recomputed values, so the segment is emitted before theirs too (``dots``)."""
        self.cx = cx
        self.segments = segments + [[n] for n in in_kernel]
        #: the phase each segment's copies run in: recomputation, or a fused kernel's backward
        self.phases = [RECOMPUTE] * len(segments) + [BACKWARD] * len(in_kernel)
        #: node -> the segments to emit before its backward: a policy's segment before the backward of
        #: any of its nodes; a fused kernel's node also before the backward of its readers
        self.triggers: dict[Node, list[int]] = {}
        for i, seg in enumerate(self.segments):
            for n in seg:
                self.triggers.setdefault(n, []).append(i)
        for i, nodes in enumerate(kept):
            for n in nodes:
                self.triggers.setdefault(n, []).append(i)
        for i, n in enumerate(in_kernel, start=len(segments)):
            for reader in {u.node for o in n.outputs for u in o.uses}:
                self.triggers.setdefault(reader, []).append(i)
        self.done: set[int] = set()

    @classmethod
    def plan(cls, cx: GradContext, nodes: Sequence[Node], policy: str) -> tuple[Recompute, list[str]]:
        if policy not in RECOMPUTE_POLICIES:
            raise NarrowpipeError(f"recompute must be one of {', '.join(RECOMPUTE_POLICIES)}, got {policy!r}")
        notes: list[str] = []
        segments: list[list[Node]] = []
        kept: list[list[Node]] = []
        if policy == "selective":
            segments = attention_cores(nodes)
            if not segments and any(n.op is Op.ATTENTION for n in nodes):
                notes.append("recompute=selective: attention is fused (its backward recomputes the scores), "
                             "so nothing else is recomputed")
        elif policy in ("full", "dots"):
            regions = _layers(nodes)
            if not regions:
                regions = [list(nodes)]
                notes.append(f"recompute={policy}: no layers found (no module scope with an index), so the whole "
                             "forward is one checkpointed segment")
            if policy == "full":
                segments = regions
            else:
                segments = [[n for n in r if not weight_dot(n)] for r in regions]
                kept = [[n for n in r if weight_dot(n)] for r in regions]
        covered = {n for seg in segments for n in seg}
        in_kernel = [n for n in nodes if n.attrs.get(IN_BACKWARD_KERNEL) and n not in covered]
        return cls(cx, segments, in_kernel, kept), notes

    def before(self, node: Node) -> None:
        cx = self.cx
        for s in self.triggers.get(node, ()):
            if s in self.done:
                continue
            self.done.add(s)
            cx.phase = self.phases[s]
            for n in self.segments[s]:
                cx.serve(n, n.source)
                attrs = {k: v for k, v in n.attrs.items() if k not in (PHASE, IN_BACKWARD_KERNEL)}
                outs = cx.emit_types(n.op, [None if v is None else cx.val(v) for v in n.inputs],
                                     [o.type for o in n.outputs], attrs, name=f"{n.name}_recompute")
                for o, new in zip(n.outputs, outs):
                    cx.remap[o] = new
        cx.phase = BACKWARD


def drop_unread_recompute(graph: Graph) -> None:
    """Remove the recomputed copies that nothing reads (transitively), so the forward values only they
    read are no longer saved. For ``dots``: JAX differentiates the checkpointed layer by partial
    evaluation and dead-code elimination (``jax/_src/interpreters/partial_eval.py``, ``dce_jaxpr``), so
    a saveable value is stored only when the backward's recomputation reads it. Megatron's ``full``
    (``torch.utils.checkpoint``) re-runs the whole layer and is not pruned."""
    graph.remove_unread([n for n in graph.nodes if n.attrs.get(PHASE) == RECOMPUTE])
