"""The canonical op set: every frontend lowers to these, and every cost rule is written against them.

One enum, tinygrad-style, plus op groups. Frontends map ``aten.mm``, ``aten.linear``, ONNX ``Gemm``,
``MatMul`` and ``Einsum`` all to :attr:`Op.DOT`, so a cost rule exists once per canonical op. The
group of an op decides how reports break FLOPs down and which execution unit runs it.

Attribute conventions (the verifier checks the ones marked required):

* ``DOT`` (dot_general): ``lhs_contract``, ``rhs_contract`` (required), ``lhs_batch``,
  ``rhs_batch``; output dims are batch, then lhs free dims, then rhs free dims, in order. Batch
  dims broadcast (size 1 against n), as ``torch.matmul`` does. ``operand_major`` (optional,
  :data:`OPERAND_MAJOR`): how the source stores each operand, a pair ``(lhs, rhs)`` of ``"k"`` (the
  operand's unit-stride dim is a contracted dim: CUTLASS's "K-major") or ``"mn"`` (a free dim, M of
  the lhs or N of the rhs: "MN-major"). A row-major ``[M, K] @ [K, N]`` is ``("k", "mn")``;
  ``torch.nn.functional.linear`` with its ``[N, K]`` weight is ``("k", "k")``; column-major BLAS
  ``gemm(transa, transb)`` is ``("k" if transa else "mn", "mn" if transb else "k")``. Absent: the
  storage is unknown and no cost depends on it.
* ``GROUPED_DOT`` (a grouped GEMM, the experts of a mixture of experts): inputs ``x [S, K]`` (the routed
  rows, sorted by group), ``w [G, K, N]`` (``rhs_contract=1``, required) or ``[G, N, K]``
  (``rhs_contract=2``) and, optionally, ``offsets [G]`` (where each group's rows end: data, so only
  its presence is known); output ``[S, N]``. Row ``r`` is multiplied by its group's matrix. How the
  ``S`` rows split over the ``G`` groups is data too: the cost model takes it from the analysis'
  expert balance (``costmodel/experts.py``). ``top_k`` (optional): the groups each token is routed
  to, so ``S / top_k`` tokens and no group gets more rows than there are tokens. ``expert_rows``
  (optional): the rows of each group, fixed (expert parallelism fixes the split of the most loaded
  device). ``role="grad_weight"`` is the weight gradient: inputs ``x [S, K]``, ``dy [S, N]`` (and
  offsets), output the weights' ``[G, N, K]`` (``rhs_contract=2``) or ``[G, K, N]``, each group's
  ``dy^T x`` over its rows.
* ``CONV``: input ``[N, C, *spatial]``, weight ``[Cout, Cin/groups, *k]`` (transposed:
  ``[Cin, Cout/groups, *k]``); ``stride``, ``padding``, ``dilation``, ``groups``, ``transposed``
  (required but the last); ``output_padding``, ``auto_pad`` and ``output_shape`` (ONNX's
  ConvTranspose) optional. ``padding`` is one value per spatial dim (both sides), two per dim (all
  begins, then all ends) or torch's ``"same"``/``"valid"``. Output sizes follow
  :mod:`narrowpipe.ir.windows`; gradients are ``role="grad_input"`` (``dy, w -> dx``) and
  ``"grad_weight"`` (``x, dy -> dw``), checked as the forward conv they differentiate.
* ``POOL``: ``kind``; a windowed pool has ``kernel`` (its dims are the input's last ones), ``stride``,
  ``padding``, ``dilation``, ``ceil_mode`` (and ``auto_pad``); an adaptive one (torch) only
  ``kernel``; a global one ``global_pool`` (``channels_last``: the channels are the last dim).
* ``BATCH_NORM``, ``GROUP_NORM`` (``num_groups``), ``INSTANCE_NORM``: input ``[N, C, ...]``, then the
  present parameters (scale, bias, running statistics), one value per channel (per group for
  ONNX's opset-18 GroupNormalization); output the input's shape. ``BATCH_NORM``'s ``training``:
  batch statistics (a reduction over N and the spatial dims); false, it uses the running
  statistics and is a per-channel affine that fuses as an elementwise epilogue.
* ``ATTENTION``: inputs q, k, v (and an optional additive/boolean mask) in ``[B, H, S, D]``
  layout (``layout="bhsd"``) or ``[B, S, H*D]`` with ``num_heads``/``kv_num_heads``
  (``layout="bsd"``); ``causal``, ``scale``. Read both layouts through
  :func:`narrowpipe.ir.attention.attention_dims` only. ``causal`` (:data:`~.attention.CAUSAL`) also
  marks the ``ADD``/``WHERE`` applying a proven causal mask in eager attention.
* ``POLAR``: ``(abs, angle) -> abs * (cos(angle) + i sin(angle))``, real operands, a complex output
  (torch's ``polar``, how Llama-4 builds its rotary table).
* Elementwise ops: operands broadcast numpy-style, except that ``axis`` lines a lower-rank operand
  up from that dim (ONNX's legacy broadcast, a conv's ``[C]`` bias) and the last
  ``lookup_operands`` operands are tables the op reads by position (rotary cos/sin caches), not
  operands of the elementwise arithmetic.
* Collectives: ``group_size`` (devices taking part), ``axis`` (mesh axis name), ``reduce``.
* ``in_place`` (:data:`IN_PLACE`, on ``CONCAT`` and the scatter ops): the index of the operand the op
  updates where it lies (torch's ``index_copy_``, a KV cache append into preallocated storage);
  the output aliases it, and only the other operands are read and written. Other ops may carry it too
  (torch's ``relu_``, ``mul_``): their cost is unchanged, their output shares the operand's storage
  in liveness (:func:`storage_operand`).
* ``UNKNOWN``: an op the frontend could not map; ``source_op`` names it. It is never costed as
  zero silently: reports list it as unmodeled.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

__all__ = ["Op", "OpGroup", "GROUP", "VIEW_OPS", "TRANSCENDENTAL_OPS", "ops_in_group", "IN_PLACE", "OPERAND_MAJOR",
           "MAJORS", "STRIDED_VIEW", "storage_operand"]

#: The attribute naming the operand a CONCAT or scatter updates in place (see the module doc).
IN_PLACE = "in_place"
#: The attribute stating how a ``DOT``'s operands are stored (see the module doc), and its values.
OPERAND_MAJOR = "operand_major"
#: On a ``PERMUTE``: the source framework's transpose is a view of its input with swapped strides
#: (torch's ``transpose``/``permute``), so no data moves until a consumer reads it strided or a
#: ``contiguous()`` copies it; fusion joins it to its consumer in every mode (:mod:`costmodel.kernels`).
STRIDED_VIEW = "strided_view"
MAJORS = ("k", "mn")


class OpGroup(enum.Enum):
    CONTRACTION = "contraction"
    CONVOLUTION = "convolution"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    NORMALIZATION = "normalization"
    DATA_MOVEMENT = "data_movement"
    GATHER_SCATTER = "gather_scatter"
    COLLECTIVE = "collective"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value

    #: Members are singletons compared by identity, so identity hashing is exact; it runs in C,
    #: where Enum's default hashes the name in Python (ops and groups key per-node dicts and sets).
    __hash__ = object.__hash__


class Op(enum.Enum):
    """A canonical op; ``value`` is its lower-case name in text and JSON."""

    __hash__ = object.__hash__   # as OpGroup's: exact for singletons, and run in C

    # contraction / convolution / attention
    DOT = "dot"
    GROUPED_DOT = "grouped_dot"
    CONV = "conv"
    ATTENTION = "attention"
    ATTENTION_BACKWARD = "attention_backward"
    # elementwise: arithmetic
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    POW = "pow"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    MOD = "mod"
    NEG = "neg"
    ABS = "abs"
    SIGN = "sign"
    RECIPROCAL = "reciprocal"
    SQUARE = "square"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    CLAMP = "clamp"
    RELU = "relu"
    LEAKY_RELU = "leaky_relu"
    PRELU = "prelu"
    HARDTANH = "hardtanh"
    HARDSIGMOID = "hardsigmoid"
    HARDSWISH = "hardswish"
    # elementwise: transcendental
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    ERF = "erf"
    GELU = "gelu"
    SILU = "silu"
    ELU = "elu"
    SELU = "selu"
    SOFTPLUS = "softplus"
    MISH = "mish"
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    POLAR = "polar"
    # elementwise: comparison and logic
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    AND = "and"
    OR = "or"
    XOR = "xor"
    NOT = "not"
    BITWISE = "bitwise"
    ISNAN = "isnan"
    ISINF = "isinf"
    WHERE = "where"
    CAST = "cast"
    QUANTIZE = "quantize"
    DEQUANTIZE = "dequantize"
    # reductions and scans
    REDUCE_SUM = "reduce_sum"
    REDUCE_MEAN = "reduce_mean"
    REDUCE_MAX = "reduce_max"
    REDUCE_MIN = "reduce_min"
    REDUCE_PROD = "reduce_prod"
    REDUCE_VAR = "reduce_var"
    REDUCE_NORM = "reduce_norm"
    REDUCE_LOGSUMEXP = "reduce_logsumexp"
    ARGMAX = "argmax"
    ARGMIN = "argmin"
    CUMSUM = "cumsum"
    CUMPROD = "cumprod"
    # normalization
    SOFTMAX = "softmax"
    LOG_SOFTMAX = "log_softmax"
    LAYER_NORM = "layer_norm"
    RMS_NORM = "rms_norm"
    BATCH_NORM = "batch_norm"
    GROUP_NORM = "group_norm"
    INSTANCE_NORM = "instance_norm"
    LP_NORM = "lp_norm"
    LRN = "lrn"
    # data movement
    RESHAPE = "reshape"
    EXPAND = "expand"
    SLICE = "slice"
    IDENTITY = "identity"
    PERMUTE = "permute"
    COPY = "copy"
    CONCAT = "concat"
    SPLIT = "split"
    PAD = "pad"
    TILE = "tile"
    FLIP = "flip"
    ROLL = "roll"
    TRIANGULAR = "triangular"
    DEPTH_TO_SPACE = "depth_to_space"
    SPACE_TO_DEPTH = "space_to_depth"
    # gather / scatter
    GATHER = "gather"
    GATHER_ELEMENTS = "gather_elements"
    GATHER_ND = "gather_nd"
    SCATTER = "scatter"
    SCATTER_ELEMENTS = "scatter_elements"
    SCATTER_ND = "scatter_nd"
    INDEX_PUT = "index_put"
    EMBEDDING_BAG = "embedding_bag"
    # collectives
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    SEND = "send"
    RECV = "recv"
    COLLECTIVE_PERMUTE = "collective_permute"
    # other
    CONSTANT = "constant"
    FILL = "fill"
    IOTA = "iota"
    RANDOM = "random"
    SORT = "sort"
    TOPK = "topk"
    NONZERO = "nonzero"
    UNIQUE = "unique"
    RESIZE = "resize"
    POOL = "pool"
    ROI_ALIGN = "roi_align"
    NMS = "nms"
    FFT = "fft"
    IF = "if"
    LOOP = "loop"
    SCAN = "scan"
    SHAPE_OF = "shape_of"
    UNKNOWN = "unknown"

    @property
    def group(self) -> OpGroup:
        return GROUP[self]

    def __str__(self) -> str:
        return self.value


_TRANSCENDENTAL = (Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.TANH, Op.SIGMOID, Op.ERF, Op.GELU, Op.SILU,
                   Op.ELU, Op.SELU, Op.SOFTPLUS, Op.MISH, Op.SIN, Op.COS, Op.TAN, Op.ASIN, Op.ACOS,
                   Op.ATAN, Op.SINH, Op.COSH, Op.ASINH, Op.ACOSH, Op.ATANH)
_ELEMENTWISE = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAXIMUM, Op.MINIMUM, Op.MOD, Op.NEG, Op.ABS,
                Op.SIGN, Op.RECIPROCAL, Op.SQUARE, Op.FLOOR, Op.CEIL, Op.ROUND, Op.CLAMP, Op.RELU,
                Op.LEAKY_RELU, Op.PRELU, Op.HARDTANH, Op.HARDSIGMOID, Op.HARDSWISH, *_TRANSCENDENTAL,
                Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE, Op.AND, Op.OR, Op.XOR, Op.NOT, Op.BITWISE,
                Op.ISNAN, Op.ISINF, Op.WHERE, Op.CAST, Op.QUANTIZE, Op.DEQUANTIZE, Op.POLAR)
_GROUPS: dict[OpGroup, tuple[Op, ...]] = {
    OpGroup.CONTRACTION: (Op.DOT, Op.GROUPED_DOT),
    OpGroup.CONVOLUTION: (Op.CONV,),
    OpGroup.ATTENTION: (Op.ATTENTION, Op.ATTENTION_BACKWARD),
    OpGroup.ELEMENTWISE: _ELEMENTWISE,
    OpGroup.REDUCTION: (Op.REDUCE_SUM, Op.REDUCE_MEAN, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_PROD,
                        Op.REDUCE_VAR, Op.REDUCE_NORM, Op.REDUCE_LOGSUMEXP, Op.ARGMAX, Op.ARGMIN,
                        Op.CUMSUM, Op.CUMPROD),
    OpGroup.NORMALIZATION: (Op.SOFTMAX, Op.LOG_SOFTMAX, Op.LAYER_NORM, Op.RMS_NORM, Op.BATCH_NORM,
                            Op.GROUP_NORM, Op.INSTANCE_NORM, Op.LP_NORM, Op.LRN),
    OpGroup.DATA_MOVEMENT: (Op.RESHAPE, Op.EXPAND, Op.SLICE, Op.IDENTITY, Op.PERMUTE, Op.COPY,
                            Op.CONCAT, Op.SPLIT, Op.PAD, Op.TILE, Op.FLIP, Op.ROLL, Op.TRIANGULAR,
                            Op.DEPTH_TO_SPACE, Op.SPACE_TO_DEPTH),
    OpGroup.GATHER_SCATTER: (Op.GATHER, Op.GATHER_ELEMENTS, Op.GATHER_ND, Op.SCATTER,
                             Op.SCATTER_ELEMENTS, Op.SCATTER_ND, Op.INDEX_PUT, Op.EMBEDDING_BAG),
    OpGroup.COLLECTIVE: (Op.ALL_REDUCE, Op.ALL_GATHER, Op.REDUCE_SCATTER, Op.ALL_TO_ALL,
                         Op.BROADCAST, Op.SEND, Op.RECV, Op.COLLECTIVE_PERMUTE),
}
GROUP: dict[Op, OpGroup] = {op: OpGroup.OTHER for op in Op}
for _group, _ops in _GROUPS.items():
    for _op in _ops:
        GROUP[_op] = _group

#: Ops that only re-describe memory (torch views): they move no bytes unless a later pass says so.
VIEW_OPS: frozenset[Op] = frozenset({Op.RESHAPE, Op.EXPAND, Op.SLICE, Op.IDENTITY, Op.SHAPE_OF})
#: Elementwise ops counted as transcendentals rather than FLOPs (XLA's convention).
TRANSCENDENTAL_OPS: frozenset[Op] = frozenset(_TRANSCENDENTAL)


def storage_operand(op: Op, attrs: Mapping[str, Any]) -> int | None:
    """The operand whose storage an op's output shares, for liveness: a view's source, or the
    operand an ``in_place`` op updates (``relu_``, an eager ``x[:, t] = y``). None: a fresh buffer."""
    if op in VIEW_OPS:
        return 0
    where = attrs.get(IN_PLACE)
    return int(where) if isinstance(where, int) else None


def ops_in_group(group: OpGroup) -> frozenset[Op]:
    return frozenset(op for op, g in GROUP.items() if g is group)
