"""Exported transformers models agree with the torch path: contraction + convolution + attention
FLOPs within 0.5% (they are in fact equal) and parameters exactly, for both exporters."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.ir import Sym, ValueKind, verify

pytest.importorskip("torch")
pytest.importorskip("transformers")

import onnx_models  # noqa: E402  (benchmarks/, put on the path by conftest)

CASES = [(name, exporter, "eager") for name in onnx_models.MODELS for exporter in ("legacy", "dynamo")]
CASES += [("gpt2", "legacy", "sdpa"), ("llama", "legacy", "sdpa"), ("llama", "dynamo", "sdpa"),
          ("vit", "legacy", "sdpa")]


@pytest.mark.slow
@pytest.mark.parametrize("name,exporter,attn", CASES, ids=[f"{n}-{e}-{a}" for n, e, a in CASES])
def test_flops_and_params_match_the_torch_path(exported, name: str, exporter: str, attn: str) -> None:
    path, ref = exported(name, exporter, attn)
    graph = narrowpipe.load(path)
    report = narrowpipe.analyze(graph, dims=onnx_models.dims_for(name))
    assert report.modeled_flops == pytest.approx(ref["modeled_flops"], rel=0.005)
    assert report.params == ref["params"]
    assert not report.unmodeled
    verify(graph)


@pytest.mark.slow
@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
def test_batch_and_sequence_stay_symbolic(exported, exporter: str) -> None:
    """One export serves every size: no unknown dims are left, and FLOPs scale with the binding."""
    path, _ = exported("gpt2", exporter)
    graph = narrowpipe.load(path)
    assert graph.symbols() == {"batch", "sequence"}
    small = narrowpipe.analyze(graph, batch=1, sequence=8)
    big = narrowpipe.analyze(graph, batch=4, sequence=8)
    assert big.modeled_flops == 4 * small.modeled_flops
    with pytest.raises(narrowpipe.UnboundDimError, match="batch"):
        narrowpipe.analyze(graph)


@pytest.mark.slow
def test_gqa_keeps_its_kv_heads(exported) -> None:
    """Llama's grouped-query attention: K/V projections are narrower than Q (2 of 4 heads)."""
    path, _ = exported("llama", "dynamo")
    graph = narrowpipe.load(path)
    widths = {n.outputs[0].type.shape[-1] for n in graph.nodes if n.op.value == "dot"}
    assert {32, 64} <= widths  # 2 KV heads x 16 and 4 query heads x 16


@pytest.mark.slow
def test_tied_lm_head_and_rotary_buffer_are_not_params(exported) -> None:
    path, ref = exported("gpt2", "legacy")
    graph = narrowpipe.load(path)
    tied = [v for v in graph.weights if "tied to" in v.source_name]
    assert tied and all(v.kind is ValueKind.CONST for v in tied)
    path, _ = exported("llama", "dynamo")
    graph = narrowpipe.load(path)
    inv_freq = [v for v in graph.weights if v.source_name.endswith("inv_freq")]
    assert inv_freq and inv_freq[0].kind is ValueKind.BUFFER


@pytest.mark.slow
def test_resnet_batch_norm_statistics_are_buffers(exported) -> None:
    path, ref = exported("resnet", "legacy")
    graph = narrowpipe.load(path)
    buffers = [v for v in graph.weights if v.kind is ValueKind.BUFFER]
    assert buffers and all("running" in v.source_name or "identity" in v.source_name for v in buffers)
    assert narrowpipe.analyze(graph, batch=1).params == ref["params"]


@pytest.mark.slow
def test_folded_batch_norm_loses_exactly_its_parameters(tmp_path) -> None:
    """A default export folds BN into the convs: the file holds C fewer params per BN layer."""
    import torch
    model = onnx_models.build("resnet")
    path = str(tmp_path / "folded.onnx")
    onnx_models.export(model, "resnet", path, "legacy", keep_bn=False)
    bn_channels = sum(m.num_features for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d))
    report = narrowpipe.analyze(narrowpipe.load(path), batch=1)
    assert report.params == sum(p.numel() for p in model.parameters()) - bn_channels


@pytest.mark.slow
def test_onnxruntime_fused_bert_counts_the_same(exported, tmp_path) -> None:
    """onnxruntime's optimizer fuses BERT into com.microsoft Attention, SkipLayerNormalization,
    BiasGelu and EmbedLayerNormalization; the counts do not change."""
    pytest.importorskip("onnxruntime")
    import onnx
    from onnxruntime.transformers.optimizer import optimize_model
    path, ref = exported("bert", "legacy")
    fused = optimize_model(path, model_type="bert", num_heads=4, hidden_size=64, opt_level=1, use_gpu=False).model
    ops = {n.op_type for n in fused.graph.node if n.domain == "com.microsoft"}
    assert {"Attention", "SkipLayerNormalization"} <= ops
    out = str(tmp_path / "bert_fused.onnx")
    onnx.save(fused, out)
    report = narrowpipe.analyze(narrowpipe.load(out), batch=2, sequence=16)
    assert report.modeled_flops == ref["modeled_flops"]
    assert report.flops_by_group["attention"] > 0
    assert report.params == ref["params"]


def test_dim_params_with_expressions_are_kept() -> None:
    """Dynamo exports name dims like ``batch*sequence``; they stay one symbolic expression."""
    import onnx
    from onnx import TensorProto, helper
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch*sequence", 8])],
                          [helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 8])])
    graph = narrowpipe.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert graph.outputs[0].type.shape == (Sym("batch*sequence"), 8)
    assert onnx is not None
