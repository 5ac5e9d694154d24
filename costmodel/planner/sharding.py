"""The sharding pass: a graph and a strategy become the program one device runs, collectives included.

Walks the graph once in order. Weights get a layout the first time a contraction or lookup reads
them (:meth:`_Shard.decide_weights`: Megatron's column/row rule, found from the activation's layout,
never from names); every other value's layout follows from its producer's rule
(:mod:`.shardrules`). Where an operand's layout differs from the one its consumer wants, the pass
inserts the collective that converts it (all-gather, all-to-all, or a free local slice); a partial
sum is settled right after the node that made it: an all-reduce, or a reduce-scatter onto the token
dim under sequence parallelism (and for the key/value gradients of context parallelism). Partial
sums with no token dim (weight gradients under context or sequence parallelism) are not settled per
microbatch: they join the data-parallel gradient reduction, as Megatron-LM does, and are listed in
``graph.meta["deferred_reductions"]``. The experts' routed rows (:mod:`.expert_parallel`) are tokens
too, though no symbolic dim says so: a partial sum over them is settled per microbatch, and they may
split unevenly over ``tp``.

The result is a static graph of local shapes (dims bound first), each inserted collective an op of
group ``collective`` with ``group_size``, ``axis``, ``stride`` (ranks between group members, which
tells the topology whether the group leaves a scale-up domain) and ``purpose``, so ``analyze`` times
it like any other op.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import prod
from typing import Any

from ...errors import PlanError
from ...ir import DimRole, DType, Graph, Node, Op, Placement, Source, TensorType, Value, ValueKind
from ...ir.verifier import maybe_verify
from ..experts import ExpertBalance
from ..interpreter import ShapeBinder
from .expert_parallel import expert_parallel
from .shardrules import Decision, decide
from .shardspec import Spec
from .strategy import Parallel
from .weight_layout import PHASE, WeightLayouts, _symbols

__all__ = ["shard", "PHASE"]

#: Ops that make a tensor from nothing: each device makes its own part where it is first read.
_GENERATORS = frozenset({Op.RANDOM, Op.FILL, Op.IOTA, Op.CONSTANT, Op.RECV})


def shard(graph: Graph, parallel: Parallel, *, dims: Mapping[str, int] | None = None,
          grad_sync: bool = False, grad_dtype: DType | None = None,
          expert_balance: str | ExpertBalance | None = None, arrive_split: frozenset[str] = frozenset()) -> Graph:
    """The program one device runs under ``parallel`` (its ``tp``, ``cp``, ``ep`` and sequence parallelism).

    ``dims`` binds the graph's symbolic dims (defaults otherwise): the batch dim is the per-device
    microbatch. ``grad_sync`` appends the data-parallel gradient reduction of every parameter
    (all-reduce, or reduce-scatter plus the parameter all-gather under ZeRO), in ``grad_dtype``
    (the parameter's own by default), for showing a whole training step in ``analyze``. Under
    expert parallelism the program is the busiest device's, under ``expert_balance`` (default
    balanced; see :mod:`.expert_parallel`). ``arrive_split`` names activation inputs that arrive
    split over ``tp`` on their sequence dim under sequence parallelism: a block of a larger model
    receives the residual stream as the block before it left it (Megatron's sequence-parallel
    region), so its norm runs on ``s / tp`` rows and an all-gather precedes the next
    column-parallel matmul."""
    bindings = graph.default_bindings()
    bindings.update(dims or {})
    missing = sorted(s for s in graph.symbols() if s not in bindings)
    if missing:
        raise PlanError(f"shard: bind the dims {', '.join(missing)} (dims={{...}}) before sharding {graph.name!r}")
    graph, routed = expert_parallel(graph, parallel, bindings, ExpertBalance.parse(expert_balance))
    return _Shard(graph, bindings, parallel, arrive_split, routed).run(grad_sync, grad_dtype)


class _Shard(WeightLayouts):
    def __init__(self, graph: Graph, bindings: dict[str, int], parallel: Parallel,
                 arrive_split: frozenset[str] = frozenset(), routed: frozenset[Value] = frozenset()) -> None:
        self.src = graph
        self.routed = routed                      # expert-side values: their rows are routed tokens
        self.arrive_split = arrive_split if parallel.sequence_parallel and parallel.tp > 1 else frozenset()
        self.stream_shapes = {tuple(v.shape) for v in graph.inputs if v.name in self.arrive_split}
        self.parallel = parallel
        self.binder = ShapeBinder(bindings)
        self.sizes: dict[str, int] = {"tp": parallel.tp, "cp": parallel.cp, "ep": parallel.ep, "dp": parallel.dp,
                                      "dp_cp": parallel.dp * parallel.cp, "edp": parallel.axis("edp")[0]}
        self.out = Graph(f"{graph.name}[{parallel.describe()}]")
        self.specs: dict[Value, Spec] = {}
        self.new: dict[Value, Value] = {}
        self.cache: dict[tuple[int, Spec, str], Any] = {}
        self.weights: dict[Value, Spec] = {}
        self.token_roles = {name for name, spec in graph.dims.items()
                            if spec.role in (DimRole.SEQUENCE, DimRole.BATCH)}
        self.seq_names = {name for name, spec in graph.dims.items() if spec.role is DimRole.SEQUENCE}
        self.deferred: dict[str, int] = {}
        self.by_name = {w.name: w for w in graph.weights}
        self.pending: dict[Value, Node] = {}      # generators (random masks, fills) made where first read
        self.notes: list[str] = []

    # -- the RuleContext the rules read --------------------------------------------------------------
    def shape(self, v: Value) -> tuple[int, ...]:
        return self.binder.shape(v)

    def raw(self, v: Value) -> Spec:
        got = self.specs.get(v)
        if got is None:            # a weight no contraction or lookup has laid out yet: whole for now
            return Spec.replicated(len(self.shape(v)))
        return got

    def spec(self, v: Value) -> Spec:
        """The layout a consumer sees: a partial sum as it will be once settled."""
        got = self.raw(v)
        return self._settled(v, got) if got.partial else got

    def _settled(self, v: Value, spec: Spec) -> Spec:
        """Where a partial sum lands: split over its token dim under sequence parallelism (and for
        context parallelism), else whole."""
        axis = spec.partial
        assert axis is not None
        token = self._token_dim(v, spec, axis)
        if token is not None and (axis == "cp" or axis == "tp" and self.parallel.sequence_parallel):
            return spec.resolved().add_axis(token, axis)
        return spec.resolved()

    # -- the walk ----------------------------------------------------------------------------------
    def run(self, grad_sync: bool, grad_dtype: DType | None) -> Graph:
        src, out = self.src, self.out
        out.meta.update({k: v for k, v in src.meta.items()})
        for v in src.inputs:
            if self._owner_name(v) is not None:
                continue                 # an optimizer state: laid out like its parameter when first read
            spec = self._input_spec(v)
            self.specs[v] = spec
            self.new[v] = out.add_input(v.name, self._local_type(v, spec), v.kind, v.source_name)
        for node in src.nodes:
            self._node(node)
        for w in src.weights:            # weights nothing read stay whole
            if w not in self.specs:
                self._set_weight(w, Spec.replicated(len(self.shape(w))))
        last = src.nodes[-1] if src.nodes else Node("outputs", Op.IDENTITY, [], [])
        for v, gen in list(self.pending.items()):    # generated values nothing read
            self._reshard(v, Spec.replicated(len(self.shape(v))), str(gen.attrs.get(PHASE, "forward")), gen)
        out.set_outputs([self._reshard(v, self.spec(v), str(last.attrs.get(PHASE, "forward")), last)
                         if self.raw(v).partial else self.new[v] for v in src.outputs])
        if grad_sync:
            self._grad_sync(grad_dtype)
        out.meta["parallel"] = self.parallel.to_dict()
        out.meta["weight_sharding"] = {w.name: str(s) for w, s in self.weights.items()}
        out.meta["deferred_reductions"] = dict(self.deferred)
        out.meta["expert_weights"] = sorted(w.name for w, s in self.weights.items() if "ep" in s.axes)
        out.meta["sharding_notes"] = list(src.meta.get("expert_parallel", ())) + list(self.notes)
        return maybe_verify(out, "narrowpipe.planner.shard")

    def _input_spec(self, v: Value) -> Spec:
        return Spec.replicated(len(v.shape)) if v.kind.is_weight else self._token_layout(v, v.name in self.arrive_split)

    def _token_layout(self, v: Value, stream: bool) -> Spec:
        """A token tensor as it arrives or is made: its sequence over ``cp`` (each rank's own tokens),
        and for the residual ``stream`` under sequence parallelism over ``tp`` too."""
        spec = Spec.replicated(len(v.shape))
        cp = self.sizes["cp"]
        shape = self.shape(v)
        if cp > 1:
            for d, dim in enumerate(v.shape):
                if _symbols(dim) & self.seq_names and shape[d] % cp == 0:
                    spec = spec.with_dim(d, ("cp",))
                    break
        if stream and self.arrive_split:
            token = self._token_dim(v, spec, "tp")
            if token is not None:
                spec = spec.add_axis(token, "tp")
        return spec

    def made_layout(self, v: Value) -> Spec:
        """A token tensor broadcast from fewer values (a block's seed gradient of ones) is made as the
        block's activations arrive; one shaped like the residual stream as the stream arrives."""
        return self._token_layout(v, tuple(v.shape) in self.stream_shapes)

    def _weight_value(self, w: Value) -> Value:
        """A weight's local value, created on first use in its decided layout."""
        if w not in self.new:
            spec = self.spec(w)
            self.new[w] = self.out.add_input(w.name, self._local_type(w, spec), w.kind, w.source_name)
        return self.new[w]

    def _node(self, node: Node) -> None:
        phase = str(node.attrs.get(PHASE, "forward"))
        if node.op in _GENERATORS and not any(v is not None for v in node.inputs) and len(node.outputs) == 1:
            self.pending[node.outputs[0]] = node       # made in the layout its first reader wants
            return
        for v in node.inputs:             # optimizer states and master copies follow their parameter
            if v is None or v in self.specs:
                continue
            owner = self._owner(v)
            if v.kind.is_weight and owner is not None:
                self._set_weight(v, owner)
            elif not v.kind.is_weight and v.producer is None:
                spec = owner if owner is not None else Spec.replicated(len(self.shape(v)))
                self.specs[v] = spec
                self.new[v] = self.out.add_input(v.name, self._local_type(v, spec), v.kind, v.source_name)
        decision = decide(self, node)
        if not all(self._splits(o, s) for s, o in zip(decision.outs, node.outputs)):
            decision = Decision([Spec.replicated(len(self.shape(v))) if v is not None else None
                                 for v in node.inputs],
                                [Spec.replicated(len(self.shape(o))) for o in node.outputs])
        inputs: list[Value | None] = []
        for v, want in zip(node.inputs, decision.want):
            if v is None or want is None:
                inputs.append(None)
                continue
            if v.kind.is_weight and v not in self.specs:
                # a weight no contraction laid out (a column-parallel bias, a norm's scale) takes the
                # layout its first reader wants
                self._set_weight(v, want if want.partial is None else Spec.replicated(want.rank))
            if v.kind.is_weight:
                self._weight_value(v)
            inputs.append(self._reshard(v, want, phase, node))
        types = [self._local_type(o, s.resolved()) for o, s in zip(node.outputs, decision.outs)]
        attrs = _local_attrs(node, decision, self.sizes)
        placement = Placement(mesh_axes=tuple(a for a in ("tp", "cp", "ep") if self.sizes[a] > 1),
                              sharding=tuple((d, "+".join(ax)) for d, ax in enumerate(decision.outs[0].dims) if ax)
                              if decision.outs else ())
        new = self.out.add_node(node.op, inputs, types, attrs, name=node.name, source=node.source,
                                out_names=[o.name for o in node.outputs])
        new.placement = placement
        for axis, rows in decision.stats:
            self._stats(new, axis, rows, phase)
        for o, n, s in zip(node.outputs, new.outputs, decision.outs):
            self.specs[o], self.new[o] = s, n           # partial sums settle where they are read

    # -- collectives ---------------------------------------------------------------------------------
    def _collective(self, op: Op, x: Value, shape: tuple[int, ...], axis: str, phase: str, purpose: str,
                    at: Node, **attrs: Any) -> Value:
        size, stride = self.parallel.axis(axis)
        node = self.out.add_node(op, [x], [TensorType(x.dtype, shape)],
                                 {"group_size": size, "axis": axis, "stride": stride, PHASE: phase,
                                  "purpose": purpose, **attrs},
                                 name=f"{at.name}_{op.value}_{axis}",
                                 source=Source(op=f"narrowpipe.planner.{op.value}", name=purpose,
                                               scope=at.source.scope))
        return node.outputs[0]

    def _reshard(self, v: Value, want: Spec, phase: str, consumer: Node) -> Value:
        gen = self.pending.pop(v, None)
        if gen is not None:
            spec = want.resolved() if want.divides(self.shape(v), self.sizes) else Spec.replicated(want.rank)
            new = self.out.add_node(gen.op, [], [self._local_type(v, spec)], dict(gen.attrs), name=gen.name,
                                    source=gen.source, out_names=[v.name])
            self.specs[v], self.new[v] = spec, new.outputs[0]
        have = self.raw(v)
        cur = self.new[v]
        if have == want:
            return cur
        key = (id(v), want, phase)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        shape = self.shape(v)
        if have.partial:
            pkey = (id(v), Spec(have.dims, "settled"), phase)
            # A sum the forward settled is saved settled: the backward reads that, not a second
            # reduce-scatter (a norm's input, the residual stream, was reduced again per layer).
            got = self.cache.get(pkey) or self.cache.get((id(v), Spec(have.dims, "settled"), "forward"))
            goal = want if want.partial is None else self._settled(v, have)
            have, cur = got if got is not None else self._settle(v, cur, have, goal, phase, consumer)
            self.cache[pkey] = (have, cur)
            if have == want:
                return cur
        spec = have
        for d in range(len(shape)):                    # gathers, innermost axis first
            for axis in reversed(have.dims[d]):
                if axis in want.dims[d] and want.dims[d][:len(spec.dims[d])] == spec.dims[d]:
                    continue
                dest = want.dim_of(axis)
                spec = spec.with_dim(d, tuple(a for a in spec.dims[d] if a != axis))
                if dest is not None and dest != d and axis not in spec.dims[dest]:
                    spec = spec.add_axis(dest, axis)
                    cur = self._collective(Op.ALL_TO_ALL, cur, spec.local_shape(shape, self.sizes), axis, phase,
                                           f"{axis} all-to-all for {consumer.op.value}", consumer, split_dim=dest,
                                           concat_dim=d)
                else:
                    cur = self._collective(Op.ALL_GATHER, cur, spec.local_shape(shape, self.sizes), axis, phase,
                                           _gather_purpose(axis, consumer, self.parallel), consumer, dim=d)
        for d in range(len(shape)):                    # local slices: free views
            for axis in want.dims[d]:
                if axis not in spec.dims[d]:
                    spec = spec.add_axis(d, axis)
                    local = TensorType(cur.dtype, spec.local_shape(shape, self.sizes))
                    node = self.out.add_node(Op.SLICE, [cur], [local],
                                             {"axis": d, "role": f"local {axis} shard", PHASE: phase},
                                             name=f"{consumer.name}_shard_{axis}", source=consumer.source)
                    cur = node.outputs[0]
        self.cache[key] = cur
        return cur

    def _settle(self, orig: Value, new: Value, spec: Spec, want: Spec, phase: str, at: Node) -> tuple[Spec, Value]:
        """Sum a partial value over its axis: a reduce-scatter onto the dim ``want`` splits over
        that axis, else an all-reduce; a partial weight gradient (no token dim, after the forward)
        is left to the data-parallel reduction that sums it anyway."""
        axis = spec.partial
        assert axis is not None
        shape = self.shape(orig)
        if phase != "forward" and not self._has_tokens(orig):
            nbytes = prod(spec.local_shape(shape, self.sizes)) * orig.dtype.nbytes(1)
            self.deferred[axis] = self.deferred.get(axis, 0) + nbytes
            return spec.resolved(), new
        token = want.dim_of(axis)
        if token is not None and axis not in spec.dims[token]:
            done = spec.resolved().add_axis(token, axis)
            if self._splits(orig, done):
                purpose = ("sequence-parallel reduce-scatter" if axis == "tp" else
                           "context-parallel gradient reduce-scatter" if axis == "cp" else f"{axis} reduce-scatter")
                return done, self._collective(Op.REDUCE_SCATTER, new, done.local_shape(shape, self.sizes), axis,
                                              phase, purpose, at, dim=token)
        done = spec.resolved()
        purpose = {"tp": "tensor-parallel all-reduce"}.get(axis, f"{axis} all-reduce")
        return done, self._collective(Op.ALL_REDUCE, new, done.local_shape(shape, self.sizes), axis, phase,
                                      purpose, at, reduce="sum")
    def is_token_dim(self, v: Value, dim: int) -> bool:
        return bool(_symbols(v.shape[dim]) & self.token_roles)

    def _has_tokens(self, v: Value) -> bool:
        """Whether ``v`` runs over tokens: a batch or sequence dim, or the routed rows of the experts
        (an activation or its gradient, not a weight's)."""
        return v in self.routed or any(_symbols(d) & self.token_roles for d in v.shape)

    def uneven_rows(self, v: Value) -> bool:
        return v in self.routed

    def _splits(self, v: Value, spec: Spec) -> bool:
        """Whether ``v`` can be laid out as ``spec``: every split dim divides, but the routed rows of
        the experts, which split as the router sent them (the busiest rank holds ``ceil(rows / k)``,
        :meth:`.Spec.local_shape`)."""
        if v in self.routed and spec.dims and spec.dims[0]:
            spec = spec.with_dim(0, ())
        return spec.divides(self.shape(v), self.sizes)

    def _token_dim(self, v: Value, spec: Spec, axis: str) -> int | None:
        """The dim a reduce-scatter over ``axis`` splits: the first sequence (or token) dim that
        still divides."""
        shape = self.shape(v)
        k = self.sizes[axis]
        for names in (self.seq_names, self.token_roles):
            for d, dim in enumerate(v.shape):
                if _symbols(dim) & names and axis not in spec.dims[d]:
                    if spec.resolved().add_axis(d, axis).divides(shape, self.sizes) and shape[d] % k == 0:
                        return d
        return None

    def _stats(self, node: Node, axis: str, rows: int, phase: str) -> None:
        """One all-reduce of a softmax's per-row statistic (max, then sum) over ``axis``."""
        stat = self.out.add_node(Op.REDUCE_MAX, [node.inputs[0]], [TensorType(DType.FP32, (rows,))],
                                 {"axes": (int(node.attrs.get("axis", -1)),), "keepdims": False},
                                 name=f"{node.name}_row_stat", source=node.source).outputs[0]
        self._collective(Op.ALL_REDUCE, stat, (rows,), axis, phase, "split-softmax row statistics", node,
                         reduce="max")

    def _grad_sync(self, grad_dtype: DType | None) -> None:
        """The data-parallel (and context-parallel) reduction of every parameter's gradient."""
        p = self.parallel
        if p.dp * p.cp == 1:
            return
        for w, spec in self.weights.items():
            if w.kind is not ValueKind.PARAM:
                continue
            local = spec.local_shape(self.shape(w), self.sizes)
            grad = self.out.add_input(f"{w.name}.grad", TensorType(grad_dtype or w.dtype, local))
            at = Node(w.name, Op.IDENTITY, [], [], source=Source(scope=w.name))
            op = Op.REDUCE_SCATTER if p.zero >= 2 else Op.ALL_REDUCE
            axis = "edp" if "ep" in spec.axes else "dp_cp"     # an expert's replicas: dp x cp / ep
            group = self.sizes[axis]
            if group == 1:
                continue
            split = op is Op.REDUCE_SCATTER and local and local[0] % group == 0
            shape = (local[0] // group, *local[1:]) if split else local
            if op is Op.REDUCE_SCATTER and shape == local:
                op = Op.ALL_REDUCE
            self._collective(op, grad, shape, axis, "grad_sync", "data-parallel gradient reduction", at)

    def _local_type(self, v: Value, spec: Spec) -> TensorType:
        shape = self.shape(v)
        if not self._splits(v, spec):
            raise PlanError(f"shard: value {v.name!r} of shape {list(shape)} does not split as {spec}")
        return TensorType(v.dtype, spec.local_shape(shape, self.sizes))


def _gather_purpose(axis: str, consumer: Node, parallel: Parallel) -> str:
    if axis == "tp" and parallel.sequence_parallel and consumer.op is Op.DOT:
        return "sequence-parallel all-gather"
    if axis == "cp" and consumer.op in (Op.ATTENTION, Op.ATTENTION_BACKWARD):
        return "context-parallel key/value exchange"
    return f"{axis} all-gather for {consumer.op.value}"


def _local_attrs(node: Node, decision: Decision, sizes: Mapping[str, int]) -> dict[str, Any]:
    """Attributes that hold sizes, divided as their dims were (heads of a ``bsd`` attention)."""
    attrs = dict(node.attrs)
    if node.op in (Op.ATTENTION, Op.ATTENTION_BACKWARD) and attrs.get("layout") == "bsd":
        off = 1 if node.op is Op.ATTENTION_BACKWARD else 0
        for key, i in (("num_heads", off), ("kv_num_heads", off + 1)):
            spec = decision.want[i] if i < len(decision.want) else None
            if attrs.get(key) and spec is not None:
                k = 1
                for a in spec.dims[2]:
                    k *= sizes[a]
                attrs[key] = int(attrs[key]) // k
    return attrs
