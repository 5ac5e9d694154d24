"""Recognise ONNX attention masks that are causal, by evaluating the small subgraph that builds them.

Why: exporters materialise the causal mask. A Hugging Face model exported to ONNX builds it from
``Range`` and ``LessOrEqual`` (``kv_idx <= q_idx``, ANDed with the padding mask of the
``attention_mask`` input), turns it into an additive ``Where(mask, 0, -inf)`` and adds it to the
attention scores before the ``Softmax``; a fused ``Attention`` op gets it as ``attn_mask`` with
``is_causal=0``. The cost model, seeing only the flag, would charge a causal LM's prefill attention
twice its time on GPUs (FlashAttention skips the blocks above the diagonal) and could not
token-pipeline it on dataflow chips. The torch frontend solves the same problem in
:mod:`.torch_masks`; this is its ONNX twin, and needs numpy and onnx only.

How: the mask depends on no weights and no activations, only on sizes (of float inputs too),
``Range`` and integer inputs. Its ancestors (up to graph inputs, initializers and ``Constant``
nodes, at most :data:`~.mask_pattern.MAX_NODES` nodes) are cut out into a small model and run with
``onnx.reference.ReferenceEvaluator`` at each of :data:`~.mask_pattern.SIZES` (every symbolic or
unknown dim of a graph input set to that size), with integer and boolean inputs filled with ones
(no padding) and inputs named ``*position*`` counting up along their last dim. A tensor read only
by ``Shape``/``Size`` is fed as zeros of its shape instead of being computed: a float input (whose
values would make the mask data-dependent), or an inner tensor whose IR dims are in terms of the
graph inputs' (a legacy export reads the sequence length off the embedding lookup, which would
otherwise need the embedding table). Initializers are read only when their data is in the model.
The mask is causal when, at every size, the positions it lets attend are exactly the lower
triangle or one band of it (:func:`~.mask_pattern.causal_band`: a sliding window under the sizes'
keys); a longer window is looked for by long probes past each scalar integer constant of the
subgraph (:mod:`.mask_probes`). Anything else (a float input's values,
external weights, a contraction on the way, an op the reference evaluator cannot run, a subgraph
over the limit) leaves it non-causal: the inference only ever adds what it proved, and never raises.

The hooks the lowerings call (``tag_mask_step``, ``attention_mask_band``) live in
:mod:`.mask_hooks`.

Cost: nothing is done for a graph until a candidate appears (a ``Softmax`` fed by ``Add`` or
``Where``, or an attention op with a mask and no causal flag); then one pass indexes the graph's
producers. An operand the lowered graph computes from a contraction or normalization (the scores
side of the add) is dismissed on the IR; any other walks at most :data:`~.mask_pattern.MAX_NODES`
ONNX ancestors; each mask tensor is evaluated once (Hugging Face exports build one mask that every
layer shares), and only when no tensor of its subgraph is large at the sizes tried.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod

import numpy as np
from onnx import GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto, helper, numpy_helper

from ...ir import Op, OpGroup, Sym, Value
from ..mask_pattern import MAX_CANDIDATES, MAX_NODES, MAX_PROBE_ELEMENTS, SIZES, Band, agreed_band, causal_band
from .mask_probes import (
    Dims,
    Sizes,
    at,
    every,
    fill,
    long_dims,
    long_probes,
    scalar_initializer,
    window_candidates,
)

__all__ = ["CausalMasks"]

#: ops that compute attention scores (or other activations) rather than masks: a walk that meets
#: one is on the scores side of the mask add, and stops there instead of evaluating a model layer
_NOT_MASK_OPS = frozenset({
    "MatMul", "Gemm", "Einsum", "Conv", "ConvTranspose", "ConvInteger", "MatMulInteger", "QLinearMatMul",
    "QLinearConv", "Softmax", "LogSoftmax", "Attention", "LayerNormalization", "RMSNormalization",
})
#: their IR twins, for the cheap pre-check on the lowered graph (:func:`_reads_activations`)
_NOT_MASK_IR = frozenset(op for op in Op if op.group in (OpGroup.CONTRACTION, OpGroup.CONVOLUTION,
                                                        OpGroup.ATTENTION, OpGroup.NORMALIZATION))
#: ops that read only the size of their input, so a float input behind them may stay unknown
_SIZE_QUERIES = frozenset({"Shape", "Size"})
#: ONNX elem types a mask input can be filled with ones (no padding) or an arange (positions)
_FILLABLE = frozenset({
    TensorProto.BOOL, TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
    TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
})
_DEFAULT_DOMAINS = ("", "ai.onnx")
#: the standard ops with subgraph attributes (their bodies may read any outer name)
_WITH_BODIES = frozenset({"If", "Loop", "Scan", "SequenceMap"})
#: the most elements any tensor of an evaluated subgraph may hold, by its IR type at the largest
#: size tried: a mask at sizes 5 and 7 is tiny, and a hostile file must not make this allocate much
_MAX_ELEMENTS = 1 << 24


class _NotConstant(Exception):
    """The subgraph depends on something that cannot be evaluated here."""


class CausalMasks:
    """Memoised causal-mask test over the top-level graph of one ONNX model.

    ``model`` is the model being lowered, with its initializer data (not the shape-inference
    skeleton, whose large initializers are stubs). ``ir_value`` (settable later, as the top-level
    graph is lowered) gives the IR value of a name: its dims, symbolic as the frontend repaired
    them, let a tensor that the mask reads only for its sizes go unevaluated (a legacy export takes
    the sequence length from the embedding lookup's output; evaluating that would read the
    embedding table). Nothing is indexed until the first query.
    """

    def __init__(self, model: ModelProto, ir_value: Callable[[str], Value | None] | None = None) -> None:
        self._model = model
        self._graph: GraphProto = model.graph
        self.ir_value = ir_value
        self._producers: dict[str, int] | None = None
        self._inputs: dict[str, ValueInfoProto] = {}
        self._inits: dict[str, TensorProto] = {}
        self._symbols: frozenset[str] | None = None
        self._arrays: dict[str, np.ndarray] = {}
        self._values: dict[str, list[np.ndarray] | None] = {}
        self._bands: dict[tuple[str, bool, bool], Band | None] = {}

    # -- queries ----------------------------------------------------------------------------------
    def producer(self, name: str) -> NodeProto | None:
        """The node of the top-level graph that outputs ``name`` (None on a malformed graph too)."""
        try:
            i = self._index().get(name)
            return self._graph.node[i] if i is not None else None
        except Exception:
            return None

    def band(self, name: str, value: Value | None = None, *, nonzero: bool = False,
             inverted: bool = False) -> Band | None:
        """The band of tensor ``name`` (IR ``value``, when known) when it is a causal mask (its
        sliding window, None for plain causal), else None. ``nonzero``: an integer mask whose nonzero
        entries attend (onnxruntime's ``mask_index``); ``inverted``: a boolean mask whose ``True``
        entries are the blocked ones (``Where(mask, fill, scores)``, i.e. ``masked_fill``)."""
        key = (name, nonzero, inverted)
        if key not in self._bands:
            try:
                hit = _band(self.values(name, value), nonzero, inverted)
                if hit is not None and hit.window is None:
                    hit = self._longer(name, hit, nonzero, inverted)
            except Exception:   # an odd dtype: not proven causal
                hit = None
            self._bands[key] = hit
        return self._bands[key]

    def _longer(self, name: str, small: Band, nonzero: bool, inverted: bool) -> Band:
        """A window longer than the small probes' keys, if long probes show one (see :mod:`.mask_probes`)."""
        try:
            nodes, leaves, _ = self._ancestors(name)
            scalars = [self._initializer(x) for x in leaves if x in self._inits and
                       scalar_initializer(self._inits[x])]
        except Exception:
            return small
        long = long_dims({x: self._dims(x) for x in self._inputs})
        tried = 0
        for probes in long_probes(window_candidates(nodes, scalars, small.reach), long) if long else ():
            try:
                band = agreed_band([small, _band(self._evaluate(name, probes, MAX_PROBE_ELEMENTS), nonzero, inverted)])
            except Exception:   # too large, or failed: what the small sizes proved stands
                continue
            if band is not None and band.window is not None:
                return band
            tried += 1
            if tried >= MAX_CANDIDATES:
                break
        return small

    def values(self, name: str, value: Value | None = None) -> list[np.ndarray] | None:
        """``name`` evaluated at each size (once when no dim is symbolic); None when it cannot be
        evaluated. Memoised: every layer's test of a shared mask costs one lookup. With its IR
        ``value``, the scores side of a mask add is recognised on the lowered graph, without
        walking the ONNX one (protobuf fields are slow to read)."""
        if name in self._values:
            return self._values[name]
        try:
            out: list[np.ndarray] | None = None
            if value is None or not _reads_activations(value):
                out = self._evaluate(name)
        except Exception:   # any failure means "not proven causal", never a wrong flag or an error
            out = None
        self._values[name] = out
        return out

    # -- the subgraph -----------------------------------------------------------------------------
    def _index(self) -> dict[str, int]:
        """Tensor name -> index of the node that outputs it (built at the first query: one pass)."""
        if self._producers is None:
            g = self._graph
            producers = {o: i for i, n in enumerate(g.node) for o in n.output}
            producers.pop("", None)
            self._producers = producers
            self._inputs = {vi.name: vi for vi in g.input}
            self._inits = {t.name: t for t in g.initializer}
        return self._producers

    def _ancestors(self, name: str) -> tuple[list[NodeProto], list[str], dict[str, Dims]]:
        """What computes ``name``: the nodes (in graph order), the leaves read for their values
        (graph inputs, initializers), and the tensors read only for their sizes (by ``Shape`` or
        ``Size``) with their dims. A tensor is walked through only when some node reads its values
        or its dims are not known in terms of the graph inputs' dims."""
        producers = self._index()
        nodes: dict[int, NodeProto] = {}
        leaves: list[str] = []
        sized: dict[str, Dims] = {}
        seen: set[str] = set()
        stack = [name]
        deferred: list[str] = []
        while stack or deferred:
            if not stack:   # every value read is walked: cut what is read only for its sizes
                for x in dict.fromkeys(deferred):
                    if x in seen:
                        continue
                    dims = self._sized_dims(x)
                    if dims is not None:
                        sized[x] = dims
                        seen.add(x)
                    else:
                        stack.append(x)
                deferred = []
                continue
            x = stack.pop()
            if x in seen:
                if x not in sized:
                    continue
                del sized[x]   # cut for its sizes, but a node walked since reads its values
            seen.add(x)
            i = producers.get(x)
            if i is None:
                if x in self._inits or x in self._inputs:
                    leaves.append(x)
                    continue
                raise _NotConstant(f"{x!r} is not defined in this graph")
            if i in nodes:
                continue
            node = self._graph.node[i]
            op = node.op_type
            if op in _NOT_MASK_OPS or node.domain not in _DEFAULT_DOMAINS:
                raise _NotConstant(f"{op} {node.name!r} does not build a mask")
            if op in _WITH_BODIES:
                raise _NotConstant(f"{op} {node.name!r} has a body")   # which may read outer names
            nodes[i] = node
            if len(nodes) > MAX_NODES:
                raise _NotConstant(f"mask subgraph over {MAX_NODES} nodes")
            (deferred if op in _SIZE_QUERIES else stack).extend(x for x in node.input if x)
        return [nodes[i] for i in sorted(nodes)], leaves, sized

    def _dims(self, name: str) -> Dims | None:
        """A leaf's dims: its IR type's when known, else as the model declares them."""
        v = self.ir_value(name) if self.ir_value is not None else None
        if v is not None:
            return tuple(v.type.shape)
        if name in self._inits:
            return tuple(int(d) for d in self._inits[name].dims)
        vi = self._inputs.get(name)
        tp = vi.type if vi is not None else None
        if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
            return None
        return tuple(int(d.dim_value) if d.HasField("dim_value") else None for d in tp.tensor_type.shape.dim)

    def _sized_dims(self, name: str) -> Dims | None:
        """The dims to feed a tensor read only for its sizes at: a graph input's or initializer's
        own; an inner tensor's IR dims when every symbol in them is a graph input's (the mask's
        sizes then follow from the inputs'); else None, and the tensor is evaluated."""
        if name in self._inits or name in self._inputs:
            return self._dims(name)
        v = self.ir_value(name) if self.ir_value is not None else None
        if v is None:
            return None
        if self._symbols is None:
            self._symbols = frozenset(s for x in self._inputs for d in (self._dims(x) or ())
                                      if isinstance(d, Sym) for s in d.symbols)
        symbols = self._symbols
        if all(not isinstance(d, Sym) or d.symbols <= symbols for d in v.type.shape):
            return tuple(v.type.shape)
        return None

    def _evaluate(self, name: str, probes: Sequence[Sizes] | None = None,
                  bound: int = _MAX_ELEMENTS) -> list[np.ndarray]:
        """``name`` at each of ``probes`` (default: every dim at each of :data:`SIZES`, once when
        none is symbolic), refusing a probe where a tensor would hold over ``bound`` elements."""
        nodes, leaves, sized = self._ancestors(name)
        inputs: list[ValueInfoProto] = []
        feeds: dict[str, np.ndarray | Dims] = {}
        for leaf in leaves:
            if leaf in self._inits:
                arr = self._initializer(leaf)
                inputs.append(helper.make_tensor_value_info(leaf, helper.np_dtype_to_tensor_dtype(arr.dtype), None))
                feeds[leaf] = arr
                continue
            t = self._inputs[leaf].type.tensor_type
            if t.elem_type not in _FILLABLE:   # a float input's values (its sizes alone go in ``sized``)
                raise _NotConstant(f"the mask reads the values of input {leaf!r} (type {t.elem_type})")
            dims = self._dims(leaf)
            if dims is None:
                raise _NotConstant(f"input {leaf!r} has no known rank")
            inputs.append(helper.make_tensor_value_info(leaf, t.elem_type, None))
            feeds[leaf] = dims
        for x, dims in sized.items():   # read only by Shape/Size: zeros of the right shape will do
            inputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, None))
            feeds[x] = dims
        symbolic = any(not isinstance(f, np.ndarray) and any(not isinstance(d, int) for d in f)
                       for f in feeds.values())
        if probes is None:
            probes = [every(size) for size in (SIZES if symbolic else SIZES[:1])]
        for sizes in probes:
            self._check_sizes(nodes, feeds, sizes, bound)
        graph = helper.make_graph(nodes, "mask", inputs, [ValueInfoProto(name=name)])
        model = helper.make_model(graph, opset_imports=list(self._model.opset_import),
                                  ir_version=self._model.ir_version)
        from onnx.reference import ReferenceEvaluator  # imported only when a mask is evaluated

        run = ReferenceEvaluator(model)
        out = []
        for sizes in probes:
            values = {x: f if isinstance(f, np.ndarray) else
                      fill(x, None if x in sized else self._inputs[x].type.tensor_type.elem_type, f, sizes)
                      for x, f in feeds.items()}
            with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
                results = run.run(None, values)   # log(0), inf -> int casts: expected where masked
            assert isinstance(results, list)   # a dict only with intermediate=True
            out.append(np.asarray(results[0]))
        return out

    def _check_sizes(self, nodes: list[NodeProto], feeds: dict[str, np.ndarray | Dims], sizes: Sizes,
                     bound: int) -> None:
        """Refuse a subgraph whose leaves or node outputs would be large at a probe's sizes (by
        their IR types): a sliced ``[1, 1, 2048, 2048]`` buffer is fine, a hostile
        ``ConstantOfShape`` of a billion elements is not evaluated."""
        shapes: list[Dims] = [f for f in feeds.values() if not isinstance(f, np.ndarray)]
        if self.ir_value is not None:
            for node in nodes:
                for o in node.output:
                    v = self.ir_value(o) if o else None
                    if v is not None:
                        shapes.append(tuple(v.type.shape))
        for dims in shapes:
            if prod(at(d, sizes) for d in dims) > bound:
                raise _NotConstant(f"a tensor of dims {dims} is too large to evaluate")

    def _initializer(self, name: str) -> np.ndarray:
        arr = self._arrays.get(name)
        if arr is None:
            t = self._inits[name]
            if t.data_location == TensorProto.EXTERNAL:
                raise _NotConstant(f"initializer {name!r} is external data")
            arr = numpy_helper.to_array(t)   # raises when the data is missing
            if arr.size != int(np.prod([int(d) for d in t.dims], dtype=np.int64)):
                raise _NotConstant(f"initializer {name!r} holds no data")
            self._arrays[name] = arr
        return arr


def _reads_activations(value: Value) -> bool:
    """Whether the lowered graph computes ``value`` from a contraction, convolution, attention or
    normalization (through values, not sizes: ``shape_of`` is not walked through), within
    :data:`~.mask_pattern.MAX_NODES` nodes. Such a tensor is the scores side of a mask add, never
    a mask; the ONNX walk would stop there too, at several times the cost."""
    seen: set[int] = set()
    stack = [value.producer]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        if node.op in _NOT_MASK_IR:
            return True
        seen.add(id(node))
        if len(seen) > MAX_NODES:
            return False
        if node.op is not Op.SHAPE_OF:
            stack.extend(v.producer for v in node.inputs if v is not None)
    return False


def _band(values: list[np.ndarray] | None, nonzero: bool, inverted: bool) -> Band | None:
    """What the evaluations of one mask show together (:func:`~.mask_pattern.agreed_band`)."""
    if not values:
        return None
    bands = []
    for mask in values:
        if nonzero and (np.issubdtype(mask.dtype, np.integer) or mask.dtype == np.bool_):
            mask = mask != 0
        if inverted:
            if mask.dtype != np.bool_:
                return None
            mask = ~mask
        bands.append(causal_band(mask))
    return agreed_band(bands)
