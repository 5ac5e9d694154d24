"""onnxruntime's com.microsoft ops as its optimizers emit them (FusedConv, MultiHeadAttention with a
packed bias or packed KV, Attention with a present cache, FusedMatMul's transBatch flags) and ONNX's
opset-23 Attention with a past cache: each output shape is what onnxruntime returns for the same
single-node model, each FLOP count a hand formula from the op's shapes."""

from __future__ import annotations

from math import prod

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.interpreter import interpret  # noqa: E402
from narrowpipe.errors import ShapeError  # noqa: E402
from narrowpipe.ir import DType, Graph, Op, Sym, TensorType, problems, verify  # noqa: E402
from narrowpipe.ir.shapes import evaluate_dim  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)
B, S, P, L, N, HD = 2, 5, 7, 9, 4, 8
D = N * HD


def _vi(name: str, shape):
    return helper.make_tensor_value_info(name, F, shape)


def _init(name: str, shape) -> onnx.TensorProto:
    return helper.make_tensor(name, F, shape, RNG.standard_normal(prod(shape)).astype(np.float32).tolist())


def _model(node, inputs, n_out: int = 1, inits=(), opset: int = 17) -> onnx.ModelProto:
    outs = [_vi(o, None) for o in list(node.output)[:n_out]]
    g = helper.make_graph([node], "g", inputs, outs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


def _ort_shapes(model: onnx.ModelProto, feeds: dict[str, tuple[int, ...]]) -> list[tuple[int, ...]]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    arrays = {k: RNG.standard_normal(s).astype(np.float32) for k, s in feeds.items()}
    return [tuple(o.shape) for o in sess.run(None, arrays)]


def _np_shapes(graph: Graph, dims: dict[str, int]) -> list[tuple[int, ...]]:
    return [tuple(evaluate_dim(d, dims) for d in v.type.shape) for v in graph.outputs]


def _flops(graph: Graph, dims: dict[str, int], group: str) -> int:
    return narrowpipe.analyze(graph, dims=dims).flops_by_group.get(group, 0)


# -- 1. FusedConv ---------------------------------------------------------------------------------

@pytest.mark.parametrize("batch", ["n", 2])
@pytest.mark.parametrize("kernel_attr", [True, False])
def test_fused_conv_output_channels_come_from_the_weight(batch, kernel_attr) -> None:
    """ORT's Conv+Relu fusion, 3 -> 8 channels, 3x3 stride 2 pad 1 on 32x32: [2, 8, 16, 16] as
    onnxruntime returns it (the shape rule once kept the input's 3 channels, as for a pool), and
    2 x 2*8*16*16 outputs x 3*3*3 taps = 221,184 FLOPs; the kernel from the weight when the
    attribute is absent."""
    kernel = {"kernel_shape": [3, 3]} if kernel_attr else {}
    node = helper.make_node("FusedConv", ["x", "w", "b"], ["y"], domain="com.microsoft", activation="Relu",
                            strides=[2, 2], pads=[1, 1, 1, 1], **kernel)
    model = _model(node, [_vi("x", [batch, 3, 32, 32])], inits=[_init("w", [8, 3, 3, 3]), _init("b", [8])])
    dims = {"n": 2} if batch == "n" else {}
    graph = narrowpipe.load(model)
    verify(graph)
    assert _np_shapes(graph, dims) == _ort_shapes(model, {"x": (2, 3, 32, 32)}) == [(2, 8, 16, 16)]
    assert _flops(graph, dims, "convolution") == 2 * (2 * 8 * 16 * 16) * (3 * 3 * 3) == 221_184


# -- 2. MultiHeadAttention with a packed bias ----------------------------------------------------

@pytest.mark.parametrize("kv_len", [S, L])
def test_mha_adds_each_projection_its_part_of_the_packed_bias(kv_len) -> None:
    """bias [D + D + D]: q gets bias[0:D], k bias[D:2D], v bias[2D:] (it once got all 3D, which
    cannot broadcast): 3 adds of B*len*D elements; attention 2 x 2*B*N*S*kv_len*H."""
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "bias"], ["y"], domain="com.microsoft",
                            num_heads=N)
    model = _model(node, [_vi("q", ["b", "s", D]), _vi("k", ["b", "l", D]), _vi("v", ["b", "l", D])],
                   inits=[_init("bias", [3 * D])])
    dims = {"b": B, "s": S, "l": kv_len}
    graph = narrowpipe.load(model)
    verify(graph)
    feeds = {"q": (B, S, D), "k": (B, kv_len, D), "v": (B, kv_len, D)}
    assert _np_shapes(graph, dims) == _ort_shapes(model, feeds) == [(B, S, D)]
    assert _flops(graph, dims, "attention") == 4 * B * N * S * kv_len * HD
    assert _flops(graph, dims, "elementwise") == B * S * D + 2 * B * kv_len * D
    parts = [n for n in graph.nodes if n.op is Op.SLICE and n.inputs[0].name == "bias"]
    assert [n.outputs[0].type.shape for n in parts] == [(D,)] * 3


