"""``plan --emit megatron``: Megatron-LM's own flag names, values that are the plan's, an exact
expected command for a hand-made plan, the model flags Megatron's Llama-3 example uses, and refusals
for what Megatron cannot run."""

from __future__ import annotations

import re

import pytest
from torch.distributed.run import get_args_parser

from narrowpipe import NarrowpipeError
from narrowpipe.cli import main
from narrowpipe.render.emit_megatron import megatron_launch

# Every flag the Megatron emitter may write, each defined by `group.add_argument('--...')` in
# NVIDIA/Megatron-LM megatron/training/arguments.py at tag core_v0.15.0
# (commit 0d7e02bd26d3eb347ad8d1bef625002babfa6df7). At main (d98e8a64ddf3, 2026-08) the same names
# are generated from the config dataclasses' field names (megatron/training/argument_utils.py).
MEGATRON_FLAGS = {
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage",
    "--pipeline-model-parallel-layout", "--context-parallel-size", "--expert-model-parallel-size",
    "--sequence-parallel", "--micro-batch-size", "--global-batch-size", "--recompute-granularity",
    "--recompute-method", "--recompute-num-layers", "--use-distributed-optimizer", "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy", "--ckpt-format", "--bf16", "--fp16", "--accumulate-allreduce-grads-in-fp32",
    "--grad-reduce-in-bf16",
    "--overlap-grad-reduce", "--overlap-param-gather", "--attention-backend", "--attention-dropout",
    "--hidden-dropout", "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads",
    "--group-query-attention", "--num-query-groups", "--kv-channels", "--seq-length", "--max-position-embeddings",
    "--position-embedding-type", "--normalization", "--swiglu", "--openai-gelu", "--disable-bias-linear",
    "--add-qkv-bias", "--untie-embeddings-and-output-weights", "--num-experts", "--moe-router-topk",
}
# choices= of the flags above that take one (same file and tag)
MEGATRON_CHOICES = {"--recompute-granularity": {"full", "selective"}, "--recompute-method": {"uniform", "block"},
                    "--position-embedding-type": {"learned_absolute", "rope", "mrope", "relative", "none"},
                    "--normalization": {"LayerNorm", "RMSNorm"},
                    "--data-parallel-sharding-strategy": {"no_shard", "optim", "optim_grads", "optim_grads_params"},
                    "--attention-backend": {"flash", "fused", "unfused", "local", "auto"}}
# the architecture flags of Megatron-LM's own Llama-3 8B recipe, examples/llama/train_llama3_8b_h100_fp8.sh
# (core_v0.15.0), which a plan of Llama-3 8B must reproduce
LLAMA3_8B_RECIPE = {"--hidden-size": "4096", "--ffn-hidden-size": "14336", "--num-attention-heads": "32",
                    "--group-query-attention": True, "--num-query-groups": "8", "--position-embedding-type": "rope",
                    "--swiglu": True, "--untie-embeddings-and-output-weights": True, "--disable-bias-linear": True,
                    "--attention-dropout": "0.0", "--hidden-dropout": "0.0", "--bf16": True}


def flags_of(args: list[str]) -> dict[str, str | bool]:
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[args[i]] = args[i + 1]
            i += 2
        else:
            out[args[i]] = True
            i += 1
    return out


def check_flags(launch) -> dict[str, str | bool]:
    program = launch.program
    assert program[0] == "torchrun" and program[-1] == "pretrain_gpt.py"
    torchrun = get_args_parser().parse_args(program[1:])        # torch's own parser accepts the launcher flags
    assert torchrun.nproc_per_node == program[2] and torchrun.training_script == "pretrain_gpt.py"
    flags = flags_of(launch.args)
    assert set(flags) <= MEGATRON_FLAGS, set(flags) - MEGATRON_FLAGS
    for flag, choices in MEGATRON_CHOICES.items():
        assert flags.get(flag, next(iter(choices))) in choices
    return flags


