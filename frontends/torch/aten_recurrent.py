"""Lowerings of torch's fused recurrent ops (``aten.lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu``).

The same IR as the ONNX frontend's RNN/GRU/LSTM (:mod:`..recurrent_cells` holds the cells both use),
one layer and direction at a time, as torch's own ``_rnn_impl`` runs them: the input projection
``x @ W_ih^T`` as one dot over all steps, the biases ``b_ih + b_hh`` added to it, the recurrent
projection ``h @ W_hh^T`` as one dot over all steps with ``sequential_steps`` saying the steps depend
on each other (the same FLOPs and bytes as the unrolled loop), the cell's elementwise steps over all
steps, LSTM's ``proj_size`` projection ``h @ W_hr^T`` likewise; a bidirectional layer concatenates its
two directions' outputs (torch's ``at::cat`` of the forward and reverse outputs), and the final
states are the last step's, stacked over layers and directions. Dropout between layers is not
modeled (inference, or ``dropout=0``). The packed-sequence overloads (``.data``) stay unmodeled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch.fx as fx

from ...errors import FrontendError
from ...ir import Dim, Op, Sym, TensorType, Value
from ..recurrent_cells import GATE_ACTIVATIONS, RECURRENT_CELLS
from .lowering import AtenLowerer

__all__ = ["RECURRENT_LOWERINGS"]


def _steps_attr(d: Dim) -> int | str | None:
    """The trip count as the ONNX frontend states it: an int, or the name of one symbolic dim."""
    if isinstance(d, int):
        return d
    return d.expr if isinstance(d, Sym) and d.symbols == {d.expr} else None


class _Layer:
    """Emits one layer and direction of one recurrent fx node ``n``."""

    def __init__(self, cx: AtenLowerer, n: fx.Node, kind: str, lead: tuple[Dim, ...], steps: Dim,
                 batch_first: bool) -> None:
        self.cx, self.n, self.kind, self.lead, self.batch_first = cx, n, kind, lead, batch_first
        self.steps = _steps_attr(steps)

    def emit(self, op: Op, inputs: Sequence[Value | None], shape: tuple[Dim, ...], name: str,
             attrs: dict[str, Any] | None = None, dtype_of: Value | None = None) -> Value:
        src = dtype_of or next(v for v in inputs if v is not None)
        t = TensorType(src.dtype, shape)
        return self.cx.emit(op, inputs, self.n, attrs, types=[t], bind=False, name=f"{self.n.name}_{name}").outputs[0]

    def dot(self, x: Value, w: Value, name: str, sequential: bool) -> Value:
        """``x [..., K] @ w[N, K]^T``: torch's weights are stored ``[N, K]``."""
        attrs: dict[str, Any] = {"lhs_contract": (x.type.rank - 1,), "rhs_contract": (1,), "lhs_batch": (),
                                 "rhs_batch": ()}
        if sequential:
            attrs["sequential_steps"] = self.steps
        return self.emit(Op.DOT, [x, w], (*self.lead, w.type.shape[0]), name, attrs, dtype_of=x)

    def state(self, s0: Value, index: int, name: str) -> Value:
        """Layer/direction ``index``'s initial state (a view of ``s0 [layers x dirs, (B,) H]``) over
        every step in x's layout (a free expand)."""
        one = self.emit(Op.SLICE, [s0], (1, *s0.type.shape[1:]), f"{name}0", {"axis": 0, "index": index})
        width = s0.type.shape[-1]
        if self.batch_first and len(self.lead) == 2:   # [1, B, H] seen as [B, 1, H]
            one = self.emit(Op.RESHAPE, [one], (self.lead[0], 1, width), f"{name}0_batch_first")
        return self.emit(Op.EXPAND, [one], (*self.lead, width), f"{name}_states", {"role": "hidden_states"})

    def run(self, x: Value, weights: list[Value], h0: Value, c0: Value | None, index: int, has_biases: bool,
            tag: str) -> tuple[Value, Value, Value | None]:
        """The layer's output over every step, and its last hidden (and LSTM cell) state ``[1, (B,) H]``."""
        gates, steps = RECURRENT_CELLS[self.kind]
        w_ih, w_hh = weights[0], weights[1]
        hidden = w_hh.type.shape[0] // gates if isinstance(w_hh.type.shape[0], int) else w_hh.type.shape[0]
        cur = self.dot(x, w_ih, f"{tag}_input_proj", sequential=False)
        if has_biases:
            bias = self.emit(Op.ADD, weights[2:4], tuple(weights[2].type.shape), f"{tag}_bias_sum", {"role": "bias"})
            cur = self.emit(Op.ADD, [cur, bias], tuple(cur.type.shape), f"{tag}_bias", {"role": "bias"})
        states = self.state(h0, index, f"{tag}_h")
        rec = self.dot(states, w_hh, f"{tag}_recurrent_proj", sequential=True)
        cur = self.emit(Op.ADD, [cur, rec], tuple(cur.type.shape), f"{tag}_gates", {"role": "gates"})
        cell_states = self.state(c0, index, f"{tag}_c") if c0 is not None else None
        cell = None
        for k, (op, width) in enumerate(steps):
            shape = (*self.lead, hidden * width)
            inputs = [self._view(Op.SLICE, cur, shape, f"{tag}_gates{k}")]
            if op not in GATE_ACTIVATIONS:
                inputs.append(self._view(Op.EXPAND, cell_states or states, shape, f"{tag}_state{k}"))
            cur = self.emit(op, inputs, shape, f"{tag}_{op.value}{k}", {"cell": self.kind})
            if self.kind == "LSTM" and op is Op.ADD:
                cell = cur
        if len(weights) % 2 == 1:   # LSTM's proj_size: W_hr [P, H] after the biases
            cur = self.dot(cur, weights[-1], f"{tag}_hidden_proj", sequential=True)
        last_h = self.emit(Op.SLICE, [cur], (1, *h0.type.shape[1:]), f"{tag}_h_last", {"role": "last_step"})
        last_c = None
        if cell is not None and c0 is not None:
            last_c = self.emit(Op.SLICE, [cell], (1, *c0.type.shape[1:]), f"{tag}_c_last", {"role": "last_step"})
        return cur, last_h, last_c

    def _view(self, op: Op, v: Value, shape: tuple[Dim, ...], name: str) -> Value:
        return v if tuple(v.type.shape) == shape else self.emit(op, [v], shape, name, {"layout_adapter": "cell"})


