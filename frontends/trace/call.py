"""What every aten-call builder shares: the recorded call, a one-op graph under construction, the
parsing of recorded scalar arguments, and the registry type the op families fill.

The builders live by op family (:mod:`.matmul`, :mod:`.vector`,
:mod:`.tensor`); :mod:`.lower` joins their tables behind one ``lower_call``.
Scalars arrive as the profiler's text (``[2, 2]``, ``False``, ``6``), so a parser returns the
caller's default, never raises, when the text does not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...ir import DType, Graph, Op, TensorType, Value
from .read import TensorArg

__all__ = ["ImpossibleCall", "Call", "GraphBuilder", "Builder", "registrar", "ints", "int_arg", "bool_arg", "bool_mask",
           "per_dim", "dtype_code", "broadcast"]

_SCALAR_TYPES = {0: DType.UINT8, 1: DType.INT8, 2: DType.INT16, 3: DType.INT32, 4: DType.INT64,
                 5: DType.FP16, 6: DType.FP32, 7: DType.FP64, 9: DType.COMPLEX64, 10: DType.COMPLEX128,
                 11: DType.BOOL, 15: DType.BF16, 23: DType.FP8_E5M2, 24: DType.FP8_E4M3,
                 25: DType.FP8_E5M2, 26: DType.FP8_E4M3}


class ImpossibleCall(Exception):
    """Recorded arguments no real call could have (a contraction whose contracted dims differ: torch
    raises before any kernel runs), so the trace is damaged. Not a ``ValueError``: :func:`.lower.lower_call`
    turns those into "unmapped", and this must reach the reader as an error naming the op."""


@dataclass(frozen=True)
class Call:
    """One recorded op call: positional inputs as recorded, scalars as text."""

    name: str
    inputs: Sequence[TensorArg | list[TensorArg] | None]
    concrete: Sequence[str]
    default_dtype: DType = DType.FP32   # for tensors in a TensorList, whose dtype is not recorded
    key: str = ""                       # the registered name it lowers as (``add`` for ``add_``)

    @property
    def base(self) -> str:
        """The name as recorded, without the namespace (``add_``)."""
        return self.name.split("::", 1)[1] if "::" in self.name else self.name

    @property
    def inplace(self) -> bool:
        return bool(self.key) and self.key != self.base

    def t(self, i: int) -> TensorArg | None:
        x = self.inputs[i] if i < len(self.inputs) else None
        return x if isinstance(x, TensorArg) else None

    def tensors(self) -> list[TensorArg]:
        return [x for x in self.inputs if isinstance(x, TensorArg)]

    def c(self, i: int) -> str:
        return self.concrete[i].strip() if i < len(self.concrete) else ""


class GraphBuilder:
    """A tiny graph under construction: inputs from recorded tensors, nodes with inferred outputs."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self.g = Graph(call.name)

    def input(self, t: TensorArg) -> Value:
        return self.g.add_input(f"in{len(self.g.inputs)}", TensorType(t.dtype or self.call.default_dtype, t.shape))

    def node(self, op: Op, ins: Sequence[Value | None], shape: Sequence[int], dtype: DType,
             attrs: dict[str, Any] | None = None) -> Value:
        return self.g.add_node(op, ins, [TensorType(dtype, tuple(int(d) for d in shape))], attrs).outputs[0]

    def outputs(self, op: Op, ins: Sequence[Value | None], types: Sequence[tuple[Sequence[int], DType]],
                attrs: dict[str, Any] | None = None) -> list[Value]:
        """A node with several outputs (sort's values and indices): each one's bytes are traffic."""
        return self.g.add_node(op, ins, [TensorType(dt, tuple(int(d) for d in shape)) for shape, dt in types],
                               attrs).outputs

    def done(self, *outs: Value) -> Graph:
        self.g.set_outputs(outs)
        return self.g


Builder = Callable[[Call], "Graph | None"]


def registrar(table: dict[str, Builder]) -> Callable[..., Callable[[Builder], Builder]]:
    """A decorator ``@register("mm", "mv")`` that files a builder under each name in ``table``, so
    each family module keeps its own table and the join order stays visible in one place."""
    def register(*names: str) -> Callable[[Builder], Builder]:
        def deco(fn: Builder) -> Builder:
            for n in names:
                table[n] = fn
            return fn
        return deco
    return register


# -- scalar argument parsing ------------------------------------------------------------------

def ints(text: str) -> tuple[int, ...] | None:
    s = text.strip()
    if not s:
        return None
    try:
        if s.startswith("["):
            inner = s.strip("[]").strip()
            return tuple(int(float(x)) for x in inner.split(",")) if inner else ()
        return (int(float(s)),)
    except ValueError:
        return None


def int_arg(text: str, default: int) -> int:
    v = ints(text)
    return v[0] if v else default


def bool_arg(text: str, default: bool = False) -> bool:
    s = text.strip().lower()
    return s in ("true", "1") if s in ("true", "false", "1", "0") else default


def bool_mask(text: str, n: int) -> tuple[bool, ...]:
    """A recorded ``output_mask`` (``[True, False, True]``) as ``n`` flags; all True when the text
    does not fit (a backward op computes every gradient unless told otherwise)."""
    words = [w.strip().lower() for w in text.strip().strip("[]").split(",")] if text.strip() else []
    if len(words) != n or any(w not in ("true", "false", "1", "0") for w in words):
        return (True,) * n
    return tuple(w in ("true", "1") for w in words)


def per_dim(text: str, n: int, default: int) -> tuple[int, ...]:
    """A recorded int or int list (``[2, 2]``, ``2``, ``[]``) as one value per spatial dim."""
    v = ints(text)
    if not v:
        return (default,) * n
    return v * n if len(v) == 1 else v


def dtype_code(text: str, default: DType) -> DType:
    v = ints(text)
    return _SCALAR_TYPES.get(v[0], default) if v and len(v) == 1 else default


def broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate((1,) * (rank - len(s)) + tuple(s)):
            if d != 1 and out[i] not in (1, d):
                return None
            out[i] = d if d != 1 else out[i]
    return tuple(out)
