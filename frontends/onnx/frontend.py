"""The ONNX frontend: ``.onnx`` files and in-memory ``onnx.ModelProto`` objects to IR graphs.

No torch is needed. The file is read without its external weight data (weights are counted from
their declared shapes), checked, typed by ONNX's shape inference plus the frontend's own symbolic
repair (so ``batch`` and ``sequence`` stay symbolic until ``analyze`` binds them), and every node
is lowered through the one ONNX table. Whatever the input, the outcome is a graph or a
:class:`~narrowpipe.errors.NarrowpipeError` that names the file, the node and the reason.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from math import prod
from pathlib import Path
from typing import Any, NamedTuple

import onnx
import onnx.inliner  # a submodule `import onnx` does not load
from onnx import GraphProto, ModelProto

from ...errors import FrontendError, ModelLoadError, NarrowpipeError, NarrowpipeWarning, ShapeError
from ...gcpause import paused_gc
from ...ir import Graph, ValueKind
from ...ir.verifier import maybe_verify
from ..dim_roles import assign_roles
from .dim_params import DimParams
from .filled import filled_initializers
from .functions import expand_function
from .grouped_mm import fold_unrolled_grouped_mm
from .lazy_types import LazyTypes, check_declared_outputs, lazy_eligible
from .lowering import OnnxLowerer, Unordered
from .masks import CausalMasks
from .node import ModelInfo
from .params import classify_initializers
from .read import (
    InitFields,
    NodeFields,
    all_graphs,
    check_model,
    initializer_fields,
    node_fields,
    opset_versions,
    parse_model,
    read_bytes,
    sort_model,
)
from .shapes import ShapeState, needs_stub, run_inference
from .table import ONNX_TABLE, SHAPE_RULES_EXTRA
from .total_length import tag_total_length
from .types import DTYPES, check_payload, is_external
from .wire import initializer_payloads

__all__ = ["load_onnx", "from_onnx_model"]

Payloads = Callable[[], dict[str, memoryview]]


def load_onnx(path: str | os.PathLike[str], *, strict: bool = False, name: str | None = None) -> Graph:
    """Load an ``.onnx`` file (its external data files are never opened)."""
    file = str(path)
    data = read_bytes(path)
    model = parse_model(data, file=file)
    return _convert(model, file, strict, name or Path(file).stem, lambda: initializer_payloads(data))


def from_onnx_model(model: Any, *, file: str = "", strict: bool = False, name: str | None = None) -> Graph:
    """Lower an in-memory ``onnx.ModelProto`` (it is not modified)."""
    return _convert(model, file, strict, name, None)


def _convert(model: Any, file: str, strict: bool, name: str | None, payloads: Payloads | None) -> Graph:
    """``payloads`` gives zero-copy views of weight payloads in the file's bytes, when there is a file."""
    if not isinstance(model, ModelProto):
        raise ModelLoadError(f"expected an onnx.ModelProto, got {type(model).__name__}", file=file or None)
    try:
        with paused_gc():  # lowering allocates millions of small objects and frees none
            try:
                return _lower(model, file, strict, name, payloads, presorted=False)
            except Unordered:
                return _lower(sort_model(model, file=file), file, strict, name, payloads, presorted=True)
    except NarrowpipeError:
        raise
    except RecursionError:
        raise ModelLoadError("the model nests subgraphs too deeply to read", file=file or None) from None
    except MemoryError:
        raise ModelLoadError("out of memory while reading the model", file=file or None) from None
    except Exception as exc:  # the last guard: a hostile file must never escape as a raw exception
        raise FrontendError(f"unexpected {type(exc).__name__} while lowering: {exc}", file=file or None) from exc


def _input_dim_params(graphs: list[GraphProto]) -> DimParams:
    """The ``dim_param`` texts of graph inputs (of the model and of its bodies): the dims the model is
    built on, whose names are trusted and kept (:mod:`.dim_params`)."""
    return DimParams(d.dim_param for g in graphs for vi in g.input
                     if vi.type.tensor_type.HasField("shape") for d in vi.type.tensor_type.shape.dim if d.dim_param)


#: Inline payloads are checked against their dims exactly up to this size; larger ones only against
#: the file's size (reading a payload copies it: checking a 500 MB model's would double its load time).
#: Weights are counted from their declared dims either way.
_EXACT_CHECK = 1 << 20


def _check_large_payloads(inits: list[InitFields], file: str) -> None:
    """Payloads the lowering does not see (inference and lowering work on a skeleton without them)."""
    size = os.path.getsize(file) if file and os.path.isfile(file) else None
    for t, name, data_type, dims, external in inits:
        dt = DTYPES.get(data_type)
        if dt is None or external or any(d < 0 for d in dims):
            continue
        nbytes = dt.nbytes(prod(dims))
        if nbytes <= _EXACT_CHECK:
            if nbytes > 1024:
                check_payload(t, dims, dt, file)
        elif size is not None and nbytes > size:
            raise ShapeError(f"initializer {name!r} declares dims {list(dims)} ({nbytes} bytes) but the whole "
                             f"file holds {size} bytes", file=file, node=name)


