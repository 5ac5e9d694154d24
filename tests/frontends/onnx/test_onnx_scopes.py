"""ONNX nodes carry the module path their exporter wrote into the node name, as torch nodes do."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.frontends.onnx.node import module_scope


@pytest.mark.parametrize("name,scope", [("/transformer/h.0/attn/MatMul", "transformer.h.0.attn"),
                                        ("model/dense/MatMul", "model.dense"), ("/Add", ""),
                                        ("MatMul_3", ""), ("", "")])
def test_module_scope_from_node_names(name, scope):
    assert module_scope(name) == scope


def test_legacy_gpt2_export_groups_hotspots_by_layer(exported):
    path, _ = exported("gpt2", "legacy")
    g = narrowpipe.load(path)
    r = narrowpipe.analyze(g, "h100", batch=1, sequence=128)     # the tiny config holds 128 positions
    scopes = {row.scope for row in r.ops}     # the test export wraps the model as ``m``
    assert "m.transformer.h.0.attn" in scopes and "m.transformer.h.1.mlp.c_fc" in scopes
    assert any(b.scope.startswith("m.transformer.h.*.") and b.count >= 2 for b in r.timing.top)
