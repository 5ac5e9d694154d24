"""Lowerings of the ONNX recurrent ops (RNN, GRU, LSTM) into contractions and gate arithmetic.

The input projection ``X @ W^T`` is one dot_general over all time steps. The recurrent projection
``h_t @ R^T`` runs once per step; it is expressed as one dot_general over all ``seq_length`` steps
(the same FLOPs and bytes as the unrolled loop, so reports put them under contractions), with
``sequential_steps`` recording that the steps depend on each other. The gates are elementwise
nodes over all steps: RNN one tanh, GRU two sigmoids and the reset/update arithmetic, LSTM three
sigmoids, two tanhs and the cell update.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...ir import Op, Value
from ..recurrent_cells import GATE_ACTIVATIONS, RECURRENT_CELLS
from .control import trip_attr
from .node import NodeCx
from .symdims import dim_floordiv, dim_mul, to_dim

__all__ = ["RECURRENT_LOWERINGS"]


def _recurrent(kind: str) -> Callable[[NodeCx], None]:
    gates, steps = RECURRENT_CELLS[kind]

    def fn(cx: NodeCx) -> None:
        x, w, r = cx.input(0), cx.input(1), cx.input(2)
        if x is None or w is None or r is None:
            raise cx.error(f"{kind} needs X, W and R")
        if x.type.rank != 3 or w.type.rank != 3 or r.type.rank != 3:
            raise cx.error(f"{kind} needs 3-D X, W and R, got ranks {x.type.rank}, {w.type.rank}, {r.type.rank}")
        layout = int(cx.attr("layout", 0))
        seq, batch = (x.type.shape[1], x.type.shape[0]) if layout else (x.type.shape[0], x.type.shape[1])
        dirs, gh = w.type.shape[0], w.type.shape[1]
        hidden: Any = cx.attr("hidden_size")
        hidden = int(hidden) if hidden is not None else to_dim(dim_floordiv(gh, gates))
        dt = x.type.dtype
        steps_t = cx.tensor(dt, (*x.type.shape[:2], dirs, gh))  # elementwise over all steps, X's layout
        proj = _dot(cx, x, w, (2,), (2,), (), (), cx.tensor(dt, (*x.type.shape[:2], dirs, gh)), "input_proj")
        b = cx.input(3)
        if b is not None:
            # B is [dirs, 2*G*h]: the input and recurrent biases side by side, summed once (as
            # runtimes do) into the [dirs, G*h] bias every step adds
            pair = cx.emit(Op.RESHAPE, [b], {"role": "bias_pair"}, types=[cx.tensor(b.type.dtype, (dirs, 2, gh))],
                           bind=False, suffix="bias_pair").outputs[0]
            bias = cx.emit(Op.REDUCE_SUM, [pair], {"axes": (1,), "keepdims": False, "role": "bias"},
                           types=[cx.tensor(b.type.dtype, (dirs, gh))], bind=False, suffix="bias_sum").outputs[0]
            proj = cx.emit(Op.ADD, [proj, bias], {"role": "bias"}, types=[proj.type], bind=False,
                           suffix="bias").outputs[0]
        # h for every step: the initial state broadcast over the steps (the recurrence is sequential)
        h0 = cx.input(5)
        state_t = cx.tensor(dt, (seq, dirs, batch, hidden))
        states = cx.emit(Op.EXPAND if h0 is not None else Op.FILL, [h0] if h0 is not None else [],
                         {"role": "hidden_states"}, types=[state_t], bind=False, suffix="h").outputs[0]
        rec = _dot(cx, states, r, (3,), (2,), (1,), (0,), cx.tensor(dt, (dirs, seq, batch, gh)), "recurrent_proj",
                   sequential_steps=trip_attr(seq))
        # the DOT yields [dirs, steps, batch, G*h] (batch dims first); a free view relabels it into
        # X's layout so the gate add is elementwise (cost-equivalent, as contrib's layout adapters)
        rec = cx.emit(Op.RESHAPE, [rec], {"layout_adapter": "dsbg->X"}, types=[steps_t], bind=False,
                      suffix="recurrent_view").outputs[0]
        cur = cx.emit(Op.ADD, [proj, rec], {"role": "gates"}, types=[steps_t], bind=False, suffix="gates").outputs[0]
        cell = cx.input(6) if kind == "LSTM" else None
        for k, (op, width) in enumerate(steps):
            t = cx.tensor(dt, (*x.type.shape[:2], dirs, dim_mul(hidden, width)))
            # each step reads its gates' slice and the state over every step, both as free views
            # in X's layout, so every step is a well-typed elementwise op of the width it computes
            inputs = [_view_as(cx, Op.SLICE, cur, t, f"gates{k}")]
            if op not in GATE_ACTIVATIONS:
                inputs.append(_view_as(cx, Op.EXPAND, states if cell is None else cell, t, f"state{k}"))
            cur = cx.emit(op, inputs, {"cell": kind}, types=[t], bind=False, suffix=f"{op.value}{k}").outputs[0]
        _bind_outputs(cx, cur)
    return fn


def _view_as(cx: NodeCx, op: Op, v: Value, t: Any, suffix: str) -> Value:
    """``v`` itself when it already has type ``t``, else a free view of it with that type."""
    if v.type == t:
        return v
    return cx.emit(op, [v], {"layout_adapter": "cell"}, types=[t], bind=False, suffix=suffix).outputs[0]


def _dot(cx: NodeCx, lhs: Value, rhs: Value, lc: tuple[int, ...], rc: tuple[int, ...], lb: tuple[int, ...],
         rb: tuple[int, ...], t: Any, suffix: str, **extra: Any) -> Value:
    attrs = {"lhs_contract": lc, "rhs_contract": rc, "lhs_batch": lb, "rhs_batch": rb, **extra}
    return cx.emit(Op.DOT, [lhs, rhs], attrs, types=[t], bind=False, suffix=suffix).outputs[0]


def _bind_outputs(cx: NodeCx, h_all: Value) -> None:
    """Y is every step's hidden state; Y_h (and LSTM's Y_c) the last step's."""
    for k in range(cx.n_outputs()):
        t = cx.out_type_at(k)
        if t is None:
            continue
        op = Op.RESHAPE if k == 0 else Op.SLICE
        cx.bind_at(k, cx.emit(op, [h_all], {"output": ("Y", "Y_h", "Y_c")[min(k, 2)]}, types=[t], bind=False,
                              suffix=("y", "y_h", "y_c")[min(k, 2)]).outputs[0])


RECURRENT_LOWERINGS: dict[str, Callable[[NodeCx], None]] = {k: _recurrent(k) for k in ("RNN", "GRU", "LSTM")}
