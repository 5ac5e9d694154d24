"""Parameters frozen in torch (``requires_grad=False``) get no gradient in the training step, as in
torch: through ``from_torch``, a ``.pt2`` file, the graph JSON file and the CLI. Compared with
``FlopCounterMode`` over torch's own step (before: the frozen first Linear got gradients, 327680 FLOPs
where torch counts 196608; DETR's frozen backbone 19505664 where torch counts 9396736)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.cli import main  # noqa: E402
from narrowpipe.costmodel.training import build_training_graph  # noqa: E402
from narrowpipe.ir import from_json, to_json  # noqa: E402

_MATMUL = ("contraction", "convolution", "attention")


def _frozen_first():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64, bias=False), torch.nn.ReLU(), torch.nn.Linear(64, 64, bias=False))
    m[0].weight.requires_grad_(False)
    return m, torch.randn(8, 64)


def _mm(graph, **kw):
    report = narrowpipe.analyze(build_training_graph(graph, loss="sum", **kw))
    return sum(r.flops for r in report.ops if r.group in _MATMUL)


def _torch_step(model, x):
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    return counter.get_total_flops()


@pytest.fixture(scope="module")
def frozen_graph():
    m, x = _frozen_first()
    return narrowpipe.from_torch(m, (x,)), _torch_step(m, x)


def test_a_parameter_frozen_in_torch_gets_no_gradient(frozen_graph):
    """Hand count: forward 2 x 2*8*64*64 = 131072; backward of the second Linear only: its weight
    gradient and the gradient into the ReLU, 65536; the frozen first Linear needs neither."""
    graph, reference = frozen_graph
    assert _mm(graph) == reference == 196608
    assert build_training_graph(graph).meta["training"]["frozen"] == 1


def test_frozen_patterns_add_to_what_the_model_froze(frozen_graph):
    graph, _ = frozen_graph
    assert _mm(graph, frozen=["2.*"]) == 131072          # forward only: nothing trains


def test_frozen_survives_pt2_and_graph_json_files(frozen_graph, tmp_path):
    graph, reference = frozen_graph
    m, x = _frozen_first()
    path = narrowpipe.save_pt2(narrowpipe.export(m, (x,)), tmp_path / "frozen.pt2")
    assert _mm(narrowpipe.load(path)) == reference
    assert _mm(from_json(to_json(graph))) == reference


def test_cli_frozen_option_freezes_by_glob(tmp_path, capsys):
    m, x = _frozen_first()
    path = narrowpipe.save_pt2(narrowpipe.export(m, (x,)), tmp_path / "frozen.pt2")
    out = tmp_path / "step.json"
    assert main(["analyze", str(path), "--train", "--frozen", "2.*", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["flops_by_group"]["contraction"] == 131072
    assert "gradients" in capsys.readouterr().out


def test_detr_frozen_backbone_matches_torch():
    """transformers freezes 12 of DETR's backbone parameters (its frozen batch norms' affine terms
    and the stem): narrowpipe counted their gradients, 19505664 FLOPs against torch's 9396736."""
    transformers = pytest.importorskip("transformers")
    config = transformers.DetrConfig(
        use_timm_backbone=False, use_pretrained_backbone=False, d_model=32, encoder_layers=1, decoder_layers=1,
        backbone_config=transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1],
                                                  layer_type="basic", out_features=["stage4"]),
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        num_queries=10, num_labels=5)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.DetrForObjectDetection(config).eval()
    pixels = torch.randn(2, 3, 64, 64)
    with FlopCounterMode(display=False) as counter:
        model(pixel_values=pixels).logits.sum().backward()
    graph = narrowpipe.from_torch(model, (), {"pixel_values": pixels})
    assert _mm(graph) == counter.get_total_flops()
