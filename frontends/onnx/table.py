"""The one table that maps ONNX ops to canonical ops.

Keys are the op type for the default domain (``"MatMul"``) and ``"domain::OpType"`` for the others
(``"com.microsoft::Attention"``, ``"ai.onnx.ml::Binarizer"``). An op missing from the table is
lowered through its ONNX function body when it has one (:mod:`.functions`); anything else
becomes an ``UNKNOWN`` node that reports list as unmodeled.
"""

from __future__ import annotations

from collections.abc import Callable

from .contractions import CONTRACTION_LOWERINGS
from .contrib import CONTRIB_LOWERINGS
from .contrib_moe import MOE_LOWERINGS, MOE_SHAPE_RULES
from .contrib_nbits import NBITS_LOWERINGS
from .contrib_quant import QUANT_LOWERINGS
from .contrib_shapes import CONTRIB_SHAPE_RULES
from .control import CONTROL_LOWERINGS
from .misc import MISC_LOWERINGS
from .nn import ELEMENTWISE_LOWERINGS, NN_LOWERINGS
from .node import NodeCx
from .recurrent import RECURRENT_LOWERINGS
from .shapes import OutSpec
from .tensor import TENSOR_LOWERINGS

__all__ = ["ONNX_TABLE", "SHAPE_RULES_EXTRA", "covered_ops"]


def _build() -> dict[str, Callable[[NodeCx], None]]:
    table: dict[str, Callable[[NodeCx], None]] = {}
    for part in (ELEMENTWISE_LOWERINGS, TENSOR_LOWERINGS, NN_LOWERINGS, CONTRACTION_LOWERINGS,
                 RECURRENT_LOWERINGS, CONTROL_LOWERINGS, MISC_LOWERINGS, CONTRIB_LOWERINGS, MOE_LOWERINGS,
                 QUANT_LOWERINGS, NBITS_LOWERINGS):
        overlap = table.keys() & part.keys()
        if overlap:
            raise RuntimeError(f"ONNX ops mapped twice: {sorted(overlap)}")
        table.update(part)
    return table


ONNX_TABLE = _build()
#: Output-shape rules of ops ONNX's inference does not know (the contrib ops).
SHAPE_RULES_EXTRA: dict[str, Callable[[NodeCx], list[OutSpec | None]]] = dict(CONTRIB_SHAPE_RULES) | MOE_SHAPE_RULES


def covered_ops() -> list[str]:
    """Every ONNX op key the table lowers directly (for the coverage table in the docs)."""
    return sorted(ONNX_TABLE)
