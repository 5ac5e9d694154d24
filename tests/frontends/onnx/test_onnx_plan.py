"""``plan`` on exported transformers models: the planner cuts an ONNX file into the torch model's
layers whichever exporter wrote it, and each block's training step differentiates what a gradient
flows into. References are outside the planner: the torch model's layer count, torch's
FlopCounterMode on one layer's forward and backward, and the legacy export of the same model."""

from __future__ import annotations

from collections import Counter

import pytest

import narrowpipe
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.planner.block_cost import loss_outputs
from narrowpipe.costmodel.planner.planner import Planner
from narrowpipe.costmodel.planner.strategy import Parallel
from narrowpipe.costmodel.training import build_training_graph
from narrowpipe.ir import Op

pytest.importorskip("torch")
pytest.importorskip("transformers")

import onnx_models  # noqa: E402  (benchmarks/, put on the path by conftest)

MICROBATCH, SEQ = 8, 16
DP8 = Parallel(tp=1, pp=1, dp=8, microbatch=MICROBATCH, global_batch=64)


def _planner(path: str) -> Planner:
    return Planner(narrowpipe.load(path), "h100", 8, global_batch=64, seq=SEQ)


def _dot_flops_of_step(graph: narrowpipe.Graph) -> int:
    """Contraction FLOPs of the block's training step as the planner builds it, unfused."""
    step = build_training_graph(graph, outputs=loss_outputs(graph, "sum"))
    table = interpret(step, {"batch": MICROBATCH, "sequence": SEQ})
    return sum(c.flops for n, c in table.costs.items() if n.op is Op.DOT)


def _torch_layer_flops(name: str) -> tuple[int, int]:
    """(layer count, matmul FLOPs of one layer's forward + backward) from the torch model itself."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model = onnx_models.build(name, "tiny")
    layers = model.transformer.h if name == "gpt2" else model.model.layers
    x = torch.randn(MICROBATCH, SEQ, model.config.hidden_size, requires_grad=True)
    mask = torch.full((SEQ, SEQ), float("-inf")).triu(1)[None, None].expand(MICROBATCH, 1, SEQ, SEQ)
    extra = {}
    if name == "llama":          # the rotary tables come from the model, outside the layer
        positions = torch.arange(SEQ)[None].expand(MICROBATCH, SEQ)
        extra["position_embeddings"] = model.model.rotary_emb(x, positions)
    with FlopCounterMode(display=False) as counter:
        out = layers[0](x, attention_mask=mask, **extra)
        (out[0] if isinstance(out, tuple) else out).sum().backward()
    return len(layers), counter.get_total_flops()


@pytest.mark.slow
def test_legacy_gpt2_plans_through_its_integer_shape_scalars(exported) -> None:
    """The legacy GPT-2 export computes ``Shape -> Gather`` scalars before the layers and reads them
    after; they leave the embedding block as int64 outputs, which carry no gradient (QA: plan
    refused with 'cannot differentiate non-float output(s) /m/transformer/Gather_output_0')."""
    path, _ = exported("gpt2", "legacy")
    planner = _planner(path)
    pro = planner.blocks.prologue
    assert pro is not None and any(not v.dtype.is_float for v in pro.graph.outputs)   # the case QA hit
    layers, torch_flops = _torch_layer_flops("gpt2")
    assert len(planner.blocks.layers) == layers
    assert _dot_flops_of_step(planner.blocks.layers[0].graph) == torch_flops
    p = narrowpipe.plan(planner.graph, "h100", 8, global_batch=64, seq=SEQ)
    assert p.step_time_s > 0 and sorted(i for s in p.stages for i in s["layers"]) == list(range(layers))


@pytest.mark.slow
def test_every_llama_layer_gets_its_backward(exported) -> None:
    """Legacy Llama's first layer hands on the rotary tables before its residual stream; the step's
    loss must seed the residual (the rotary tables depend on no parameter), so layer 0 trains like
    layer 1 and like torch's layer (it had no backward when only the first output was seeded)."""
    path, _ = exported("llama", "legacy")
    planner = _planner(path)
    layers, torch_flops = _torch_layer_flops("llama")
    assert len(planner.blocks.layers) == layers
    first = planner.blocks.layers[0].graph
    assert first.outputs[0].type.shape[:2] == (1, 1)     # a rotary table ([1, 1, seq, head_dim]) comes first
    assert [_dot_flops_of_step(b.graph) for b in planner.blocks.layers] == [torch_flops] * layers
    costs, _, _ = planner.costs(DP8)
    assert costs[0].flops["backward"] == costs[1].flops["backward"] > costs[0].flops["forward"]


@pytest.mark.slow
def test_dynamo_export_plans_like_its_legacy_twin(exported) -> None:
    """The dynamo exporter names nodes ``node_linear_1`` and keeps the module stack in each node's
    ``pkg.torch.onnx.name_scopes`` metadata (QA: plan found 0 layers). Read from there, the two
    exports of one Llama have the same layers, contraction scopes, parameters and backward; forward
    FLOPs differ only by the legacy export's extra casts and shape arithmetic (under 1%)."""
    legacy, _ = exported("llama", "legacy")
    dynamo, _ = exported("llama", "dynamo")
    ref, got = _planner(legacy), _planner(dynamo)

    def dot_scopes(graph: narrowpipe.Graph) -> Counter[str]:
        return Counter(n.source.scope for n in graph.nodes if n.op is Op.DOT)

    assert dot_scopes(got.graph) == dot_scopes(ref.graph)
    assert "m.model.layers.1.self_attn.q_proj" in dot_scopes(got.graph)
    assert len(got.blocks.layers) == len(ref.blocks.layers) == onnx_models.build("llama").config.num_hidden_layers
    (ref_layers, ref_pro, ref_epi), (layers, pro, epi) = ref.costs(DP8), got.costs(DP8)
    for a, b in zip(ref_layers, layers):
        assert (b.params, b.flops["backward"]) == (a.params, a.flops["backward"])
        assert b.flops["forward"] == pytest.approx(a.flops["forward"], rel=0.01)
    assert [_dot_flops_of_step(b.graph) for b in got.blocks.layers] == \
        [_dot_flops_of_step(b.graph) for b in ref.blocks.layers]
    assert (pro.params, epi.params) == (ref_pro.params, ref_epi.params)      # type: ignore[union-attr]
    p = narrowpipe.plan(dynamo, "h100", 8, global_batch=64, seq=SEQ, parallel={"tp": 1, "pp": 2})
    assert [s["layers"] for s in p.stages] == [[0], [1]]

