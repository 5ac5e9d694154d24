"""The cells of the recurrent ops (RNN, GRU, LSTM) as canonical elementwise steps; shared by the ONNX
and torch frontends so both lower one ``nn.GRU`` to the same IR (and so the same FLOPs and bytes).

Each cell is the number of gates its projections produce (``G``: the ``[G*H, in]`` weights) and the
elementwise ops of one step, each over all time steps at once: ``(op, how many H-wide slices it
covers)``. RNN is one tanh (or ReLU, torch's ``nonlinearity="relu"``); GRU two sigmoids and the
reset/update arithmetic; LSTM three sigmoids, two tanhs and the cell update (its ``ADD`` is the new
cell state).
"""

from __future__ import annotations

from ..ir import Op

__all__ = ["RECURRENT_CELLS", "GATE_ACTIVATIONS"]

RECURRENT_CELLS: dict[str, tuple[int, list[tuple[Op, int]]]] = {
    "RNN": (1, [(Op.TANH, 1)]),
    "RNN_RELU": (1, [(Op.RELU, 1)]),
    "GRU": (3, [(Op.SIGMOID, 2), (Op.MUL, 1), (Op.ADD, 1), (Op.TANH, 1), (Op.SUB, 1), (Op.MUL, 1), (Op.ADD, 1)]),
    "LSTM": (4, [(Op.SIGMOID, 3), (Op.TANH, 1), (Op.MUL, 1), (Op.MUL, 1), (Op.ADD, 1), (Op.TANH, 1), (Op.MUL, 1)]),
}

#: The steps that read only their gates' slice; the others also read the state (GRU's h, LSTM's c).
GATE_ACTIVATIONS: frozenset[Op] = frozenset({Op.SIGMOID, Op.TANH, Op.RELU})
