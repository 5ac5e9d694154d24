"""Where the backward starts: the loss on the model's outputs and its gradient.

Why two losses: ``sum`` is what ``out.sum().backward()`` does (a gradient of ones, a broadcast view
of one scalar that costs nothing), the neutral choice for any graph; ``cross_entropy`` is what a
language model trains on, and it is not free: log-softmax over the vocabulary (its output, one
logits-sized tensor, is kept for the backward), the label gather, the mean, then a scatter and the
log-softmax backward, each over ``batch x seq x vocab`` (HF's ``ForCausalLMLoss`` and Megatron's
cross entropy do the same work; both also upcast the logits to fp32, which this graph does not).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import NarrowpipeError
from ...ir import DType, Graph, Node, Op, Source, TensorType, Value
from .context import GradContext
from .phases import BACKWARD, FORWARD

__all__ = ["LOSSES", "add_loss"]

LOSSES = ("sum", "cross_entropy")


def _ones(cx: GradContext, v: Value) -> Value:
    one = cx.emit(Op.FILL, [], (), v.dtype, {"value": 1.0}, name=f"{v.name}_grad_seed")
    if not v.shape:
        return one
    return cx.emit(Op.EXPAND, [one], v.shape, v.dtype, name=f"{v.name}_grad_ones")


def add_loss(cx: GradContext, graph: Graph, outputs: Sequence[Value],
             loss: str) -> tuple[list[Node], dict[Value, Value]]:
    """The loss's forward nodes (to be differentiated with the model) and the seed gradients."""
    if loss not in LOSSES:
        raise NarrowpipeError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    if loss == "sum":
        cx.phase = BACKWARD
        seeds = {}
        for v in outputs:
            cx.serve(None, Source(op="loss.sum", name=v.name))
            seeds[v] = _ones(cx, v)
        return [], seeds
    logits = outputs[0]
    rank = logits.type.rank
    if rank < 1 or not logits.dtype.is_float:
        raise NarrowpipeError(f"cross_entropy needs float logits with a class dim, got {logits.name!r}: {logits.type}")
    cx.phase = FORWARD
    cx.serve(None, Source(op="loss.cross_entropy", name="loss", scope="loss"))
    first = len(graph.nodes)
    labels = graph.add_input("labels", TensorType(DType.INT64, tuple(logits.shape[:-1])))
    lsm = cx.like(Op.LOG_SOFTMAX, [logits], logits, {"axis": rank - 1}, name="loss_log_softmax")
    idx = cx.emit(Op.RESHAPE, [labels], (*logits.shape[:-1], 1), DType.INT64, name="loss_labels_view")
    picked = cx.emit(Op.GATHER_ELEMENTS, [lsm, idx], (*logits.shape[:-1], 1), logits.dtype, {"axis": rank - 1},
                     name="loss_pick")
    mean = cx.emit(Op.REDUCE_MEAN, [picked], (), logits.dtype, {"axes": tuple(range(rank)), "keepdims": False},
                   name="loss_mean")
    nll = cx.like(Op.NEG, [mean], mean, name="loss")
    nodes = graph.nodes[first:]
    cx.phase = BACKWARD
    return nodes, {nll: _ones(cx, nll)}
