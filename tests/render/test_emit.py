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
    assert main(["-q", *PLAN_ARGS, "--emit", "torch", "--emit-out", str(as_json)]) == 0
    doc = json.loads(as_json.read_text())
    validate(doc)
    assert doc["tool"] == "torch" and doc["source"]["kind"] == "narrowpipe.plan"
    assert main(["-q", *PLAN_ARGS, "--emit", "torch", "--emit-out", str(as_text)]) == 0
    assert as_text.read_text().rstrip("\n").endswith(doc["code"].rstrip("\n"))
    capsys.readouterr()
    assert main(["-q", *PLAN_ARGS, "--emit", "megatron"]) == 0
    assert "pretrain_gpt.py \\\n    --tensor-model-parallel-size 2 \\" in capsys.readouterr().out


def test_emit_out_without_emit_is_refused(tmp_path, capsys):
    assert main([*PLAN_ARGS, "--emit-out", str(tmp_path / "x.sh")]) == 2
    assert "--emit-out needs --emit" in capsys.readouterr().err