def test_a_hand_made_interleaved_plan_gives_this_exact_command(hand_plan, llama_arch):
    plan = hand_plan(4, 2, 16, tp=4, dp=2, layers=[4] * 8, seq=8192, sequence_parallel=True, recompute="selective",
                     zero=1, architecture=llama_arch)
    launch = megatron_launch(plan)
    assert launch.command == [
        "torchrun", "--nproc-per-node", "8", "--nnodes", "4", "pretrain_gpt.py",
        "--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "4",
        "--num-layers-per-virtual-pipeline-stage", "4", "--sequence-parallel", "--micro-batch-size", "1",
        "--global-batch-size", "32", "--recompute-granularity", "selective", "--use-distributed-optimizer", "--bf16",
        "--accumulate-allreduce-grads-in-fp32", "--overlap-grad-reduce", "--overlap-param-gather",
        "--attention-dropout", "0.0", "--hidden-dropout", "0.0", "--num-layers", "32", "--hidden-size", "4096",
        "--ffn-hidden-size", "14336", "--num-attention-heads", "32", "--group-query-attention", "--num-query-groups",
        "8", "--seq-length", "8192", "--max-position-embeddings", "8192", "--position-embedding-type", "rope",
        "--normalization", "RMSNorm", "--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights"]
    check_flags(launch)
    text = launch.text()
    assert text.splitlines()[-1] == "    --untie-embeddings-and-output-weights"
    assert "    --tensor-model-parallel-size 4 \\" in text


def test_uneven_chunks_become_megatrons_layout_string_that_parses_back_to_the_plans_split(hand_plan, llama_arch):
    plan = hand_plan(2, 2, 4, tp=2, layers=[3, 2, 2, 1], architecture={**llama_arch, "layers": 8})
    flags = check_flags(megatron_launch(plan))
    layout = flags["--pipeline-model-parallel-layout"]
    assert "--num-layers-per-virtual-pipeline-stage" not in flags     # Megatron allows only one of the two
    # Megatron's documented syntax: unroll x*n, split stages on '|' (pipeline_parallel_layer_layout.py)
    stages = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), str(layout)).split("|")
    assert [s.count("t") for s in stages] == [3, 2, 2, 1]
    assert stages[0].startswith("E") and stages[-1].endswith("L") and "".join(stages).count("E") == 1


@pytest.mark.parametrize("zero, expect, absent", [
    (0, set(), {"--use-distributed-optimizer", "--overlap-param-gather", "--use-megatron-fsdp"}),
    (1, {"--use-distributed-optimizer", "--overlap-param-gather"}, {"--use-megatron-fsdp"}),
    (2, {"--use-megatron-fsdp", "--ckpt-format"}, {"--use-distributed-optimizer"}),
    (3, {"--use-megatron-fsdp", "--ckpt-format"}, {"--use-distributed-optimizer"}),
])
def test_zero_stages_map_to_the_distributed_optimizer_or_megatron_fsdp(hand_plan, llama_arch, zero, expect, absent):
    flags = check_flags(megatron_launch(hand_plan(1, 1, 4, zero=zero, architecture=llama_arch)))
    assert expect <= set(flags) and not absent & set(flags)
    if zero >= 2:
        assert flags["--data-parallel-sharding-strategy"] == {2: "optim_grads", 3: "optim_grads_params"}[zero]
        assert flags["--ckpt-format"] == "fsdp_dtensor"          # Megatron asserts it for Megatron FSDP


def test_full_recomputation_recomputes_every_layer_and_fp16_gets_its_flag(hand_plan, llama_arch):
    flags = check_flags(megatron_launch(hand_plan(1, 1, 4, recompute="full", dtype="fp16", architecture=llama_arch)))
    assert (flags["--recompute-granularity"], flags["--recompute-method"], flags["--recompute-num-layers"]) == \
        ("full", "uniform", "1")
    assert flags["--fp16"] is True and "--bf16" not in flags


