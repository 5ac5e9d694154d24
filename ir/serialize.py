"""JSON round-trip of graphs, so exported models can be cached, diffed and shipped without torch.

The format is versioned (``format``/``version`` keys); attribute sequences are stored as JSON lists
and read back as tuples, nested graphs as ``{"$graph": ...}``, so ``from_json(to_json(g))`` prints
identically to ``g``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import IRError
from .dtypes import DType
from .graph import DimSpec, Graph, Placement, Source, Value, ValueKind
from .ops import Op
from .roles import DimRole
from .shapes import dim_from_json, dim_to_json
from .types import TensorType

__all__ = ["graph_to_dict", "graph_from_dict", "to_json", "from_json", "save_json", "load_json",
           "FORMAT", "VERSION"]

FORMAT = "narrowpipe.graph"
VERSION = 1


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
        raise IRError(f"unknown attribute encoding {sorted(v)}")
    return v


def _dim_to(d: DimSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"name": d.name, "default": d.default, "min": d.min, "max": d.max, "doc": d.doc}
    if d.role is not DimRole.OTHER:
        out["role"] = d.role.value  # absent means "other": files from before roles load unchanged
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
        src = {k: getattr(n.source, k) for k in ("op", "name", "scope", "file") if getattr(n.source, k)}
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
        "meta": graph.meta,
    }


def graph_from_dict(data: dict[str, Any]) -> Graph:
    if data.get("format") != FORMAT:
        raise IRError(f"not a narrowpipe graph (format={data.get('format')!r})")
    if data.get("version") != VERSION:
        raise IRError(f"unsupported graph version {data.get('version')!r} (this build reads {VERSION})")
    try:
        return _build(data)
    except KeyError as exc:
        raise IRError(f"malformed graph JSON: a required field {exc} is missing") from exc
    except (TypeError, ValueError) as exc:
        raise IRError(f"malformed graph JSON: {exc}") from exc


def _build(data: dict[str, Any], outer: dict[str, Value] | None = None) -> Graph:
    g = Graph(data["name"])
    for d in data.get("dims", []):
        g.declare_dim(DimSpec(d["name"], d.get("default"), d.get("min"), d.get("max"), d.get("doc", ""),
                              DimRole.parse(d.get("role"))))
    env: dict[str, Value] = dict(outer or {})
    for key, default_kind in (("inputs", ValueKind.INPUT), ("weights", ValueKind.PARAM)):
        for v in data[key]:
            kind = ValueKind(v.get("kind", default_kind.value))
            val = g.add_input(v["name"], _type_from(v), kind, v.get("source_name", ""))
            env[v["name"]] = val
    for n in data["nodes"]:
        inputs = [None if x is None else env[x] for x in n["inputs"]]
        src = Source(**n.get("source", {}))
        attrs = {k: _attr_from(v, env) for k, v in n.get("attrs", {}).items()}
        node = g.add_node(Op(n["op"]), inputs, [_type_from(o) for o in n["outputs"]], attrs,
                          name=n["name"], source=src, out_names=[o["name"] for o in n["outputs"]])
        for out, o in zip(node.outputs, n["outputs"]):
            out.source_name = o.get("source_name", out.name)
            env[o["name"]] = out
        if "placement" in n:
            p = n["placement"]
            node.placement = Placement(tuple(p["devices"]), tuple(p["mesh_axes"]),
                                       tuple((int(a), str(b)) for a, b in p["sharding"]), p.get("stage"))
    g.set_outputs(env[x] for x in data["outputs"])
    g.meta = dict(data.get("meta", {}))
    return g


def to_json(graph: Graph, indent: int | None = None) -> str:
    return json.dumps(graph_to_dict(graph), indent=indent)


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
