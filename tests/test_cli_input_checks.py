"""Bad numbers on the command line and in files are refused with a message, never priced or timed.

Each case is one a QA pass reproduced: a negative price printed a negative cost while the verdict
said there was no price; ``plan --seq 0`` failed deep in a slice; ``--context`` without ``--mode``
was ignored; a decode context past the model's positions was timed; ``--top -3`` listed all but
three rows; ``--fix tp=2 --tp 4`` silently took one; an ONNX file with two writers of one value
loaded; a graph file without a name said only ``'name'``.
"""

from __future__ import annotations

import json

import pytest

import narrowpipe
from narrowpipe.cli import main
from narrowpipe.models.examples import load_example


def _fails(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return " ".join(err.split())


@pytest.mark.parametrize("price", ["-3", "0", "nan"])
def test_a_price_must_be_positive(capsys, price):
    err = _fails(capsys, ["compare", "gpt2", "--targets", "h100", "--set", "seq=8", "--price", f"h100={price}"])
    assert "--price h100" in err and "positive" in err
    with pytest.raises(narrowpipe.NarrowpipeError, match="positive"):
        narrowpipe.compare(load_example("gpt2"), ["h100"], prices={"h100": float(price)}, seq=8)


@pytest.mark.parametrize(("flag", "value", "says"), [("--seq", "0", "seq must be at least 1"),
                                                     ("--global-batch", "-4", "global batch must be at least 1")])
def test_plan_refuses_an_empty_sequence_or_batch(capsys, flag, value, says):
    argv = ["plan", "gpt2", "--devices", "8", "--target", "dgx-h100", "--global-batch", "64", flag, value]
    assert says in _fails(capsys, argv)


def test_plan_refuses_a_field_fixed_twice_with_different_values(capsys):
    argv = ["plan", "gpt2", "--devices", "8", "--target", "dgx-h100", "--global-batch", "64", "--fix", "tp=2",
            "--tp", "4"]
    assert "--fix tp=2 and --tp 4" in _fails(capsys, argv)


def test_context_needs_a_mode_and_fits_the_model(capsys):
    assert "give --mode prefill or --mode decode" in _fails(capsys, ["analyze", "gpt2", "--context", "512"])
    err = _fails(capsys, ["analyze", "gpt2", "--target", "h100", "--mode", "decode", "--context", "4096"])
    assert "gpt2 handles at most 1,024 positions" in err
    assert main(["analyze", "gpt2", "--target", "h100", "--mode", "decode", "--context", "1000"]) == 0


def test_top_is_a_count(capsys):
    with pytest.raises(SystemExit) as e:
        main(["analyze", "gpt2", "--top", "-3"])
    assert e.value.code == 2 and "--top: must be 0 or more" in capsys.readouterr().err


def test_an_onnx_value_with_two_writers_names_both(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r"),
                           helper.make_node("Sigmoid", ["x"], ["y"], name="s")], "g", [x], [y])
    path = tmp_path / "dup.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(narrowpipe.NarrowpipeError, match="'y' is written by two nodes, r and s") as e:
        narrowpipe.load(path)
    assert "dup.onnx" in str(e.value) and "'s'" in str(e.value)


def test_a_graph_file_without_a_required_field_says_which(tmp_path):
    path = tmp_path / "g.json"
    load_example("gpt2").save(path)
    data = json.loads(path.read_text())
    del data["name"]
    path.write_text(json.dumps(data))
    with pytest.raises(narrowpipe.NarrowpipeError, match="a required field 'name' is missing"):
        narrowpipe.load(path)


def test_an_onnx_conv_whose_input_channels_do_not_fit_its_weight_is_refused(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 5, 3, 3])       # expects 5 input channels
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="badconv")], "g", [x, w], [y])
    path = tmp_path / "badconv.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(narrowpipe.NarrowpipeError, match="3 channels but its weight .* expects 5") as e:
        narrowpipe.load(path)
    assert "badconv" in str(e.value)


@pytest.mark.parametrize(("scale", "says"), [
    ("memory_bandwidth=2,hbm_bandwidth=2", "both scale memory_bandwidth"),   # aliases compounded to 4x
    ("compute=2,peak_flops=2", "both scale matrix_flops"),
    ("hbm_bandwidth=2,hbm_bandwidth=3", "--scale hbm_bandwidth is given twice"),
    ("", "--scale expects RESOURCE=FACTOR, got nothing"),
])
def test_whatif_refuses_a_resource_scaled_twice_or_nothing(capsys, scale, says):
    assert says in _fails(capsys, ["whatif", "gpt2", "--target", "h100", "--set", "seq=1", "--scale", scale])


@pytest.mark.parametrize(("flag", "value"), [("--batch", "0"), ("--batch", "-1"), ("--seq", "0"), ("--threads", "0")])
def test_validate_refuses_empty_sizes_and_thread_counts(capsys, flag, value):
    with pytest.raises(SystemExit) as e:
        main(["validate", "gpt2", "--target", "h100", flag, value])
    assert e.value.code == 2 and "must be 1 or more" in capsys.readouterr().err


