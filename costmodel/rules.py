"""Cost rules: one per canonical op, the only place where FLOP and byte formulas live.

Conventions (the same as ``torch.utils.flop_counter`` for the matrix ops, XLA's HloCostAnalysis for
the rest), so every number a report prints can be re-derived by hand:

* contraction, convolution, attention: 2 FLOPs per multiply-add, no discount for causal masks,
  biases not counted here (frontends emit them as separate elementwise adds);
* elementwise: 1 FLOP per output element; transcendental ops (exp, tanh, erf, gelu, ...) count one
  transcendental per output element instead of FLOPs;
* reductions: 1 FLOP per input element; normalizations: a fixed count per element listed in
  :data:`NORM_FLOPS_PER_ELEMENT`, plus transcendentals per row;
* bytes: compulsory traffic of the unfused op: each distinct input read once, outputs written
  once; views (reshape, expand, slice, identity) move nothing; a gather reads only the rows it
  gathers; an attention whose V is declared a prefix of its K (``V_IN_K``) reads that tensor once.

An op without a rule here has no cost: the interpreter reports it as unmodeled, never as zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from math import ceil, log2, prod

from ..ir import GROUP, IN_PLACE, TRANSCENDENTAL_OPS, V_IN_K, VIEW_OPS, Op, OpGroup, attention_dims, attention_operands
from .cost import ZERO, Cost
from .experts import node_reached_experts, node_row_share
from .opview import OpView
from .rules_collective import COLLECTIVE_RULES
from .rules_vision import VISION_RULES, _traffic
from .shape_checks import check_broadcast, check_contraction, check_gather, check_view, check_window, shape_error

__all__ = ["RULES", "rule_for", "has_rule", "NORM_FLOPS_PER_ELEMENT", "NORM_GRAD_FLOPS_PER_ELEMENT", "Rule"]

Rule = Callable[[OpView], Cost]
RULES: dict[Op, Rule] = {}



def _rule(*ops: Op) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for op in ops:
            RULES[op] = fn
        return fn
    return deco


def rule_for(op: Op) -> Rule | None:
    return RULES.get(op)


def has_rule(op: Op) -> bool:
    return op in RULES


# -- contraction, convolution, attention -----------------------------------------------------------

@_rule(Op.DOT)
def dot(v: OpView) -> Cost:
    """dot_general: 2 x output elements x contracted size (= torch's mm/bmm count)."""
    return _traffic(v, 2 * v.out_numel() * prod(check_contraction(v)))


@_rule(Op.GROUPED_DOT)
def grouped_dot(v: OpView) -> Cost:
    """A grouped GEMM (MoE experts): each of the S rows through its group's K x N matrix, 2 x S x K x N
    FLOPs whatever the split; reads the rows, the offsets and only the groups some row reaches
    (:func:`.experts.expert_rows` under the analysis' expert balance), writes [S, N]."""
    if v.attrs.get("role") == "grad_weight":
        return _grouped_grad_weight(v)
    rows, k = v.shape(0)
    w = v.shape(1)
    n = w[3 - int(v.attrs["rhs_contract"])]
    reached = node_reached_experts(v.attrs, rows, w[0], v.expert_balance)   # expected, under random routing
    wdt = v.in_dtypes[1]
    assert wdt is not None
    share = node_row_share(v.attrs)     # an expert-parallel shard's experts take the group's share, on average
    read = round(v.in_bytes(0) * share) + round(reached * wdt.nbytes(prod(w[1:])))
    read += sum(v.in_bytes(i) for i in range(2, len(v.in_shapes)) if v.has_input(i))
    return Cost(round(2 * rows * k * n * share), 0, read, round(v.all_out_bytes() * share))


def _grouped_grad_weight(v: OpView) -> Cost:
    """The experts' weight gradient: each routed row's ``x`` (K) against its ``dy`` (N) into its
    expert's ``K x N`` gradient, 2 x S x K x N FLOPs (what the forward costs, as torch's
    ``_grouped_mm`` backward runs it); reads both row sets, writes the gradients."""
    rows, k = v.shape(0)
    n = v.shape(1)[1]
    return Cost(2 * rows * k * n, 0, v.all_in_bytes(), v.all_out_bytes())


@_rule(Op.CONV)
def conv(v: OpView) -> Cost:
    """torch's conv_flop_count: 2 x N x Cout x Cin/groups x kernel x spatial positions.

    The spatial positions are the output's for a forward conv and the input's for a transposed one,
    exactly as ``torch.utils.flop_counter`` counts them.
    """
    check_window(v)
    x, w = v.shape(0), v.shape(1)
    transposed = bool(v.attrs.get("transposed", False))
    if v.attrs.get("role") == "grad_weight":
        # Inputs (x, grad_out), output the weight gradient: each weight element sums its group's
        # products over the batch and the grad (or input, if transposed) positions, the forward's
        # work: kernel x positions x Cin x Cout / groups. torch.utils.flop_counter (2.13) leaves out
        # the / groups (a depthwise Conv1d's weight gradient read 128x its forward; pytorch/pytorch
        # PR 183405 divides it): narrowpipe counts the work done, equal to torch's where groups = 1.
        grad, kernel = w, v.out_shapes[0][2:]
        groups = int(v.attrs.get("groups", 1))
        positions = prod(x[2:]) if transposed else prod(grad[2:])
        flops = 2 * prod(kernel) * positions * x[1] * grad[1] * grad[0] // groups
        return _traffic(v, flops)
    spatial = (x if transposed else v.out_shapes[0])[2:]
    flops = 2 * x[0] * w[0] * w[1] * prod(w[2:]) * prod(spatial)
    return _traffic(v, flops)


def _attention_dims(v: OpView) -> tuple[int, int, int, int, int, int]:
    """(batch, q heads, q len, kv len, qk head dim, v head dim), decoded by the IR's one reader."""
    off = attention_operands(v.node)
    a = attention_dims(v.attrs, v.shape(off), v.shape(off + 1), v.shape(off + 2))
    return a.batch, a.heads, a.sq, a.sk, a.d, a.dv


@_rule(Op.ATTENTION)
def attention(v: OpView) -> Cost:
    """Scaled dot-product attention: QK^T and PV, 2 FLOPs per multiply-add each, KV heads broadcast
    to the query heads (GQA), one exp per score; as torch's ``sdpa_flop_count``."""
    b, h, sq, sk, d, dv = _attention_dims(v)
    flops = 2 * b * h * sq * sk * d + 2 * b * h * sq * sk * dv
    cost = _traffic(v, flops, b * h * sq * sk)
    k, val = v.node.inputs[attention_operands(v.node) + 1:attention_operands(v.node) + 3]
    if v.attrs.get(V_IN_K) and val is not None and val is not k:
        # V is the first dv columns of K (absorbed MLA's [latent | rotary key] cache, FlashMLA's layout):
        # one tensor, streamed once, so V's bytes are already in K's
        if dv > d:
            raise shape_error(v, f"{V_IN_K}: V ({dv} wide) cannot be a prefix of K ({d} wide)")
        cost = replace(cost, bytes_read=cost.bytes_read - v.in_bytes(attention_operands(v.node) + 2))
    return cost


@_rule(Op.ATTENTION_BACKWARD)
def attention_backward(v: OpView) -> Cost:
    """Inputs (grad_out, q, k, v): recompute scores, then four more matmuls (torch's count)."""
    b, h, sq, sk, d, dv = _attention_dims(v)
    bh = b * h
    flops = 2 * bh * (sq * d * sk + sq * dv * sk + sk * sq * dv + sq * sk * d + d * sq * sk)
    return _traffic(v, flops, bh * sq * sk)


# -- elementwise ------------------------------------------------------------------------------------

#: Elementwise ops that are several scalar operations per output element: (FLOPs, transcendentals).
#: ``polar(abs, angle)``: a cosine and a sine, each multiplied by ``abs``, per complex element.
_COMPOUND_PER_ELEMENT: dict[Op, tuple[int, int]] = {Op.POLAR: (2, 2)}


def _elementwise(v: OpView) -> Cost:
    check_broadcast(v)
    n = sum(v.out_numel(i) for i in range(len(v.out_shapes)))
    if v.node.op in _COMPOUND_PER_ELEMENT:
        flops, trans = _COMPOUND_PER_ELEMENT[v.node.op]
        return _traffic(v, flops * n, trans * n)
    if v.node.op in TRANSCENDENTAL_OPS:
        return _traffic(v, 0, n)
    return _traffic(v, n)


for _op, _g in GROUP.items():
    if _g is OpGroup.ELEMENTWISE:
        RULES[_op] = _elementwise



# -- reductions and normalizations --------------------------------------------------------------

_REDUCE_FLOPS_PER_ELEMENT: dict[Op, int] = {
    Op.REDUCE_SUM: 1, Op.REDUCE_MEAN: 1, Op.REDUCE_MAX: 1, Op.REDUCE_MIN: 1, Op.REDUCE_PROD: 1,
    Op.ARGMAX: 1, Op.ARGMIN: 1, Op.CUMSUM: 1, Op.CUMPROD: 1,
    Op.REDUCE_VAR: 3,        # subtract mean, square, accumulate
    Op.REDUCE_NORM: 2,       # square (or abs), accumulate
    Op.REDUCE_LOGSUMEXP: 3,  # max, subtract, accumulate (+1 exp per element)
}


@_rule(*_REDUCE_FLOPS_PER_ELEMENT)
def reduction(v: OpView) -> Cost:
    n = v.numel(0)
    trans = n if v.node.op is Op.REDUCE_LOGSUMEXP else 0
    return _traffic(v, _REDUCE_FLOPS_PER_ELEMENT[v.node.op] * n, trans)


#: FLOPs per input element of each normalization (besides its transcendentals).
NORM_FLOPS_PER_ELEMENT: dict[Op, int] = {
    Op.SOFTMAX: 4,        # max, subtract, sum, divide (+1 exp)
    Op.LOG_SOFTMAX: 4,    # max, subtract, sum, subtract (+1 exp; +1 log per row)
    Op.LAYER_NORM: 7,     # mean, subtract, square, variance sum, normalize, scale, shift (+1 rsqrt per row)
    Op.RMS_NORM: 4,       # square, sum, normalize, scale (+1 rsqrt per row)
    Op.BATCH_NORM: 2,     # inference: folded scale and shift; training adds the statistics (7)
    Op.GROUP_NORM: 7,
    Op.INSTANCE_NORM: 7,
    Op.LP_NORM: 3,        # |x|^p, sum, divide (+1 root per row)
    Op.LRN: 5,            # square, window sum (amortized), scale, pow (+1), divide
}


#: FLOPs per element of a normalization's backward kernel (``role="grad"``: inputs dy, then x or
#: the output), per gradient it writes (attr ``grads``). Norms: recompute x_hat (2; RMS 1), g = dy*w
#: (1), the row sums of g and g*x_hat (3; RMS 2), dx = rstd*(g - mean(g) - x_hat*mean(g*x_hat)) (4;
#: RMS 3); dweight = sum of dy*x_hat (2), dbias = sum of dy (1). Softmax: dy*y, row sum, subtract,
#: multiply (4); log-softmax: row sum of dy, y*sum, subtract (3, +1 exp). Statistics are saved by the
#: forward, so no rsqrt is recomputed.
NORM_GRAD_FLOPS_PER_ELEMENT: dict[Op, int] = {
    Op.SOFTMAX: 4, Op.LOG_SOFTMAX: 3, Op.LAYER_NORM: 10, Op.RMS_NORM: 7, Op.BATCH_NORM: 10,
    Op.GROUP_NORM: 10, Op.INSTANCE_NORM: 10}
_PARAM_GRAD_FLOPS_PER_ELEMENT = {"weight": 2, "bias": 1}


def _normalization_grad(v: OpView) -> Cost:
    n = v.numel(0)
    op = v.node.op
    grads = v.attrs.get("grads", ("input",))
    flops = n * (NORM_GRAD_FLOPS_PER_ELEMENT.get(op, NORM_FLOPS_PER_ELEMENT[op]) if "input" in grads else 0)
    flops += n * sum(_PARAM_GRAD_FLOPS_PER_ELEMENT.get(g, 0) for g in grads)
    return _traffic(v, flops, n if op is Op.LOG_SOFTMAX else 0)


@_rule(*NORM_FLOPS_PER_ELEMENT)
def normalization(v: OpView) -> Cost:
    if v.attrs.get("role") == "grad":
        return _normalization_grad(v)
    n = v.numel(0)
    op = v.node.op
    per = NORM_FLOPS_PER_ELEMENT[op]
    if op is Op.BATCH_NORM and v.attrs.get("training", False):
        per = 7
    rows = _norm_rows(v)
    if op in (Op.SOFTMAX, Op.LOG_SOFTMAX):
        trans = n + (rows if op is Op.LOG_SOFTMAX else 0)
    elif op is Op.LRN:
        trans = n
    else:
        trans = rows
    return _traffic(v, per * n, trans)


def _norm_rows(v: OpView) -> int:
    """How many independent vectors are normalized (one rsqrt/log each)."""
    shape = v.shape(0)
    if not shape:
        return 1
    op = v.node.op
    if op in (Op.BATCH_NORM,):
        return shape[1] if len(shape) > 1 else 1
    if op is Op.GROUP_NORM:
        return shape[0] * int(v.attrs.get("num_groups", 1))
    if op is Op.INSTANCE_NORM:
        return shape[0] * (shape[1] if len(shape) > 1 else 1)
    axis = int(v.attrs.get("axis", -1))
    axis = axis % len(shape)
    if op in (Op.LAYER_NORM, Op.RMS_NORM):
        return prod(shape[:axis])
    return prod(shape) // max(shape[axis], 1)


# -- data movement, gather/scatter --------------------------------------------------------------

@_rule(*VIEW_OPS)
def view(v: OpView) -> Cost:
    """Views re-describe memory: no work, no traffic (once their shapes hold under the bindings)."""
    check_view(v)
    return ZERO


@_rule(Op.PERMUTE, Op.COPY, Op.CONCAT, Op.SPLIT, Op.PAD, Op.TILE, Op.FLIP, Op.ROLL, Op.TRIANGULAR,
       Op.DEPTH_TO_SPACE, Op.SPACE_TO_DEPTH)
def copy(v: OpView) -> Cost:
    """Materializing data movement: read the inputs, write the outputs, no arithmetic.

    A concat marked ``in_place`` (a KV cache append in a serving runtime: the new rows are written
    into the cache's preallocated storage) moves only the operands other than the one it updates."""
    if v.node.op is Op.CONCAT and IN_PLACE in v.attrs:
        moved = _bytes_except(v, int(v.attrs[IN_PLACE]))
        return Cost(0, 0, moved, moved)
    return _traffic(v)


def _bytes_except(v: OpView, keep: int) -> int:
    """Bytes of every operand but ``keep`` (the storage an in-place op updates)."""
    return sum(v.in_bytes(i) for i in range(len(v.in_shapes)) if i != keep and v.has_input(i))


@_rule(Op.GATHER, Op.GATHER_ELEMENTS, Op.GATHER_ND)
def gather(v: OpView) -> Cost:
    """Reads the indices and only the gathered elements (not the whole table), writes the output."""
    if v.node.op is Op.GATHER:
        check_gather(v)
    out = v.out_bytes()
    idx = sum(v.in_bytes(i) for i in range(1, len(v.in_shapes)) if v.has_input(i))
    return Cost(0, 0, idx + out, out)


@_rule(Op.SCATTER, Op.SCATTER_ELEMENTS, Op.SCATTER_ND, Op.INDEX_PUT)
def scatter(v: OpView) -> Cost:
    """Out-of-place scatter: copy the data, read indices and updates; a reduce adds 1 FLOP per update.

    Marked ``in_place`` (a static KV cache's ``index_copy_``), the data is updated where it lies:
    indices and updates are read and only the updated elements are written."""
    last = len(v.in_shapes) - 1
    updates = v.numel(last) if v.in_shapes and v.in_shapes[-1] is not None else 0
    flops = updates if v.attrs.get("reduce") not in (None, "none", "") else 0
    if IN_PLACE in v.attrs:
        read = _bytes_except(v, int(v.attrs[IN_PLACE]))
        return Cost(flops, 0, read, v.in_bytes(last) if updates else 0)
    return _traffic(v, flops)


@_rule(Op.EMBEDDING_BAG)
def embedding_bag(v: OpView) -> Cost:
    """Gathers one row per index, reduces them into bags (1 FLOP per gathered element)."""
    row = prod(v.shape(0)[1:])
    gathered = v.numel(1) * row
    dt = v.in_dtypes[0]
    assert dt is not None
    read = dt.nbytes(gathered) + sum(v.in_bytes(i) for i in range(1, len(v.in_shapes)) if v.has_input(i))
    return Cost(gathered, 0, read, v.all_out_bytes())


# -- other --------------------------------------------------------------------------------------

@_rule(Op.CONSTANT)
def constant(v: OpView) -> Cost:
    """Constants are baked into the program: their consumers pay for reading them."""
    return ZERO


@_rule(Op.FILL, Op.IOTA)
def fill(v: OpView) -> Cost:
    """Writes its output (an uninitialized allocation, torch's ``empty``, writes nothing)."""
    if v.attrs.get("uninitialized"):
        return ZERO
    return Cost(0, 0, v.all_in_bytes(), v.all_out_bytes())


@_rule(Op.RANDOM)
def random(v: OpView) -> Cost:
    return _traffic(v, v.out_numel())


@_rule(Op.SORT, Op.UNIQUE)
def sort(v: OpView) -> Cost:
    """Comparison sort: n log2 n comparisons along the sorted axis."""
    shape = v.shape(0)
    if not shape:
        return _traffic(v)
    axis = int(v.attrs.get("axis", -1)) % len(shape)
    length = max(shape[axis], 1)
    return _traffic(v, prod(shape) * max(ceil(log2(length)), 1))


@_rule(Op.TOPK)
def topk(v: OpView) -> Cost:
    """Heap selection: about log2(k) comparisons per input element."""
    k = max(int(v.attrs.get("k", 1)), 1)
    return _traffic(v, v.numel(0) * max(ceil(log2(k + 1)), 1))


@_rule(Op.NONZERO)
def nonzero(v: OpView) -> Cost:
    return _traffic(v, v.numel(0))


# the vision and signal ops' and the collectives' rules live in their own modules, in the same registry
RULES.update(VISION_RULES)
RULES.update(COLLECTIVE_RULES)
