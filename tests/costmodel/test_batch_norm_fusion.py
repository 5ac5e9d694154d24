"""An inference batch norm is a per-channel affine epilogue: it fuses into the convolution before it
(XLA's conv output fusion; onnxruntime and TensorRT fold it into the weights) and on into the ReLU
and residual add; a training-mode batch norm reduces over the batch and stays a kernel of its own.
Bytes are hand-counted from the shapes below; FLOPs from the conv formula."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.kernels import fuse
from narrowpipe.ir import DType, Graph, Node, Op, TensorType, ValueKind

N, C, K, HW, R = 256, 64, 64, 56, 3      # ResNet-50 stage-1 3x3 conv, batch 256
BF16 = DType.BF16
X = N * C * HW * HW                      # input elements (padding 1 keeps 56x56)
Y = N * K * HW * HW                      # output elements
W = K * C * R * R


def _conv(g: Graph) -> Node:
    x = g.add_input("x", TensorType(BF16, (N, C, HW, HW)))
    w = g.add_input("w", TensorType(BF16, (K, C, R, R)), ValueKind.PARAM)
    return g.add_node(Op.CONV, [x, w], [TensorType(BF16, (N, K, HW, HW))],
                      {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1,
                       "output_padding": (0, 0), "transposed": False})


def _vec(g: Graph, name: str, shape: tuple[int, ...] = (K,)):
    return g.add_input(name, TensorType(BF16, shape), ValueKind.PARAM)


def conv_bn_relu(training: bool = False, residual: bool = False, role: str | None = None) -> Graph:
    g = Graph("conv_bn_relu")
    conv = _conv(g)
    attrs = {"epsilon": 1e-5, "training": training, **({"role": role} if role else {})}
    bn = g.add_node(Op.BATCH_NORM, [conv.outputs[0], *(_vec(g, n) for n in ("scale", "bias", "mean", "var"))],
                    [TensorType(BF16, (N, K, HW, HW))], attrs)
    h = bn.outputs[0]
    if residual:
        skip = g.add_input("skip", TensorType(BF16, (N, K, HW, HW)))
        h = g.add_node(Op.ADD, [h, skip], [TensorType(BF16, (N, K, HW, HW))]).outputs[0]
    g.set_outputs(g.add_node(Op.RELU, [h], [TensorType(BF16, (N, K, HW, HW))]).outputs)
    return g


def conv_affine_relu() -> Graph:
    """The same block with the batch norm written as ``x * a + b`` (a, b: [K, 1, 1])."""
    g = Graph("conv_affine_relu")
    conv = _conv(g)
    t = TensorType(BF16, (N, K, HW, HW))
    m = g.add_node(Op.MUL, [conv.outputs[0], _vec(g, "a", (K, 1, 1))], [t])
    a = g.add_node(Op.ADD, [m.outputs[0], _vec(g, "b", (K, 1, 1))], [t])
    g.set_outputs(g.add_node(Op.RELU, a.outputs, [t]).outputs)
    return g


def _kernels(graph: Graph, mode: str = "full"):
    return [k for k in fuse(interpret(graph, {}), mode) if not k.is_free]


def test_inference_batch_norm_is_the_convs_epilogue():
    (k,) = _kernels(conv_bn_relu())
    assert k.kind == "conv" and [n.op for n in k.nodes] == [Op.CONV, Op.BATCH_NORM, Op.RELU]
    # the conv's input, its weights and the norm's four per-channel vectors in; one output out
    assert k.cost.bytes_read == 2 * (X + W + 4 * K)
    assert k.cost.bytes_written == 2 * Y


def test_fusion_keeps_the_flop_count():
    table = interpret(conv_bn_relu(), {})
    conv_flops = 2 * N * K * HW * HW * C * R * R
    assert table.costs[table.graph.nodes[0]].flops == conv_flops
    assert sum(k.cost.flops for k in fuse(table, "full")) == sum(c.flops for c in table.costs.values())
    assert sum(k.cost.flops for k in fuse(table, "full")) == sum(k.cost.flops for k in fuse(table, "none"))


def test_residual_add_joins_the_same_kernel():
    (k,) = _kernels(conv_bn_relu(residual=True))
    assert [n.op for n in k.nodes] == [Op.CONV, Op.BATCH_NORM, Op.ADD, Op.RELU]
    assert k.cost.bytes_read == 2 * (X + W + 4 * K + Y)      # + the shortcut, read once
    assert k.cost.bytes_written == 2 * Y


@pytest.mark.parametrize("target", ["tpu-v6e", "h100"])
def test_same_time_as_the_block_written_as_multiply_add(target):
    bn = narrowpipe.analyze(conv_bn_relu(), target, fusion="full").timing.time_s
    affine = narrowpipe.analyze(conv_affine_relu(), target, fusion="full").timing.time_s
    # the only difference: the norm reads 4 per-channel vectors, x * a + b two (2 x 64 x 2 bytes)
    assert bn == pytest.approx(affine, rel=1e-4)


def test_training_batch_norm_stays_its_own_kernel():
    kernels = _kernels(conv_bn_relu(training=True))
    assert [[n.op for n in k.nodes] for k in kernels] == [[Op.CONV], [Op.BATCH_NORM, Op.RELU]]
    assert kernels[0].cost.bytes_written == 2 * Y           # the conv's output goes to memory


def test_batch_norm_gradient_is_not_an_epilogue():
    kernels = _kernels(conv_bn_relu(role="grad"))
    assert [n.op for n in kernels[0].nodes] == [Op.CONV]


def test_eager_and_library_gemm_modes():
    assert len(_kernels(conv_bn_relu(), "none")) == 3
    # no-epilogue: library convs take no epilogue; the norm and ReLU still fuse with each other
    assert [[n.op for n in k.nodes] for k in _kernels(conv_bn_relu(), "no-epilogue")] == \
        [[Op.CONV], [Op.BATCH_NORM, Op.RELU]]
