"""An ONNX file timed on a CPU says which runtime the prediction is of (eager PyTorch's kernels and
host costs, not onnxruntime's): QA measured light_resnet50 at 76.8 ms in onnxruntime against 127 ms
predicted, with nothing in the output saying the two runtimes differ."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

import narrowpipe
from narrowpipe.cli import main
from narrowpipe.ir import DType
from tests.graph_builders import gemm_graph


def _model() -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64]),
                                             helper.make_tensor_value_info("w", TensorProto.FLOAT, [64, 64])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [64, 64])])
    return helper.make_model(graph)


def _runtime(notes: list[str]) -> list[str]:
    return [n for n in notes if n.startswith("runtime modelled:")]


def test_an_onnx_graph_on_a_cpu_names_the_runtime_modelled(tmp_path, capsys):
    from narrowpipe.frontends.onnx.frontend import from_onnx_model
    (note,) = _runtime(narrowpipe.analyze(from_onnx_model(_model()), "epyc-9755").timing.notes)
    assert "PyTorch" in note and "one kernel per op" in note and "not onnxruntime" in note
    fused = narrowpipe.analyze(from_onnx_model(_model()), "epyc-9755", fusion="full").timing.notes
    assert "fused as --fusion full" in _runtime(fused)[0]
    path = tmp_path / "two.onnx"
    onnx.save(_model(), path)
    assert main(["compare", str(path), "--targets", "epyc-9755,h100"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "runtime modelled: PyTorch (op by op" in out


def test_no_runtime_note_off_onnx_or_off_a_cpu():
    from narrowpipe.frontends.onnx.frontend import from_onnx_model
    assert not _runtime(narrowpipe.analyze(gemm_graph(64, 64, 64, DType.FP32), "epyc-9755").timing.notes)
    assert not _runtime(narrowpipe.analyze(from_onnx_model(_model()), "h100").timing.notes)
