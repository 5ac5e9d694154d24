"""ONNX's own shape inference of one node, from input types the frontend worked out itself.

Used where the whole-model answer is missing or open (:mod:`.resolve`) and, once per node
signature, to type plain graphs node by node (:mod:`.lazy_types`).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, TypeProto

from ...ir import DType, Sym
from .shapes import OutSpec
from .types import DTYPES, MAX_DIM, ONNX_OF, type_proto

__all__ = ["node_inference"]


def node_inference(node: onnx.NodeProto, opset: int, opsets: list[onnx.OperatorSetIdProto],
                   in_types: list[tuple[DType, tuple[int | Sym, ...]] | None],
                   in_data: list[np.ndarray | None], ir_version: int) -> list[OutSpec | None] | None:
    """ONNX's inference for one node whose inputs we typed ourselves; None if ONNX has no schema.

    Symbolic input dims enter as opaque names (``__d0``, ``__d1``...: equal dims, equal names, as
    ONNX compares them) and come back as the very dims they stand for, so a dim such as
    ``min(128, sequence)`` survives the trip; any other name ONNX returns is an unknown dim.
    Raises the ONNX error (for the caller to turn into a :class:`ShapeError`) when the inputs are
    inconsistent for this op.
    """
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except Exception:
        return None
    types: dict[str, TypeProto] = {}
    data: dict[str, TensorProto] = {}
    token: dict[Sym, Sym] = {}
    for name, t, arr in zip(node.input, in_types, in_data):
        if not name or t is None:
            continue
        dims = tuple(d if isinstance(d, int) else token.setdefault(d, Sym(f"__d{len(token)}")) for d in t[1])
        types[name] = type_proto(ONNX_OF.get(t[0], TensorProto.FLOAT), dims)
        if arr is not None and arr.dtype != object:
            try:
                data[name] = onnx.numpy_helper.from_array(arr, name)
            except Exception:
                pass
    result = onnx.shape_inference.infer_node_outputs(schema, node, types, data, opset_imports=opsets,
                                                     ir_version=ir_version)
    ours = {v.expr: d for d, v in token.items()}
    out: list[OutSpec | None] = []
    for name in node.output:
        tp = result.get(name)
        kind = tp.WhichOneof("value") if tp is not None else None
        while tp is not None and kind in ("sequence_type", "optional_type"):   # the element type
            tp = getattr(tp, kind).elem_type
            kind = tp.WhichOneof("value")
        if tp is None or kind not in ("tensor_type", "sparse_tensor_type"):
            out.append(None)
            continue
        tt = getattr(tp, kind)
        dt = DTYPES.get(tt.elem_type)
        if not tt.HasField("shape"):
            out.append((dt, None))
            continue
        got: list[int | Sym | None] = []
        for d in tt.shape.dim:
            which = d.WhichOneof("value")
            if which == "dim_value" and 0 <= d.dim_value <= MAX_DIM:
                got.append(d.dim_value)
            else:
                got.append(ours.get(d.dim_param) if which == "dim_param" else None)
        out.append((dt, tuple(got)))
    return out
