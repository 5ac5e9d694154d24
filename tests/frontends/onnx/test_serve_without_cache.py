"""``serve`` on an ONNX export made without a KV cache: a GPT-2 exported by torch.onnx's dynamo path
(attention as MatMul, Softmax, MatMul; the tied embedding stored once, as ``lm_head.weight``) is
recognised and rebuilt with a cache; a graph it cannot rebuild is refused saying which part it could
not read and what to export instead, not by naming GPT-2 as a layout it rebuilds.

References: the config the export was made from, and torch's own parameter count of the model;
``serving_graph`` itself refuses a rebuild whose parameters or matmul/attention FLOPs differ from the
graph's at batch 2 x 16 tokens."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.costmodel.serving import serving_graph


def test_a_dynamo_gpt2_export_without_cache_is_rebuilt(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=1000, n_positions=128,
                                     use_cache=False)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():   # fresh biases are all zero: the exporter would merge them into one tensor
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    kw = {"input_ids": torch.randint(0, 1000, (2, 8)), "attention_mask": torch.ones(2, 8, dtype=torch.long)}
    dyn = {k: {0: torch.export.Dim("batch"), 1: torch.export.Dim("sequence", max=128)} for k in kw}
    path = str(tmp_path / "gpt2.onnx")
    torch.onnx.export(model, (), kwargs=kw, dynamic_shapes=dyn, dynamo=True).save(path)
    graph = narrowpipe.load(path)
    assert narrowpipe.analyze(graph, dims={"batch": 1, "sequence": 4}).params == \
        sum(p.numel() for p in model.parameters())
    served = serving_graph(graph)    # was: "not one serving can rebuild (... GPT-2 layout ...)"
    assert "recognised" in served.origin
    spec = served.spec
    assert spec is not None
    assert (spec.layers, spec.hidden, spec.heads, spec.head_dim, spec.vocab, spec.ffn, spec.max_positions,
            spec.tie_embeddings) == (2, 64, 4, 16, 1000, 256, 128, True)


def test_an_unrebuildable_graph_says_why_and_what_to_export() -> None:
    """MatMul, Softmax, MatMul over 2-D tensors: no head count to read, so the refusal says so."""
    w = numpy_helper.from_array(np.zeros((8, 8), np.float32), "transformer.wte.weight")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "transformer.wte.weight"], ["s"], name="qk"),
                           helper.make_node("Softmax", ["s"], ["p"], name="sm"),
                           helper.make_node("MatMul", ["p", "x"], ["y"], name="pv")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(narrowpipe.NarrowpipeError) as info:
        serving_graph(narrowpipe.load(model))
    text = str(info.value)
    assert "no attention node to read the head count" in text and "past key/value inputs" in text
    assert "GPT-2 layout" not in text
