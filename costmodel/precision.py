"""Precision what-ifs: the same program with weights, activations (or both) in another format.

Real deployments quantize: fp8 weights with bf16 activations (weight-only), fp8 end to end, fp4
weights. This pass returns a copy of the graph with float weights and/or float activations retyped;
integer tensors (token ids, indices, masks) keep their types. Compute follows the wider operand of
each contraction (a bf16 x fp8 matmul runs at the bf16 rate but reads fp8 weights), so the bytes
and the rates both move the way they do on real hardware.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import DType, Graph, graph_from_dict, graph_to_dict
from ..ir.passes import AnalysisManager, PassResult, register_pass

__all__ = ["with_precision", "Precision"]


def _retype(entry: dict, to: DType | None) -> None:
    if to is None:
        return
    if DType(entry["dtype"]).is_float:
        entry["dtype"] = to.value


def with_precision(graph: Graph, *, weights: DType | str | None = None,
                   activations: DType | str | None = None) -> Graph:
    """A copy of ``graph`` with float weights and/or float activations (inputs included) retyped."""
    w = DType.parse(weights) if isinstance(weights, str) else weights
    a = DType.parse(activations) if isinstance(activations, str) else activations
    data = graph_to_dict(graph)
    _apply(data, w, a)
    out = graph_from_dict(data)
    out.meta["precision"] = {"weights": w.value if w else None, "activations": a.value if a else None}
    return out


def _apply(data: dict, w: DType | None, a: DType | None) -> None:
    for v in data["weights"]:
        _retype(v, w)
    for v in data["inputs"]:
        _retype(v, a)
    for node in data["nodes"]:
        for v in node["outputs"]:
            _retype(v, a)
        if node.get("attrs", {}).get("to") and a is not None and DType.parse(str(node["attrs"]["to"])).is_float:
            node["attrs"]["to"] = a.value
        for attr in node.get("attrs", {}).values():
            if isinstance(attr, dict) and "$graph" in attr:
                _apply(attr["$graph"], w, a)


@register_pass("precision")
@dataclass(frozen=True)
class Precision:
    """Pipeline form: ``precision{weights=fp8_e4m3,activations=bf16}``."""

    weights: str = ""
    activations: str = ""

    def run(self, graph: Graph, am: AnalysisManager) -> PassResult:
        return PassResult(with_precision(graph, weights=self.weights or None, activations=self.activations or None))


