"""Mixture-of-experts ONNX files: onnxruntime's MoE/QMoE contrib ops and the per-expert MatMuls an
exporter unrolls a grouped GEMM into both become grouped GEMMs that count what the model builder
counts for the same experts (and hand formulas); nothing is left unmodeled or unbound."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.ir import Op, verify
from narrowpipe.models import transformer

H, FFN, E, K = 32, 48, 8, 2
F = TensorProto.FLOAT
MS = ("com.microsoft", 1)


def _load(nodes, inputs, inits, outputs=("y",)):
    ins = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    outs = [helper.make_tensor_value_info(o, F, None) for o in outputs]
    g = helper.make_graph(nodes, "moe", ins, outs, [numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(*MS)])
    graph = narrowpipe.load(m)
    verify(graph)
    return graph


def _w(*shape, dtype=np.float32):
    return np.zeros(shape, dtype=dtype)


def _moe_graph(fused: bool):
    """A router MatMul and one MoE over [batch, seq, H]: SwiGLU fused in fc1 ([E, 2I, H]) or, as
    onnxruntime's transformer fusion writes it, silu(fc1) gated by a separate fc3."""
    inits = [("gate", _w(H, E)), ("fc1", _w(E, 2 * FFN if fused else FFN, H)), ("fc2", _w(E, H, FFN))]
    names = ["x", "logits", "fc1", "", "fc2", ""]
    if not fused:
        inits.append(("fc3", _w(E, FFN, H)))
        names += ["fc3"]
    attrs = {"k": K, "normalize_routing_weights": 1,
             "activation_type": "swiglu" if fused else "silu"} | ({"swiglu_fusion": 2} if fused else {})
    nodes = [helper.make_node("MatMul", ["x", "gate"], ["logits"]),
             helper.make_node("MoE", names, ["y"], domain="com.microsoft", **attrs)]
    return _load(nodes, [("x", F, ["batch", "seq", H])], inits)


def _builder_experts(batch, seq):
    """The builder's grouped GEMMs for the same experts (fp32): FLOPs and bytes per op."""
    g = transformer(1, H, 4, 100, ffn=FFN, gated_mlp=True, experts=E, top_k=K, dtype="fp32", seq=seq)
    r = narrowpipe.analyze(g, batch=batch, seq=seq)
    return sorted((row.flops, row.bytes) for row in r.ops if row.op == "grouped_dot")


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("batch,seq", [(2, 5), (1, 1)])
def test_onnxruntime_moe_counts_what_the_builder_counts(fused, batch, seq):
    graph = _moe_graph(fused)
    r = narrowpipe.analyze(graph, strict=True, batch=batch, seq=seq)
    rows = K * batch * seq
    experts = 2 * rows * (2 * FFN * H + H * FFN)
    assert r.flops_by_group["contraction"] == 2 * batch * seq * H * E + experts
    grouped = [n for n in graph.nodes if n.op is Op.GROUPED_DOT]
    assert len(grouped) == (2 if fused else 3) and all(n.attrs["top_k"] == K for n in grouped)
    if fused:   # the same two grouped GEMMs as the builder's, byte for byte (decode: 2 experts read)
        assert sorted((row.flops, row.bytes) for row in r.ops if row.op == "grouped_dot") == \
            _builder_experts(batch, seq)


