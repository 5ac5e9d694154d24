"""Expert parallelism as graph rewriting: the routed rows of a mixture of experts cross to the devices
that hold their experts and back, as all-to-all ops in the program.

Why a pass before sharding: under expert parallelism (``ep``) each device holds ``E/ep`` experts,
and a grouped GEMM runs on the rows routed to *its* experts from every device of the ``ep`` group,
not on its own tokens' rows. That is a change of which rows a device holds, not of how a tensor is
split, so it is written into the graph once: the rows a grouped GEMM reads are *dispatched* by an
``ALL_TO_ALL`` over the ``ep`` axis, they stay on the expert side through the row-wise ops between
the experts' GEMMs (the activation, the gate-up halves, their gradients), and an ``ALL_TO_ALL``
*combines* them back before anything that mixes them with the token side (the routing weights, the
sum over a token's ``top_k`` rows, the scatter back to the tokens). The backward gets the same two
exchanges from the same rules (the output gradient dispatched, the input gradient combined), and a
recomputed forward its own; a value exchanged once is not exchanged again (the weight gradient
reads the dispatched rows the forward kept, as Megatron-Core saves them). The sharding pass then
splits each expert weight's first dim over ``ep`` and times every exchange like any collective; with
tensor and sequence parallelism each tensor-parallel rank exchanges its share of the rows and the
experts all-gather them over ``tp`` (:func:`.shardrules_grouped.expert_exchange`).

How many rows a device's experts receive is the expert balance (:func:`..experts.expert_parallel_rows`):
each expert-side tensor gets the busiest device's row count, and each grouped GEMM its local
experts' split (``expert_rows``), so a skewed router slows the step where the most loaded device
sets the pace. Context parallelism with expert parallelism is not modelled (its rows are split by
sequence before routing): the pass refuses the pair and the search never tries it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import prod

from ...errors import PlanError
from ...ir import GROUP, Graph, Node, Op, OpGroup, Source, TensorType, Value
from ..experts import BALANCED, ExpertBalance, cap_note, expert_parallel_reached, expert_parallel_rows
from ..interpreter import ShapeBinder
from .strategy import Parallel
from .weight_layout import PHASE

__all__ = ["expert_parallel", "is_moe", "expert_param_numel", "active_params_note"]

#: Data movement that keeps a tensor's rows where they are (a gate-up half, its zero-padded gradient).
_ROW_WISE_DATA = frozenset({Op.SLICE, Op.PAD, Op.CONCAT})


def is_moe(graph: Graph) -> bool:
    return any(n.op is Op.GROUPED_DOT for n in graph.nodes)


@dataclass(frozen=True)
class _Routing:
    """One routing's rows on the busiest device: ``rows`` a device routes, ``split`` its local experts' rows."""

    rows: int
    experts: int
    split: tuple[int, ...]
    reached: float            # local experts read: D / ep under random routing, else the split's

    @property
    def received(self) -> int:
        return sum(self.split)


def expert_parallel(graph: Graph, parallel: Parallel, bindings: Mapping[str, int],
                    balance: ExpertBalance) -> tuple[Graph, frozenset[Value]]:
    """``graph`` with its grouped GEMMs on the expert side of dispatch and combine all-to-alls
    (``graph`` itself when ``ep`` is 1 or it has no experts), and its expert-side values.

    The expert-side values' first dim is the routed rows the busiest device received: a count of
    tokens (top-k copies of them) with no symbolic dim left to say so, which the sharding pass needs
    to know twice: such rows may split unevenly over ``tp`` (each rank exchanges its share, the
    busiest ``ceil(rows / tp)``), and a partial sum over them is an activation (gradient) to settle
    per microbatch, never a weight gradient left to the data-parallel reduction."""
    if parallel.ep == 1 or not is_moe(graph):
        return graph, frozenset()
    if parallel.cp > 1:
        raise PlanError(f"expert parallelism (ep={parallel.ep}) with context parallelism (cp={parallel.cp}) is not "
                        f"modelled: {graph.name!r} routes rows its sequence split has already divided")
    rewrite = _Rewrite(graph, parallel, bindings, balance)
    return rewrite.run(), frozenset(rewrite.expert.values())


class _Rewrite:
    def __init__(self, graph: Graph, parallel: Parallel, bindings: Mapping[str, int],
                 balance: ExpertBalance) -> None:
        self.src = graph
        self.parallel = parallel
        self.balance = balance
        self.binder = ShapeBinder(bindings)
        self.out = Graph(graph.name)
        self.token: dict[Value, Value] = {}      # source value -> its copy on the token side
        self.expert: dict[Value, Value] = {}     # source value -> its copy on the expert side
        self.routing: dict[Value, _Routing] = {}
        self.routings: dict[tuple[int, int, int | None, bool], _Routing] = {}

    def run(self) -> Graph:
        src, out = self.src, self.out
        for spec in src.dims.values():
            out.declare_dim(spec)
        out.meta.update(src.meta)
        for v in (*src.inputs, *src.weights):
            self.token[v] = out.add_input(v.name, v.type, v.kind, v.source_name)
        for node in src.nodes:
            self._node(node)
        last = src.nodes[-1] if src.nodes else None
        out.set_outputs([self._token_copy(v, last) for v in src.outputs])
        notes = [self._note(r) for r in self.routings.values()]
        for top_k, experts in {(k[2], k[1]) for k in self.routings}:
            capped = cap_note(experts, top_k, self.balance)
            if capped and f"expert parallelism: {capped}" not in notes:
                notes.append(f"expert parallelism: {capped}")
        out.meta["expert_parallel"] = notes
        return out

    # -- one node ---------------------------------------------------------------------------------
    def _node(self, node: Node) -> None:
        if node.op is Op.GROUPED_DOT:
            self._grouped(node)
        elif self._row_wise(node):
            ins = [None if v is None else self.expert[v] if v in self.expert else self.token[v] for v in node.inputs]
            routing = next(self.routing[v] for v in node.inputs if v is not None and v in self.expert)
            types = [self._expert_type(o, routing) for o in node.outputs]
            self._emit(node, ins, types, expert=routing)
        else:
            ins = [None if v is None else self._token_copy(v, node) for v in node.inputs]
            self._emit(node, ins, [o.type for o in node.outputs])

    def _grouped(self, node: Node) -> None:
        """A grouped GEMM on the expert side: its rows operands dispatched, its split fixed to the
        busiest device's local experts (``top_k`` gives way to ``expert_rows``)."""
        weight_grad = node.attrs.get("role") == "grad_weight"
        routing = self._routing_of(node, weight_grad)
        rows_operands = (0, 1) if weight_grad else (0,)
        ins: list[Value | None] = []
        for i, v in enumerate(node.inputs):
            if v is None:
                ins.append(None)
            elif i in rows_operands:
                ins.append(self._expert_copy(v, routing, node))
            else:
                ins.append(self._token_copy(v, node))
        attrs = {k: a for k, a in node.attrs.items() if k not in ("top_k", "expert_rows", "reached_experts")}
        attrs["expert_rows"] = routing.split
        if self.balance.kind == "random":    # the expected local experts read, not the rounded split's
            attrs["reached_experts"] = routing.reached
        out = node.outputs[0]
        types = [out.type if weight_grad else self._expert_type(out, routing)]
        self._emit(node, ins, types, attrs, expert=None if weight_grad else routing)

    def _routing_of(self, node: Node, weight_grad: bool) -> _Routing:
        x = node.inputs[0]
        groups = node.outputs[0] if weight_grad else node.inputs[1]
        assert x is not None and groups is not None
        rows, experts = self.binder.shape(x)[0], self.binder.shape(groups)[0]
        ep = self.parallel.ep
        if experts % ep:
            raise PlanError(f"expert parallelism: ep={ep} does not divide the {experts} experts of node "
                            f"{node.name!r} ({node.source.scope or 'no scope'})")
        top_k = node.attrs.get("top_k")
        capacity = bool(node.attrs.get("capacity"))   # capacity buckets: even whatever the routing
        key = (rows, experts, top_k if isinstance(top_k, int) else None, capacity)
        hit = self.routings.get(key)
        if hit is None:
            balance = BALANCED if capacity else self.balance
            split = expert_parallel_rows(rows, experts, ep, key[2], balance)
            reached = expert_parallel_reached(rows, experts, ep, key[2], balance)
            hit = self.routings[key] = _Routing(rows, experts, split, reached)
        return hit

    def _row_wise(self, node: Node) -> bool:
        """Whether ``node`` runs on the expert side: an elementwise op or a slice/pad/concat whose
        operands of the result's rank all share its rows and are on the expert side (a smaller
        operand broadcasts), so each row stays on the device that holds it."""
        present = [v for v in node.inputs if v is not None]
        if not any(v in self.expert for v in present) or len(node.outputs) != 1:
            return False
        if GROUP[node.op] is not OpGroup.ELEMENTWISE and node.op not in _ROW_WISE_DATA:
            return False
        out = self.binder.shape(node.outputs[0])
        for v in present:
            shape = self.binder.shape(v)
            if len(shape) < len(out) or v in self.expert and len(shape) == len(out) and shape[0] == out[0]:
                continue
            if len(shape) == len(out) and shape[0] == 1 and GROUP[node.op] is OpGroup.ELEMENTWISE:
                continue
            return False
        return True

    # -- exchanges ----------------------------------------------------------------------------------
    def _expert_copy(self, v: Value, routing: _Routing, consumer: Node) -> Value:
        """``v``'s rows on the expert side: dispatched once, by the first reader that needs them."""
        hit = self.expert.get(v)
        if hit is not None:
            return hit
        shape = self.binder.shape(v)
        if len(shape) != 2 or shape[0] != routing.rows:
            raise PlanError(f"expert parallelism: node {consumer.name!r} reads {v.name!r} of shape {list(shape)}, "
                            f"not the {routing.rows} routed rows its experts expect")
        new = self._exchange(self.token[v], TensorType(v.dtype, (routing.received, *v.type.shape[1:])), consumer,
                             "expert-parallel dispatch all-to-all")
        self.expert[v] = new
        self.routing[v] = routing
        return new

    def _token_copy(self, v: Value, consumer: Node | None) -> Value:
        """``v`` on the token side: combined once, by the first reader that needs it."""
        hit = self.token.get(v)
        if hit is not None:
            return hit
        assert consumer is not None
        new = self._exchange(self.expert[v], v.type, consumer, "expert-parallel combine all-to-all")
        self.token[v] = new
        return new

    def _exchange(self, x: Value, out: TensorType, at: Node, purpose: str) -> Value:
        size, stride = self.parallel.axis("ep")
        node = self.out.add_node(Op.ALL_TO_ALL, [x], [out],
                                 {"group_size": size, "axis": "ep", "stride": stride,
                                  PHASE: at.attrs.get(PHASE, "forward"), "purpose": purpose},
                                 name=f"{at.name}_{'dispatch' if 'dispatch' in purpose else 'combine'}_ep",
                                 source=Source(op="narrowpipe.planner.all_to_all", name=purpose, scope=at.source.scope))
        return node.outputs[0]

    # -- helpers ------------------------------------------------------------------------------------
    def _expert_type(self, v: Value, routing: _Routing) -> TensorType:
        return TensorType(v.dtype, (routing.received, *v.type.shape[1:]))

    def _emit(self, node: Node, ins: list[Value | None], types: list[TensorType],
              attrs: dict[str, object] | None = None, *, expert: _Routing | None = None) -> None:
        new = self.out.add_node(node.op, ins, types, dict(node.attrs) if attrs is None else attrs, name=node.name,
                                source=node.source, out_names=[o.name for o in node.outputs])
        for o, n in zip(node.outputs, new.outputs):
            if expert is not None:
                self.expert[o] = n
                self.routing[o] = expert
            else:
                self.token[o] = n

    def _note(self, r: _Routing) -> str:
        ep = self.parallel.ep
        even = r.rows  # what every device would receive under a perfectly even split
        return (f"expert parallelism ep={ep}: {r.rows} routed rows per device, {r.rows * ep} over the group's "
                f"{r.experts} experts ({self.balance} routing); the busiest device holds {len(r.split)} expert"
                f"{'s' if len(r.split) != 1 else ''} "
                f"and receives {r.received} rows" + (f" ({r.received / even:.2f}x an even share)" if even and
                                                     r.received != even else ""))