def test_validation_inputs_refuse_a_sequence_past_the_models_positions():
    pytest.importorskip("transformers")
    from narrowpipe.calibration.validation_models import build_validation_model
    with pytest.raises(narrowpipe.NarrowpipeError, match="seq 2000 is past the model's 1024 positions"):
        build_validation_model("gpt2", 1, 2000, tiny=True)


def test_diagnose_top_is_a_count_and_json_goes_into_new_folders(capsys, tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 50,
         "args": {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}}]}))
    with pytest.raises(SystemExit):
        main(["diagnose", str(trace), "--target", "h100", "--top", "-2"])
    assert "must be 0 or more" in capsys.readouterr().err
    out = tmp_path / "new" / "deeper" / "d.json"
    assert main(["diagnose", str(trace), "--target", "h100", "-q", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["format"] == "narrowpipe.diagnosis"


def test_roofline_says_when_top_asks_for_more_than_a_report_ranks(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    assert main(["roofline", "gpt2", "--target", "h100", "--set", "seq=8", "--top", "6",
                 "--out", str(tmp_path / "r.png")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--top 6: the report ranks its 3 heaviest kernels" in out


def test_plan_refuses_devices_without_links_and_a_sequence_past_the_positions(capsys):
    """A CPU chip has no interconnect in its spec: 8 of them planned to an infinite step (exit 0,
    Infinity in the JSON). GPT-2 has 1,024 learned positions: seq 4096 was planned and emitted."""
    err = _fails(capsys, ["plan", "llama-3-8b", "--devices", "8", "--target", "xeon-6980p", "--global-batch", "8"])
    assert "no interconnect between devices" in err
    err = _fails(capsys, ["plan", "gpt2", "--devices", "8", "--target", "dgx-h100", "--global-batch", "64",
                          "--seq", "4096", "--emit", "megatron"])
    assert "at most 1,024 positions; seq 4,096" in err


def test_serve_refuses_zero_lengths_and_sweep_batch_zero_and_a_context_past_the_export(capsys):
    """--input 0 / --output 0 were read as 'not given' (2048 and 256 were timed); serve-sweep dropped
    batch 0 silently; the bundled Llama-3 export (8,192 positions) was costed at a 200k context."""
    assert "input_len must be >= 1 token, got 0" in _fails(
        capsys, ["serve", "llama-3-8b", "--target", "h100", "--mode", "prefill", "--input", "0"])
    assert "output_len must be >= 1 token, got 0" in _fails(
        capsys, ["serve", "llama-3-8b", "--target", "h100", "--mode", "generate", "--input", "100", "--output", "0"])
    assert "--batches expects integers of at least 1" in _fails(
        capsys, ["serve-sweep", "llama-3-8b", "--target", "h100", "--batches", "0,1", "--context", "100"])
    assert "handles at most 8,192 positions" in _fails(
        capsys, ["serve", "llama-3-8b", "--target", "h100", "--mode", "decode", "--context", "200000"])


def test_the_latency_answer_is_a_layout_that_holds_one_sequence(capsys):
    """Llama-3-70B (141 GB of bf16 weights) on one 80 GB H100: no layout fits, so none reaches a TPOT;
    it printed 'the lowest TPOT reachable is 53.6 ms (h100-sxm TP1)'."""
    from narrowpipe.costmodel.serving.capacity import plan_capacity
    plan = plan_capacity(load_example("llama-3-70b"), ["h100"], rate=10, tpot=0.1, max_tp=1, input_len=2048,
                         output_len=256)
    assert plan.best_latency is None and not any(c.fits_one for c in plan.candidates)
    assert main(["serve", "llama-3-70b", "--target", "h100", "--rate", "10", "--tpot", "100ms", "--devices", "1"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "none holds even one sequence in memory" in out and "lowest TPOT reachable" not in out


def test_a_price_for_a_target_not_compared_is_warned_about(capsys):
    assert main(["compare", "gpt2", "--targets", "h100", "--set", "seq=8", "--price", "tpu-v5e=2"]) == 0
    assert "--price for tpu-v5e: not among the compared targets" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("argv", [
    ["compare", "model.pt2", "--targets", "h100,h1000"],
    ["analyze", "model.pt2", "--target", "h1000"],
    ["whatif", "model.pt2", "--target", "h1000", "--scale", "hbm_bandwidth=2"],
    ["roofline", "model.pt2", "--target", "h1000"],
])
def test_an_unknown_target_is_refused_before_the_model_loads(argv, monkeypatch, capsys):
    """QA: an unknown --targets name was reported after the .pt2 loaded (13 s)."""
    import narrowpipe.cli as cli
    loaded = []
    monkeypatch.setattr(cli, "resolve_model", lambda *a, **k: loaded.append(a) or pytest.fail("loaded the model"))
    assert main(argv) == 2
    assert "h1000" in capsys.readouterr().err and not loaded
