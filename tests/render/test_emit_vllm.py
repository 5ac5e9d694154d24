"""``serve --emit vllm``: vLLM's own flag names and choices, the serving deployment's values, an exact
expected command, and refusals for formats vLLM has no name for."""

from __future__ import annotations

import json

import pytest

import narrowpipe
from narrowpipe import NarrowpipeError
from narrowpipe.cli import main
from narrowpipe.costmodel.serving import Layout
from narrowpipe.costmodel.serving.capacity import plan_capacity
from narrowpipe.render.emit_vllm import model_reference, parse_layout, vllm_from_capacity, vllm_launch
from narrowpipe.schema import validate

# Every flag the vLLM emitter may write, each defined by `parser.add_argument('--...')` in
# EngineArgs.add_cli_args, vllm-project/vllm vllm/engine/arg_utils.py at commit
# 001999d2f360c2c5da23a916510c273b1a73d06c, with the choices= that parser gives them.
VLLM_FLAGS = {"--tensor-parallel-size", "--pipeline-parallel-size", "--max-num-seqs", "--max-model-len",
              "--gpu-memory-utilization", "--dtype", "--kv-cache-dtype", "--quantization", "--max-num-batched-tokens"}
VLLM_CHOICES = {"--dtype": {"auto", "half", "float16", "bfloat16", "float", "float32"},
                "--kv-cache-dtype": {"auto", "fp8", "fp8_e5m2", "fp8_e4m3"},
                # QUANTIZATION_METHODS, vllm/model_executor/layers/quantization/__init__.py at commit
                # 0034007debee2a009e030804f2cde7953aff78c6 (the methods the emitter may name)
                "--quantization": {"fp8", "awq", "gptq", "compressed-tensors", "modelopt", "modelopt_fp4",
                                   "bitsandbytes", "experts_int8", "tpu_int8", "fbgemm_fp8"}}
SOURCE = {"kind": "narrowpipe.serving", "model": "m", "target": "h100-sxm", "summary": "hand-made"}


def flags_of(args: list[str]) -> dict[str, str]:
    assert len(args) % 2 == 0 and all(a.startswith("--") for a in args[::2])   # every vLLM flag here takes a value
    return dict(zip(args[::2], args[1::2]))


def check(launch) -> dict[str, str]:
    assert launch.program[:2] == ["vllm", "serve"]
    flags = flags_of(launch.args)
    assert set(flags) <= VLLM_FLAGS, set(flags) - VLLM_FLAGS
    for flag, choices in VLLM_CHOICES.items():
        assert flags.get(flag, next(iter(choices))) in choices
    return flags


def test_a_hand_made_deployment_gives_this_exact_command(tmp_path):
    launch = vllm_launch(str(tmp_path / "config.json"), "h100", "TP4 x PP2", batch=64, max_model_len=8192,
                         model_dtype="bf16", formats={"weights": None, "activations": None, "kv": "fp8_e4m3"},
                         source=SOURCE, prefill_tokens=2048)
    assert launch.command == ["vllm", "serve", str(tmp_path), "--tensor-parallel-size", "4",
                              "--pipeline-parallel-size", "2", "--max-num-seqs", "64", "--max-model-len", "8192",
                              "--max-num-batched-tokens", "2048", "--gpu-memory-utilization", "0.9", "--dtype",
                              "bfloat16", "--kv-cache-dtype", "fp8_e4m3"]
    assert launch.notes == []          # a checkpoint folder: nothing to say
    check(launch)


@pytest.mark.parametrize("weights, activations, quant, noted", [
    (None, None, None, False), ("fp8_e4m3", "fp8_e4m3", "fp8", False), ("fp8_e4m3", None, "fp8", True),
    ("int4", None, None, True), ("int8", None, None, True)])
def test_weight_formats_name_vllms_method_or_say_why_not(weights, activations, quant, noted):
    launch = vllm_launch("m", "h100", "TP1", batch=8, max_model_len=4096, model_dtype="bf16",
                         formats={"weights": weights, "activations": activations, "kv": None}, source=SOURCE)
    flags = check(launch)
    assert flags.get("--quantization") == quant
    assert any("quantiz" in n or "fp8" in n for n in launch.notes) == noted


def test_fp8_gemm_inputs_with_fp8_weights_are_w8a8_not_weight_only():
    """serve --weights fp8_e4m3 --gemm-inputs fp8_e4m3 is FP8 W8A8 (the activations stay 16-bit outside
    the GEMMs): what vLLM's fp8 method runs, so no 'predicted weight-only' note."""
    kw = dict(batch=8, max_model_len=4096, model_dtype="bf16", source=SOURCE)
    w8a8 = vllm_launch("m", "h100", "TP4", formats={"weights": "fp8_e4m3", "activations": None, "kv": "fp8_e4m3",
                                                     "gemm_inputs": "fp8_e4m3"}, **kw)
    assert check(w8a8)["--quantization"] == "fp8"
    assert not any("weight-only" in n for n in w8a8.notes)
    weight_only = vllm_launch("m", "h100", "TP4", formats={"weights": "fp8_e4m3", "gemm_inputs": None}, **kw)
    assert any("weight-only" in n for n in weight_only.notes)
    inputs_only = vllm_launch("m", "h100", "TP4", formats={"weights": None, "gemm_inputs": "fp8_e4m3"}, **kw)
    assert "--quantization" not in check(inputs_only)
    assert any("fp8 GEMM inputs with bf16 weights" in n for n in inputs_only.notes)