def test_a_plan_of_llama_3_8b_gives_megatrons_own_llama_3_recipe_flags(tmp_path, capsys):
    out = tmp_path / "megatron.sh"
    assert main(["-q", "plan", "llama-3-8b", "--devices", "16", "--target", "dgx-h100", "--global-batch", "32",
                 "--seq", "4096", "--dtype", "bf16", "--fix", "tp=4,pp=2,microbatch=1,recompute=selective,zero=1",
                 "--emit", "megatron", "--emit-out", str(out)]) == 0
    text = out.read_text()
    lines = [ln.strip().rstrip("\\").strip() for ln in text.splitlines() if ln.startswith("    --")]
    flags = flags_of([part for ln in lines for part in ln.split(" ", 1)])
    for flag, value in LLAMA3_8B_RECIPE.items():
        assert flags.get(flag) == value, flag
    assert flags["--tensor-model-parallel-size"] == "4" and flags["--pipeline-model-parallel-size"] == "2"
    assert flags["--global-batch-size"] == "32" and flags["--micro-batch-size"] == "1"
    assert flags["--num-layers"] == "32" and flags["--seq-length"] == "4096"
    assert "torchrun --nproc-per-node 8 --nnodes 2 pretrain_gpt.py" in text


def test_what_megatron_cannot_run_is_refused(hand_plan, llama_arch):
    with pytest.raises(NarrowpipeError, match="Megatron-LM runs on GPUs"):
        megatron_launch(hand_plan(1, 1, 4, target="tpu-v5e", system="tpu-v5e-256", architecture=llama_arch))
    with pytest.raises(NarrowpipeError, match="parameters are fp8_e4m3"):
        megatron_launch(hand_plan(1, 1, 4, dtype="fp8_e4m3", architecture=llama_arch))
    with pytest.raises(NarrowpipeError, match="encoder"):
        megatron_launch(hand_plan(1, 1, 4, architecture={**llama_arch, "encoder": True}))
    with pytest.raises(NarrowpipeError, match="older plan file"):
        megatron_launch(hand_plan(1, 1, 4, dtype="", architecture=llama_arch))


def test_plan_emit_vllm_points_to_serve(capsys):
    assert main(["plan", "gpt2", "--devices", "8", "--target", "dgx-h100", "--global-batch", "16",
                 "--emit", "vllm"]) == 2
    assert "narrowpipe serve MODEL --target ... --emit vllm" in capsys.readouterr().err


def test_model_features_the_flags_do_not_set_are_named_not_dropped():
    import narrowpipe
    g = narrowpipe.transformer(4, 1024, 8, 32000, seq=1024, name="windowed", sliding_window=512)
    plan = narrowpipe.plan(g, "dgx-h100", 8, global_batch=16, parallel={"tp": 2, "pp": 2, "microbatch": 1})
    assert plan.architecture["other"] == {"sliding_window": 512}
    assert any("sliding_window=512" in n for n in megatron_launch(plan).notes)


def test_two_byte_gradient_reduction_under_bf16_asks_megatron_for_it(hand_plan, llama_arch):
    """Megatron turns --bf16 into fp32 gradient accumulation and reduction unless
    --grad-reduce-in-bf16 is given (arguments.py at core_v0.15.0): a plan that reduced 2-byte
    gradients (the megatron-lm-2021 runtime) must say so, or the job holds and moves twice the bytes."""
    plan = hand_plan(1, 1, 4, architecture=llama_arch,
                     runtime={"name": "megatron-lm-2021", "grad_reduce_dtype": "fp16"})
    flags = check_flags(megatron_launch(plan))
    assert flags.get("--grad-reduce-in-bf16") is True and "--accumulate-allreduce-grads-in-fp32" not in flags
    fp32 = check_flags(megatron_launch(hand_plan(1, 1, 4, architecture=llama_arch,
                                                 runtime={"grad_reduce_dtype": "fp32"})))
    assert "--grad-reduce-in-bf16" not in fp32 and fp32["--accumulate-allreduce-grads-in-fp32"] is True
