"""Weights, activations and KV cache in separate formats; weight-only quantization pays a dequantization."""

import dataclasses
import math

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution import DeviceGroup, TimingOptions
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.serving import serve
from narrowpipe.costmodel.serving.formats import Formats
from narrowpipe.costmodel.timing import fused_program, time_program
from narrowpipe.ir import DType, Graph, Op, TensorType

SIZES = dict(layers=32, hidden=4096, heads=32, vocab=128256, ffn=14336, kv_heads=8, gated_mlp=True, seq=2048)


@pytest.fixture(scope="module")
def llama8b():
    return narrowpipe.transformer(**SIZES)


def test_int4_weight_only_decode_streams_a_quarter_of_the_linear_layers_bytes(llama8b):
    """AWQ/GPTQ quantize the linear layers (groups of 128 with a scale and a zero point each); the
    embedding, lm_head and norms stay in bf16."""
    bf16 = serve(llama8b, "h100", batch=1, context=2048, with_crossover=False)
    int4 = serve(llama8b, "h100", batch=1, context=2048, weights="int4", with_crossover=False)
    assert int4.formats["weights"] == "int4"
    L, E, F, V, KV = 32, 4096, 14336, 128256, 1024
    linear = L * (E * (E + KV + KV + E) + 3 * E * F)            # q, k, v, o; gate, up, down
    norms = L * 2 * E + E
    embed = head = V * E
    assert bf16.memory.weights == pytest.approx(2 * (linear + norms + embed + head), rel=1e-6)
    # AWQ's int4: half a byte per weight, and per group of 128 an fp16 scale and a 4-bit zero point
    stored = linear / 2 + linear / 128 * (2 + 0.5)
    assert int4.memory.weights == pytest.approx(stored + 2 * (norms + embed + head), rel=1e-6)
    h100 = get_target("h100")
    # the embedding is gathered a row at a time: not streamed per step
    moved = stored + 2 * (norms + head) + bf16.kv_bytes_per_token * 2049
    # beyond its launch each GEMM kernel (q, k, v, o, gate, up, down per layer; the head) pays the
    # GEMM latency floor; the int4 dequantization hides under the weight reads
    gemms = 7 * 32 + 1
    hand = moved / (h100.memory_bandwidth * h100.memory_efficiency) + int4.decode.kernels * h100.launch_overhead \
        + gemms * h100.gemm_latency
    assert int4.tpot_s == pytest.approx(hand, rel=0.03)
    assert int4.bound == "memory"


def test_fp8_weights_leave_a_tied_head_and_norms_in_the_models_format():
    """A tied embedding/head table is read by a gather and a GEMM: the engines keep it in 16 bits."""
    g = narrowpipe.transformer(layers=2, hidden=256, heads=4, vocab=1000, ffn=512, tie_embeddings=True, seq=64)
    fp8 = serve(g, "h100", batch=1, context=64, weights="fp8_e4m3", with_crossover=False)
    bf16 = serve(g, "h100", batch=1, context=64, with_crossover=False)
    linear = 2 * (4 * 256 * 256 + 2 * 256 * 512)
    assert bf16.memory.weights - fp8.memory.weights == pytest.approx(linear, rel=1e-6)   # 2 -> 1 byte each


def test_fp8_end_to_end_prefill_runs_at_the_fp8_rate(llama8b):
    bf16 = serve(llama8b, "h100", mode="prefill", batch=4, input_len=2048)
    fp8 = serve(llama8b, "h100", mode="prefill", batch=4, input_len=2048, weights="fp8_e4m3",
                activations="fp8_e4m3")
    assert bf16.bound == fp8.bound == "compute"
    assert 1.6 < bf16.ttft_s / fp8.ttft_s < 2.05            # matmuls at 1979 vs 989 TFLOP/s; attention as before


def test_fp8_kv_cache_doubles_the_batch_that_fits(llama8b):
    bf16 = serve(llama8b, "h100", batch=1, context=8192, with_crossover=False)
    fp8 = serve(llama8b, "h100", batch=1, context=8192, kv="fp8_e4m3", with_crossover=False)
    assert fp8.kv_bytes_per_token == bf16.kv_bytes_per_token // 2
    assert fp8.max_batch >= 2 * bf16.max_batch - 1