def _warn_missing_external(graphs: list[GraphProto], file: str) -> None:
    """One warning per external data file that is not beside the model: its weights are never read
    (they are counted from their declared dims), so this is no error, but a copy that left its
    ``.data`` behind cannot run, and the user should hear it."""
    if not file or not os.path.isfile(file):
        return
    base = os.path.dirname(os.path.abspath(file))
    missing: dict[str, int] = {}
    for g in graphs:
        for t in g.initializer:
            if not is_external(t):
                continue
            loc = next((e.value for e in t.external_data if e.key == "location"), "")
            if loc and not os.path.exists(os.path.join(base, loc)):
                missing[loc] = missing.get(loc, 0) + 1
    for loc, n in missing.items():
        warnings.warn(f"{file}: external data file {loc!r} ({n} initializer(s)) is missing; analysis goes on, "
                      "since weights are counted from their declared dims and never read", NarrowpipeWarning,
                      stacklevel=2)


#: How nodes are typed: "auto" (node by node where that is exact, else whole-model inference),
#: "full" (always whole-model inference) or "lazy" (node by node, failing where it cannot be exact;
#: for tests that compare the two ways).
TYPING = "auto"


def _lower(model: ModelProto, file: str, strict: bool, name: str | None, payloads: Payloads | None, *,
           presorted: bool) -> Graph:
    fields = node_fields(model.graph)  # read once for checking, weight classes and lowering
    graphs = check_model(model, file=file, top=fields)
    _warn_missing_external(graphs, file)
    if model.functions:
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as exc:
            raise ModelLoadError(f"cannot inline the model's local functions: {exc}", file=file or None) from None
        fields = node_fields(model.graph)
        graphs = all_graphs(model.graph, fields)
    inits = initializer_fields(model.graph)  # read once too, for the same readers and the skeleton
    stubs = [not external and needs_stub(data_type, dims, external) for _t, _name, data_type, dims, external in inits]
    # a ConstantOfShape over a stored shape is a stored tensor, classified as initializers are (.filled)
    params = classify_initializers(model.graph, graphs, payloads, top=fields,
                                   inits=inits + filled_initializers(fields, inits))
    _check_large_payloads(inits, file)
    m = _Model(model, graphs, _input_dim_params(graphs), params, file, strict, name, presorted)
    if TYPING == "lazy" or (TYPING == "auto" and lazy_eligible(model, graphs, fields, ONNX_TABLE)):
        try:
            # large weights as dims only, as whole-model inference sees them (the same known values)
            return _build(m, model, {}, fields, list(zip(inits, stubs)), lazy=True)
        except Unordered:
            raise
        except Exception:
            if TYPING == "lazy":
                raise
            # the whole-model path below decides the outcome (types, or the error and its message)
    inferred, errors = run_inference(model, stubs)
    # Inference types the nodes and keeps them as they were, in order: their fields still hold; and
    # its skeleton keeps the initializers in order, with the stubs marked above.
    top_fields = fields if len(inferred.graph.node) == len(fields) else None
    top_inits = list(zip(inits, stubs)) if len(inferred.graph.initializer) == len(inits) else None
    return _build(m, inferred, errors, top_fields, top_inits, lazy=False)


class _Model(NamedTuple):
    """The checked model and what was read of it before typing."""

    model: ModelProto
    graphs: list[GraphProto]
    names: DimParams   # each reading (lazy, then whole-model) works on its own copy
    params: dict[str, tuple[ValueKind, str]]
    file: str
    strict: bool
    name: str | None
    presorted: bool


def _build(m: _Model, typed: ModelProto, errors: dict[str, str], fields: list[NodeFields] | None,
           inits: list[tuple[InitFields, bool]] | None, *, lazy: bool) -> Graph:
    """Lower ``typed`` (the model after whole-model inference, or the model itself when ``lazy``)."""
    model, file = m.model, m.file
    state = ShapeState(file, errors, names=m.names.copy())
    if lazy:
        state.lazy = LazyTypes()
    opsets = opset_versions(typed)
    info = ModelInfo(file=file, opsets=opsets, opset_protos=list(typed.opset_import),
                     ir_version=typed.ir_version, strict=m.strict, params=m.params, sorted=m.presorted)
    graph = Graph(m.name or model.graph.name or "onnx_model")
    lowerer = OnnxLowerer(info, state, ONNX_TABLE, SHAPE_RULES_EXTRA, fallback=expand_function)
    lowerer.masks = CausalMasks(model)  # the model with its initializer data, not the inference skeleton
    if lazy:
        lowerer.stamps = {}   # node signatures key both the types and the recipes of pure lowerings
    lowerer.lower_graph(typed.graph, graph, None, top=True, fields=fields, inits=inits)
    if lazy:
        check_declared_outputs(typed.graph, graph, state.names)
    folded = fold_unrolled_grouped_mm(graph)   # per-expert MatMuls back into grouped GEMMs
    for spec in state.dims.values():
        if spec.name not in folded:
            graph.declare_dim(spec)
    assign_roles(graph)  # batch / sequence / KV length, from dim_param names and input positions
    tag_total_length(graph)   # the mask's past + new tokens is no KV length (.total_length)
    graph.meta.update({
        "source": "onnx", "file": file, "opsets": {k or "ai.onnx": v for k, v in opsets.items()},
        "ir_version": int(model.ir_version), "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "onnx_version": onnx.__version__,
        "external_data": any(is_external(t) for g in m.graphs for t in g.initializer),
    })
    if errors:
        graph.meta["shape_inference_notes"] = [f"{k or '(model)'}: {v}" for k, v in sorted(errors.items())][:20]
    return maybe_verify(graph, f"the ONNX frontend ({file or graph.name})")
