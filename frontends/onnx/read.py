"""Reading ONNX files defensively: whatever the bytes, the result is a checked model or a
:class:`~narrowpipe.errors.NarrowpipeError` naming the file and the reason.

Users hand us files from anywhere, so nothing is trusted: the size is checked before reading (a
protobuf cannot exceed 2 GiB, and external weight data is never read), parse failures become
:class:`ModelLoadError`, and a model that parses but is not a usable ONNX graph (no graph, opsets
or domains this onnx does not know, nodes without an op type, cycles) is rejected with the node.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator
from operator import attrgetter
from pathlib import Path
from typing import Any

import onnx
from onnx import GraphProto, ModelProto, NodeProto, TensorProto

from ...errors import FrontendError, ModelLoadError, ShapeError
from .op_versions import check_op_versions
from .types import MAX_DIM, absurd_size

__all__ = ["read_bytes", "parse_model", "check_model", "node_fields", "NodeFields", "initializer_fields",
           "InitFields", "opset_versions",
           "iter_subgraphs", "all_graphs", "toposort", "sort_model", "KNOWN_DOMAINS", "MAX_PROTO_BYTES"]

#: protobuf refuses messages of 2 GiB and more; bigger models keep weights in external files.
MAX_PROTO_BYTES = (1 << 31) - 1

#: Operator domains the frontend lowers (besides the model's own local functions). An op of any other
#: domain (a vendor's custom op) is lowered like an unknown standard op: listed as unmodeled, its
#: outputs typed from the model's value_info.
KNOWN_DOMAINS: dict[str, str] = {
    "": "ONNX standard ops", "ai.onnx": "ONNX standard ops", "ai.onnx.ml": "ONNX-ML",
    "ai.onnx.preview": "ONNX preview ops", "ai.onnx.preview.training": "ONNX training ops",
    "ai.onnx.training": "ONNX training ops", "com.microsoft": "onnxruntime contrib ops",
    "com.microsoft.nchwc": "onnxruntime NCHWc ops", "com.microsoft.experimental": "onnxruntime experimental ops",
}
#: Newest version of the non-ONNX domains we know (onnxruntime versions its contrib ops as 1).
_CONTRIB_MAX = {"com.microsoft": 1, "com.microsoft.nchwc": 1, "com.microsoft.experimental": 1}


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The file's bytes, after checking it exists, is a file, and can be a protobuf at all."""
    p = Path(path)
    file = str(p)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ModelLoadError("file not found", file=file) from None
    except OSError as exc:
        raise ModelLoadError(f"cannot stat the file: {exc.strerror or exc}", file=file) from None
    if p.is_dir():
        raise ModelLoadError("is a directory, not an .onnx file", file=file)
    if st.st_size == 0:
        raise ModelLoadError("the file is empty", file=file)
    if st.st_size > MAX_PROTO_BYTES:
        raise ModelLoadError(
            f"the file is {st.st_size / 2**30:.1f} GiB; a protobuf cannot exceed 2 GiB, so this is not a "
            f"valid .onnx file (large models keep their weights in external data: "
            f"onnx.save(model, path, save_as_external_data=True))", file=file)
    try:
        return p.read_bytes()
    except OSError as exc:
        raise ModelLoadError(f"cannot read the file: {exc.strerror or exc}", file=file) from None


def parse_model(data: bytes, *, file: str = "") -> ModelProto:
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # DecodeError, RecursionError, RuntimeWarning-as-error: all mean corrupt
        raise ModelLoadError(f"not an ONNX model: the protobuf is truncated or corrupt "
                             f"({type(exc).__name__}: {exc})", file=file or None) from None
    return model


def opset_versions(model: ModelProto) -> dict[str, int]:
    """Domain -> imported version (``ai.onnx`` folded into the default domain)."""
    out: dict[str, int] = {}
    for o in model.opset_import:
        out["" if o.domain == "ai.onnx" else o.domain] = int(o.version)
    return out


