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
from ...ir import DType, Graph, Node, Value, maybe_verify
from .backward import BACKWARD_RULES, backward, requires_grad, trainable
from .context import GradContext
from .grad_elementwise import NON_DIFFERENTIABLE
from .loss import add_loss
from .optimizer import optimizer_step
from .phases import FORWARD, PHASE
from .recompute import Recompute, drop_unread_recompute

__all__ = ["build_training_graph", "differentiable_outputs", "grad_inputs", "is_training_graph"]


def _selected(graph: Graph, outputs: Sequence[int | str] | None, name: str) -> list[Value]:
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
    bad = [v for v in out if not v.dtype.is_float]
    if bad:
        raise NarrowpipeError(f"graph {name!r}: cannot take a loss of {'; '.join(map(_describe, bad))}: "
                              "integer and bool tensors carry no gradient; pick a float output (outputs=)")
    return out


def _describe(v: Value) -> str:
    """An output as an error names it: its name and type, and the node (file, scope, op) that made it."""
    made = v.producer
    if made is None:
        return f"output {v.name!r} ({v.type})"
    src = made.source
    origin = ", ".join(p for p in (src.op, f"file {src.file!r}" if src.file else "",
                                   f"scope {src.scope!r}" if src.scope else "") if p)
    return f"output {v.name!r} ({v.type}, made by node {made.name!r}{f': {origin}' if origin else ''})"


def differentiable_outputs(graph: Graph, frozen: Iterable[str] = (), inputs: Iterable[str] = ()) -> list[int]:
    """Indices of the outputs a gradient flows back into: float values that depend on a trainable
    parameter, or on one of the activation ``inputs`` that carry a gradient (:func:`grad_inputs`),
    through differentiable ops.

    Why: a block of a model cut into pieces (the planner's embedding, layers and head) returns what
    later blocks read, in no particular order: the residual stream, but also rotary tables, masks
    and integer shape scalars. The next block sends a gradient back for each of its inputs that
    requires one, as torch's autograd does, and for no integer, bool or parameter-free value; so
    the block's backward starts from all of those outputs, not from whichever comes first."""
    params = trainable(graph, frozen)
    need = requires_grad(graph.nodes, [*params, *grad_inputs(graph, inputs)])
    return [i for i, v in enumerate(graph.outputs) if v in need]


def grad_inputs(graph: Graph, names: Iterable[str]) -> list[Value]:
    """The graph inputs named in ``names``: activations an earlier piece of the model computed from
    its parameters (a pipeline stage's or a planner block's input), so that the model's backward
    gives them a gradient, as torch's autograd does for a tensor that requires one. A graph with no
    such inputs (a whole model: its inputs are pixels, token ids) differentiates its parameters only."""
    wanted = list(names)
    if not wanted:
        return []
    by_name = {v.name: v for v in graph.inputs if not v.kind.is_weight}
    missing = [n for n in wanted if n not in by_name]
    if missing:
        have = ", ".join(by_name) or "none"
        raise NarrowpipeError(f"graph {graph.name!r}: no activation input named {', '.join(map(repr, missing))} "
                              f"to give a gradient (activation inputs: {have})")
    bad = [by_name[n] for n in wanted if not by_name[n].dtype.is_float]
    if bad:
        raise NarrowpipeError(f"graph {graph.name!r}: input {bad[0].name!r} ({bad[0].type}) holds no floats, so it "
                              "carries no gradient")
    return [by_name[n] for n in wanted]


def is_training_graph(graph: Graph) -> bool:
    return "training" in graph.meta


