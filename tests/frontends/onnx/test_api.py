"""The public entry points: ``narrowpipe.load`` for files and in-memory models, the CLI, declared
dims, strict mode, and no torch needed anywhere on the ONNX path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.cli import main as cli_main
from narrowpipe.errors import ModelLoadError, UnsupportedOpError
from narrowpipe.frontends.onnx.frontend import from_onnx_model
from narrowpipe.ir import from_json, to_json

ROOT = Path(__file__).resolve().parents[3]


def _mlp(path: Path | None = None) -> onnx.ModelProto:
    w1 = numpy_helper.from_array(np.zeros((16, 32), np.float32), "w1")
    w2 = numpy_helper.from_array(np.zeros((32, 16), np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"), helper.make_node("Relu", ["h"], ["a"]),
             helper.make_node("MatMul", ["a", "w2"], ["y"], name="down")]
    g = helper.make_graph(nodes, "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", 16])], [w1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    if path is not None:
        onnx.save(m, str(path))
    return m


def test_in_memory_model_and_file_give_the_same_graph(tmp_path: Path) -> None:
    m = _mlp(tmp_path / "mlp.onnx")
    a = narrowpipe.analyze(narrowpipe.load(m), batch=2, sequence=3)
    b = narrowpipe.analyze(narrowpipe.load(tmp_path / "mlp.onnx"), batch=2, sequence=3)
    assert a.flops == b.flops and a.params == b.params == 1024
    assert a.modeled_flops == 2 * 2 * 3 * (16 * 32 + 32 * 16)


def test_dims_are_declared_and_stay_symbolic(tmp_path: Path) -> None:
    graph = narrowpipe.load(_mlp())
    assert set(graph.dims) == {"batch", "sequence"}
    assert graph.symbols() == {"batch", "sequence"}
    assert (narrowpipe.analyze(graph, batch=4, sequence=3).flops
            == 2 * narrowpipe.analyze(graph, batch=2, sequence=3).flops)
    assert from_json(to_json(graph)).symbols() == graph.symbols()


def test_not_a_model_proto() -> None:
    with pytest.raises(ModelLoadError, match="ModelProto"):
        from_onnx_model(b"bytes")


def test_strict_mode_refuses_unmodeled_ops() -> None:
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=1,
                            max_skip_count=0, ngram_counts=[0], ngram_indexes=[0], pool_int64s=[1])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert [u.op for u in narrowpipe.analyze(narrowpipe.load(m)).unmodeled] == ["ai.onnx::TfIdfVectorizer"]
    with pytest.raises(UnsupportedOpError, match="TfIdfVectorizer"):
        narrowpipe.load(m, strict=True)


def test_cli_analyzes_an_onnx_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _mlp(tmp_path / "mlp.onnx")
    out = tmp_path / "report.json"
    assert cli_main(["analyze", str(tmp_path / "mlp.onnx"), "--set", "batch=2", "--set", "sequence=3",
                     "--json", str(out)]) == 0
    assert out.exists()
    assert cli_main(["analyze", str(tmp_path / "mlp.onnx")]) == 2
    assert "batch" in capsys.readouterr().err


def test_the_onnx_path_never_imports_torch(tmp_path: Path) -> None:
    _mlp(tmp_path / "mlp.onnx")
    code = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
            "import narrowpipe\n"
            f"r = narrowpipe.analyze(narrowpipe.load({str(tmp_path / 'mlp.onnx')!r}), batch=1, sequence=1)\n"
            "assert r.params == 1024, r.params\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT.parent), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr


def test_model_local_functions_are_inlined_in_a_fresh_process(tmp_path: Path) -> None:
    """``onnx.inliner`` is a submodule ``import onnx`` does not load; in a fresh process (no test
    having imported it) the frontend must still find it."""
    twice = helper.make_function("local", "Twice", ["x"], ["y"], [helper.make_node("Add", ["x", "x"], ["y"])],
                                 [helper.make_opsetid("", 17)])
    g = helper.make_graph([helper.make_node("Twice", ["a"], ["b"], domain="local")], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                          functions=[twice])
    onnx.save(m, str(tmp_path / "local.onnx"))
    code = ("import narrowpipe\n"
            f"ops = [n.op.value for n in narrowpipe.load({str(tmp_path / 'local.onnx')!r}).nodes]\n"
            "assert ops == ['add'], ops\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT.parent), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
