"""A CPU report says which rate it took: a dtype the target has no matrix rate for runs at another
dtype's, named in the notes and the MFU line; --tf32 and --sparse, which a CPU has no rate for,
say they change nothing; MFU is held against the model's own dtype's rate even where no top-level
node is a contraction.

QA (calibrated 1-thread EPYC host, matrix rates fp32 166, bf16 361 GFLOP/s): an fp16 BERT read
"MFU 15.7% of 361 GFLOP/s fp16" with the fallback nowhere in the output; an fp32 model whose
matmuls sit in a Loop read "MFU 33.2% of 361 GFLOP/s" (the bf16 rate).
"""

from __future__ import annotations

import dataclasses

import pytest

from narrowpipe import analyze
from narrowpipe.backends import get_target
from narrowpipe.cli import main
from narrowpipe.ir import DType, Graph, Op, TensorType
from tests.graph_builders import gemm_graph

#: epyc-9755's catalog rates (backends/catalog/epyc-9755.toml): fp32 and bf16 matrix, no fp16.
EPYC_FP32, EPYC_BF16 = 22.1184e12, 44.2368e12


def _host(target_name: str = "epyc-9755"):
    """The catalog chip as a calibrated host file would name it (vendor "host")."""
    return dataclasses.replace(get_target(target_name), name="host", vendor="host")


def test_an_fp16_model_on_a_cpu_without_an_fp16_rate_names_the_fallback():
    t = get_target("epyc-9755")
    assert "fp16" not in t.matrix_flops
    r = analyze(gemm_graph(256, 256, 256, DType.FP16), t)
    assert r.timing.precision == "fp16 as bf16" and r.timing.peak_flops == pytest.approx(EPYC_BF16)
    assert any(n.startswith("fp16 as bf16: fp16 matmuls are timed at the bf16 rate (4.424e+04 GFLOP/s)")
               and "epyc-9755 lists no fp16 matrix rate" in n for n in r.timing.notes)
    host = analyze(gemm_graph(256, 256, 256, DType.FP16), _host())
    assert any("fp16 was not calibrated on this host" in n for n in host.timing.notes)


def test_native_rates_add_no_note():
    for dtype in (DType.FP32, DType.BF16):
        r = analyze(gemm_graph(256, 256, 256, dtype), get_target("epyc-9755"))
        assert not [n for n in r.timing.notes if " as " in n]
    # xeon-6980p lists fp16 (AMX-FP16); its fp32 matmuls run on the AVX-512 units, at their own rate
    for dtype in (DType.FP16, DType.FP32):
        assert not analyze(gemm_graph(256, 256, 256, dtype), get_target("xeon-6980p")).timing.notes


def test_the_mfu_line_never_labels_the_bf16_rate_fp16(tmp_path, capsys):
    path = tmp_path / "gemm_fp16.json"
    gemm_graph(256, 256, 256, DType.FP16).save(path)
    assert main(["analyze", str(path), "--target", "epyc-9755"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "of 44.2 TFLOP/s fp16 as bf16" in out
    assert "TFLOP/s fp16 bound" not in out and "fp16 as bf16: fp16 matmuls are timed at the bf16 rate" in out


@pytest.mark.parametrize(("flag", "says"), [
    ("--tf32", "TF32 (--tf32) changes nothing on epyc-9755"),
    ("--sparse", "2:4 sparsity (--sparse) changes nothing on epyc-9755")])
def test_tf32_and_sparse_on_a_cpu_say_they_change_nothing(tmp_path, capsys, flag, says):
    path = tmp_path / "gemm_fp32.json"
    gemm_graph(256, 256, 256, DType.FP32).save(path)
    assert main(["analyze", str(path), "--target", "epyc-9755", flag]) == 0
    assert says in " ".join(capsys.readouterr().out.split())
    plain = analyze(gemm_graph(256, 256, 256, DType.FP32), "epyc-9755")
    opt = analyze(gemm_graph(256, 256, 256, DType.FP32), "epyc-9755",
                  **{"allow_tf32" if flag == "--tf32" else "sparse": True})
    assert opt.time_s == plain.time_s            # nothing changed, and now it says so
    assert not [n for n in plain.timing.notes if "changes nothing" in n]


def _elementwise_graph() -> Graph:
    g = Graph("adds")
    a = g.add_input("a", TensorType(DType.FP32, (512, 512)))
    b = g.add_input("b", TensorType(DType.FP32, (512, 512)))
    g.set_outputs(g.add_node(Op.ADD, [a, b], [TensorType(DType.FP32, (512, 512))]).outputs)
    return g


def test_mfu_of_a_model_without_a_top_level_contraction_is_against_its_own_dtype(tmp_path):
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    import narrowpipe
    f = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["h_out"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("h_in", f, [64, 64])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", f, [64, 64])])
    g = helper.make_graph([helper.make_node("Loop", ["M", "", "X"], ["Y"], body=body)], "loop",
                          [helper.make_tensor_value_info("X", f, [64, 64])],
                          [helper.make_tensor_value_info("Y", f, [64, 64])],
                          [numpy_helper.from_array(np.zeros((64, 64), np.float32), "W"),
                           numpy_helper.from_array(np.array(5, np.int64), "M")])
    path = tmp_path / "loop.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    for target, fp32 in (("epyc-9755", EPYC_FP32), (_host(), EPYC_FP32)):
        r = analyze(narrowpipe.load(str(path)), target)
        # hand computation: 5 trips x 2 x 64^3 FLOPs against the fp32 rate, not the bf16 one
        assert r.timing.dtype == "fp32" and r.timing.peak_flops == pytest.approx(fp32)
        assert r.timing.mfu == pytest.approx(5 * 2 * 64**3 / (r.time_s * fp32))
    r = analyze(_elementwise_graph(), "epyc-9755")
    assert r.timing.dtype == "fp32" and r.timing.peak_flops == pytest.approx(EPYC_FP32)
