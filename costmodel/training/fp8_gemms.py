"""FP8 training as Transformer Engine runs it: only the Linear layers' GEMMs run in FP8.

Why a rewrite of the (sharded) training step rather than a retyped model: Transformer Engine (TE),
as NeMo and Megatron-Core run it, keeps the weights in bf16 (fp32 master weights and gradients in
the optimizer), the activations, norms, residual adds, SwiGLU, rotary, attention's core
(FlashAttention/cuDNN in bf16: FP8 dot-product attention is off by default), the loss and the
optimizer in bf16/fp32, and feeds FP8 only to the GEMMs of its Linear modules: the forward
(E4M3 input and weight) and both backward GEMMs (dgrad: the E5M2 output gradient against the
weight; wgrad: the input against the output gradient), each accumulating in fp32 and writing bf16.
The default recipe is ``HYBRID``: "FP8 tensors in the forward pass are in e4m3 format, FP8 tensors
in the backward pass are in e5m2 format" (TE Common API, ``transformer_engine.common.recipe.Format``,
https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/api/common.html; the FP8 primer,
https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/examples/fp8_primer.html).
Retyping the whole model to FP8 (the refused earlier version) ran every op at the FP8 rate and
halved every activation, 1.7x NVIDIA's measured FP8 throughput.

What the rewrite adds, op by op, so that the cost rules and the GPU model time it like any program:

* a ``QUANTIZE`` before each FP8 GEMM operand, written as TE writes it: the input's cast writes the
  FP8 value and a transposed FP8 copy (TE's ``cast_transpose``; the wgrad GEMM reads the copy) and
  is an elementwise node, so fusion puts it into the LayerNorm/RMSNorm or activation kernel that
  produces its input (TE's ``LayerNormLinear``/``LayerNormMLP`` fuse the cast into the norm and
  the activation), and leaves it a kernel of its own after attention or a collective;
* the output gradient's cast to E5M2 (value and transposed copy), shared by the dgrad and the wgrad
  of one Linear, fused into the elementwise backward kernel that produces it (TE's
  ``dgelu``/``dswiglu`` + cast) where there is one;
* one cast of each weight per optimizer step (TE caches the FP8 weight across the microbatches of
  a step: ``is_first_microbatch``), in the phase :data:`WEIGHT_CAST` that the planner times once per
  step; its FP8 value and transposed copy stay resident (:func:`fp8_weight_bytes`).

The GEMMs then read 8-bit operands, so the GPU model runs them at the chip's FP8 matrix rate and
counts 1-byte operand traffic, while every other kernel is left as it was. Under sequence
parallelism the forward all-gather of a Linear's input moves the FP8 shard (TE casts before the
gather), and the backward re-gather of the saved input moves the saved FP8 copy.

Assumptions (no source read): every chip gets the transposed FP8 copies that Hopper's TN-only FP8
GEMMs need (Blackwell's FP8 GEMMs take other layouts, so there this overstates the cast writes by
one FP8 byte per element); the per-tensor scale and amax reductions (a few floats per tensor, fused
into the cast kernels) are not counted. Not covered: routed experts' grouped GEMMs (TE's
``GroupedLinear`` in FP8) stay bf16; FP8 parameters (``fp8_model_params``) are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...ir import VIEW_OPS, DType, Graph, Node, Op, Source, TensorType, Value, ValueKind
from .phases import BACKWARD, FORWARD, PHASE, RECOMPUTE

__all__ = ["fp8_linear_gemms", "weight_operand", "Fp8Rewrite", "WEIGHT_CAST", "FORWARD_FORMAT", "GRAD_FORMAT",
           "FP8_CAST"]

#: The phase of the once-per-step weight casts (timed once per step, beside the optimizer).
WEIGHT_CAST = "weight_cast"
#: TE's HYBRID recipe (its default): E4M3 for the forward's inputs and weights, E5M2 for gradients.
FORWARD_FORMAT = DType.FP8_E4M3
GRAD_FORMAT = DType.FP8_E5M2
#: Attribute marking the casts this rewrite adds (reports and tests find them by it).
FP8_CAST = "fp8_cast"
_GEMM_PHASES = (FORWARD, RECOMPUTE)
_GRAD_ROLES = ("grad_lhs", "grad_rhs")


@dataclass
class Fp8Rewrite:
    """What :func:`fp8_linear_gemms` changed: the GEMMs now in FP8 (forward + dgrad + wgrad) and the
    casts it added, by kind (``activation``, ``gradient``, ``weight``)."""

    gemms: list[Node] = field(default_factory=list)
    casts: dict[str, list[Node]] = field(default_factory=lambda: {"activation": [], "gradient": [], "weight": []})


def fp8_linear_gemms(graph: Graph) -> Fp8Rewrite:
    """Rewrite ``graph`` (a training step, sharded or not) in place so that every Linear's GEMMs
    read FP8 operands through the casts Transformer Engine runs; returns what changed. A Linear is
    a ``DOT`` of the forward (or its recomputation) with a parameter operand; its dgrad and wgrad
    are the backward ``DOT``s that read that parameter, or the input that Linear read."""
    out = Fp8Rewrite()
    state = _State(graph, out)
    for node in list(graph.nodes):
        if node.op is Op.DOT and node.attrs.get(PHASE) in _GEMM_PHASES:
            w = weight_operand(node)
            if w is not None:
                state.forward(node, w)
    for node in list(graph.nodes):
        if node.op is Op.DOT and node.attrs.get(PHASE) == BACKWARD and node.attrs.get("role") in _GRAD_ROLES:
            state.backward(node)
    return out


def weight_operand(node: Node) -> int | None:
    """The index (0 or 1) of the operand that is a parameter (through views), or None."""
    for i, v in enumerate(node.inputs[:2]):
        if v is not None and _param(v) is not None:
            return i
    return None


def _param(v: Value) -> Value | None:
    """The parameter ``v`` is (or is a view of), else None."""
    while v.producer is not None and v.producer.op in VIEW_OPS and v.producer.inputs:
        src = v.producer.inputs[0]
        if src is None:
            return None
        v = src
    return v if v.producer is None and v.kind is ValueKind.PARAM else None


class _State:
    """The casts added so far, keyed by the bf16 value each reads (one cast per value: a fused QKV's
    three projections read one cast of the norm's output, as TE's ``LayerNormLinear`` does)."""

    def __init__(self, graph: Graph, out: Fp8Rewrite) -> None:
        self.graph = graph
        self.out = out
        self.weights: dict[Value, Node] = {}
        self.inputs: dict[Value, Node] = {}
        self.grads: dict[Value, Node] = {}

    # -- forward -------------------------------------------------------------------------------
    def forward(self, node: Node, wi: int) -> None:
        w = node.inputs[wi]
        x = node.inputs[1 - wi]
        assert w is not None
        if x is None:
            return
        self.graph.set_input(node, wi, self.weight(w).outputs[0])
        gathered = self._gathered_for_linears(x, node)
        if gathered is not None:
            # sequence parallelism: cast the local shard, gather FP8 (TE casts before the all-gather)
            local = gathered.inputs[0]
            assert local is not None
            if not _is_cast(local):
                q = self.input(local, str(node.attrs.get(PHASE)))
                self.graph.set_input(gathered, 0, q.outputs[0])
                _retype(gathered.outputs[0], FORWARD_FORMAT)
        elif not _is_cast(x):
            q = self.input(x, str(node.attrs.get(PHASE)))
            self.graph.set_input(node, 1 - wi, q.outputs[0])
        self.out.gemms.append(node)

    def _gathered_for_linears(self, x: Value, node: Node) -> Node | None:
        """The forward all-gather producing ``x`` when only Linears read its output (so it can carry
        FP8), else None."""
        p = x.producer
        if p is None or p.op is not Op.ALL_GATHER or p.attrs.get(PHASE) != node.attrs.get(PHASE) or not p.inputs:
            return None
        readers = [u.node for u in x.uses]
        if p.inputs[0] is None or not all(_is_linear(r) for r in readers):
            return None
        return p

    def weight(self, w: Value) -> Node:
        """The once-per-step cast of weight ``w`` (keyed by the parameter it is or views): its FP8
        value and transposed copy."""
        p = _param(w)
        assert p is not None
        hit = self.weights.get(p)
        if hit is None:
            hit = self.weights[p] = self._cast(w, FORWARD_FORMAT, WEIGHT_CAST, "weight")
        return hit

    def input(self, x: Value, phase: str) -> Node:
        hit = self.inputs.get(x)
        if hit is None:
            hit = self.inputs[x] = self._cast(x, FORWARD_FORMAT, phase, "activation")
        return hit

    # -- backward ------------------------------------------------------------------------------
    def backward(self, node: Node) -> None:
        """A dgrad (reads a weight) or wgrad (reads a Linear's input) of a Linear cast above: its
        other operand is the output gradient, cast once to E5M2 for both GEMMs of that Linear."""
        kinds: list[str] = []
        for v in node.inputs[:2]:
            cast = self.weights.get(_param(v)) if v is not None else None     # type: ignore[arg-type]
            if v is None:
                kinds.append("")
            elif cast is not None and cast.outputs[1].shape == v.shape:
                kinds.append("weight")
            elif v in self.inputs or self._regathered(v) is not None:
                kinds.append("input")
            else:
                kinds.append("grad")
        if "weight" not in kinds and "input" not in kinds:
            return
        for i, kind in enumerate(kinds):
            v = node.inputs[i]
            if v is None:
                continue
            if kind == "weight":
                p = _param(v)
                assert p is not None
                self.graph.set_input(node, i, self.weights[p].outputs[1])
            elif kind == "input":
                gather = self._regathered(v)
                if gather is not None:
                    local = gather.inputs[0]
                    assert local is not None
                    if not _is_cast(local):     # the first of the Linears that share the gather
                        self.graph.set_input(gather, 0, self.inputs[local].outputs[1])
                        _retype(gather.outputs[0], FORWARD_FORMAT)
                else:
                    self.graph.set_input(node, i, self.inputs[v].outputs[1])
            elif kind == "grad":
                q = self.grads.get(v)
                if q is None:
                    q = self.grads[v] = self._cast(v, GRAD_FORMAT, BACKWARD, "gradient")
                # the dgrad reads the value, the wgrad the transposed copy (TE's cast_transpose)
                self.graph.set_input(node, i, q.outputs[0 if "weight" in kinds else 1])
        self.out.gemms.append(node)

    def _regathered(self, v: Value) -> Node | None:
        """The backward all-gather (sequence parallelism) of a Linear's saved input shard, else None."""
        p = v.producer
        if p is None or p.op is not Op.ALL_GATHER or p.attrs.get(PHASE) != BACKWARD:
            return None
        src = p.inputs[0]
        if src is not None and src in self.inputs:
            return p
        if src is not None and _is_cast(src):     # already re-pointed at the FP8 copy
            return p
        return None

    # -- emitting ------------------------------------------------------------------------------
    def _cast(self, v: Value, to: DType, phase: str, kind: str) -> Node:
        """A cast of ``v`` to ``to`` writing the FP8 value and a transposed FP8 copy (typed with
        ``v``'s shape: the GEMM's dims do not change, only the storage order, and the bytes are
        equal), placed right after ``v``'s producer so fusion can join them."""
        g = self.graph
        t = TensorType(to, v.shape)
        node = g.add_node(Op.QUANTIZE, [v], [t, t], {PHASE: phase, "to": to.value, FP8_CAST: kind},
                          name=f"{v.name}_fp8_cast",
                          source=Source(op="transformer_engine.cast_transpose", name=v.source_name or v.name,
                                        scope=v.producer.source.scope if v.producer is not None else ""))
        g.nodes.pop()
        at = g.nodes.index(v.producer) + 1 if v.producer is not None and v.producer in g.nodes else 0
        g.nodes.insert(at, node)
        self.out.casts[kind].append(node)
        return node


def _is_linear(node: Node) -> bool:
    """A ``DOT`` reading a parameter, or a weight cast this rewrite already put in its place."""
    if node.op is not Op.DOT:
        return False
    return weight_operand(node) is not None or any(
        v is not None and v.producer is not None and v.producer.attrs.get(FP8_CAST) == "weight"
        for v in node.inputs[:2])


def _is_cast(v: Value) -> bool:
    """Whether ``v`` is already an output of a cast this rewrite added."""
    return v.producer is not None and bool(v.producer.attrs.get(FP8_CAST))


def _retype(v: Value, to: DType) -> None:
    v.type = TensorType(to, v.type.shape)