def test_serve_emit_vllm_w8a8_from_the_command_line(tmp_path):
    out = tmp_path / "vllm.json"
    assert main(["-q", "serve", "llama-3-8b", "--target", "h100", "--mode", "generate", "--batch", "4", "--tp", "2",
                 "--weights", "fp8_e4m3", "--gemm-inputs", "fp8_e4m3", "--emit", "vllm",
                 "--emit-out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["settings"]["--quantization"] == "fp8"
    assert not any("weight-only" in n for n in doc["notes"])


def test_formats_and_layouts_vllm_cannot_express_are_refused():
    kw = dict(batch=8, max_model_len=4096, model_dtype="bf16", source=SOURCE)
    with pytest.raises(NarrowpipeError, match="--kv-cache-dtype is auto, fp8, fp8_e4m3 or fp8_e5m2; .* is int8"):
        vllm_launch("m", "h100", "TP1", formats={"kv": "int8"}, **kw)
    with pytest.raises(NarrowpipeError, match="does not run on groq-lpu"):
        vllm_launch("m", "groq-lpu", "dataflow layout (8 chips)", formats={}, **kw)
    with pytest.raises(NarrowpipeError, match="not one"):
        parse_layout("dataflow layout (8 chips)")
    for tp, pp in ((1, 1), (4, 1), (2, 2), (1, 4), (8, 2)):
        assert parse_layout(Layout(tp, pp).label) == (tp, pp)      # serving's own labels read back


def test_serve_emit_vllm_takes_the_deployments_values(tmp_path, capsys):
    out = tmp_path / "vllm.json"
    assert main(["-q", "serve", "gpt2", "--target", "h100", "--mode", "generate", "--batch", "8", "--input", "512",
                 "--output", "128", "--tp", "2", "--emit", "vllm", "--emit-out", str(out)]) == 0
    doc = json.loads(out.read_text())
    validate(doc)
    flags = flags_of(doc["command"][3:])
    assert (flags["--tensor-parallel-size"], flags["--max-num-seqs"], flags["--max-model-len"]) == ("2", "8", "640")
    assert flags["--dtype"] == "float32" and flags["--kv-cache-dtype"] == "auto"    # the example's own formats


def test_a_capacity_plan_emits_its_best_layout_at_its_batch():
    model = narrowpipe.transformer(4, 1024, 16, 32000, seq=512, name="tiny-4l")
    plan = plan_capacity(model, "h100", rate=10, input_len=512, output_len=128, tpot=0.02, max_tp=2)
    best = plan.best_throughput
    assert best is not None
    flags = check(vllm_from_capacity(plan, "m", "bf16", {"weights": None, "activations": None, "kv": None}))
    assert flags["--max-num-seqs"] == str(best.batch) and flags["--max-model-len"] == "640"
    assert (int(flags["--tensor-parallel-size"]), int(flags["--pipeline-parallel-size"])) == parse_layout(best.layout)


def test_a_deployment_that_does_not_fit_gets_no_command(tmp_path, capsys):
    """70B in bf16 is 141 GB of weights: on one 80 GB H100 the table said 'does not fit by 73.3 GB' and
    the full vllm serve command was still written, without a word."""
    out = tmp_path / "nofit.txt"
    rc = main(["serve", "llama-3-70b", "--target", "h100", "--batch", "8", "--emit", "vllm", "--emit-out", str(out)])
    assert rc == 2 and not out.exists()
    assert "does not fit" in capsys.readouterr().err


@pytest.mark.parametrize("argv, tokens", [
    # serve prefills its batch together: 4 prompts of 8192 tokens are one 32,768-token step, which vLLM's
    # default of 8192 on an H100 would have split into four
    (["--tp", "4", "--mode", "prefill", "--input", "8192", "--batch", "4"], 4 * 8192),
    (["--tp", "2", "--input", "1024", "--output", "128", "--batch", "16"], 16 * 1024),
    (["--tp", "2", "--mode", "decode", "--context", "2048", "--batch", "16"], None)])
def test_the_prefill_step_the_prediction_assumes_is_pinned(capsys, argv, tokens):
    assert main(["-q", "serve", "llama-3-8b", "--target", "h100", *argv, "--emit", "vllm"]) == 0
    text = capsys.readouterr().out
    command = text[text.index("vllm serve"):].split()
    if tokens is None:
        assert "--max-num-batched-tokens" not in command and "decode steps only" in text
    else:
        assert command[command.index("--max-num-batched-tokens") + 1] == str(tokens)


def test_a_capacity_plan_pins_one_prompt_per_prefill_step():
    """plan_capacity books the activations of one prompt's prefill (prefill_batch=1), so vLLM's step is
    pinned to the prompt, not to vLLM's GPU-dependent default."""
    graph = narrowpipe.load_model("llama-3-8b")
    plan = plan_capacity(graph, ["h100"], rate=1.0, input_len=3000, output_len=200, tpot=0.05)
    launch = vllm_from_capacity(plan, "llama-3-8b", "bf16", {"weights": None, "activations": None, "kv": None})
    flags = check(launch)
    assert flags["--max-num-batched-tokens"] == str(max(3000, int(flags["--max-num-seqs"])))


def test_a_relative_config_folder_is_written_as_a_path_not_a_model_name():
    """``mixtral/config.json`` (a folder named like its ``model_type``) is served from ``./mixtral``:
    ``vllm serve mixtral`` read as a model name; nested and absolute folders stay as given."""
    assert model_reference("mixtral/config.json") == ("./mixtral", None)
    assert model_reference("configs/dsv3/config.json") == ("configs/dsv3", None)
    assert model_reference("/abs/dsv3/config.json") == ("/abs/dsv3", None)
