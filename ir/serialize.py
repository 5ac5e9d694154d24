"""JSON round-trip of graphs, so exported models can be cached, diffed and shipped without torch.

The format is versioned (``format``/``version`` keys); attribute sequences are stored as JSON lists
and read back as tuples, nested graphs as ``{"$graph": ...}``, so ``from_json(to_json(g))`` prints
identically to ``g``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ..errors import IRError
from ..jsonout import dumps as dump_json
from .dtypes import DType
from .graph import DimSpec, Graph, Node, Placement, Source, Value, ValueKind
from .ops import Op
from .roles import DimRole
from .shapes import dim_from_json, dim_to_json
from .types import TensorType
from .verifier import verify

__all__ = ["graph_to_dict", "graph_from_dict", "to_json", "from_json", "save_json", "load_json",
           "FORMAT", "VERSION"]

FORMAT = "narrowpipe.graph"
#: 2: a non-finite float attribute (an attention mask's ``-inf`` fill) is written ``{"$float": "-inf"}``:
#: JSON has no Infinity or NaN, and strict readers failed on the bare ``-Infinity`` version 1 wrote
#: (which still loads: Python's reader takes it).
VERSION = 2
_READS = (1, 2)
_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _type_to(t: TensorType) -> dict[str, Any]:
    return {"dtype": t.dtype.value, "shape": [dim_to_json(d) for d in t.shape]}


def _type_from(d: dict[str, Any]) -> TensorType:
    return TensorType(DType(d["dtype"]), tuple(dim_from_json(x) for x in d["shape"]))


def _attr_to(v: Any) -> Any:
    if isinstance(v, Graph):
        return {"$graph": graph_to_dict(v)}
    if isinstance(v, (list, tuple)):
        return [_attr_to(x) for x in v]
    if isinstance(v, DType):
        return {"$dtype": v.value}
    if isinstance(v, dict):
        return {"$dict": {str(k): _attr_to(x) for k, x in v.items()}}
    if isinstance(v, float) and not math.isfinite(v):
        return {"$float": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise IRError(f"attribute value of type {type(v).__name__} cannot be serialized: {v!r}")


def _attr_from(v: Any, env: dict[str, Value]) -> Any:
    if isinstance(v, list):
        return tuple(_attr_from(x, env) for x in v)
    if isinstance(v, dict):
        if "$graph" in v:
            return _build(v["$graph"], env)  # a nested body sees the enclosing graph's values
        if "$dtype" in v:
            return DType(v["$dtype"])
        if "$dict" in v:
            return {k: _attr_from(x, env) for k, x in v["$dict"].items()}
        if "$float" in v and v["$float"] in _NONFINITE:
            return _NONFINITE[v["$float"]]
        raise IRError(f"unknown attribute encoding {sorted(v)}")
    return v


def _dim_to(d: DimSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"name": d.name, "default": d.default, "min": d.min, "max": d.max, "doc": d.doc}
    if d.role is not DimRole.OTHER:
        out["role"] = d.role.value  # absent means "other": files from before roles load unchanged
    if d.source_name:
        out["source_name"] = d.source_name
    return out


def graph_to_dict(graph: Graph) -> dict[str, Any]:
    def value(v: Value) -> dict[str, Any]:
        d = {"name": v.name, **_type_to(v.type)}
        if v.kind is not ValueKind.ACTIVATION:
            d["kind"] = v.kind.value
        if v.source_name != v.name:
            d["source_name"] = v.source_name
        return d

    nodes = []
    for n in graph.nodes:
        entry: dict[str, Any] = {
            "name": n.name, "op": n.op.value,
            "inputs": [None if v is None else v.name for v in n.inputs],
            "outputs": [value(v) for v in n.outputs],
        }
        if n.attrs:
            entry["attrs"] = {k: _attr_to(v) for k, v in n.attrs.items()}
        src = {k: getattr(n.source, k) for k in ("op", "name", "scope") if getattr(n.source, k)}
        if n.source.file:   # the file's name, not where it sat on the machine that exported it
            src["file"] = os.path.basename(n.source.file)
        if src:
            entry["source"] = src
        if n.placement is not None:
            p = n.placement
            entry["placement"] = {"devices": list(p.devices), "mesh_axes": list(p.mesh_axes),
                                  "sharding": [list(s) for s in p.sharding], "stage": p.stage}
        nodes.append(entry)
    return {
        "format": FORMAT, "version": VERSION, "name": graph.name,
        "dims": [_dim_to(d) for d in graph.dims.values()],
        "inputs": [value(v) for v in graph.inputs],
        "weights": [value(v) for v in graph.weights],
        "nodes": nodes,
        "outputs": [v.name for v in graph.outputs],
        "meta": {k: os.path.basename(v) if k == "file" and isinstance(v, str) else v for k, v in graph.meta.items()},
    }


def graph_from_dict(data: dict[str, Any], *, check: bool = True) -> Graph:
    """The graph ``data`` describes, refused (:class:`IRError`) unless it is one a program could be.

    A file is input nobody checked: a name given twice, a reference to nothing, a weight listed as
    an input or a dot whose operands disagree would otherwise load and count wrong numbers. So the
    names are taken exactly as written (never renamed), every reference must name an input, weight
    or earlier node's output, and the verifier (:func:`.verifier.verify`) checks the result;
    ``check=False`` skips only that last step."""
    if data.get("format") != FORMAT:
        raise IRError(f"not a narrowpipe graph (format={data.get('format')!r})")
    version = data.get("version")
    if isinstance(version, bool) or version not in _READS:
        raise IRError(f"unsupported graph version {version!r} (this build reads {', '.join(map(str, _READS))})")
    try:
        graph = _build(data)
    except KeyError as exc:
        raise IRError(f"malformed graph JSON: a required field {exc} is missing") from exc
    except (TypeError, ValueError, AttributeError) as exc:
        raise IRError(f"malformed graph JSON: {exc}") from exc
    if check:
        verify(graph, after="loading it from JSON")
    return graph


#: Which kinds each list of a graph file may hold: ``inputs`` are what the user feeds, ``weights``
#: what the model holds (``params`` counts only ``param``); anything else contradicts its list.
_LIST_KINDS: dict[str, tuple[ValueKind, ...]] = {
    "inputs": (ValueKind.INPUT,),
    "weights": (ValueKind.PARAM, ValueKind.BUFFER, ValueKind.CONST),
}


def _dim_spec(d: dict[str, Any]) -> DimSpec:
    """A declared dim, checked: sizes are integers (or absent), the role one of :class:`DimRole`."""
    name = d["name"]
    if not isinstance(name, str) or not name:
        raise IRError(f"a dim's name must be a non-empty string, got {name!r}")
    sizes: dict[str, int | None] = {}
    for key in ("default", "min", "max"):
        v = d.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise IRError(f"dim {name!r}: {key} must be an integer or null, got {v!r}")
        sizes[key] = v
    try:
        role = DimRole.parse(d.get("role"))
    except IRError as exc:
        raise IRError(f"dim {name!r}: {exc}") from None
    if sizes["min"] is not None and sizes["min"] < 0:
        raise IRError(f"dim {name!r}: min {sizes['min']} is negative")
    lo, hi = sizes["min"], sizes["max"]
    if lo is not None and hi is not None and lo > hi:
        raise IRError(f"dim {name!r}: min {lo} is above max {hi}")
    source = d.get("source_name", "")
    if not isinstance(source, str):
        raise IRError(f"dim {name!r}: source_name must be a string, got {source!r}")
    spec = DimSpec(name, sizes["default"], lo, hi, d.get("doc", ""), role, source)
    if spec.default is not None and spec.default < spec.least:   # the rule binding applies (DimSpec.least)
        raise IRError(f"dim {name!r}: default {spec.default} is below {spec.least}, the least size of a "
                      f"{role.value} dim" + (f" with min {lo}" if lo is not None else ""))
    return spec


class _Names:
    """The values visible while building one graph: an enclosing graph's, then this one's, each
    name defined once, so a reference always means the value its writer meant."""

    def __init__(self, outer: dict[str, Value] | None, later: dict[str, str]) -> None:
        self.env: dict[str, Value] = dict(outer or {})
        self.mine: dict[str, str] = {}      # name -> what defined it here, for the duplicate message
        self.later = later                  # output name -> the node that defines it, to explain a cycle

    def define(self, name: Any, value: Value, what: str) -> None:
        if not isinstance(name, str) or not name:
            raise IRError(f"{what}: a value name must be a non-empty string, got {name!r}")
        if name in self.mine:
            raise IRError(f"value name {name!r} is defined twice ({self.mine[name]} and {what}); "
                          f"every input, weight and node output needs its own name")
        self.mine[name] = what
        self.env[name] = value

    def read(self, name: Any, reader: str) -> Value:
        hit = self.env.get(name) if isinstance(name, str) else None
        if hit is not None:
            return hit
        if isinstance(name, str) and name in self.later:
            raise IRError(f"{reader} reads {name!r}, which node {self.later[name]!r} defines only later "
                          f"(nodes must be listed in topological order; a cycle has none)")
        raise IRError(f"{reader} reads {name!r}, which no input, weight or earlier node defines")


def _keep_name(obj: Value | Node, name: str, graph: Graph) -> None:
    """Give ``obj`` the name the file wrote: nodes and values share the graph's fresh-name space, so
    a later name the graph has already handed out would otherwise be silently renamed (a node named
    like a value is refused in :func:`_build`)."""
    if obj.name != name:
        obj.name = name
        graph._names.add(name)


def _build(data: dict[str, Any], outer: dict[str, Value] | None = None) -> Graph:
    g = Graph(data["name"])
    for d in data.get("dims", []):
        spec = _dim_spec(d)
        if spec.name in g.dims:
            raise IRError(f"dim {spec.name!r} is declared twice")
        g.declare_dim(spec)
    later = {o["name"]: n.get("name") for n in data["nodes"] for o in n["outputs"] if isinstance(o, dict)}
    names = _Names(outer, later)
    for key, kinds in _LIST_KINDS.items():
        for v in data[key]:
            kind = _kind(v, kinds[0])
            if kind not in kinds:
                allowed = " or ".join(repr(k.value) for k in kinds)
                raise IRError(f"{key[:-1]} {v.get('name')!r} has kind {kind.value!r}, which contradicts the "
                              f"{key!r} list (kind {allowed}); list it under "
                              f"{'weights' if kind.is_weight else 'inputs'} or fix its kind")
            val = g.add_input(v["name"], _type_from(v), kind, v.get("source_name", ""))
            _keep_name(val, v["name"], g)
            names.define(v["name"], val, f"{key[:-1]} {v['name']!r}")
    node_names: set[str] = set()
    for n in data["nodes"]:
        nname = n["name"]
        if nname in node_names:
            raise IRError(f"node name {nname!r} is used twice")
        if isinstance(nname, str) and (nname in names.mine or nname in later):
            raise IRError(f"node name {nname!r} is also the name of a value; nodes and values share one "
                          f"name space (the networkx view keys both by name)")
        node_names.add(nname)
        where = f"node {nname!r}"
        inputs = [None if x is None else names.read(x, where) for x in n["inputs"]]
        src = Source(**n.get("source", {}))
        attrs = {k: _attr_from(v, names.env) for k, v in n.get("attrs", {}).items()}
        node = g.add_node(_op(n["op"], where), inputs, [_type_from(o) for o in n["outputs"]], attrs,
                          name=nname, source=src, out_names=[o["name"] for o in n["outputs"]])
        _keep_name(node, nname, g)
        for out, o in zip(node.outputs, n["outputs"]):
            _keep_name(out, o["name"], g)
            out.source_name = o.get("source_name", out.name)
            names.define(o["name"], out, f"an output of {where}")
        if "placement" in n:
            p = n["placement"]
            node.placement = Placement(tuple(p["devices"]), tuple(p["mesh_axes"]),
                                       tuple((int(a), str(b)) for a, b in p["sharding"]), p.get("stage"))
    g.set_outputs(names.read(x, "the graph's outputs") for x in data["outputs"])
    g.meta = dict(data.get("meta", {}))
    return g


def _kind(v: dict[str, Any], default: ValueKind) -> ValueKind:
    text = v.get("kind", default.value)
    try:
        return ValueKind(text)
    except ValueError:
        kinds = ", ".join(k.value for k in ValueKind)
        raise IRError(f"value {v.get('name')!r}: unknown kind {text!r}; kinds: {kinds}") from None


def _op(text: Any, where: str) -> Op:
    try:
        return Op(text)
    except ValueError:
        raise IRError(f"{where}: unknown op {text!r} (see narrowpipe.ir.Op for the canonical ops)") from None


def to_json(graph: Graph, indent: int | None = None) -> str:
    return dump_json(graph_to_dict(graph), indent, "graph")


def from_json(text: str) -> Graph:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise IRError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise IRError("graph JSON must be an object")
    return graph_from_dict(data)


def save_json(graph: Graph, path: str | Path) -> Path:
    """Write ``graph`` to a ``.json`` path (folders created) and return it. Only ``.json``: a
    ``.pt2`` holds a torch program, which an IR graph no longer is (``narrowpipe.save_pt2``)."""
    p = Path(path)
    if p.suffix.lower() != ".json":
        hint = " (save torch programs with narrowpipe.save_pt2)" if p.suffix.lower() == ".pt2" else ""
        raise IRError(f"a graph saves as narrowpipe JSON: give a .json path, not {p.name!r}{hint}")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(to_json(graph))
    except OSError as exc:
        raise IRError(f"cannot write {p}: {exc.strerror or exc}") from None
    return p


def load_json(path: str | Path) -> Graph:
    return from_json(Path(path).read_text())
