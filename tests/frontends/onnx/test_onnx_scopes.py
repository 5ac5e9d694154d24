"""ONNX nodes carry the module path their exporter wrote into the node name (legacy) or into the node's
``pkg.torch.onnx.name_scopes`` metadata (dynamo), as torch nodes do."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.costmodel.planner.blocks import split_blocks
from narrowpipe.frontends.onnx.node import module_scope
from narrowpipe.frontends.onnx.node_names import NAME_SCOPES, scope_from_name_scopes


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


def _dynamo_style(scopes: list[str | None]) -> onnx.ModelProto:
    """Two layers of MatMul + Relu named as the dynamo exporter names them (``node_linear_0``, no
    path), each with its module stack in ``pkg.torch.onnx.name_scopes``; None: no metadata, a
    legacy-style path name instead."""
    nodes = []
    for i, scope in enumerate(scopes):
        op = "MatMul" if i % 2 == 0 else "Relu"
        ins = [f"x{i}", f"w{i // 2}"] if op == "MatMul" else [f"x{i}"]
        node = helper.make_node(op, ins, [f"x{i + 1}"], name=f"node_{op.lower()}_{i}" if scope is not None
                                else f"/m/layers.{i // 2}/act/{op}")
        if scope is not None:
            node.metadata_props.add(key=NAME_SCOPES, value=scope)
        nodes.append(node)
    weights = [numpy_helper.from_array(np.full((8, 8), 0.1 * (k + 1), np.float32), f"w{k}")
               for k in range(len(scopes) // 2)]
    graph = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info(f"x{len(scopes)}", TensorProto.FLOAT, ["batch", 8])],
                              weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_dynamo_metadata_scopes_are_the_legacy_name_scopes() -> None:
    """The same module path from either exporter: the innermost module of the name_scopes list
    (its last entry is the FX node), the model-level '' as no scope, torch's placeholder stack for
    nodes it added itself as no scope, and the node name when the metadata is absent or unreadable."""
    stack = ["", "m", "m.model", "m.model.layers.{k}", "m.model.layers.{k}.mlp", "m.model.layers.{k}.mlp.{p}"]
    scopes = [repr([s.format(k=k, p=p) for s in stack] + [f"{p}_{k}"]) for k in range(2) for p in ("fc", "act")]
    g = narrowpipe.load(_dynamo_style(scopes))
    assert [n.source.scope for n in g.nodes] == ["m.model.layers.0.mlp.fc", "m.model.layers.0.mlp.act",
                                                 "m.model.layers.1.mlp.fc", "m.model.layers.1.mlp.act"]
    assert len(split_blocks(g).layers) == 2
    mixed = narrowpipe.load(_dynamo_style([scopes[0], None, "['_empty_nn_module_stack_from_metadata_hook', 'x']",
                                           "not a list"]))
    assert [n.source.scope for n in mixed.nodes] == ["m.model.layers.0.mlp.fc", "m.layers.0.act", "", ""]
    assert scope_from_name_scopes("['', 'view']") == "" and scope_from_name_scopes("['view']") == ""


@pytest.mark.slow
def test_dynamo_gpt2_export_has_the_torch_models_layers(exported):
    """QA: the planner found 0 layers in dynamo exports; the torch model says how many there are."""
    import onnx_models  # benchmarks/, put on the path by conftest; needs torch, as ``exported`` does

    path, _ = exported("gpt2", "dynamo")
    g = narrowpipe.load(path)
    layers = len(onnx_models.build("gpt2").transformer.h)
    assert len(split_blocks(g).layers) == layers
    assert {n.source.scope for n in g.nodes if n.op.value == "dot"} >= {
        f"m.transformer.h.{k}.{mod}" for k in range(layers) for mod in ("attn.c_attn", "mlp.c_fc", "mlp.c_proj")}