def test_a_static_broadcast_failure_is_not_blamed_on_the_bindings() -> None:
    """[2, 32] + [96] cannot broadcast whatever the bindings: the error says the graph fixed the
    sizes, not the attention-mask hint that only symbolic dims bound apart deserve."""
    g = Graph("ew")
    a, b = g.add_input("a", TensorType(DType.FP32, (2, 32))), g.add_input("c", TensorType(DType.FP32, (96,)))
    g.set_outputs(g.add_node(Op.ADD, [a, b], [TensorType(DType.FP32, (2, 32))]).outputs)
    with pytest.raises(ShapeError) as err:
        narrowpipe.analyze(g)
    assert "operands do not broadcast" in str(err.value) and "mask" not in str(err.value)
    assert "graph itself fixes" in str(err.value)
    g = Graph("mask")
    scores = g.add_input("s", TensorType(DType.FP32, (2, Sym("past") + Sym("seq"))))
    mask = g.add_input("m", TensorType(DType.FP32, (2, Sym("total"))))
    g.set_outputs(g.add_node(Op.ADD, [scores, mask], [scores.type]).outputs)
    with pytest.raises(ShapeError, match="attention mask's total length"):
        narrowpipe.analyze(g, dims={"past": 3, "seq": 2, "total": 4})


# -- 3. com.microsoft Attention with a present output ---------------------------------------------

def _attention(past: bool) -> onnx.ModelProto:
    ins = ["x", "w", "bb", "", "past"] if past else ["x", "w", "bb"]
    node = helper.make_node("Attention", ins, ["y", "present"], domain="com.microsoft", num_heads=N, unidirectional=1)
    inputs = [_vi("x", ["b", "s", D])] + ([_vi("past", [2, "b", N, "p", HD])] if past else [])
    return _model(node, inputs, 2, [_init("w", [D, 3 * D]), _init("bb", [3 * D])])


@pytest.mark.parametrize("past", [True, False])
def test_attention_present_stacks_past_and_new_keys_and_values(past) -> None:
    """GPT-2-with-past: present [2, B, N, P + S, H] as onnxruntime returns it; FLOPs the QKV
    projection 2*B*S*D*3D = 61,440 plus attention 4*B*N*S*T*H (T = P + S: 15,360; T = S: 6,400).
    The present is one copy, as the kernel's ConcatStateChunk: past and new K/V read, present
    written (4 bytes each); the IR holds no two-input reshape."""
    model, dims = _attention(past), {"b": B, "s": S, **({"p": P} if past else {})}
    graph = narrowpipe.load(model)
    verify(graph)
    t = P + S if past else S
    feeds = {"x": (B, S, D), **({"past": (2, B, N, P, HD)} if past else {})}
    assert _np_shapes(graph, dims) == _ort_shapes(model, feeds) == [(B, S, D), (2, B, N, t, HD)]
    r = narrowpipe.analyze(graph, dims=dims)
    assert r.flops_by_group["contraction"] == 2 * B * S * D * 3 * D == 61_440
    assert r.flops_by_group["attention"] == 4 * B * N * S * t * HD == (15_360 if past else 6_400)
    assert r.flops_by_group["contraction"] + r.flops_by_group["attention"] == (76_800 if past else 67_840)
    present = graph.outputs[1].producer
    assert present is not None and present.op is (Op.CONCAT if past else Op.COPY)
    cost = interpret(graph, dims).costs[present]
    assert cost.bytes_read == 4 * 2 * B * N * t * HD and cost.bytes_written == 4 * 2 * B * N * t * HD
    assert all(len(n.inputs) == 1 for n in graph.nodes if n.op is Op.RESHAPE)


def test_the_verifier_refuses_a_reshape_of_two_tensors() -> None:
    """A reshape views one tensor; past it only an integer shape or axes of rank <= 1 (ONNX Reshape,
    Unsqueeze) may follow."""
    g = Graph("r")
    k, v = g.add_input("k", TensorType(DType.FP32, (2, 5, 32))), g.add_input("v", TensorType(DType.FP32, (2, 5, 32)))
    g.add_node(Op.RESHAPE, [k, v], [TensorType(DType.FP32, (2, 2, 4, 5, 8))])
    shape = g.add_input("shape", TensorType(DType.INT64, (3,)))
    g.add_node(Op.RESHAPE, [k, shape], [TensorType(DType.FP32, (10, 4, 8))])
    found = problems(g)
    assert len(found) == 1 and "a reshape views one tensor" in found[0] and "'v'" in found[0]


# -- 4. FusedMatMul's transBatch flags ------------------------------------------------------------