def _recurrent(kind: str) -> Callable[[AtenLowerer, fx.Node], None]:
    def fn(cx: AtenLowerer, n: fx.Node) -> None:
        def refuse(reason: str) -> FrontendError:
            return FrontendError(reason, file=cx.file or None, node=n.name, op=str(n.target))
        if len(n.args) < 9:
            raise refuse(f"expected 9 arguments (input, hx, params, has_biases, num_layers, dropout, train, "
                         f"bidirectional, batch_first), got {len(n.args)}")
        x = cx.value(n.args[0])
        hx = n.args[1] if isinstance(n.args[1], (list, tuple)) else [n.args[1]]
        h0, c0 = cx.value(hx[0]), (cx.value(hx[1]) if kind == "LSTM" and len(hx) > 1 else None)
        args: list[Any] = list(n.args)
        params = [cx.value(p) for p in args[2]]
        has_biases, layers, bidirectional, batch_first = bool(args[3]), int(args[4]), bool(args[7]), bool(args[8])
        dirs = 2 if bidirectional else 1
        per = len(params) // max(layers * dirs, 1)
        base = 4 if has_biases else 2
        if x is None or h0 is None or (kind == "LSTM" and c0 is None) or any(p is None for p in params):
            raise refuse("an input, initial state or weight is not a tensor the frontend tracked")
        if per * layers * dirs != len(params) or per not in (base, base + (kind == "LSTM")):
            raise refuse(f"{len(params)} weights for {layers} layer(s) x {dirs} direction(s) with "
                         f"has_biases={has_biases}: expected {base} per layer and direction"
                         f"{' (or one more, proj_size)' if kind == 'LSTM' else ''}")
        batched = x.type.rank == 3
        lead = tuple(x.type.shape[:-1])
        steps = lead[1] if batched and batch_first else lead[0]
        layer = _Layer(cx, n, kind, lead, steps, batch_first and batched)
        out: Value = x
        last_h: list[Value] = []
        last_c: list[Value] = []
        for li in range(layers):
            outs = []
            for d in range(dirs):
                i = li * dirs + d
                ws = [p for p in params[i * per:(i + 1) * per] if p is not None]
                y, h, c = layer.run(out, ws, h0, c0, i, has_biases, f"l{li}{'_reverse' if d else ''}")
                outs.append(y)
                last_h.append(h)
                if c is not None:
                    last_c.append(c)
            out = outs[0] if dirs == 1 else layer.emit(
                Op.CONCAT, outs, (*lead, sum(o.type.shape[-1] for o in outs)), f"l{li}_directions",
                {"axis": len(lead)})
        types = cx.out_types(n)
        results = [out]
        for k, pieces in ((1, last_h), (2, last_c)):
            if k < len(types) and pieces:   # h_n (c_n): the last steps stacked over layers and directions
                results.append(pieces[0] if len(pieces) == 1 else cx.emit(
                    Op.CONCAT, pieces, n, {"axis": 0, "role": "final_state"}, types=[types[k]], bind=False,
                    name=f"{n.name}_{'hc'[k - 1]}_n").outputs[0])
        cx.bind(n, results)
    return fn


RECURRENT_LOWERINGS: dict[str, Callable[[AtenLowerer, fx.Node], None]] = {
    "lstm.input": _recurrent("LSTM"), "gru.input": _recurrent("GRU"), "rnn_tanh.input": _recurrent("RNN"),
    "rnn_relu.input": _recurrent("RNN_RELU"),
}
