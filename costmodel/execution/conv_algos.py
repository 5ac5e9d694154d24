"""How a GPU library may run a convolution, each way as the GEMM it executes plus its extra traffic.

cuDNN and MIOpen time several algorithms per problem and run the fastest; the model does the same
with the algorithms whose work differs:

* **implicit GEMM** (every convolution): M = output positions, N = output channels, K = input
  channels x filter taps. On tensor cores the channels a K step contracts pad up to the MMA's K
  granularity (``tensor_core_min_tile``), so a first layer with 1-3 input channels does 8-16x its
  FLOPs there, which is why such layers are far slower than their FLOP count says;
* **Winograd** (3x3 and 5x5 filters, stride 1, dense, forward and backward-data): F(m x m, r x r)
  computes an m x m output tile from an alpha x alpha input tile, alpha = m + r - 1, with
  alpha^2 element-wise products instead of m^2 r^2; run as alpha^2 batched GEMMs
  (tiles x Cin by Cin x Cout). The fused form F(2x2, 3x3) keeps its transforms on chip; the
  non-fused F(4x4, 3x3) and F(2x2, 5x5) (cuDNN's WINOGRAD_NONFUSED) write the transformed input and
  output to memory and read them back, in three extra kernels. Winograd only pays off where the
  multiplies are the cost, so it is offered for convolutions on the vector units (fp32 without
  TF32), as the libraries do (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016);
* **Winograd for weight gradients** (cuDNN's BWD_FILTER_ALGO_WINOGRAD_NONFUSED, 3x3 and 5x5,
  stride 1): dW is the correlation of the input with the output gradient, so the same F(m x m, r x r)
  transforms apply with the gradient's m x m tiles in the filter's role: alpha^2 GEMMs of
  Cin x Cout reducing over the tiles (a long K, split over the SMs like every weight gradient),
  the transformed input, gradient and filter written and read back.

* **direct convolution** (on the vector units, where the target has ``conv_direct_efficiency``):
  a loop over the filter taps per output element, the problem's own FLOPs at that fraction of the
  unit's peak, no channel padding and no tiles. It is what wins where the GEMM pads a narrow side:
  the data gradient of a one-channel layer is a GEMM with N = 1, run in 32-128 wide tiles.

* **MIOpen's any-filter Winograd** (``conv_winograd_rxs_efficiency``, :mod:`.conv_winograd_rxs`):
  any filter cut into 3x3 blocks at stride 1 or 2, a persistent kernel at its own plateau;
* **MIOpen's 1x1 stride-2 GEMM path** (``conv_gemm_1x1_stride2``, :mod:`.conv_miopen_gemm`): a
  library without an implicit GEMM runs such a layer as one GEMM between two layout transposes.

A filter shorter than its vertical stride (1x1, stride 2) leaves input rows unread: the
implicit GEMM reads r of every s rows (within a row the skipped columns share memory sectors).

A **strided data gradient** (stride s > 1) runs its GEMM over the output positions, whose rows land
on 1 / s^2 of the input gradient; positions with no filter tap (a filter shorter than its stride)
or with taps shifted by padding must still be written, so the library zero-fills the whole input
gradient first: the plan pays one more launch and the gradient's bytes once more. Source: MIOpen's
backward-data implicit GEMM calls ``SetTensor`` with zero before its kernels unless every pad is 0
and the filter is at least its stride in every dimension (src/conv/invokers/impl_gemm.cpp). The
model charges the fill for every strided data gradient, that last case included (assumption:
cuDNN's strided path, which is not public, fills as well; with MIOpen's exception applied to the
NVIDIA rows, T4's and V100's unpadded strided data gradients move further below their measured
times, so the exception is not taken on evidence from AMD's library alone).

cuDNN's strided data-gradient kernels on the CUDA cores run slower than its other kernels: DeepBench's
fp32 strided data gradients take a median 2.3x (P100, cuDNN 6), 1.7x (T4) and 1.8x (V100, cuDNN 7.6)
the time of the same layer's forward (10th-90th percentile 0.9-3.7x), its stride-1 data gradients
1.0-1.1x, MIOpen's strided ones on MI25 1.1x. On the vector units the GEMM of that plan runs at the
target's ``conv_dgrad_strided_efficiency`` of the plateau (assumption: the per-tap stride tests and
predicated gathers of cuDNN's dgrad kernels, which are not public); the fill and the other plans
(Winograd does not apply, the direct convolution has its own plateau) are not slowed. The forced
tensor-core BWD_DATA_ALGO_1 rows keep the plain plan: T4's fp16 strided data gradients are 2.1x
their forward, V100's 1.5x, and one value copied from T4 moves V100's past their times.

A **forced algorithm** (node attribute ``forced_algo``, set only on measured rows whose benchmark
harness forced one, :mod:`narrowpipe.calibration.harness_algos`) leaves the plan that algorithm is
and no choice: DeepBench's tensor-core runs force cuDNN's IMPLICIT_PRECOMP_GEMM forward,
BWD_DATA_ALGO_1 and BWD_FILTER_ALGO_1 (``code/nvidia/conv_bench.cu``, the three algorithms cuDNN 7
runs on tensor cores), each the implicit GEMM of its pass here. A model's own convolutions never
carry the attribute: a framework gets the library's pick, the fastest plan.

Whether a chip's library has the non-fused Winograd weight gradient is the target's
``conv_winograd_wgrad``; its GEMMs are ordinary batched GEMMs on transformed operands in memory, so
the weight-gradient kernels' plateau (``conv_wgrad_efficiency``) applies to the implicit GEMM only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil, prod

from ...errors import NarrowpipeError
from ...ir import Node
from ..interpreter import CostTable
from ..sizes import value_bytes
from .conv_miopen_gemm import miopen_1x1_stride2_gemm
from .conv_winograd_rxs import rxs_gemm
from .gemm import Gemm, conv_gemm

__all__ = ["ConvPlan", "conv_plans", "is_strided_data_gradient", "WINOGRAD_FORMS", "FORCED_PLANS"]

#: (output tile m, filter r, fused) of the Winograd forms considered.
WINOGRAD_FORMS: tuple[tuple[int, int, bool], ...] = ((2, 3, True), (4, 3, False), (2, 5, False))

#: cuDNN algorithms a harness may force -> the plan that runs them: the implicit GEMM of the pass
#: (``conv_plans``' first plan). Other names (FFT, Winograd) have no forced plan yet.
FORCED_PLANS: dict[str, str] = {"IMPLICIT_GEMM": "implicit GEMM", "IMPLICIT_PRECOMP_GEMM": "implicit GEMM",
                                "BWD_DATA_ALGO_1": "implicit GEMM", "BWD_FILTER_ALGO_1": "implicit GEMM"}


@dataclass(frozen=True)
class ConvPlan:
    name: str
    gemm: Gemm
    extra_bytes: int = 0       # traffic outside the GEMM: transforms written and read back
    extra_kernels: int = 0     # kernels besides the GEMM (non-fused transforms)
    direct: bool = False       # a direct convolution: the problem's FLOPs at the direct plateau, no tiles
    efficiency: float | None = None   # a direct-style kernel's own plateau (absent: conv_direct_efficiency)
    unread_bytes: int = 0      # input rows a strided filter shorter than its stride never touches


def _channel_padded(g: Gemm, node: Node, table: CostTable, k_step: int) -> Gemm:
    """The implicit GEMM with its contracted channels padded to the MMA K granularity."""
    if node.attrs.get("role") == "grad_weight" or k_step <= 1:
        return g
    w = node.inputs[1]
    assert w is not None
    wshape = table.shapes[w]
    taps = prod(wshape[2:])
    groups = int(node.attrs.get("groups", 1))
    channels = wshape[0] // groups if node.attrs.get("transposed") else wshape[1]
    padded = ceil(channels / k_step) * k_step
    return g if padded == channels else replace(g, k=padded * taps)


def _skipped_rows_bytes(table: CostTable, node: Node) -> int:
    """Input bytes a convolution (or its weight gradient) never reads: with a filter r rows tall
    and a vertical stride s > r, only r of every s input rows hold a tap (a 1x1 stride-2 layer
    reads half its input rows; within a row the strided columns share the memory sectors, so the
    row is read whole)."""
    a = node.attrs
    stride = [int(s) for s in a.get("stride", (1,))]
    x, w = node.inputs[0], node.inputs[1]
    if a.get("role") == "grad_input" or a.get("transposed") or x is None or w is None:
        return 0
    filt = table.shapes[node.outputs[0] if a.get("role") == "grad_weight" else w][2:]
    # a 1-D convolution's only axis is the contiguous one: its skipped elements share sectors too
    if len(filt) < 2 or stride[0] <= filt[0]:
        return 0
    return int(value_bytes(table, x) * (1 - filt[0] / stride[0]))


def _winograd(table: CostTable, node: Node, g: Gemm, wgrad_too: bool) -> list[ConvPlan]:
    a = node.attrs
    w = node.inputs[1]
    assert w is not None
    wgrad = a.get("role") == "grad_weight"
    kernel = table.shapes[node.outputs[0] if wgrad else w][2:]
    if (int(a.get("groups", 1)) != 1 or len(kernel) != 2
            or kernel[0] != kernel[1] or any(int(s) != 1 for s in a.get("stride", (1,)))
            or any(int(d) != 1 for d in a.get("dilation", (1,)))):
        return []
    r = kernel[0]
    if wgrad:
        return _winograd_wgrad(table, node, g, r) if wgrad_too else []
    out = table.shapes[node.outputs[0]]
    transposed = bool(a.get("transposed"))
    x = node.inputs[0]
    assert x is not None
    # the problem's output positions: the conv output (forward) or the input of the grad (backward)
    spatial = out[2:]
    cin, cout = (table.shapes[w][0], table.shapes[w][1]) if transposed else (table.shapes[w][1], table.shapes[w][0])
    e = g.dtype.bits // 8
    plans = []
    for m, rr, fused in WINOGRAD_FORMS:
        if rr != r:
            continue
        alpha = m + r - 1
        tiles = out[0] * ceil(spatial[0] / m) * ceil(spatial[1] / m)
        a2 = alpha * alpha
        t_in, t_out, t_w = a2 * tiles * cin * e, a2 * tiles * cout * e, a2 * cin * cout * e
        flops = 2 * alpha * alpha * tiles * cin * cout
        if fused:
            gg = Gemm(alpha * alpha, tiles, cout, cin, g.dtype, g.a_bytes, g.b_bytes, g.c_bytes, flops)
            plans.append(ConvPlan(f"Winograd F({m}x{m},{r}x{r}) fused", gg))
        else:
            gg = Gemm(alpha * alpha, tiles, cout, cin, g.dtype, t_in, t_w, t_out, flops)
            extra = value_bytes(table, x) + t_in + g.b_bytes + t_w + t_out + value_bytes(table, node.outputs[0])
            plans.append(ConvPlan(f"Winograd F({m}x{m},{r}x{r}) non-fused", gg, extra, 3))
    return plans


def _winograd_wgrad(table: CostTable, node: Node, g: Gemm, r: int) -> list[ConvPlan]:
    """Non-fused Winograd weight gradients: the input's alpha x alpha tiles and the output
    gradient's m x m tiles transformed, alpha^2 GEMMs (Cin x tiles) x (tiles x Cout), the
    alpha x alpha filter gradients transformed back to r x r."""
    x, dy = node.inputs[0], node.inputs[1]
    assert x is not None and dy is not None
    xs, ys = table.shapes[x], table.shapes[dy]
    cin, cout = xs[1], ys[1]
    e = g.dtype.bits // 8
    plans = []
    for m, rr, _fused in WINOGRAD_FORMS:
        if rr != r or (m, rr) == (2, 3):      # the libraries' non-fused forms only
            continue
        alpha = m + r - 1
        a2 = alpha * alpha
        tiles = ys[0] * ceil(ys[2] / m) * ceil(ys[3] / m)
        t_in, t_dy, t_w = a2 * tiles * cin * e, a2 * tiles * cout * e, a2 * cin * cout * 4
        gg = Gemm(a2, cin, cout, tiles, g.dtype, t_in, t_dy, t_w, 2 * a2 * tiles * cin * cout)
        extra = value_bytes(table, x) + t_in + value_bytes(table, dy) + t_dy + t_w + value_bytes(table, node.outputs[0])
        plans.append(ConvPlan(f"Winograd F({m}x{m},{r}x{r}) non-fused weight gradient", gg, extra, 3))
    return plans


def is_strided_data_gradient(node: Node) -> bool:
    """A convolution's data gradient with a stride above 1 on some axis."""
    return node.attrs.get("role") == "grad_input" and any(int(s) > 1 for s in node.attrs.get("stride", (1,)))


