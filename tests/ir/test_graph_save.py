"""Graph.save / narrowpipe.load as documented API: a graph round-trips through JSON with its dims."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.errors import IRError, ModelLoadError
from narrowpipe.ir import DimSpec, DType, Graph, Op, Sym, TensorType, ValueKind


def _graph() -> Graph:
    g = Graph("proj")
    g.declare_dim(DimSpec("seq", 4, 1, 64))
    x = g.add_input("x", TensorType(DType.BF16, (Sym("seq"), 8)))
    w = g.add_input("w", TensorType(DType.BF16, (8, 8)), ValueKind.PARAM)
    y = g.add_node(Op.DOT, [x, w], [TensorType(DType.BF16, (Sym("seq"), 8))],
                   {"lhs_contract": (1,), "rhs_contract": (0,)})
    g.set_outputs(y.outputs)
    return g


def test_graph_save_and_load_round_trip(tmp_path):
    g = _graph()
    path = g.save(tmp_path / "new" / "proj.json")
    back = narrowpipe.load(path)
    assert back.dims == g.dims
    a, b = narrowpipe.analyze(g, seq=16), narrowpipe.analyze(back, seq=16)
    assert (a.flops, a.bytes, a.params) == (b.flops, b.bytes, b.params)
    with pytest.raises(IRError, match="save_pt2"):
        g.save(tmp_path / "proj.pt2")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ModelLoadError, match="bad.json"):
        narrowpipe.load(bad)


def test_a_saved_graph_keeps_the_source_file_name_not_its_folder(tmp_path):
    """A graph file is the portable artifact: the exporting machine's folders do not belong in it."""
    import json

    import narrowpipe
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "lin", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    src = tmp_path / "deep" / "lin.onnx"
    src.parent.mkdir()
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    graph = narrowpipe.load(str(src.resolve()))
    graph.save(tmp_path / "lin.json")
    text = (tmp_path / "lin.json").read_text()
    assert str(tmp_path) not in text
    doc = json.loads(text)
    assert doc["meta"]["file"] == "lin.onnx" and {n["source"]["file"] for n in doc["nodes"]} == {"lin.onnx"}
    assert narrowpipe.analyze(narrowpipe.load(tmp_path / "lin.json")).flops == narrowpipe.analyze(graph).flops


def test_an_edited_result_shape_is_refused_once_bound_not_costed(tmp_path):
    """An eager-attention score scale declared [batch, 4, seq, seq*3] passes the symbolic verifier (seq*3
    and seq may agree for some binding) but not the interpreter once seq is bound."""
    import json

    import narrowpipe
    from narrowpipe.errors import ShapeError
    narrowpipe.transformer(2, 64, 4, 100, seq=16, attention="eager").save(tmp_path / "e.json")
    doc = json.loads((tmp_path / "e.json").read_text())
    node = next(n for n in doc["nodes"] if n["name"] == "model_layers_0_self_attn_scale")
    node["outputs"][0]["shape"] = ["batch", 4, "seq", "seq*3"]
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(ShapeError, match=r"output shape \[2, 4, 16, 48\] is not the broadcast \[2, 4, 16, 16\]"):
        narrowpipe.analyze(narrowpipe.load(tmp_path / "bad.json"), dims={"batch": 2})


def test_a_minus_infinity_fill_saves_as_json_strict_readers_take(tmp_path):
    """An eager causal mask fills with -inf: version 1 wrote a bare -Infinity, which is not JSON
    (jq and browsers refuse it); version 2 writes {"$float": "-inf"} and version 1 files still load."""
    import json
    import math

    g = narrowpipe.transformer(2, 64, 4, 100, seq=16, attention="eager")
    path = g.save(tmp_path / "e.json")
    text = path.read_text()
    assert "Infinity" not in text and "NaN" not in text
    json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in a saved graph"))
    assert '"$float"' in text
    back = narrowpipe.load(path)
    fills = [v for n in back.nodes for v in n.attrs.values() if isinstance(v, float) and math.isinf(v)]
    assert fills and all(v == -math.inf for v in fills)
    old = json.loads(text)
    old["version"] = 1
    old_text = json.dumps(old).replace('{"$float": "-inf"}', "-Infinity")
    assert "-Infinity" in old_text
    assert narrowpipe.analyze(_from_text(old_text, tmp_path)).flops == narrowpipe.analyze(back).flops


def _from_text(text: str, tmp_path) -> Graph:
    p = tmp_path / "old.json"
    p.write_text(text)
    return narrowpipe.load(p)