def expert_param_numel(graph: Graph) -> int:
    """Elements of the weights grouped GEMMs read as their experts (what expert parallelism splits)."""
    seen: dict[Value, int] = {}
    for node in graph.nodes:
        w = node.inputs[1] if node.op is Op.GROUPED_DOT and len(node.inputs) > 1 else None
        if w is not None and w.kind.is_weight and node.attrs.get("role") != "grad_weight":
            seen[w] = prod(d if isinstance(d, int) else 0 for d in w.type.shape)
    return sum(seen.values())


def active_params_note(graph: Graph, params: int, expert_params: int) -> str | None:
    """The parameters one token runs through, for a mixture of experts (None for a dense model): all
    but the routed experts', plus ``top_k / E`` of theirs. The figure model cards quote (Mixtral
    8x7B: 46.7B total, 12.9B active; DeepSeek-V3: 671B, 37B), which the total alone hides."""
    routed = [(n.attrs.get("top_k"), w.type.shape[0]) for n in graph.nodes
              if n.op is Op.GROUPED_DOT and n.attrs.get("role") != "grad_weight"
              for w in n.inputs[1:2] if w is not None and w.kind.is_weight]
    picks = {(k, e) for k, e in routed if isinstance(k, int) and isinstance(e, int) and e > 0}
    if not expert_params or len(picks) != 1:
        return None
    top_k, experts = next(iter(picks))
    active = params - expert_params + expert_params * top_k // experts
    return (f"mixture of experts: {_count(params)} parameters, {_count(active)} active per token (embeddings, "
            f"the dense layers and top-{top_k} of the {experts} routed experts' {_count(expert_params)})")


def _count(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"