def conv_plans(table: CostTable, node: Node, *, k_step: int, winograd: bool,
               winograd_wgrad: bool = False, direct: bool = False,
               winograd_rxs: float | None = None, gemm_1x1_stride2: bool = False) -> list[ConvPlan]:
    """The algorithms a library could run ``node`` with (implicit GEMM first); ``winograd``: the
    convolution runs on the vector units, where the library offers Winograd (for weight gradients
    too when ``winograd_wgrad``), when ``direct`` a direct convolution and, when ``winograd_rxs``
    (its plateau), MIOpen's any-filter Winograd kernel (:mod:`.conv_winograd_rxs`); when
    ``gemm_1x1_stride2``, a 1x1 stride-2 forward layer runs MIOpen's GEMM between two transposes
    (:mod:`.conv_miopen_gemm`) instead of the implicit GEMM."""
    g = conv_gemm(table, node)
    a = node.attrs
    if is_strided_data_gradient(node):
        plans = [ConvPlan("strided data gradient: zero fill, then the GEMM", _channel_padded(g, node, table, k_step),
                          value_bytes(table, node.outputs[0]), 1)]
    else:
        plans = [ConvPlan("implicit GEMM", _channel_padded(g, node, table, k_step),
                          unread_bytes=_skipped_rows_bytes(table, node))]
    form = miopen_1x1_stride2_gemm(table, node, g) if gemm_1x1_stride2 else None
    if form is not None:
        plans = [ConvPlan("GEMM between layout transposes (MIOpen 1x1 stride 2)", form[0], form[1], 2)]
    if a.get("forced_algo"):       # the harness chose: the implicit GEMM, no library choice
        if FORCED_PLANS.get(str(a["forced_algo"])) != "implicit GEMM":
            raise NarrowpipeError(f"node {node.name!r}: no convolution plan models the forced algorithm "
                                  f"{a['forced_algo']!r} (known: {', '.join(sorted(FORCED_PLANS))})")
        return plans
    if winograd:
        plans += _winograd(table, node, g, winograd_wgrad)
        if direct:
            plans.append(ConvPlan("direct convolution", g, direct=True))
        rxs = rxs_gemm(table, node, g) if winograd_rxs is not None else None
        if rxs is not None:
            plans.append(ConvPlan("Winograd RxS (MIOpen, 3x3 blocks)", rxs, direct=True, efficiency=winograd_rxs))
    return plans