def _max_versions() -> dict[str, int]:
    out = dict(_CONTRIB_MAX)
    for domain, (_lo, hi) in onnx.defs.C.schema_version_map().items():
        out[domain] = hi
    out.setdefault("", onnx.defs.onnx_opset_version())
    return out


_MAX_VERSIONS = _max_versions()


#: One node's fields as Python values: op type, domain (``ai.onnx`` read as ""), name, inputs,
#: outputs, and its attributes (the protobuf's repeated field, held rather than read again).
NodeFields = tuple[str, str, str, list[str], list[str], Any]


def node_fields(graph: GraphProto) -> list[NodeFields]:
    """The fields of every node of ``graph`` (not of its bodies), read once.

    Why: each read of a protobuf field decodes and allocates anew (a node's input names cost about
    a microsecond each), and checking, classifying weights and lowering all read them; on a
    100,000-node graph each extra pass costs a tenth of a second. Bodies are read where they are
    used (they are small, and their nodes are lowered once per body).
    """
    out: list[NodeFields] = []
    append = out.append
    for op_type, domain, name, ins, outs, attrs in map(_FIELDS, graph.node):   # one C call reads them
        append((op_type, "" if domain == "ai.onnx" else domain, name, list(ins), list(outs), attrs))
    return out


_FIELDS = attrgetter("op_type", "domain", "name", "input", "output", "attribute")


#: One initializer's fields as Python values: the tensor, its name, element type, declared dims
#: and whether its payload is external.
InitFields = tuple[TensorProto, str, int, tuple[int, ...], bool]


def initializer_fields(graph: GraphProto) -> list[InitFields]:
    """The fields of every initializer of ``graph``, read once (as :func:`node_fields`: weight
    classes, payload checks, the inference skeleton and the lowering all read them)."""
    external = TensorProto.EXTERNAL
    return [(t, t.name, t.data_type, tuple(t.dims), t.data_location == external) for t in graph.initializer]


def _check_single_assignment(rows: list[NodeFields], where: str, file: str) -> None:
    """ONNX graphs are single-assignment: a value written by two nodes has no one meaning, and
    lowering either writer would silently drop the other's cost."""
    writer: dict[str, str] = {}
    for i, (op_type, _domain, name, _ins, outs, _attrs) in enumerate(rows):
        label = name or f"#{i} ({op_type})"
        for out in outs:
            if not out:
                continue
            if out in writer:
                raise FrontendError(f"{where}: value {out!r} is written by two nodes, {writer[out]} and {label} "
                                    "(ONNX graphs assign each value once)", file=file or None, node=name or None)
            writer[out] = label


