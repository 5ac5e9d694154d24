"""How the sharding pass lays out weights: Megatron's column/row rule, found from the activation a
contraction reads (never from names), and optimizer states that follow their parameter.

A weight gets its layout the first time a contraction or lookup reads it. If the activation is
split on a contracted dim, the weight is split the same way (row parallel: the result is a partial
sum). If the activation is whole, the weight is split on its largest free dim (column parallel)
when the result can stay split until the next contraction or the output: every reshape keeps the
split on whole heads, and no normalization or reduction runs over it. An embedding table is split
by rows when it is larger than what it gathers.
"""

from __future__ import annotations

from math import prod
from typing import Any

from ...errors import PlanError
from ...ir import Graph, Node, Op, Sym, Value
from .shardrules import equal_piece, reshape_map
from .shardspec import Spec

__all__ = ["WeightLayouts", "PHASE"]

#: The node attribute that names a node's training phase (forward, backward, recompute, optimizer).
PHASE = "phase"


class WeightLayouts:
    """The weight-layout half of the sharding pass (mixed into it)."""

    src: Graph
    sizes: dict[str, int]
    specs: dict[Value, Spec]
    weights: dict[Value, Spec]
    by_name: dict[str, Value]
    token_roles: set[str]
    parallel: Any

    def shape(self, v: Value) -> tuple[int, ...]:
        raise NotImplementedError

    def spec(self, v: Value) -> Spec:
        raise NotImplementedError

    def _set_weight(self, w: Value, spec: Spec) -> None:
        self.specs[w] = self.weights[w] = spec

    def decide_weights(self, node: Node) -> None:
        if node.op is Op.DOT:
            self._decide_dot(node)
        elif node.op is Op.GROUPED_DOT:
            self._decide_experts(node)
        elif node.op is Op.GATHER:
            table, idx = node.inputs[0], node.inputs[1]
            if table is not None and idx is not None and table.kind.is_weight and table not in self.specs:
                rows = self.shape(table)[0]
                tp = self.sizes["tp"]
                # split a table's rows when it is larger than what each device gathers (its own tokens
                # under context parallelism): the saving outweighs the all-reduce of the output (word
                # embeddings yes, position tables no)
                spec = Spec.replicated(len(self.shape(table)))
                gathered = prod(self.spec(idx).local_shape(self.shape(idx), self.sizes))
                if tp > 1 and rows % tp == 0 and rows > gathered:
                    spec = spec.with_dim(0, ("tp",))
                self._set_weight(table, spec)

    def _decide_dot(self, node: Node) -> None:
        a = node.attrs
        for w_i, act_i, wc, ac, wb in ((1, 0, a["rhs_contract"], a["lhs_contract"], a.get("rhs_batch", ())),
                                        (0, 1, a["lhs_contract"], a["rhs_contract"], a.get("lhs_batch", ()))):
            w, act = node.inputs[w_i], node.inputs[act_i]
            if w is None or act is None or not w.kind.is_weight or w in self.specs or act.kind.is_weight:
                continue
            spec = Spec.replicated(len(self.shape(w)))
            tp = self.sizes["tp"]
            act_spec = self.spec(act)
            wshape = self.shape(w)
            if tp > 1:
                row = next((i for i, d in enumerate(ac) if "tp" in act_spec.dims[d]), None)
                if row is not None and wshape[wc[row]] % tp == 0:
                    spec = spec.with_dim(wc[row], ("tp",))                        # row parallel
                elif row is None and not self._tp_on_other_dim(act, act_spec, ac):
                    free = [d for d in range(len(wshape)) if d not in wc and d not in wb]
                    col = max(free, key=lambda d: wshape[d], default=None)
                    out_dim = len(self.shape(node.outputs[0])) - len(free) + free.index(col) if col is not None else 0
                    if (col is not None and wshape[col] % tp == 0 and w_i == 1
                            and self._column_ok(node.outputs[0], out_dim, tp)):
                        spec = spec.with_dim(col, ("tp",))                        # column parallel
            self._set_weight(w, spec)

    def _decide_experts(self, node: Node) -> None:
        """Stacked experts ``[E, out, in]``: the experts over ``ep``, and inside each expert the dense
        rule: row parallel when the rows arrive split over ``tp`` on the contracted dim, else column
        parallel when the result can stay split until the next contraction."""
        x, w = node.inputs[0], node.inputs[1]
        if node.attrs.get("role") == "grad_weight" or x is None or w is None or not w.kind.is_weight \
                or w in self.specs:
            return
        shape = self.shape(w)
        spec = Spec.replicated(len(shape))
        ep, tp = self.sizes.get("ep", 1), self.sizes["tp"]
        if ep > 1:
            if shape[0] % ep:
                raise PlanError(f"shard: ep={ep} does not divide the {shape[0]} experts of {w.name!r}")
            spec = spec.with_dim(0, ("ep",))
        rc = int(node.attrs["rhs_contract"])
        if tp > 1:
            if "tp" in self.spec(x).dims[1] and shape[rc] % tp == 0:
                spec = spec.with_dim(rc, ("tp",))                                  # row parallel
            elif "tp" not in self.spec(x).dims[1] and shape[3 - rc] % tp == 0 and \
                    self._column_ok(node.outputs[0], 1, tp):
                spec = spec.with_dim(3 - rc, ("tp",))                              # column parallel
        self._set_weight(w, spec)

    def _owner_name(self, w: Value) -> Value | None:
        """The parameter ``w`` is a state or master copy of: the longest weight name that prefixes
        ``w``'s name at a dot (``<param>.exp_avg``), with the same shape."""
        name = w.name
        while "." in name:
            name = name.rpartition(".")[0]
            owner = self.by_name.get(name)
            if owner is not None and owner is not w and self.shape(owner) == self.shape(w):
                return owner
        return None

    def _owner(self, w: Value) -> Spec | None:
        """The layout of the parameter ``w`` is a state of, once that parameter is laid out."""
        owner = self._owner_name(w)
        return self.specs.get(owner) if owner is not None else None

    def _column_ok(self, v: Value, dim: int, k: int, depth: int = 0) -> bool:
        """Whether a result split on ``dim`` can stay split until a contraction or the output: every
        reshape keeps the split on a leading factor that ``k`` divides (whole heads), and no
        normalization, top-k or reduction runs over it (a router's logits stay whole)."""
        if depth > 8:
            return True
        if any(o is v for o in self.src.outputs):
            return True
        phase = v.producer.attrs.get(PHASE) if v.producer is not None else None
        for use in v.uses:
            n = use.node
            if n.op in (Op.DOT, Op.GROUPED_DOT, Op.ATTENTION) or n.attrs.get(PHASE) != phase:
                continue                  # a pair found, or a later phase (backward reads saved values)
            out = n.outputs[0] if n.outputs else None
            if out is None:
                return False
            if n.op is Op.RESHAPE:
                m = reshape_map(self.shape(v), self.shape(out))
                if m is None or dim not in m or self.shape(out)[m[dim]] % k:
                    return False
                nd = m[dim]
            elif n.op is Op.PERMUTE:
                nd = list(n.attrs["perm"]).index(dim)
            elif n.op in (Op.SOFTMAX, Op.LOG_SOFTMAX):
                nd = dim                   # runs split, its row statistics all-reduced
            elif n.op in (Op.RMS_NORM, Op.LAYER_NORM) and dim < int(n.attrs.get("axis", -1)) % len(self.shape(v)):
                nd = dim                   # a norm over other dims (each head's q/k norm): rows stay split
            elif n.op is Op.GATHER_ELEMENTS and int(n.attrs.get("axis", -1)) % len(self.shape(v)) == dim:
                continue                   # a split pick: one all-reduce of the picked values
            elif n.op is Op.SLICE and equal_piece(self.shape(v), self.shape(out)) == dim:
                if self.shape(out)[dim] % k:
                    return False
                nd = dim
            elif n.group.value == "elementwise" and len(self.shape(out)) >= len(self.shape(v)):
                nd = dim + len(self.shape(out)) - len(self.shape(v))
            elif n.group.value == "data_movement" and len(self.shape(out)) == len(self.shape(v)) and \
                    self.shape(out)[dim] == self.shape(v)[dim]:
                nd = dim                   # slices, concats, expands along other dims (rotate_half, repeat_kv)
            else:
                return False
            if not self._column_ok(out, nd, k, depth + 1):
                return False
        return True

    def _tp_on_other_dim(self, act: Value, spec: Spec, contract: tuple[int, ...]) -> bool:
        """Whether ``tp`` already splits a kept dim of the activation other than its tokens (heads in
        attention's batched contractions): then the weight stays whole. A sequence split (sequence
        parallelism) does not count: the contraction gathers it first."""
        return any("tp" in axes and not _symbols(act.shape[d]) & self.token_roles
                   for d, axes in enumerate(spec.dims) if d not in contract)


def _symbols(dim: object) -> frozenset[str]:
    return dim.symbols if isinstance(dim, Sym) else frozenset()