def _gemm_graph(w: DType) -> Graph:
    g = Graph("gemm")
    x = g.add_input("x", TensorType(DType.BF16, (4096, 4096)))
    wt = g.add_input("w", TensorType(w, (4096, 4096)))
    n = g.add_node(Op.DOT, [x, wt], [TensorType(DType.BF16, (4096, 4096))],
                   {"lhs_contract": (1,), "rhs_contract": (1,), "lhs_batch": (), "rhs_batch": ()})
    g.set_outputs(n.outputs)
    return g


def test_weight_only_matmul_is_never_faster_than_its_dequantization():
    """A chip with slow vector units: the int4 GEMM is bound by dequantizing each weight tile once per
    row tile (2 ops per weight element), which overlaps the tensor-core work."""
    h100 = get_target("h100")
    slow = dataclasses.replace(h100, vector_flops={"fp64": 1e12, "fp32": 1e12})
    table = interpret(_gemm_graph(DType.INT4), {})
    t = time_program(fused_program(table, slow, TimingOptions()), DeviceGroup(slow, 1)).times[0]
    tiles = min(math.ceil(4096 / tm) for tm, _, _ in slow.tile_shapes)   # the best tile's row tiles
    assert t.compute_s >= 2 * 4096 * 4096 * tiles / 1e12
    plain = time_program(fused_program(interpret(_gemm_graph(DType.BF16), {}), slow, TimingOptions()),
                         DeviceGroup(slow, 1)).times[0]
    assert t.compute_s > 2 * plain.compute_s


def test_fp8_gemm_inputs_quantize_only_what_gemms_read():
    """TensorRT-LLM/vLLM FP8 (W8A8): per layer the attention norm's output (q, k, v read it), the
    attention output (o), the MLP norm's output (gate, up) and the SwiGLU product (down) are FP8;
    plus the final norm's output (the head). The residual stream and every GEMM output stay bf16."""
    from narrowpipe.costmodel.serving.formats import Formats
    tiny = narrowpipe.transformer(layers=2, hidden=64, heads=4, vocab=256, ffn=128, kv_heads=2, gated_mlp=True,
                                  seq=8, past=8)
    g = Formats.of(weights="fp8_e4m3", activations="bf16", gemm_inputs="fp8_e4m3").apply(tiny)
    users = g.users()
    fp8 = [v for n in g.nodes for v in n.outputs if v.type.dtype == DType.FP8_E4M3]
    assert len(fp8) == 4 * 2 + 1
    assert all(u.op in (Op.DOT, Op.GROUPED_DOT) for v in fp8 for u in users[v])
    dots = [n for n in g.nodes if n.op == Op.DOT]
    assert dots and all(v.type.dtype == DType.BF16 for n in dots for v in n.outputs)


def test_fp8_gemm_inputs_leave_an_exported_attentions_matmuls_in_16_bits():
    """An export without a fused attention op writes attention as two matmuls (Q K^T, then P V):
    those are GEMMs of activations by activations, which the engines run in the activations' format,
    so Q, K, V and the softmax probabilities stay bf16; the linear layers' input (read through a
    transposed weight, as ``torch.export`` writes ``linear``) is FP8."""
    from narrowpipe.costmodel.serving.formats import gemm_inputs_in
    from narrowpipe.ir import ValueKind
    bf16 = DType.BF16
    g = Graph("eager_attention")
    x = g.add_input("x", TensorType(bf16, (8, 16)))
    contract = {"lhs_contract": (1,), "rhs_contract": (0,)}

    def linear(v, name):
        w = g.add_input(name, TensorType(bf16, (16, 16)), ValueKind.PARAM)
        wt = g.add_node(Op.PERMUTE, [w], [TensorType(bf16, (16, 16))], {"perm": (1, 0)}).outputs[0]
        return g.add_node(Op.DOT, [v, wt], [TensorType(bf16, (8, 16))], contract).outputs[0]

    normed = g.add_node(Op.MUL, [x, x], [TensorType(bf16, (8, 16))]).outputs[0]
    q, k, v = linear(normed, "wq"), linear(normed, "wk"), linear(normed, "wv")
    scores = g.add_node(Op.DOT, [q, k], [TensorType(bf16, (8, 8))],
                        {"lhs_contract": (1,), "rhs_contract": (1,)}).outputs[0]
    probs = g.add_node(Op.SOFTMAX, [scores], [TensorType(bf16, (8, 8))], {"axis": -1}).outputs[0]
    g.set_outputs([g.add_node(Op.DOT, [probs, v], [TensorType(bf16, (8, 16))], contract).outputs[0]])
    assert gemm_inputs_in(g, DType.FP8_E4M3) == 1
    assert normed.type.dtype == DType.FP8_E4M3
    assert all(t.type.dtype == bf16 for t in (q, k, v, scores, probs))


