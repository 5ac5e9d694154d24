"""Typing a model node by node, without ONNX's whole-model inference, where that gives the same types.

Why: ``onnx.shape_inference.infer_shapes`` costs as much as reading the file (it serializes the
model, infers every node in C++, and the typed copy is parsed and read back value by value), and
on a plain graph of tensors it answers nothing the node-level inference cannot: each node's output
types follow from its op, attributes, input types and known input values. A model's nodes repeat a
few signatures thousands of times, so ONNX's inference of one node (:func:`.node_infer.node_inference`)
runs once per distinct signature here, repaired by the frontend's own rules like the whole-model
answer is (:mod:`.resolve`), and every other node with that signature takes the cached types.

The frontend lowers lazily only models with nothing the whole-model pass could know better: one
graph of tensors (no control-flow bodies, sequences or optionals), no declared intermediate types,
and every op in the table. Inside, anything this path cannot type exactly as the whole-model path
would (a dim nothing determines, so it would be named after its value; a failing node; a graph
output declared otherwise) raises :class:`NeedsInference` and the frontend lowers the model again
the whole-model way, which stays the reference for every outcome and every error message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from onnx import GraphProto, ModelProto, ValueInfoProto

from ...ir import Graph, TensorType
from .dim_params import DimParams
from .shapes import OutSpec, RawType
from .types import DTYPES, ONNX_OF

if TYPE_CHECKING:
    from .node import NodeCx
    from .read import NodeFields

__all__ = ["NeedsInference", "LazyTypes", "lazy_eligible", "check_declared_outputs"]

Rules = dict[str, Callable[["NodeCx"], list[OutSpec | None]]]


class NeedsInference(Exception):
    """This model needs ONNX's whole-model inference to be typed as the reference path types it."""


def _is_tensor(vi: ValueInfoProto) -> bool:
    return vi.type.WhichOneof("value") == "tensor_type"


def lazy_eligible(model: ModelProto, graphs: list[GraphProto], fields: list[NodeFields],
                  table: Mapping[str, object]) -> bool:
    """Whether the model may be typed node by node: one graph, tensors only, no declared
    intermediate types, every op lowered by the table (no function bodies or unknown ops)."""
    g = model.graph
    if len(graphs) != 1 or len(g.value_info) or len(g.sparse_initializer):
        return False
    if not all(_is_tensor(vi) for vi in g.input) or not all(_is_tensor(vi) for vi in g.output):
        return False
    kinds = {(row[0], row[1]) for row in fields}   # a few distinct ops, however many nodes
    return all((op_type if not domain else f"{domain}::{op_type}") in table for op_type, domain in kinds)


class LazyTypes:
    """Output types per node signature (see the module docstring); ``resolve`` replaces the
    whole-model lookup of :func:`.resolve.resolve_types`."""

    __slots__ = ("cache",)

    def __init__(self) -> None:
        #: signature -> (output types, the input types of the signature, kept alive for their ids)
        self.cache: dict[tuple, tuple[list[TensorType], tuple]] = {}

    def resolve(self, cx: NodeCx, rules: Rules, own: list[OutSpec | None] | None) -> list[TensorType]:
        if own is not None:   # control flow and sequences settle their own specs against ONNX's
            raise NeedsInference(f"node {cx.name!r} types its outputs itself")
        key = cx.signature()
        if key is not None:
            hit = self.cache.get(key)
            if hit is not None:
                return hit[0]
        shared = cx.lw.state.shared
        types = [shared(t) for t in self._derive(cx, rules)]
        if key is not None:
            self.cache[key] = (types, tuple(None if v is None else v.type for v in cx.values))
        return types

    def _derive(self, cx: NodeCx, rules: Rules) -> list[TensorType]:
        """ONNX's inference of this node, repaired by the frontend's rules, as the whole-model path
        repairs the whole-model answer; a dim that would have to be named raises NeedsInference."""
        from .resolve import node_specs, own_shapes  # resolve imports this module's caller
        state = cx.lw.state
        specs = node_specs(cx) if cx.domain in _ONNX_DOMAINS else None
        outs = cx.outs
        raws: list[RawType | None] = []
        for k, o in enumerate(outs):
            spec = specs[k] if specs is not None and k < len(specs) else None
            if not o or spec is None:
                raws.append(None)
                continue
            dt, dims = spec
            raws.append((ONNX_OF[dt] if dt is not None else 0,
                         None if dims is None else tuple("" if d is None else d for d in dims)))
        ready: list[TensorType] = []
        for o, raw in zip(outs, raws):
            if not o:
                continue
            if raw is None or not raw[0] or raw[1] is None or "" in raw[1] or raw[0] not in DTYPES:
                break
            ready.append(TensorType(DTYPES[raw[0]], tuple(d for d in raw[1] if not isinstance(d, str))))
        else:
            return ready
        own = own_shapes(cx, rules, raws)
        n_dims = len(state.dims)
        out: list[TensorType] = []
        for k, (o, raw) in enumerate(zip(outs, raws)):
            if not o:
                continue
            out.append(state.settle(raw, own[k] if k < len(own) else None, name=o, node=cx.name, op=cx.source.op,
                                    flagged=False))
        if len(state.dims) != n_dims:
            raise NeedsInference(f"node {cx.name!r} has an output dim nothing determines")
        return out


_ONNX_DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.preview")


def check_declared_outputs(gproto: GraphProto, graph: Graph, names: DimParams) -> None:
    """Graph outputs declared with a type must come out as the whole-model path makes them, which
    merges ONNX's inferred type into the declared one and repairs what stays open: a declared size
    or an input dim name must equal the computed dim; a name of the output's own (the legacy
    exporter's ``MatMul555_dim_0``) is re-derived there, so it takes the computed dim, the same one
    wherever the name recurs. Anything else raises NeedsInference."""
    own_names: dict[str, object] = {}
    for vi, value in zip(gproto.output, graph.outputs):
        tt = vi.type.tensor_type
        if tt.elem_type and DTYPES.get(tt.elem_type) is not value.type.dtype:
            raise NeedsInference(f"output {vi.name!r} is declared with another element type")
        if not tt.HasField("shape"):
            continue
        dims = tt.shape.dim
        if len(dims) != value.type.rank:
            raise NeedsInference(f"output {vi.name!r} is declared with another rank")
        for d, got in zip(dims, value.type.shape):
            which = d.WhichOneof("value")
            if which == "dim_value":
                if d.dim_value != got:
                    raise NeedsInference(f"output {vi.name!r} is declared with another size")
            elif which == "dim_param" and d.dim_param:
                dim = names.read(d.dim_param)
                if isinstance(dim, int) or dim.symbols <= names.trusted:
                    if dim != got:   # whole-model inference may not know ``got``: it would keep ``dim``
                        raise NeedsInference(f"output {vi.name!r} is declared with another dim")
                elif own_names.setdefault(d.dim_param, got) != got:
                    raise NeedsInference(f"output {vi.name!r} reuses dim name {d.dim_param!r} for another dim")
