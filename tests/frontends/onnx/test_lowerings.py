"""Exact numbers on tiny shapes: each ONNX op lowers to the canonical ops whose rules give the
hand-computed FLOPs (2 per multiply-add for contractions, torch's convention for convolutions)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.ir import Op, Sym, ValueKind, verify


def run(nodes, inputs, outputs=None, inits=(), opset=21, extra_opsets=(), **dims):
    """Load a hand-built model; returns (graph, report)."""
    ins = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in (outputs or [nodes[-1].output[0]])]
    inits = [i if isinstance(i, TensorProto) else numpy_helper.from_array(i[1], i[0]) for i in inits]
    g = helper.make_graph(nodes, "t", ins, outs, inits)
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(g, opset_imports=opsets)
    graph = narrowpipe.load(m)
    verify(graph)
    return graph, narrowpipe.analyze(graph, **dims)


F = TensorProto.FLOAT


def ops(graph) -> list[str]:
    return [n.op.value for n in graph.nodes]


# -- contractions ---------------------------------------------------------------------------

@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_transposes_alpha_beta_and_bias(ta: int, tb: int) -> None:
    m, k, n = 3, 5, 7
    a_shape = [k, m] if ta else [m, k]
    b_shape = [n, k] if tb else [k, n]
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=ta, transB=tb, alpha=2.0, beta=0.5)
    graph, r = run([node], [("a", F, a_shape), ("b", F, b_shape), ("c", F, [n])])
    assert r.modeled_flops == 2 * m * n * k
    assert ops(graph) == ["dot", "mul", "mul", "add"]
    assert graph.outputs[0].type.shape == (m, n)
    # ONNX tensors are row-major: A [M, K] is K-major, [K, M] (transA) M-major; B [K, N] N-major,
    # [N, K] (transB) K-major
    assert graph.nodes[0].attrs["operand_major"] == ("mn" if ta else "k", "k" if tb else "mn")


def test_matmul_states_no_operand_layout() -> None:
    graph, _ = run([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", F, [3, 4]), ("b", F, [4, 5])])
    assert "operand_major" not in graph.nodes[0].attrs


@pytest.mark.parametrize("a,b,out", [([4], [4], ()), ([3, 4], [4], (3,)), ([4], [4, 5], (5,)),
                                     ([2, 3, 4], [4, 5], (2, 3, 5)), ([2, 1, 3, 4], [6, 4, 5], (2, 6, 3, 5)),
                                     ([3, 4], [2, 4, 5], (2, 3, 5))])
def test_matmul_follows_numpy_semantics(a, b, out) -> None:
    graph, r = run([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", F, a), ("b", F, b)])
    assert graph.outputs[0].type.shape == out
    assert r.modeled_flops == 2 * int(np.prod(out)) * a[-1]


def test_matmul_symbolic_batch() -> None:
    graph, r = run([helper.make_node("MatMul", ["a", "w"], ["y"])], [("a", F, ["batch", "seq", 8])],
                   inits=[("w", np.zeros((8, 16), np.float32))], batch=2, seq=5)
    assert graph.outputs[0].type.shape == (Sym("batch"), Sym("seq"), 16)
    assert r.modeled_flops == 2 * 2 * 5 * 16 * 8
    assert r.params == 128


@pytest.mark.parametrize("eq,shapes,flops", [
    ("ij,jk->ik", [[3, 4], [4, 5]], 2 * 3 * 5 * 4),
    ("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]], 2 * 2 * 3 * 5 * 4),
    ("bhqd,bhkd->bhqk", [[2, 3, 4, 8], [2, 3, 6, 8]], 2 * 2 * 3 * 4 * 6 * 8),
    ("ij,jk,kl->il", [[2, 3], [3, 4], [4, 5]], 2 * 2 * 4 * 3 + 2 * 2 * 5 * 4),
    ("...ij,...jk->...ik", [[7, 2, 3], [7, 3, 4]], 2 * 7 * 2 * 4 * 3),
    ("ij->ji", [[3, 4]], 0),
    ("ij,ij->", [[3, 4], [3, 4]], 2 * 12),
])
def test_einsum_as_pairwise_dot_generals(eq, shapes, flops) -> None:
    names = [f"x{i}" for i in range(len(shapes))]
    graph, r = run([helper.make_node("Einsum", names, ["y"], equation=eq)],
                   [(n, F, s) for n, s in zip(names, shapes)], opset=17)
    assert r.modeled_flops == flops


def test_matmul_integer_and_qlinear_matmul() -> None:
    U8 = TensorProto.UINT8
    graph, r = run([helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])],
                   [("a", U8, [3, 4]), ("b", U8, [4, 5]), ("az", U8, [])])
    # the zero point is read by the integer GEMM (a 1-byte operand), never subtracted from A:
    # A 12 + B 20 + zp 1 bytes read, the int32 [3, 5] written
    assert r.modeled_flops == 2 * 3 * 5 * 4 and ops(graph) == ["dot"] and r.bytes == 12 + 20 + 1 + 4 * 15
    scale = np.array(0.1, np.float32)
    zp = np.array(0, np.uint8)
    graph, r = run([helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])],
                   [("a", U8, [3, 4]), ("b", U8, [4, 5])],
                   inits=[("as", scale), ("az", zp), ("bs", scale), ("bz", zp), ("ys", scale), ("yz", zp)])
    assert r.modeled_flops == 2 * 3 * 5 * 4 and ops(graph) == ["dot", "quantize"]


def test_dequantized_int8_weights_are_params() -> None:
    w = np.ones((16, 8), np.int8)
    graph, r = run([helper.make_node("DequantizeLinear", ["w", "s"], ["wf"]),
                    helper.make_node("MatMul", ["x", "wf"], ["y"])],
                   [("x", F, [2, 16])], inits=[("w", w), ("s", np.array(0.5, np.float32))])
    assert r.params == 128
    assert r.modeled_flops == 2 * 2 * 8 * 16


# -- convolutions (torch's FLOP convention) -------------------------------------------------

def _torch_conv_flops(x, w, out, transposed=False) -> int:
    spatial = x[2:] if transposed else out[2:]
    return 2 * x[0] * w[0] * w[1] * int(np.prod(w[2:])) * int(np.prod(spatial))


@pytest.mark.parametrize("attrs,x,w,out", [
    ({}, [1, 3, 8, 8], [4, 3, 3, 3], [1, 4, 6, 6]),
    ({"pads": [1, 1, 1, 1], "strides": [2, 2]}, [2, 3, 9, 9], [4, 3, 3, 3], [2, 4, 5, 5]),
    ({"group": 2, "dilations": [2, 2]}, [1, 4, 10, 10], [6, 2, 3, 3], [1, 6, 6, 6]),
    ({"group": 4}, [1, 4, 5, 5], [4, 1, 3, 3], [1, 4, 3, 3]),
    ({"auto_pad": "SAME_UPPER", "strides": [2]}, [1, 2, 9], [3, 2, 4], [1, 3, 5]),
    ({"pads": [0, 1, 0, 2, 1, 0]}, [1, 2, 4, 4, 4], [2, 2, 2, 2, 2], [1, 2, 5, 5, 3]),
])
def test_conv_output_shape_and_flops(attrs, x, w, out) -> None:
    graph, r = run([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], [("x", F, x)],
                   inits=[("w", np.zeros(w, np.float32)), ("b", np.zeros(w[0], np.float32))])
    assert list(graph.outputs[0].type.shape) == out
    assert r.modeled_flops == _torch_conv_flops(x, w, out)
    assert ops(graph) == ["conv", "add"]
    conv = graph.nodes[0]
    assert conv.attrs["groups"] == attrs.get("group", 1)


def test_conv_transpose_counts_input_positions() -> None:
    x, w = [1, 4, 5, 5], [4, 3, 3, 3]
    graph, r = run([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])], [("x", F, x)],
                   inits=[("w", np.zeros(w, np.float32))])
    assert list(graph.outputs[0].type.shape) == [1, 3, 11, 11]
    assert r.modeled_flops == _torch_conv_flops(x, w, None, transposed=True)
    assert graph.nodes[0].attrs["transposed"] is True


def test_conv_symbolic_spatial_dims() -> None:
    graph, r = run([helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])],
                   [("x", F, ["n", 3, "h", "w"])], inits=[("w", np.zeros((8, 3, 3, 3), np.float32))], n=1, h=32, w=32)
    assert r.modeled_flops == _torch_conv_flops([1, 3, 32, 32], [8, 3, 3, 3], [1, 8, 16, 16])


# -- attention ------------------------------------------------------------------------------

def test_standard_attention_4d_with_gqa_and_kv_cache() -> None:
    b, hq, hk, s, past, d = 2, 8, 2, 5, 7, 16
    node = helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "present_k", "present_v"])
    graph, r = run([node], [("q", F, [b, hq, s, d]), ("k", F, [b, hk, s, d]), ("v", F, [b, hk, s, d]),
                            ("pk", F, [b, hk, past, d]), ("pv", F, [b, hk, past, d])],
                   outputs=["y", "present_k", "present_v"], opset=23)
    total = past + s
    assert r.flops_by_group["attention"] == 4 * b * hq * s * total * d
    assert graph.outputs[1].type.shape == (b, hk, total, d)
    assert sorted(ops(graph)) == ["attention", "concat", "concat"]


def test_standard_attention_3d_layout() -> None:
    b, s, hq, hk, d = 1, 6, 4, 2, 8
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=hq, kv_num_heads=hk, is_causal=1)
    graph, r = run([node], [("q", F, [b, s, hq * d]), ("k", F, [b, s, hk * d]), ("v", F, [b, s, hk * d])], opset=23)
    att = [n for n in graph.nodes if n.op is Op.ATTENTION][0]
    assert att.attrs["layout"] == "bsd" and att.attrs["num_heads"] == hq and att.attrs["kv_num_heads"] == hk
    assert r.flops_by_group["attention"] == 4 * b * hq * s * s * d


MS = [("com.microsoft", 1)]


def test_contrib_attention_includes_its_qkv_projection() -> None:
    b, s, h, n = 2, 4, 32, 4
    node = helper.make_node("Attention", ["x", "w", "bias"], ["y"], domain="com.microsoft", num_heads=n)
    graph, r = run([node], [("x", F, [b, s, h])], extra_opsets=MS,
                   inits=[("w", np.zeros((h, 3 * h), np.float32)), ("bias", np.zeros(3 * h, np.float32))])
    assert r.flops_by_group["contraction"] == 2 * b * s * 3 * h * h
    assert r.flops_by_group["attention"] == 4 * b * n * s * s * (h // n)
    assert r.params == h * 3 * h + 3 * h
    assert graph.outputs[0].type.shape == (b, s, h)


def _ort_shapes(model: onnx.ModelProto, feeds: dict) -> list[tuple]:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [tuple(o.shape) for o in sess.run(None, feeds)]


def test_contrib_group_query_attention_matches_onnxruntime() -> None:
    b, s, hq, hk, d, past = 1, 3, 4, 2, 8, 5
    total = past + s
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "seqlens", "total"],
                            ["y", "present_k", "present_v"], domain="com.microsoft", num_heads=hq, kv_num_heads=hk)
    ins = [("q", F, [b, s, hq * d]), ("k", F, [b, s, hk * d]), ("v", F, [b, s, hk * d]),
           ("pk", F, [b, hk, past, d]), ("pv", F, [b, hk, past, d]), ("seqlens", TensorProto.INT32, [b]),
           ("total", TensorProto.INT32, [])]
    g = helper.make_graph([node], "gqa", [helper.make_tensor_value_info(*i) for i in ins],
                          [helper.make_tensor_value_info(o, F, None) for o in ("y", "present_k", "present_v")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    graph = narrowpipe.load(model)
    ours = [tuple(v.type.shape) for v in graph.outputs]
    feeds = {"q": np.zeros((b, s, hq * d), np.float32), "k": np.zeros((b, s, hk * d), np.float32),
             "v": np.zeros((b, s, hk * d), np.float32), "pk": np.zeros((b, hk, past, d), np.float32),
             "pv": np.zeros((b, hk, past, d), np.float32), "seqlens": np.array([total - 1], np.int32),
             "total": np.array(total, np.int32)}
    assert ours[0] == _ort_shapes(model, feeds)[0]
    r = narrowpipe.analyze(graph)
    assert r.flops_by_group["attention"] == 4 * b * hq * s * ours[1][2] * d


def test_contrib_multihead_attention_matches_onnxruntime() -> None:
    b, s, n, h = 2, 5, 4, 32
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain="com.microsoft", num_heads=n)
    ins = [("q", F, [b, s, h]), ("k", F, [b, 7, h]), ("v", F, [b, 7, h])]
    g = helper.make_graph([node], "mha", [helper.make_tensor_value_info(*i) for i in ins],
                          [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    graph = narrowpipe.load(model)
    feeds = {"q": np.zeros((b, s, h), np.float32), "k": np.zeros((b, 7, h), np.float32),
             "v": np.zeros((b, 7, h), np.float32)}
    assert tuple(graph.outputs[0].type.shape) == _ort_shapes(model, feeds)[0]
    assert narrowpipe.analyze(graph).flops_by_group["attention"] == 4 * b * n * s * 7 * (h // n)


def test_contrib_skip_layer_norm_fused_matmul_and_matmul_nbits() -> None:
    b, s, h = 2, 3, 16
    nodes = [helper.make_node("SkipLayerNormalization", ["x", "skip", "g", "beta"], ["n"], domain="com.microsoft"),
             helper.make_node("FusedMatMul", ["n", "w"], ["m"], domain="com.microsoft", transB=1, alpha=0.5),
             helper.make_node("MatMulNBits", ["m", "q", "sc"], ["y"], domain="com.microsoft", K=h, N=8, bits=4,
                              block_size=16)]
    graph, r = run(nodes, [("x", F, [b, s, h]), ("skip", F, [b, s, h])], extra_opsets=MS,
                   inits=[("g", np.ones(h, np.float32)), ("beta", np.zeros(h, np.float32)),
                          ("w", np.zeros((h, h), np.float32)), ("q", np.zeros((8, 1, 8), np.uint8)),
                          ("sc", np.ones(8, np.float32))])
    assert graph.outputs[0].type.shape == (b, s, 8)
    assert r.flops_by_group["contraction"] == 2 * b * s * h * h + 2 * b * s * 8 * h
    assert [o for o in ops(graph) if o in ("add", "layer_norm")] == ["add", "layer_norm"]


# -- control flow -----------------------------------------------------------------------------

def _body(nodes, inputs, outputs) -> onnx.GraphProto:
    return helper.make_graph(nodes, "body", [helper.make_tensor_value_info(*i) for i in inputs],
                             [helper.make_tensor_value_info(*o) for o in outputs])


def test_loop_costs_its_body_times_the_trip_count() -> None:
    body = _body([helper.make_node("Identity", ["cond"], ["cond_out"]),
                  helper.make_node("MatMul", ["h", "w"], ["h_out"])],
                 [("i", TensorProto.INT64, []), ("cond", TensorProto.BOOL, []), ("h", F, [2, 8])],
                 [("cond_out", TensorProto.BOOL, []), ("h_out", F, [2, 8])])
    node = helper.make_node("Loop", ["trips", "", "h0"], ["h_final"], body=body)
    graph, r = run([node], [("h0", F, [2, 8])], inits=[("trips", np.array(5, np.int64)),
                                                       ("w", np.zeros((8, 8), np.float32))])
    assert graph.nodes[0].attrs["trip_count"] == 5
    assert r.flops == 5 * 2 * 2 * 8 * 8  # the body's matmul, 5 times (reported under the loop node)


def test_if_takes_the_costlier_branch() -> None:
    then = _body([helper.make_node("MatMul", ["x", "x"], ["t"])], [], [("t", F, [4, 4])])
    other = _body([helper.make_node("Relu", ["x"], ["e"])], [], [("e", F, [4, 4])])
    graph, r = run([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                   [("c", TensorProto.BOOL, []), ("x", F, [4, 4])])
    assert r.flops == 2 * 4 * 4 * 4


def test_scan_runs_its_body_per_element() -> None:
    body = _body([helper.make_node("Add", ["acc", "x_t"], ["acc_out"]),
                  helper.make_node("Identity", ["acc_out"], ["y_t"])],
                 [("acc", F, [3]), ("x_t", F, [3])], [("acc_out", F, [3]), ("y_t", F, [3])])
    node = helper.make_node("Scan", ["init", "xs"], ["final", "ys"], body=body, num_scan_inputs=1)
    graph, r = run([node], [("init", F, [3]), ("xs", F, [6, 3])], outputs=["final", "ys"])
    assert graph.outputs[1].type.shape == (6, 3)
    assert r.flops == 6 * 3


@pytest.mark.parametrize("kind,gates", [("RNN", 1), ("GRU", 3), ("LSTM", 4)])
def test_recurrent_cells(kind: str, gates: int) -> None:
    seq, batch, inp, hid = 5, 2, 6, 4
    node = helper.make_node(kind, ["x", "w", "r"], ["y"], hidden_size=hid)
    graph, r = run([node], [("x", F, [seq, batch, inp])],
                   inits=[("w", np.zeros((1, gates * hid, inp), np.float32)),
                          ("r", np.zeros((1, gates * hid, hid), np.float32))])
    assert r.modeled_flops == 2 * seq * batch * gates * hid * inp + seq * 2 * batch * gates * hid * hid
    assert r.params == gates * hid * (inp + hid)


# -- everything else ------------------------------------------------------------------------

def test_norms_reductions_and_softmax_keep_their_axes() -> None:
    nodes = [helper.make_node("LayerNormalization", ["x", "g"], ["n"], axis=-1),
             helper.make_node("Softmax", ["n"], ["s"], axis=1),
             helper.make_node("ReduceMean", ["s", "axes"], ["y"], keepdims=0)]
    graph, r = run(nodes, [("x", F, [2, 3, 4])],
                   inits=[("g", np.ones(4, np.float32)), ("axes", np.array([2], np.int64))])
    ln, sm, rm = graph.nodes
    assert (ln.op, ln.attrs["axis"]) == (Op.LAYER_NORM, 2)
    assert (sm.op, sm.attrs["axis"]) == (Op.SOFTMAX, 1)
    assert (rm.op, rm.attrs["axes"], rm.attrs["keepdims"]) == (Op.REDUCE_MEAN, (2,), False)
    assert graph.outputs[0].type.shape == (2, 3)
    assert r.flops_by_group["normalization"] == 7 * 24 + 4 * 24


def test_constant_nodes_are_constant_weights() -> None:
    c = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.ones((2, 2), np.float32)))
    graph, r = run([c, helper.make_node("Add", ["x", "c"], ["y"])], [("x", F, [2, 2])])
    assert [v.kind for v in graph.weights] == [ValueKind.CONST]
    assert r.params == 0 and r.flops == 4


def test_resize_and_pooling() -> None:
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["r"], mode="linear"),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    graph, r = run(nodes, [("x", F, [1, 3, 4, 4])], inits=[("scales", np.array([1, 1, 2, 2], np.float32))])
    resize, pool = graph.nodes
    assert resize.outputs[0].type.shape == (1, 3, 8, 8) and resize.attrs["spatial_dims"] == 2
    assert pool.outputs[0].type.shape == (1, 3, 4, 4) and pool.attrs["kernel"] == (2, 2)


def test_sources_name_the_onnx_node_and_file(tmp_path) -> None:
    g = helper.make_graph([helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="fc1")], "t",
                          [helper.make_tensor_value_info("a", F, [2, 3])],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(np.zeros((3, 4), np.float32), "b"),
                           numpy_helper.from_array(np.zeros(4, np.float32), "c")])
    path = tmp_path / "fc.onnx"
    onnx.save(helper.make_model(g), str(path))
    graph = narrowpipe.load(str(path))
    assert {(n.source.op, n.source.name, n.source.file) for n in graph.nodes} == {("ai.onnx::Gemm", "fc1", str(path))}


def test_function_ops_lower_through_their_bodies() -> None:
    """SwiGLU has no table entry: its ONNX function body is expanded, sources keep SwiGLU."""
    graph, r = run([helper.make_node("SwiGLU", ["a", "b"], ["y"])], [("a", F, [2, 8]), ("b", F, [2, 8])], opset=28)
    assert graph.outputs[0].type.shape == (2, 8)
    assert {n.source.op for n in graph.nodes} == {"ai.onnx::SwiGLU"}
    assert not r.unmodeled and r.flops + r.transcendentals > 0
