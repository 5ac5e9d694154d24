"""Shapes of every ONNX value: ONNX's own inference first, then exact symbolic repair.

``onnx.shape_inference`` runs once over the whole model (C++, fast, with data propagation). Where
it leaves a dim unknown (``unk__7``) or a value without a shape (after a contrib op, or a shape
chain it cannot follow), the frontend's own rules compute it from the already resolved inputs and
the folded shape tensors, and the answer is recorded for that ``unk`` name so every later value
carrying it is repaired too. Dims nothing can determine (data-dependent sizes) become stable named
symbols declared on the graph; a value whose rank is unknown is a :class:`ShapeError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from math import prod
from typing import TYPE_CHECKING, Any, Union

import onnx
from onnx import GraphProto, ModelProto, TensorProto, TypeProto

from ...errors import ShapeError
from ...ir import DimSpec, DType, Sym, TensorType, Value
from .dim_params import DimParams
from .symdims import Poly, sanitize_symbol, to_dim
from .types import DTYPES, MAX_DIM, absurd_size, dtype_of

if TYPE_CHECKING:
    from .lazy_types import LazyTypes

__all__ = ["run_inference", "needs_stub", "ShapeState", "Bounded", "RawType", "OutSpec", "Unk", "graph_types",
           "weight_skeleton"]

Unk = str  # an unknown dim: ONNX's generated name (``unk__3``) or "" when anonymous
RawDim = Union[int, Sym, Unk]
RawType = tuple[int, tuple[RawDim, ...] | None]   # (ONNX elem type, dims or None = rank unknown)
OutSpec = tuple[DType | None, tuple[Any, ...] | None]  # what a shape rule returns per output

_ERROR_NODE = re.compile(r"\(op_type:([\w.]+)(?:, node name: ([^)]*))?\)")
_BIG = 1024  # initializers declared larger than this many bytes enter inference without their payload


def run_inference(model: ModelProto, stubs: list[bool] | None = None) -> tuple[ModelProto, dict[str, str]]:
    """ONNX shape inference with data propagation, on a skeleton of ``model`` whose large weights
    are declared but hold no data (inference only needs their dims; the caller's model is left as
    it was). Returns the typed skeleton and, per node name, the error strict inference reported
    (those nodes are re-derived by the frontend's own rules). ``stubs``: per initializer, whether
    it enters without its payload (:func:`needs_stub`), when the caller has worked it out."""
    skeleton = weight_skeleton(model, stubs)
    errors: dict[str, str] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(skeleton, strict_mode=True, data_prop=True)
    except Exception as exc:
        errors = _parse_errors(str(exc))
        try:
            inferred = onnx.shape_inference.infer_shapes(skeleton, strict_mode=False, data_prop=True)
        except Exception as exc2:  # inference crashed outright: continue with our own rules only
            errors.setdefault("", f"{type(exc2).__name__}: {exc2}")
            inferred = skeleton
    return inferred, errors


def weight_skeleton(model: ModelProto, stubs: list[bool] | None = None) -> ModelProto:
    """A copy of the model in which top-level initializers above 1 KiB (declared) carry no payload.

    They are marked external without a location, which inference and the lowering read as "dims
    only". Shape tensors (1-D integers) keep their values. Nothing large is copied.
    """
    if not any(stubs if stubs is not None else map(_needs_stub, model.graph.initializer)):
        return model   # nothing to strip (inference returns a new model and leaves its input as it was)
    out = ModelProto()
    for fld in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        if model.HasField(fld):
            setattr(out, fld, getattr(model, fld))
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    src, g = model.graph, out.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    for t, stub in zip(src.initializer, stubs if stubs is not None else map(_needs_stub, src.initializer)):
        if not stub:
            g.initializer.append(t)
            continue
        stub = g.initializer.add()
        stub.name = t.name
        stub.data_type = t.data_type
        stub.dims.extend(t.dims)
        stub.data_location = TensorProto.EXTERNAL
    return out


def _needs_stub(t: TensorProto) -> bool:
    return needs_stub(t.data_type, tuple(t.dims), t.data_location == TensorProto.EXTERNAL)


def needs_stub(data_type: int, dims: tuple[int, ...], external: bool) -> bool:
    """Whether inference should see a tensor without its payload: a large inline tensor that is
    not a shape tensor (an external one already carries none)."""
    if external:
        return False
    dt = DTYPES.get(data_type)
    shape_tensor = data_type in (TensorProto.INT64, TensorProto.INT32) and len(dims) <= 1
    return not (dt is None or shape_tensor or any(d < 0 for d in dims) or dt.nbytes(prod(dims)) <= _BIG)


def _parse_errors(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for chunk in re.split(r"(?=\(op_type:)", message):
        m = _ERROR_NODE.match(chunk)
        if m:
            out.setdefault((m.group(2) or "").strip(), chunk.strip()[:500])
    if not out:
        out[""] = message.strip()[:500]
    return out


def graph_types(graph: GraphProto) -> dict[str, TypeProto]:
    """Every typed name of one graph (inputs, outputs, value_info), not of its subgraphs."""
    out: dict[str, TypeProto] = {}
    for vi in graph.value_info:
        out[vi.name] = vi.type
    for vi in graph.input:
        out[vi.name] = vi.type
    for vi in graph.output:
        out.setdefault(vi.name, vi.type)
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            out[vi.name] = vi.type
    return out


class Bounded:
    """A dim no rule can know (it depends on tensor values), with an upper bound when one is known.

    It becomes a named symbol whose default is the bound (users may bind it to the real size);
    when the bound is itself symbolic (``n`` for a split of an ``[n]`` input) the bound is used as
    the dim, an upper bound on the cost that stays bindable through ``n``.
    """

    __slots__ = ("limit",)

    def __init__(self, limit: Any = None) -> None:
        self.limit = limit if isinstance(limit, (int, Sym, Poly)) and not isinstance(limit, bool) else None

    def __repr__(self) -> str:
        return f"Bounded({self.limit})"


@dataclass
class ShapeState:
    """What the whole model's walk shares: generated ``unk`` names, their resolutions, new dims."""

    file: str
    errors: dict[str, str]
    #: What each ``dim_param`` text denotes (its own copy: reading a new text may name a new dim); its
    #: ``trusted`` names, the graph inputs' dims, are the only ones taken as given.
    names: DimParams = field(default_factory=DimParams)
    trust_all: bool = False
    subst: dict[str, Any] = field(default_factory=dict)
    dims: dict[str, DimSpec] = field(default_factory=dict)
    unknown: set[str] = field(default_factory=set)   # generate()'s data-dependent dims (not the file's names)
    _cache: dict[bytes, RawType] = field(default_factory=dict)
    _soft: dict[str, bool] = field(default_factory=dict)
    _ready: dict[bytes, TensorType] = field(default_factory=dict)
    #: Set when the model is typed node by node instead of by whole-model inference.
    lazy: LazyTypes | None = None
    _shared: dict[TensorType, TensorType] = field(default_factory=dict)
    _by_dims: dict[tuple[DType, tuple[int, ...]], TensorType] = field(default_factory=dict)

    def shared(self, t: TensorType) -> TensorType:
        """One object per distinct type (weights repeat a few types thousands of times): later
        lookups by identity (node signatures, the cost index) then skip hashing it again."""
        return self._shared.setdefault(t, t)

    def tensor_type(self, dtype: DType, dims: tuple[int, ...]) -> TensorType:
        """:meth:`shared` ``TensorType(dtype, dims)`` for static dims, found by a plain tuple key."""
        t = self._by_dims.get((dtype, dims))
        if t is None:
            t = self._by_dims[(dtype, dims)] = self.shared(TensorType(dtype, dims))
        return t

    def ready(self, tp: TypeProto, name: str, node: str) -> TensorType | None:
        """The IR type of a fully known tensor type (the fast path: most values), else None."""
        key = tp.SerializeToString()
        hit = self._ready.get(key)   # only tensor types are stored: a hit is one
        if hit is not None:
            return hit
        if tp.WhichOneof("value") != "tensor_type":
            return None
        raw = self.raw(tp, name, node)
        if raw is None or raw[1] is None or raw[0] not in DTYPES:
            return None
        dims = tuple(d for d in raw[1] if not isinstance(d, str))
        if len(dims) != len(raw[1]):   # an unknown dim: not ready
            return None
        t = TensorType(DTYPES[raw[0]], dims)
        if len(self._ready) < 100_000:
            self._ready[key] = t
        return t

    # -- reading ONNX types -------------------------------------------------------------------
    def raw(self, tp: TypeProto | None, name: str, node: str | None = None, *,
            lenient: bool = False) -> RawType | None:
        """(elem type, dims) of a tensor type; None when untyped; sequences and optionals give the
        element type (the frontend stacks sequence elements along a new leading dim)."""
        if tp is None:
            return None
        kind = tp.WhichOneof("value")
        while kind in ("sequence_type", "optional_type"):
            tp = getattr(tp, kind).elem_type
            kind = tp.WhichOneof("value")
        if kind not in ("tensor_type", "sparse_tensor_type"):
            return None
        tt = getattr(tp, kind)
        key = tt.SerializeToString()
        hit = None if lenient else self._cache.get(key)
        if hit is not None:
            return hit
        if not tt.HasField("shape"):
            out: RawType = (tt.elem_type, None)
        else:
            dims: list[RawDim] = []
            for d in tt.shape.dim:
                which = d.WhichOneof("value")
                if which == "dim_value":
                    v = d.dim_value
                    if v < 0 and not lenient:
                        dims.append("")  # inference's own "unknown" (files are checked for these upfront)
                        continue
                    if v < 0 or v > MAX_DIM:
                        if lenient:
                            dims.append("")
                            continue
                        raise ShapeError(f"value {name!r} has dim {v} (absurd)", file=self.file or None,
                                         node=node or name)
                    dims.append(v)
                elif which == "dim_param" and d.dim_param:
                    p = d.dim_param
                    soft = self._soft.get(p)
                    if soft is None:
                        soft = self._soft[p] = self.is_soft(p)
                    dims.append(p if soft else self.declared(p))
                else:
                    dims.append("")
            out = (tt.elem_type, tuple(dims))
            absurd = None if lenient else absurd_size(dims)
            if absurd is not None:
                raise ShapeError(f"value {name!r} has {absurd}", file=self.file or None, node=node or name)
        if not lenient and len(self._cache) < 100_000:
            self._cache[key] = out
        return out

    def is_soft(self, text: str) -> bool:
        """A dim name to re-derive rather than trust: ONNX's ``unk__N``, or a name the exporter
        invented for an output (the legacy exporter's ``MatMul555_dim_0``), i.e. one not built from
        the graph inputs' dims."""
        if self.trust_all:
            return False
        dim = self.names.read(text)
        return not isinstance(dim, int) and not dim.symbols <= self.names.trusted

    def declared(self, text: str, doc: str = "") -> int | Sym:
        """The dim ``text`` denotes, declaring the dims it names (each with its ONNX spelling)."""
        dim = self.names.read(text)
        for name in () if isinstance(dim, int) else dim.symbols:
            if name not in self.dims:
                source = self.names.source(name)
                self.dims[name] = DimSpec(name, doc=doc or f"ONNX dim_param {source!r}"
                                          + (f" (in {text!r})" if source != text else ""),
                                          source_name=source if source != name else "")
        return dim

    # -- merging ONNX's answer with ours ------------------------------------------------------
    def settle(self, raw: RawType | None, own: OutSpec | None, *, name: str, node: str, op: str,
               flagged: bool, upper_bound: Callable[[], int | None] = lambda: None) -> TensorType:
        """The final type of one output: ONNX's dims, repaired by ``own`` where ONNX has no answer."""
        elem = raw[0] if raw is not None else 0
        dims = raw[1] if raw is not None else None
        own_dt, own_dims = own if own is not None else (None, None)
        if elem:
            dtype = dtype_of(elem, what=f"output {name!r}", file=self.file or None, node=node)
        elif own_dt is not None:
            dtype = own_dt
        else:
            raise ShapeError(f"shape inference found no element type for output {name!r}", file=self.file or None,
                             node=node, op=op)
        if own_dims is not None:
            own_dims = tuple(to_dim(d) if isinstance(d, Poly) else d for d in own_dims)
        if dims is None:
            if own_dims is None:
                raise ShapeError(f"shape inference could not determine the rank of output {name!r}"
                                 + (f" ({self.errors[node]})" if node in self.errors else "")
                                 + "; declare its type in the model's value_info to analyse past this node",
                                 file=self.file or None, node=node, op=op)
            dims = own_dims
        elif own_dims is not None and len(own_dims) != len(dims):
            if flagged or not any(isinstance(d, str) for d in dims):
                raise ShapeError(f"output {name!r}: declared rank {len(dims)} but the op gives rank "
                                 f"{len(own_dims)} ({_fmt(dims)} vs {_fmt(own_dims)})", file=self.file or None,
                                 node=node, op=op)
            dims = own_dims
        out: list[int | Sym] = []
        for axis, d in enumerate(dims):
            mine = own_dims[axis] if own_dims is not None else None
            if d is None or isinstance(d, Bounded):
                d = ""
            if isinstance(d, str):
                if d and d in self.subst:
                    out.append(self.subst[d])
                    continue
                if isinstance(mine, Bounded) and mine.limit is not None and not isinstance(mine.limit, int):
                    mine = to_dim(mine.limit)
                elif mine is None or isinstance(mine, (str, Bounded)):
                    bound = mine.limit if isinstance(mine, Bounded) else upper_bound()
                    assert not isinstance(bound, Sym), "a symbolic limit is the dim itself (above)"
                    mine = self.generate(name, axis, node, op, bound, label=d)
                if d:
                    self.subst[d] = mine
                out.append(mine)
            else:
                mine_int = isinstance(mine, int) and not isinstance(mine, bool)
                if flagged and isinstance(d, int) and mine_int and d != mine:
                    raise ShapeError(f"output {name!r}: declared shape {_fmt(dims)} disagrees with the op's "
                                     f"shape {_fmt(own_dims or ())}", file=self.file or None, node=node, op=op)
                if isinstance(d, int) and not isinstance(d, bool) and isinstance(mine, Sym):
                    self.declare_size(mine, d, name, node, op)
                out.append(d)
        absurd = absurd_size(out)
        if absurd is not None:
            raise ShapeError(f"output {name!r} would have {absurd}: {_fmt(out)}", file=self.file or None,
                             node=node, op=op)
        return TensorType(dtype, tuple(out))

    def declare_size(self, dim: Sym, size: int, value: str, node: str, op: str) -> None:
        """A data-dependent dim (:meth:`generate`'s symbol) that a later declaration states as
        ``size`` (``ReduceSum`` over axes given at run time, its consumer's output declared ``[3]``):
        the declaration is what the file says the run gives, so it becomes the dim's default, which
        stays bindable (a bound the rule guessed, a Loop's one default trip, gives way to it)."""
        names = dim.symbols
        spec = self.dims.get(next(iter(names))) if len(names) == 1 else None
        if spec is None or spec.name not in self.unknown or dim != Sym(spec.name) or spec.default == size:
            return
        self.dims[spec.name] = replace(spec, default=size, doc=f"{spec.doc}; {size} as output {value!r} of "
                                                               f"{op} node {node!r} declares")

    def generate(self, value: str, axis: int, node: str, op: str, upper_bound: int | None,
                 label: str = "") -> Sym:
        """A stable symbol for a dim nothing can determine (a data-dependent size): the name the
        file gave it if any, else one derived from the value and axis."""
        if label and not label.startswith("unk__"):
            name = self.names.name(label)
            if name not in self.dims:
                self.dims[name] = DimSpec(name, default=upper_bound, doc=f"ONNX dim_param {label!r} of {value!r}, "
                                                                      f"which shape inference cannot derive",
                                          source_name=label if label != name else "")
            return Sym(name)
        base = sanitize_symbol(f"{value}_d{axis}")
        name = base
        i = 1
        while (name in self.dims and not self.dims[name].doc.startswith(f"unknown dim {axis} of {value!r}")) \
                or not (name in self.dims or self.names.free(name)):
            name = f"{base}_{i}"
            i += 1
        self.names.reserve(name)
        self.unknown.add(name)
        if name not in self.dims:
            self.dims[name] = DimSpec(name, default=upper_bound, min=0,    # data-dependent: may be empty
                                      doc=f"unknown dim {axis} of {value!r} (output of {op} node {node!r}); "
                                          f"data-dependent or beyond shape inference"
                                          + ("; default is an upper bound" if upper_bound is not None else ""))
        return Sym(name)

    def reads_unknown(self, inputs: Iterable[Value | None]) -> bool:
        """Whether a node reads a dim :meth:`generate` made: its declared output may state that dim's
        size (:meth:`declare_size`), so its type is settled against its own rule, not taken as declared."""
        return bool(self.unknown) and any(isinstance(d, Sym) and not d.symbols.isdisjoint(self.unknown)
                                          for v in inputs if v is not None for d in v.type.shape)

    def needs_repair(self, raw: RawType | None) -> bool:
        if raw is None or raw[1] is None or not raw[0]:
            return True
        return any(isinstance(d, str) and (not d or d not in self.subst) for d in raw[1])


def _fmt(dims: Iterable[Any]) -> str:
    return "[" + ", ".join(str(d) if d != "" else "?" for d in dims) + "]"
