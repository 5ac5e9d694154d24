"""``build_training_graph``: one training step (forward, loss, recomputation, backward, optimizer) as
one IR graph that every existing pass, rule and execution model handles.

The result is a new graph: the forward's nodes (``phase="forward"``), the loss, the backward derived
op by op (:mod:`.backward`), recomputed forward ops where the policy asks (:mod:`.recompute`) and the
optimizer's update of every parameter (:mod:`.optimizer`); its outputs are the updated weights and
optimizer states. ``analyze`` on it counts and times the whole step, and ``Report.flops_by_phase``
splits it. ``graph.meta["training"]`` records the options and what was left unmodeled.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ...errors import NarrowpipeError
from ...ir import DType, Graph, Value, maybe_verify
from .backward import BACKWARD_RULES, backward, requires_grad, trainable
from .context import GradContext
from .grad_elementwise import NON_DIFFERENTIABLE
from .loss import add_loss
from .optimizer import optimizer_step
from .phases import FORWARD, PHASE
from .recompute import Recompute

__all__ = ["build_training_graph", "is_training_graph"]


def _selected(graph: Graph, outputs: Sequence[int | str] | None) -> list[Value]:
    if not graph.outputs:
        raise NarrowpipeError(f"graph {graph.name!r} has no outputs to take a loss of")
    picks = [0] if outputs is None else list(outputs)
    out = []
    for p in picks:
        if isinstance(p, int):
            if not -len(graph.outputs) <= p < len(graph.outputs):
                raise NarrowpipeError(f"output {p} out of range: graph {graph.name!r} has {len(graph.outputs)}")
            out.append(graph.outputs[p])
            continue
        found = [v for v in graph.outputs if p in (v.name, v.source_name)]
        if not found:
            names = ", ".join(v.name for v in graph.outputs)
            raise NarrowpipeError(f"no output named {p!r} in graph {graph.name!r} (outputs: {names})")
        out.append(found[0])
    bad = [v.name for v in out if not v.dtype.is_float]
    if bad:
        raise NarrowpipeError(f"cannot differentiate non-float output(s) {', '.join(bad)}")
    return out


def is_training_graph(graph: Graph) -> bool:
    return "training" in graph.meta


def build_training_graph(graph: Graph, *, optimizer: str = "adam", recompute: str = "none", loss: str = "sum",
                         outputs: Sequence[int | str] | None = None, master: DType | str = DType.FP32,
                         frozen: Iterable[str] = ()) -> Graph:
    """One training step of ``graph`` (a forward pass) as a new graph.

    ``optimizer``: ``adam`` (default), ``adamw``, ``momentum`` (SGD with momentum) or ``sgd``; states
    are fp32 and parameters narrower than ``master`` get an fp32 master copy. ``recompute``:
    ``none``, ``selective`` (eager attention cores) or ``full`` (every layer). ``loss``: ``sum`` (the
    gradient of ones that ``out.sum().backward()`` gives) or ``cross_entropy`` (over the last dim of
    the first output, with a ``labels`` input). ``outputs`` picks the outputs the loss reads (indices
    or names; default the first, e.g. a causal LM's logits). ``frozen`` lists fnmatch patterns of
    parameter names that get no gradient (and no optimizer states).
    """
    if is_training_graph(graph):
        raise NarrowpipeError(f"graph {graph.name!r} is already a training step")
    train = graph.clone()
    train.name = f"{graph.name}.train"
    for node in train.nodes:
        node.attrs[PHASE] = FORWARD
    train.version += 1
    cx = GradContext(train)
    forward = list(train.nodes)
    picked = _selected(train, outputs)
    params = trainable(train, frozen)
    plan, notes = Recompute.plan(cx, forward, recompute)
    loss_nodes, seeds = add_loss(cx, train, picked, loss)
    nodes = forward + loss_nodes
    need = requires_grad(nodes, params)
    grads = backward(cx, nodes, seeds, need, params, before=plan.before)
    train.set_outputs(optimizer_step(cx, train, grads, optimizer, master))
    no_rule = sorted({n.label for n in nodes if n.op not in BACKWARD_RULES and n.op not in NON_DIFFERENTIABLE
                      and any(o in need for o in n.outputs)} | cx.unmodeled)
    if no_rule:
        notes.append(f"no backward rule for {', '.join(no_rule)}: their gradients are unmodeled ops")
    frozen_count = sum(1 for w in graph.weights if w.kind.value == "param") - len(params)
    train.meta["training"] = {"optimizer": optimizer, "recompute": recompute, "loss": loss,
                              "master": str(master), "parameters": len(params), "frozen": frozen_count,
                              "with_gradient": len(grads), "no_backward_rule": no_rule, "notes": notes}
    return maybe_verify(train, "build_training_graph")