def test_fp8_gemm_inputs_prefill_sits_between_weight_only_and_fp8_end_to_end(llama8b):
    """GEMMs at the fp8 rate (faster than fp8 weights with bf16 activations), the norms, residuals and
    attention in bf16 (no faster than fp8 end to end); tensor-parallel collectives move bf16."""
    kw = dict(mode="prefill", batch=1, input_len=2048, with_crossover=False, weights="fp8_e4m3")
    w8 = serve(llama8b, "h100", activations="bf16", **kw).ttft_s
    w8a8 = serve(llama8b, "h100", activations="bf16", gemm_inputs="fp8_e4m3", **kw)
    e2e = serve(llama8b, "h100", activations="fp8_e4m3", **kw).ttft_s
    assert e2e <= w8a8.ttft_s < w8
    assert any("GEMM inputs in fp8_e4m3" in n for n in w8a8.notes)
    from narrowpipe.costmodel.serving.serve import replica_for
    r = replica_for(llama8b, "h100", tp=2, weights="fp8_e4m3", activations="bf16", gemm_inputs="fp8_e4m3")
    assert r.act_bytes == 2
    # the all-reduces move 16-bit rows: the same collectives time as with bf16 GEMM inputs
    w8_only = replica_for(llama8b, "h100", tp=2, weights="fp8_e4m3", activations="bf16")
    assert r.step(1, 2048, 0).comm_s == w8_only.step(1, 2048, 0).comm_s > 0


def test_fp8_gemms_on_a_chip_without_an_fp8_rate_say_they_run_at_bf16(llama8b):
    """TPU v5e lists bf16 and int8 matrix rates, no fp8 (its catalog file): the report says so."""
    v5e = serve(llama8b, "tpu-v5e", mode="prefill", batch=1, input_len=2048, weights="fp8_e4m3",
                gemm_inputs="fp8_e4m3")
    bf16 = serve(llama8b, "tpu-v5e", mode="prefill", batch=1, input_len=2048)
    assert "fp8_e4m3" not in get_target("tpu-v5e").matrix_flops
    assert any("tpu-v5e has no fp8_e4m3 matrix rate" in n and "bf16 rate (197 TFLOP/s)" in n for n in v5e.notes)
    assert v5e.ttft_s == pytest.approx(bf16.ttft_s, rel=0.05)        # the bytes shrink; compute-bound prefill
    h100 = serve(llama8b, "h100", mode="prefill", batch=1, input_len=2048, weights="fp8_e4m3", gemm_inputs="fp8_e4m3")
    assert not any("matrix rate" in n for n in h100.notes)


def test_nvfp4_weights_carry_an_fp8_scale_per_16_weights():
    """NVFP4: 4-bit codes in blocks of 16 with one E4M3 scale, 4.5 bits per weight; the scales are
    weights the GEMM reads (one kernel per linear layer, as without them), not parameters."""
    g = narrowpipe.transformer(layers=2, hidden=256, heads=4, vocab=1000, ffn=512, seq=64)
    fp4 = serve(g, "b200", batch=1, context=64, weights="fp4", with_crossover=False)
    bf16 = serve(g, "b200", batch=1, context=64, with_crossover=False)
    linear = 2 * (4 * 256 * 256 + 2 * 256 * 512)                  # q, k, v, o; up, down (a plain MLP)
    assert bf16.memory.weights - fp4.memory.weights == pytest.approx(linear * (2 - 0.5 - 1 / 16), rel=1e-9)
    assert fp4.decode.kernels == bf16.decode.kernels
    assert Formats.of(weights="fp4").apply(g).param_count() == g.param_count()