def test_qmoe_dequantizes_packed_experts_then_runs_the_same_gemms():
    """4-bit experts packed two to a byte ([E, 2I, H/2] uint8) with per-row scales."""
    inits = [("gate", _w(H, E)), ("fc1", _w(E, 2 * FFN, H // 2, dtype=np.uint8)), ("s1", _w(E, 2 * FFN)),
             ("fc2", _w(E, H, FFN // 2, dtype=np.uint8)), ("s2", _w(E, H))]
    nodes = [helper.make_node("MatMul", ["x", "gate"], ["logits"]),
             helper.make_node("QMoE", ["x", "logits", "fc1", "s1", "", "fc2", "s2"], ["y"], domain="com.microsoft",
                              k=K, activation_type="swiglu", swiglu_fusion=2, expert_weight_bits=4)]
    graph = _load(nodes, [("x", F, ["tokens", H])], inits)
    r = narrowpipe.analyze(graph, strict=True, tokens=6)
    assert r.flops_by_group["contraction"] == 2 * 6 * H * E + 2 * 6 * K * (2 * FFN * H + H * FFN)
    assert [n.op for n in graph.nodes].count(Op.DEQUANTIZE) == 2
    assert r.params == H * E + E * 2 * FFN * H // 2 + E * H * FFN // 2   # the scales are not parameters


def _unrolled_graph(groups: int):
    """What transformers' ONNX exporter writes for ``_grouped_mm(x [S, K], w [G, K, N], offsets)``:
    per group a Range over its rows, a Gather, a MatMul by its Split/Squeeze-d weight, then a Concat."""
    n_out = 40
    nodes = [helper.make_node("Split", ["offsets"], [f"end{g}" for g in range(groups)], axis=0, num_outputs=groups),
             helper.make_node("Split", ["w"], [f"w{g}" for g in range(groups)], axis=0, num_outputs=groups)]
    prev = "zero"
    for g in range(groups):
        nodes += [helper.make_node("Squeeze", [f"end{g}", "axis0"], [f"e{g}"]),
                  helper.make_node("Range", [prev, f"e{g}", "one"], [f"rows{g}"]),
                  helper.make_node("Gather", ["x", f"rows{g}"], [f"x{g}"], axis=0),
                  helper.make_node("Squeeze", [f"w{g}", "axis0"], [f"wg{g}"]),
                  helper.make_node("MatMul", [f"x{g}", f"wg{g}"], [f"y{g}"])]
        prev = f"e{g}"
    nodes.append(helper.make_node("Concat", [f"y{g}" for g in range(groups)], ["y"], axis=0))
    inits = [("w", _w(groups, H, n_out)), ("axis0", np.array([0], np.int64)), ("zero", np.array(0, np.int64)),
             ("one", np.array(1, np.int64))]
    return _load(nodes, [("x", F, ["rows", H]), ("offsets", TensorProto.INT64, [groups])], inits), n_out


def test_unrolled_per_expert_matmuls_fold_into_one_grouped_gemm():
    graph, n_out = _unrolled_graph(E)
    grouped = [n for n in graph.nodes if n.op is Op.GROUPED_DOT]
    assert len(grouped) == 1 and grouped[0].attrs["rhs_contract"] == 1
    assert not any(n.op in (Op.DOT, Op.CONCAT, Op.IOTA) for n in graph.nodes)
    assert set(graph.dims) == {"rows"} and graph.symbols() == {"rows"}   # no per-expert row counts to bind
    r = narrowpipe.analyze(graph, strict=True, rows=24, expert_balance="balanced")   # every expert read
    assert r.flops == 2 * 24 * H * n_out
    assert r.bytes == 4 * (24 * H + E * H * n_out + 24 * n_out) + 8 * E
    three = narrowpipe.analyze(graph, rows=3, expert_balance="balanced")
    assert three.bytes == 4 * (3 * H + 3 * H * n_out + 3 * n_out) + 8 * E


@pytest.mark.slow
@pytest.mark.parametrize("fusions", [None, "cuda"], ids=["unrolled", "ort-moe"])
def test_transformers_onnx_exports_of_mixtral_count_what_flop_counter_mode_counts(tmp_path, fusions):
    """transformers' own ONNX exporter on a tiny Mixtral: its default experts unroll into per-expert
    MatMuls, its CUDA fusions write onnxruntime's MoE op; FlopCounterMode runs the same weights (batched_mm
    experts, eager attention) at batch 2, seq 12."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    from torch.utils.flop_counter import FlopCounterMode
    from transformers.exporters.configs import OnnxConfig
    from transformers.exporters.exporter_onnx import OnnxExporter

    torch.manual_seed(0)
    config = transformers.MixtralConfig(hidden_size=H, intermediate_size=FFN, num_hidden_layers=1,
                                        num_attention_heads=4, num_key_value_heads=2, vocab_size=300,
                                        num_local_experts=E, num_experts_per_tok=K)
    config._attn_implementation, config._experts_implementation = "eager", "batched_mm"
    model = transformers.MixtralForCausalLM(config).eval()
    ids = torch.randint(0, 300, (2, 12))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(ids, use_cache=False)
    model.config._attn_implementation = "sdpa"
    model.set_experts_implementation("grouped_mm")
    exported = OnnxExporter().export(model, {"input_ids": ids, "use_cache": False},
                                     config=OnnxConfig(dynamic=True, ort_fusions=fusions))
    import onnx_ir
    path = tmp_path / "mixtral.onnx"
    onnx_ir.save(exported.program, str(path))
    graph = narrowpipe.load(path)
    batch, seq = (d for d in graph.dims_with_role(narrowpipe.DimRole.BATCH) + graph.dims_with_role(
        narrowpipe.DimRole.SEQUENCE))
    r = narrowpipe.analyze(graph, strict=True, dims={batch: 2, seq: 12})
    assert r.flops_by_group["contraction"] + r.flops_by_group["attention"] == counter.get_total_flops()
    assert sum(n.op is Op.GROUPED_DOT for n in graph.nodes) == (3 if fusions else 2)
