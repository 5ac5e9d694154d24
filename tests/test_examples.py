"""The bundled examples: shipped graphs match a fresh meta-device export, and their totals match
hand-written transformer formulas (an independent reference, not the tool itself)."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.ir import DimRole, graph_to_dict
from narrowpipe.models.examples import EXAMPLES, build_example, load_example


def llama_reference(h: int, inter: int, layers: int, heads: int, kv: int, vocab: int, b: int, s: int):
    """Parameters and matmul FLOPs of a Llama decoder, from its dimensions alone."""
    hd = h // heads
    per_layer = h * h * 2 + h * kv * hd * 2 + 3 * h * inter + 2 * h
    params = vocab * h * 2 + layers * per_layer + h
    tokens = b * s
    linear = layers * (h * h * 2 + h * kv * hd * 2 + 3 * h * inter) + h * vocab
    attention = layers * 2 * 2 * b * heads * s * s * hd
    return params, 2 * tokens * linear + attention


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_every_example_loads_without_torch_work_and_has_no_unmodeled_ops(name):
    r = narrowpipe.analyze(load_example(name))
    assert r.unmodeled == []
    assert r.flops > 0 and r.params > 0


def test_published_parameter_counts():
    params = {name: narrowpipe.analyze(load_example(name)).params for name in EXAMPLES}
    assert params["gpt2"] == 124_439_808
    assert params["bert-base"] == 109_482_240
    assert params["resnet50"] == 25_557_032
    assert params["vit-base"] == 86_567_656


@pytest.mark.parametrize("name,dims", [("llama-3-8b", (4096, 14336, 32, 32, 8, 128256)),
                                       ("llama-3-70b", (8192, 28672, 80, 64, 8, 128256))])
@pytest.mark.parametrize("b,s", [(1, 2048), (4, 512)])
def test_llama3_examples_match_formula(name, dims, b, s):
    params, flops = llama_reference(*dims, b=b, s=s)
    r = narrowpipe.analyze(load_example(name), batch=b, seq=s)
    assert r.params == params
    assert r.modeled_flops == flops


@pytest.mark.parametrize("name", ["gpt2", "bert-base", "resnet50", "vit-base"])
def test_shipped_graph_equals_a_fresh_export(name):
    pytest.importorskip("transformers")
    fresh, shipped = graph_to_dict(build_example(name)), graph_to_dict(load_example(name))
    for key in ("inputs", "weights", "nodes", "outputs", "dims"):
        assert fresh[key] == shipped[key], f"{name}: {key} differs; run tools/build_examples.py"


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_shipped_graphs_tag_batch_and_sequence_roles(name):
    g = load_example(name)
    assert g.dims_with_role(DimRole.BATCH) == ["batch"]
    assert g.dims_with_role(DimRole.SEQUENCE) == (["seq"] if "seq" in g.dims else [])
    assert g.dims_with_role(DimRole.KV_LENGTH) == []
