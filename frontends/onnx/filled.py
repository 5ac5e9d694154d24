"""A ``ConstantOfShape`` over a constant shape is a stored tensor, not a fill run at every inference.

Why: some files keep their weights as ``ConstantOfShape`` nodes whose shape input is an
initializer or a ``Constant`` (onnx's ``light_*`` test networks, whose weights were stripped to
keep the files small: every conv, fc and batch-norm tensor is such a node). The node's output is
the same tensor at every run, so a runtime folds it before the first one (onnxruntime's basic
optimisation turns each into an initializer) and it costs what a weight costs: bytes stored and
read, no kernel. Lowered as a ``FILL`` it instead counted as an activation written every
inference (light_resnet50: 239 fill kernels writing 102 MB, params 896 of 25.6M).

The frontend maps it as it maps an initializer: the output becomes a weight of its declared shape
and type, classified by the same rules (:mod:`.params`: a conv weight is a parameter, a batch-norm
statistic a buffer, an integer or one-element fill a constant). A ``ConstantOfShape`` whose shape
is computed in the graph (``Shape`` of an input, a ``Concat`` with a batch dim) stays a runtime
``FILL``: only shapes stored in the file are constants here. Bodies of control-flow ops are left
alone (their fills may run a data-dependent number of times).
"""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto, TensorProto

from .read import InitFields, NodeFields
from .types import small_array

__all__ = ["filled_initializers"]


def _constant_values(rows: list[NodeFields], inits: list[InitFields]) -> dict[str, TensorProto]:
    """Name -> the tensor of every initializer and ``Constant`` node (``value``) of the graph."""
    out: dict[str, TensorProto] = {f[1]: f[0] for f in inits}
    for op_type, domain, _name, _ins, outs, attrs in rows:
        if op_type == "Constant" and not domain and outs and outs[0]:
            for a in attrs:
                if a.name == "value" and a.type == AttributeProto.TENSOR:
                    out[outs[0]] = a.t
    return out


def _fill_type(attrs: object) -> int:
    """The element type of the fill (its ``value`` attribute; float32 when absent, as ONNX says)."""
    for a in attrs:  # type: ignore[attr-defined]
        if a.name == "value" and a.type == AttributeProto.TENSOR:
            return int(a.t.data_type)
    return TensorProto.FLOAT


def filled_initializers(rows: list[NodeFields], inits: list[InitFields]) -> list[InitFields]:
    """The top-level ``ConstantOfShape`` nodes with a constant shape, as initializer fields (a
    tensor with its name, type and dims, no payload) for :func:`.params.classify_initializers`.

    ``rows``: the graph's node fields; ``inits``: its initializer fields. A shape that cannot be
    read as non-negative integers is left to the lowering, which reports or fills it as before."""
    constants: dict[str, TensorProto] | None = None
    out: list[InitFields] = []
    for op_type, domain, _name, ins, outs, attrs in rows:
        if op_type != "ConstantOfShape" or domain or not ins or not ins[0] or not outs or not outs[0]:
            continue
        if constants is None:
            constants = _constant_values(rows, inits)
        t = constants.get(ins[0])
        arr = small_array(t) if t is not None else None
        if arr is None or arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer) or (arr < 0).any():
            continue
        dims = tuple(int(d) for d in arr)
        data_type = _fill_type(attrs)
        stub = TensorProto(name=outs[0], data_type=data_type, dims=dims)
        out.append((stub, outs[0], data_type, dims, False))
    return out
