"""Precision what-ifs: the same program with weights, activations (or both) in another format.

Real deployments quantize: fp8 weights with bf16 activations (weight-only), fp8 end to end, fp4
weights. This pass returns a copy of the graph with float weights and/or float activations retyped;
integer tensors (token ids, indices, masks) keep their types. Compute follows the wider operand of
each contraction (a bf16 x fp8 matmul runs at the bf16 rate but reads fp8 weights), so the bytes
and the rates both move the way they do on real hardware.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import PassError
from ..ir import DType, Graph, TensorType, Value, node_subgraphs
from ..ir.passes import AnalysisManager, PassResult, register_pass

__all__ = ["with_precision", "Precision", "FORMATS", "number_format"]


def _retype(value: Value, to: DType | None) -> None:
    if to is not None and value.type.dtype.is_float:
        value.type = TensorType(to, value.type.shape)


def with_precision(graph: Graph, *, weights: DType | str | None = None,
                   activations: DType | str | None = None) -> Graph:
    """A copy of ``graph`` with float weights and/or float activations (inputs included) retyped."""
    w = _option("weights", weights)
    a = _option("activations", activations)
    out = graph.clone()
    _apply(out, w, a)
    out.meta["precision"] = {"weights": w.value if w else None, "activations": a.value if a else None}
    return out


#: The number formats a weight or an activation can be retyped to: real floats and the small integers
#: of quantized formats (bool, string, complex and wide integers are dtypes, not precisions: the error
#: listed them as choices).
FORMATS = tuple(d for d in DType if (d.is_float and not d.value.startswith("complex"))
                or d.value in ("int8", "int4", "uint8", "uint4"))


def number_format(value: DType | str) -> DType | None:
    """``value`` as one of :data:`FORMATS` (any spelling :meth:`DType.parse` takes), or None."""
    try:
        dtype = value if isinstance(value, DType) else DType.parse(value)
    except ValueError:
        return None
    return dtype if dtype in FORMATS else None


def _option(key: str, value: DType | str | None) -> DType | None:
    """A precision option, or a :class:`PassError` naming the option and the formats it takes."""
    if value is None:
        return value
    dtype = number_format(value)
    if dtype is None:
        known = ", ".join(d.value for d in FORMATS)
        shown = value.value if isinstance(value, DType) else value
        raise PassError(f"pass 'precision': option {key}={shown!r} is not a number format it can take; "
                        f"choose from {known}")
    return dtype


def _apply(graph: Graph, w: DType | None, a: DType | None) -> None:
    """Retype in place: only ever called on a fresh clone, which no analysis has seen yet."""
    for v in graph.weights:
        _retype(v, w)
    for v in graph.inputs:
        _retype(v, a)
    for node in graph.nodes:
        for v in node.outputs:
            _retype(v, a)
        to = node.attrs.get("to")
        if to and a is not None and (to if isinstance(to, DType) else DType.parse(str(to))).is_float:
            node.attrs["to"] = a.value
        for body in node_subgraphs(node):
            _apply(body, w, a)


@register_pass("precision")
@dataclass(frozen=True)
class Precision:
    """Pipeline form: ``precision{weights=fp8_e4m3,activations=bf16}``."""

    weights: str = ""
    activations: str = ""

    def __post_init__(self) -> None:
        """Refuse a bad dtype when the pipeline is parsed, as ``fuse{mode=...}`` does, not mid-run."""
        _option("weights", self.weights or None)
        _option("activations", self.activations or None)

    def run(self, graph: Graph, am: AnalysisManager) -> PassResult:
        """A new graph (the input is left as it was), so no analysis of the input is touched."""
        return PassResult(with_precision(graph, weights=self.weights or None, activations=self.activations or None))


