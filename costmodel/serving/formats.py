"""Number formats a deployment chooses separately: weights, activations and the KV cache.

Serving stacks quantize the three independently: fp8 or int4 weights with bf16 activations
(weight-only: the bytes of the weights shrink, the matmul runs at the activations' rate after a
dequantization in the kernel), fp8 end to end (the chip's fp8 rate), an fp8 KV cache (half the
cache bytes, so twice the batch). None keeps the graph's own format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import NarrowpipeError
from ...ir import DType, Graph
from ..costcache import forget
from ..precision import with_precision

__all__ = ["Formats"]


def _parse(text: DType | str | None, what: str) -> DType | None:
    if text is None or text == "":
        return None
    if isinstance(text, DType):
        return text
    try:
        dt = DType.parse(text)
    except ValueError:
        raise NarrowpipeError(f"unknown {what} format {text!r} (e.g. bf16, fp16, fp8_e4m3, int8, int4, fp4)") from None
    if not (dt.is_float or dt.is_int):
        raise NarrowpipeError(f"{what} format {text!r} is not a number format")
    return dt


@dataclass(frozen=True)
class Formats:
    """The weights', activations' and KV cache's formats (None: as the graph has them)."""

    weights: DType | None = None
    activations: DType | None = None
    kv: DType | None = None

    @classmethod
    def of(cls, weights: DType | str | None = None, activations: DType | str | None = None,
           kv: DType | str | None = None) -> Formats:
        return cls(_parse(weights, "weight"), _parse(activations, "activation"), _parse(kv, "KV cache"))

    def apply(self, graph: Graph) -> Graph:
        """``graph`` with its weights and activations retyped (a copy when anything changes)."""
        if self.weights is None and self.activations is None:
            return graph
        out = with_precision(graph, weights=self.weights, activations=self.activations)
        forget(out)
        return out

    def label(self) -> str:
        parts = [f"{k} {v.value}" for k, v in (("weights", self.weights), ("activations", self.activations),
                                                ("KV", self.kv)) if v is not None]
        return ", ".join(parts) or "the model's own formats"

    def to_dict(self) -> dict[str, Any]:
        return {k: (v.value if v is not None else None) for k, v in
                (("weights", self.weights), ("activations", self.activations), ("kv", self.kv))}
