"""``--emit``'s common form: every tool's JSON validates against the shipped schema, the text is the
command or snippet with the notes as comments, and ``--emit-out`` picks the form by its suffix."""

from __future__ import annotations

import copy
import json

import pytest

from narrowpipe import NarrowpipeError
from narrowpipe.cli import main
from narrowpipe.render.emit_jax import jax_launch
from narrowpipe.render.emit_megatron import megatron_launch
from narrowpipe.render.emit_torch import torch_launch
from narrowpipe.schema import validate

PLAN_ARGS = ["plan", "gpt2", "--devices", "8", "--target", "dgx-h100", "--global-batch", "16", "--seq", "512",
             "--fix", "tp=2,pp=2,microbatch=1,interleave=1"]
#: GPT-2's Conv1D projections have no torch tensor-parallel plan: the torch settings are asked at tp=1
TORCH_ARGS = [*PLAN_ARGS[:-1], "tp=1,pp=2,microbatch=1,interleave=1"]


@pytest.mark.parametrize("emit", [megatron_launch, torch_launch, jax_launch])
def test_every_tools_json_validates_and_a_renamed_field_fails(hand_plan, llama_arch, emit):
    doc = json.loads(emit(hand_plan(1, 1, 4, tp=2, dp=4, architecture=llama_arch)).to_json())
    validate(doc)
    renamed = copy.deepcopy(doc)
    renamed["flags"] = renamed.pop("settings")
    with pytest.raises(NarrowpipeError, match="settings"):
        validate(renamed)


def test_the_text_is_the_command_with_notes_as_comments(hand_plan, llama_arch):
    launch = megatron_launch(hand_plan(1, 1, 4, dtype="fp32", architecture=llama_arch))
    lines = launch.text().splitlines()
    assert lines[0].startswith("# megatron settings from narrowpipe: hand on 4 x h100-sxm (dgx-h100): tp2 pp1 dp2")
    assert "# note: fp32 training: Megatron's default precision, no --bf16/--fp16" in lines
    command = [ln for ln in lines if not ln.startswith("#")]
    # tp=2 on an H100: the variable Megatron's validate_args asserts, set for the launcher
    assert command[0] == "env CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc-per-node 4 --nnodes 1 pretrain_gpt.py \\"
    assert all(ln.startswith("    --") for ln in command[1:])
    assert " ".join(ln.rstrip(" \\").strip() for ln in command).split() == launch.command


def test_emit_out_writes_json_or_text_by_its_suffix_and_stdout_without_it(tmp_path, capsys):
    as_json, as_text = tmp_path / "launch.json", tmp_path / "launch.sh"
    assert main(["-q", *TORCH_ARGS, "--emit", "torch", "--emit-out", str(as_json)]) == 0
    doc = json.loads(as_json.read_text())
    validate(doc)
    assert doc["tool"] == "torch" and doc["source"]["kind"] == "narrowpipe.plan"
    assert main(["-q", *TORCH_ARGS, "--emit", "torch", "--emit-out", str(as_text)]) == 0
    assert as_text.read_text().rstrip("\n").endswith(doc["code"].rstrip("\n"))
    capsys.readouterr()
    assert main(["-q", *PLAN_ARGS, "--emit", "megatron"]) == 0
    assert "pretrain_gpt.py \\\n    --tensor-model-parallel-size 2 \\" in capsys.readouterr().out


def test_emit_out_without_emit_is_refused(tmp_path, capsys):
    assert main([*PLAN_ARGS, "--emit-out", str(tmp_path / "x.sh")]) == 2
    assert "--emit-out needs --emit" in capsys.readouterr().err


@pytest.mark.parametrize("tool", ["megatron", "torch", "jax"])
def test_a_model_that_is_no_recognised_transformer_gets_no_launch_settings(hand_plan, tool):
    """A ResNet's plan has no layers, heads or hidden size: Megatron wrote ``--seq-length 1``, torch a
    loop over ``model.model.layers``, JAX attention specs. Every tool refuses it."""
    from narrowpipe.render.plan import launch_for
    target = {"jax": "tpu-v5p"}.get(tool, "h100-sxm")
    system = {"jax": "tpu-v5p-8x8x8"}.get(tool, "dgx-h100")
    plan = hand_plan(1, 1, 4, tp=1, dp=4, target=target, system=system)      # architecture {}: not recognised
    with pytest.raises(NarrowpipeError, match="not .*recognised transformer|not one narrowpipe recognises"):
        launch_for(plan, tool)
    if tool != "jax":
        with pytest.raises(NarrowpipeError, match="not a recognised transformer"):
            {"megatron": megatron_launch, "torch": torch_launch}[tool](plan)


_STACK_CHIPS = {"cuda": ("h100-sxm", "dgx-h100"), "rocm": ("mi300x", None), "gaudi": ("gaudi3", "gaudi3"),
                "neuron": ("trainium2", "trn2-16"), "tpu": ("tpu-v5p", "tpu-v5p-8x8x8")}


@pytest.mark.parametrize("stack", sorted(_STACK_CHIPS))
def test_the_check_before_planning_agrees_with_each_emitters_own_refusal(hand_plan, llama_arch, stack):
    """``check_tool_target`` refuses before the search exactly the chips each emitter refuses after it."""
    from narrowpipe.backends import get_target
    from narrowpipe.render.emit import check_tool_target, software_stack
    chip_name, system = _STACK_CHIPS[stack]
    chip = get_target(chip_name)
    assert software_stack(chip) == stack
    plan = hand_plan(1, 1, 4, tp=1, dp=4, target=chip_name, system=system or chip_name, architecture=llama_arch)
    for tool, emit in (("megatron", megatron_launch), ("torch", torch_launch), ("jax", jax_launch)):
        try:
            emit(plan, chip)
            emitted = True
        except NarrowpipeError:
            emitted = False
        try:
            check_tool_target(tool, chip)
            passes = True
        except NarrowpipeError:
            passes = False
        assert passes == emitted, (tool, stack)


def test_an_incompatible_emit_is_refused_before_the_plan_is_searched(monkeypatch, capsys):
    """A TPU plan with --emit megatron searched (~25 s), printed the plan, then failed."""
    import narrowpipe

    def no_search(*args, **kwargs):
        raise AssertionError("the plan was searched before --emit was checked")

    monkeypatch.setattr(narrowpipe, "plan", no_search)
    rc = main(["plan", "llama-3-8b", "--devices", "64", "--target", "tpu-v5p", "--global-batch", "64",
               "--emit", "megatron"])
    out = capsys.readouterr()
    assert rc == 2 and "plan:" not in out.out
    assert "--emit megatron" in out.err and "use --emit jax" in out.err