def check_model(model: ModelProto, *, file: str = "", top: list[NodeFields] | None = None) -> list[GraphProto]:
    """Reject models this frontend cannot read, with the field, node, opset or domain at fault;
    returns the main graph and every nested body. ``top``: :func:`node_fields` of the main graph,
    when the caller has them."""
    f = file or None
    if not model.HasField("graph"):
        raise ModelLoadError("not an ONNX model: it has no graph (wrong file type, or truncated)", file=f)
    if model.ir_version > onnx.IR_VERSION:
        raise ModelLoadError(f"IR version {model.ir_version} is newer than the installed onnx "
                             f"{onnx.__version__} supports ({onnx.IR_VERSION}); upgrade onnx", file=f)
    if model.ir_version < 1:
        raise ModelLoadError("the model has no ir_version: not a valid ONNX model", file=f)
    opsets = opset_versions(model)
    if not opsets:
        raise ModelLoadError("the model imports no opset (opset_import is empty)", file=f)
    local = {fn.domain for fn in model.functions}
    graphs: list[GraphProto] = []
    used: dict[str, tuple[str, str]] = {}   # domain -> (op type, name) of its first node
    all_rows: list[NodeFields] = []
    for graph, where in iter_subgraphs(model.graph, "graph", top):
        rows = top if top is not None and not graphs else node_fields(graph)  # the main graph comes first
        graphs.append(graph)
        _check_declared_dims(graph, file)
        if not all(row[0] for row in rows):
            i, row = next((i, row) for i, row in enumerate(rows) if not row[0])
            raise FrontendError(f"{where}: node #{i} has no op_type (a protobuf with missing fields)",
                                file=f, node=row[2] or None)
        _check_single_assignment(rows, where, file)
        all_rows.extend(rows)
        new = {row[1] for row in rows} - used.keys()
        for op_type, domain, name, _ins, _outs, _attrs in rows:   # each new domain's first node, in order
            if not new:
                break
            if domain in new:
                used[domain] = (op_type, name)
                new.discard(domain)
    for domain, (op_type, name) in used.items():
        if domain in local:
            continue
        where = name or op_type
        if domain not in opsets and domain not in _CONTRIB_MAX:
            raise ModelLoadError(f"node uses domain {domain!r}, which the model does not import "
                                 f"(opset_import lists {sorted(opsets)})", file=f, node=where)
    for domain, version in opsets.items():
        if domain in local or domain not in KNOWN_DOMAINS or (domain and domain not in used):
            continue  # an import no node uses is harmless
        newest = _MAX_VERSIONS.get(domain)
        if version < 1 or (newest is not None and version > newest):
            label = domain or "ai.onnx"
            raise ModelLoadError(f"opset {label} version {version} is not supported: the installed onnx "
                                 f"{onnx.__version__} knows versions 1 to {newest}", file=f)
    check_op_versions(((r[0], r[1], r[2]) for r in all_rows), opsets, {(fn.domain, fn.name) for fn in model.functions},
                      file)
    return graphs


def _check_declared_dims(graph: GraphProto, file: str) -> None:
    """Declared shapes must not hold negative or absurd sizes."""
    for vi in (*graph.input, *graph.output, *graph.value_info):
        tp = vi.type
        while tp.WhichOneof("value") in ("sequence_type", "optional_type"):
            tp = getattr(tp, tp.WhichOneof("value")).elem_type
        kind = tp.WhichOneof("value")
        if kind not in ("tensor_type", "sparse_tensor_type"):
            continue
        t = getattr(tp, kind)
        if not t.HasField("shape"):
            continue
        for d in t.shape.dim:
            if d.HasField("dim_value") and (d.dim_value < 0 or d.dim_value > MAX_DIM):
                raise ShapeError(f"value {vi.name!r} is declared with dim {d.dim_value} "
                                 f"({'negative' if d.dim_value < 0 else 'absurd'})", file=file or None,
                                 node=vi.name or None)
        dims = [d.dim_value for d in t.shape.dim if d.HasField("dim_value")]
        absurd = absurd_size(dims)
        if absurd is not None:
            raise ShapeError(f"value {vi.name!r} is declared with {absurd} (dims "
                             f"{[d.dim_value if d.HasField('dim_value') else d.dim_param for d in t.shape.dim]})",
                             file=file or None, node=vi.name or None)


def iter_subgraphs(graph: GraphProto, where: str,
                   top: list[NodeFields] | None = None) -> Iterator[tuple[GraphProto, str]]:
    """The graph and every nested graph (If/Loop/Scan bodies), depth first, with a location.
    ``top``: :func:`node_fields` of ``graph``, when the caller has read them."""
    stack = [(graph, where)]
    while stack:
        g, w = stack.pop()
        yield g, w
        rows = top if top is not None and g is graph else node_fields(g)
        for op_type, _domain, name, _ins, _outs, attrs in rows:
            if not attrs:
                continue
            for a in attrs:
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.append((a.g, f"{w}/{name or op_type}.{a.name}"))
                elif a.type == onnx.AttributeProto.GRAPHS:
                    stack.extend((sub, f"{w}/{name or op_type}.{a.name}") for sub in a.graphs)