def build_training_graph(graph: Graph, *, optimizer: str = "adam", recompute: str = "none", loss: str = "sum",
                         outputs: Sequence[int | str] | None = None, master: DType | str = DType.FP32,
                         frozen: Iterable[str] = (), inputs: Iterable[str] = ()) -> Graph:
    """One training step of ``graph`` (a forward pass) as a new graph.

    ``optimizer``: ``adam`` (default), ``adamw``, ``momentum`` (SGD with momentum) or ``sgd``; states
    are fp32 and parameters narrower than ``master`` get an fp32 master copy. ``recompute``:
    ``none``, ``selective`` (eager attention cores), ``dots`` (all but the weights' matmul outputs,
    JAX's policy) or ``full`` (every layer). ``loss``: ``sum`` (the
    gradient of ones that ``out.sum().backward()`` gives) or ``cross_entropy`` (over the last dim of
    the first output, with a ``labels`` input). ``outputs`` picks the outputs the loss reads (indices
    or names; default the first, e.g. a causal LM's logits). ``frozen`` lists fnmatch patterns of
    parameter names that get no gradient (and no optimizer states). ``inputs`` names activation
    inputs that get a gradient too (:func:`grad_inputs`: a piece of a model whose input an earlier
    piece computed); each one's gradient is summed over its readers and becomes an output after the
    updated weights (what a pipeline stage sends back).
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
    picked = _selected(train, outputs, graph.name)
    params = trainable(train, frozen)
    handed_in = grad_inputs(train, inputs)
    plan, notes = Recompute.plan(cx, forward, recompute)
    loss_nodes, seeds = add_loss(cx, train, picked, loss)
    nodes = forward + loss_nodes
    need = requires_grad(nodes, [*params, *handed_in])
    grads = backward(cx, nodes, seeds, need, params, before=plan.before, inputs=handed_in)
    sent_back = [grads.pop(v) for v in handed_in if v in grads]
    train.set_outputs(optimizer_step(cx, train, grads, optimizer, master) + sent_back)
    if recompute == "dots":
        drop_unread_recompute(train)
    no_rule = sorted({n.label for n in nodes if n.op not in BACKWARD_RULES and n.op not in NON_DIFFERENTIABLE
                      and any(o in need for o in n.outputs)} | cx.unmodeled)
    if no_rule:
        notes.append(f"no backward rule for {', '.join(no_rule)}: their gradients are unmodeled ops")
    gaps = _recurrence_gaps(nodes, need)
    notes.extend(gaps)
    frozen_count = sum(1 for w in graph.weights if w.kind.value == "param") - len(params)
    train.meta["training"] = {"optimizer": optimizer, "recompute": recompute, "loss": loss,
                              "master": str(master), "parameters": len(params), "frozen": frozen_count,
                              "with_gradient": len(grads), "no_backward_rule": no_rule, "notes": notes,
                              "gaps": gaps}
    return maybe_verify(train, "build_training_graph")


def _recurrent_sources(nodes: Sequence[Node], need: set[Value]) -> list[str]:
    """The recurrent layers (source ops) whose step-to-step projection takes a gradient."""
    return sorted({str(n.source.op or n.name) for n in nodes
                   if "sequential_steps" in n.attrs and any(o in need for o in n.outputs)})


def _recurrence_gaps(nodes: Sequence[Node], need: set[Value]) -> list[str]:
    """What the step leaves out for recurrent layers, said where the counts are read (a report note).

    Why: the IR runs a recurrent layer's steps at once, each step's recurrent projection reading the
    initial state (the recurrence is sequential, the FLOPs per step the same), so the backward has no
    path from a step's gates to the previous step's hidden state: backpropagation through time's
    per-step ``dgates @ W_hh`` (torch's backward of every step after the first) is not counted, and
    the step's matmul FLOPs fall short of ``FlopCounterMode`` over ``loss.backward()`` by it."""
    layers = _recurrent_sources(nodes, need)
    if not layers:
        return []
    return [f"backward through time not modeled for {', '.join(layers)}: each step's gradient into the "
            "previous hidden state (a [batch, gates x hidden] x [gates x hidden, hidden] matmul per step "
            "after the first, per layer and direction) is not counted"]