@pytest.mark.parametrize("attrs, a, b", [
    ({"transBatchA": 1}, (5, 2, 3, 8), (2, 3, 8, 6)),
    ({"transBatchB": 1}, (2, 3, 5, 8), (8, 2, 3, 6)),
    ({"transBatchA": 1, "transA": 1}, (8, 2, 3, 5), (2, 3, 8, 6)),
    ({"transBatchB": 1, "transB": 1}, (2, 3, 5, 8), (6, 2, 3, 8)),
    ({"transBatchA": 1, "transBatchB": 1}, (5, 2, 3, 8), (8, 2, 3, 6)),
    ({"transBatchA": 1, "transBatchB": 1, "transA": 1, "transB": 1}, (8, 2, 3, 5), (6, 2, 3, 8)),
    ({"transBatchA": 1}, (5, 1, 3, 8), (2, 3, 8, 6)),
    ({"transBatchA": 1}, (5, 2, 8), (2, 8, 6)),
    ({"transA": 1}, (2, 3, 8, 5), (8, 6)),
    ({"transB": 1}, (5, 8), (2, 3, 6, 8)),
])
def test_fused_matmul_reads_its_operands_in_onnxruntimes_order(attrs, a, b) -> None:
    """Output shape what onnxruntime returns; FLOPs 2 x outputs x K (K = 8 in every case)."""
    node = helper.make_node("FusedMatMul", ["a", "c"], ["y"], domain="com.microsoft", **attrs)
    model = _model(node, [_vi("a", list(a)), _vi("c", list(b))])
    graph = narrowpipe.load(model)
    verify(graph)
    (want,) = _ort_shapes(model, {"a": a, "c": b})
    assert _np_shapes(graph, {}) == [want]
    assert _flops(graph, {}, "contraction") == 2 * prod(want) * 8


def test_fused_matmul_trans_batch_needs_equal_ranks_of_three() -> None:
    """onnxruntime refuses transBatchA with ranks 4 and 2 ('Two inputs should have same rank and
    rank >= 3'): a ShapeError naming the node, not a count."""
    node = helper.make_node("FusedMatMul", ["a", "c"], ["y"], domain="com.microsoft", transBatchA=1)
    with pytest.raises(ShapeError, match="same rank >= 3"):
        narrowpipe.load(_model(node, [_vi("a", [5, 2, 3, 8]), _vi("c", [8, 6])]))


# -- 5. MultiHeadAttention with packed KV ---------------------------------------------------------

@pytest.mark.parametrize("symbolic", [True, False])
def test_mha_packed_kv_is_split_into_keys_and_values(symbolic) -> None:
    """key [B, L, N, 2, H] with no value (the spec allows it; onnxruntime runs it on CUDA only):
    output [B, S, N*H], attention 4*B*N*S*L*H = 11,520 FLOPs."""
    node = helper.make_node("MultiHeadAttention", ["q", "kv"], ["y"], domain="com.microsoft", num_heads=N)
    q, kv = (["b", "s", D], ["b", "l", N, 2, HD]) if symbolic else ([B, S, D], [B, L, N, 2, HD])
    graph = narrowpipe.load(_model(node, [_vi("q", q), _vi("kv", kv)]))
    verify(graph)
    dims = {"b": B, "s": S, "l": L} if symbolic else {}
    assert _np_shapes(graph, dims) == [(B, S, D)]
    assert _flops(graph, dims, "attention") == 4 * B * N * S * L * HD == 11_520


# -- 6. opset-23 Attention with a past cache and untyped presents ---------------------------------

@pytest.mark.parametrize("three_d", [False, True])
def test_onnx_attention_presents_are_past_plus_new(three_d) -> None:
    """GQA (4 query heads, 2 kv heads) with a [b, 2, p, 8] cache and symbolic dims: the presents
    [b, 2, p + s, 8] (ONNX's inference gives no rank), as onnxruntime returns them;
    attention 4*B*N*S*(P+S)*H = 15,360 FLOPs."""
    nk = 2
    node = helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "pk_out", "pv_out"], is_causal=1,
                            **({"q_num_heads": N, "kv_num_heads": nk} if three_d else {}))
    if three_d:
        qkv = [_vi("q", ["b", "s", D]), _vi("k", ["b", "s", nk * HD]), _vi("v", ["b", "s", nk * HD])]
        feeds = {"q": (B, S, D), "k": (B, S, nk * HD), "v": (B, S, nk * HD)}
    else:
        qkv = [_vi("q", ["b", N, "s", HD]), _vi("k", ["b", nk, "s", HD]), _vi("v", ["b", nk, "s", HD])]
        feeds = {"q": (B, N, S, HD), "k": (B, nk, S, HD), "v": (B, nk, S, HD)}
    cache = [_vi("pk", ["b", nk, "p", HD]), _vi("pv", ["b", nk, "p", HD])]
    model = _model(node, qkv + cache, 3, opset=23)
    dims = {"b": B, "s": S, "p": P}
    graph = narrowpipe.load(model)
    verify(graph)
    got = _np_shapes(graph, dims)
    assert got == _ort_shapes(model, {**feeds, "pk": (B, nk, P, HD), "pv": (B, nk, P, HD)})
    assert got[1] == got[2] == (B, nk, P + S, HD)
    assert _flops(graph, dims, "attention") == 4 * B * N * S * (P + S) * HD == 15_360