def all_graphs(graph: GraphProto, top: list[NodeFields] | None = None) -> list[GraphProto]:
    return [g for g, _ in iter_subgraphs(graph, "graph", top)]


def sort_model(model: ModelProto, *, file: str = "") -> ModelProto:
    """A copy of the model with every graph's nodes in topological order (cycles are an error)."""
    out = ModelProto()
    out.CopyFrom(model)
    _sort_graph(out.graph, set(), file)
    return out


def _sort_graph(graph: GraphProto, outer: set[str], file: str) -> None:
    order = toposort(graph, outer, file=file)
    if order is not None:
        nodes = [NodeProto() for _ in order]
        for new, old in zip(nodes, order):
            new.CopyFrom(old)
        graph.ClearField("node")
        graph.node.extend(nodes)
    visible = outer | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    for node in graph.node:
        visible.update(node.output)
    for node in graph.node:
        for a in node.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                        list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
                _sort_graph(sub, visible, file)


def toposort(graph: GraphProto, outer: set[str], *, file: str = "") -> list[NodeProto] | None:
    """None when the nodes are already in topological order; else the sorted nodes.

    Raises :class:`FrontendError` on a cycle (naming the nodes on it). Names used but never
    defined are left for the lowering to report with their node.
    """
    defined = set(outer)
    defined.update(i.name for i in graph.input)
    defined.update(t.name for t in graph.initializer)
    defined.update(t.name for t in graph.sparse_initializer)
    nodes = list(graph.node)
    ordered = True
    for node in nodes:
        for x in (node.input if not node.attribute else _node_reads(node)):
            if x and x not in defined:
                ordered = False
                break
        if not ordered:
            break
        defined.update(node.output)
    if ordered:
        return None
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for o in node.output:
            if o:
                producer[o] = i
    deps: list[set[int]] = []
    for i, node in enumerate(nodes):
        reads = _node_reads(node)
        if any(producer.get(x) == i for x in reads):
            raise FrontendError("the node reads its own output (a cycle)", file=file or None,
                                node=node.name or node.op_type)
        deps.append({producer[x] for x in reads if x in producer})
    return _stable_topo(nodes, deps, file)


def _stable_topo(nodes: list[NodeProto], deps: list[set[int]], file: str) -> list[NodeProto]:
    """Kahn's algorithm taking the earliest ready node first, so source order is kept."""
    remaining = [len(d) for d in deps]
    users: dict[int, list[int]] = {}
    for i, d in enumerate(deps):
        for j in d:
            users.setdefault(j, []).append(i)
    heap = [i for i, n in enumerate(remaining) if n == 0]
    heapq.heapify(heap)
    out: list[NodeProto] = []
    while heap:
        i = heapq.heappop(heap)
        out.append(nodes[i])
        for u in users.get(i, ()):
            remaining[u] -= 1
            if remaining[u] == 0:
                heapq.heappush(heap, u)
    if len(out) != len(nodes):
        stuck = [nodes[i] for i, n in enumerate(remaining) if n > 0]
        names = ", ".join(repr(n.name or n.op_type) for n in stuck[:5])
        raise FrontendError(f"the graph has a cycle: {len(stuck)} nodes wait on each other ({names}"
                            f"{', ...' if len(stuck) > 5 else ''})", file=file or None,
                            node=stuck[0].name or stuck[0].op_type)
    return out


def _node_reads(node: NodeProto) -> list[str]:
    """Names a node reads: its inputs and the outer names its subgraphs capture."""
    reads = list(node.input)
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            subs = [a.g]
        elif a.type == onnx.AttributeProto.GRAPHS:
            subs = list(a.graphs)
        else:
            subs = []
        for g in subs:
            reads.extend(_captures(g))
    return reads


def _captures(graph: GraphProto) -> set[str]:
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    out: set[str] = set()
    for node in graph.node:
        for x in _node_reads(node):
            if x and x not in local:
                out.add(x)
        local.update(node.output)
    return out
