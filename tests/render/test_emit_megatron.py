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
    "--position-embedding-type", "--normalization", "--swiglu", "--disable-bias-linear",
    "--add-qkv-bias", "--untie-embeddings-and-output-weights", "--num-experts", "--moe-router-topk",
    "--rotary-base", "--use-rope-scaling", "--rope-scaling-factor", "--no-gradient-accumulation-fusion",
    "--qk-layernorm", "--moe-ffn-hidden-size", "--moe-token-dispatcher-type", "--moe-grouped-gemm",
    "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--moe-router-score-function",
    "--moe-router-enable-expert-bias", "--moe-router-pre-softmax", "--moe-router-num-groups", "--moe-router-group-topk",
    "--moe-router-topk-scaling-factor", "--moe-router-dtype", "--multi-latent-attention", "--q-lora-rank",
    "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--rope-type",
    "--rotary-scaling-factor", "--mscale", "--mscale-all-dim", "--norm-epsilon", "--fp8-format", "--fp8-recipe",
    # core_v0.15.0 arguments.py add_argument; at main from ModelParallelConfig.overlap_moe_expert_parallel_comm
    "--overlap-moe-expert-parallel-comm",
}
# `--rotary-base` is `type=int` there: an integer, written as one
# choices= of the flags above that take one (same file and tag)
MEGATRON_CHOICES = {"--recompute-granularity": {"full", "selective"}, "--recompute-method": {"uniform", "block"},
                    "--position-embedding-type": {"learned_absolute", "rope", "mrope", "relative", "none"},
                    "--normalization": {"LayerNorm", "RMSNorm"},
                    "--data-parallel-sharding-strategy": {"no_shard", "optim", "optim_grads", "optim_grads_params"},
                    "--attention-backend": {"flash", "fused", "unfused", "local", "auto"},
                    "--moe-token-dispatcher-type": {"allgather", "alltoall", "flex"},
                    "--moe-router-score-function": {"softmax", "sigmoid"}, "--moe-router-dtype": {"fp32", "fp64"},
                    "--rope-type": {"rope", "yarn"}, "--fp8-format": {"e4m3", "hybrid"},
                    "--fp8-recipe": {"tensorwise", "delayed", "mxfp8", "blockwise"}}
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
    if program[0] == "env":           # only the variable validate_args asserts on (or the MoE overlap's > 1)
        overlap = "--overlap-moe-expert-parallel-comm" in launch.args
        assert program[1] == f"CUDA_DEVICE_MAX_CONNECTIONS={32 if overlap else 1}"
        program = program[2:]
    assert program[0] == "torchrun" and program[-1] == "pretrain_gpt.py"
    torchrun = get_args_parser().parse_args(program[1:])        # torch's own parser accepts the launcher flags
    assert torchrun.nproc_per_node == program[2] and torchrun.training_script == "pretrain_gpt.py"
    flags = flags_of(launch.args)
    assert set(flags) <= MEGATRON_FLAGS, set(flags) - MEGATRON_FLAGS
    for flag, choices in MEGATRON_CHOICES.items():
        assert flags.get(flag, next(iter(choices))) in choices
    if "--rotary-base" in flags:
        assert str(int(flags["--rotary-base"])) == flags["--rotary-base"]
    return flags


def test_a_hand_made_interleaved_plan_gives_this_exact_command(hand_plan, llama_arch):
    plan = hand_plan(4, 2, 16, tp=4, dp=2, layers=[4] * 8, seq=8192, sequence_parallel=True, recompute="selective",
                     zero=1, architecture=llama_arch)
    launch = megatron_launch(plan)
    assert launch.command == [
        "env", "CUDA_DEVICE_MAX_CONNECTIONS=1", "torchrun", "--nproc-per-node", "8", "--nnodes", "4", "pretrain_gpt.py",
        "--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "4",
        "--num-layers-per-virtual-pipeline-stage", "4", "--sequence-parallel", "--micro-batch-size", "1",
        "--global-batch-size", "32", "--recompute-granularity", "selective", "--use-distributed-optimizer", "--bf16",
        "--accumulate-allreduce-grads-in-fp32", "--overlap-grad-reduce", "--overlap-param-gather",
        "--attention-dropout", "0.0", "--hidden-dropout", "0.0", "--num-layers", "32", "--hidden-size", "4096",
        "--ffn-hidden-size", "14336", "--num-attention-heads", "32", "--group-query-attention", "--num-query-groups",
        "8", "--seq-length", "8192", "--max-position-embeddings", "8192", "--position-embedding-type", "rope",
        "--rotary-base", "500000", "--normalization", "RMSNorm", "--swiglu", "--disable-bias-linear",
        "--untie-embeddings-and-output-weights"]
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
    # Megatron FSDP: the four flags docs/source/api-guide/custom_fsdp.md (core_v0.15.0) lists together
    (2, {"--use-megatron-fsdp", "--ckpt-format", "--use-distributed-optimizer", "--no-gradient-accumulation-fusion"},
     set()),
    (3, {"--use-megatron-fsdp", "--ckpt-format", "--use-distributed-optimizer", "--no-gradient-accumulation-fusion"},
     set()),
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


def test_a_dots_plan_has_no_megatron_flag(hand_plan, llama_arch):
    """Megatron-Core's --recompute-granularity is selective or full; the JAX dots policy is neither."""
    with pytest.raises(NarrowpipeError, match="no Megatron flag"):
        megatron_launch(hand_plan(1, 1, 8, recompute="dots", architecture=llama_arch))


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
    assert "env CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc-per-node 8 --nnodes 2 pretrain_gpt.py" in text
    assert flags["--rotary-base"] == "500000"          # Llama-3's rope_theta; Megatron's default is 10000


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


def test_zero_2_and_3_give_megatron_fsdps_documented_flag_set(hand_plan, llama_arch):
    for zero, strategy in ((2, "optim_grads"), (3, "optim_grads_params")):
        flags = check_flags(megatron_launch(hand_plan(1, 1, 4, zero=zero, architecture=llama_arch)))
        assert {k: flags.get(k) for k in ("--use-megatron-fsdp", "--data-parallel-sharding-strategy",
                                          "--no-gradient-accumulation-fusion", "--use-distributed-optimizer")} == {
            "--use-megatron-fsdp": True, "--data-parallel-sharding-strategy": strategy,
            "--no-gradient-accumulation-fusion": True, "--use-distributed-optimizer": True}


@pytest.mark.parametrize("target, system, tp, cp, zero, env", [
    ("h100-sxm", "dgx-h100", 2, 1, 1, True),       # tensor parallelism before Blackwell: asserted == "1"
    ("h100-sxm", "dgx-h100", 1, 2, 0, True),       # context parallelism too
    ("h100-sxm", "dgx-h100", 1, 1, 1, False),      # neither: nothing asserted
    ("h100-sxm", "dgx-h100", 2, 1, 3, False),      # Megatron FSDP asserts != "1"
    ("b200", "dgx-b200", 2, 1, 1, False),          # Blackwell (compute capability 10): no requirement
    ("mi300x", "mi300x-8", 2, 1, 0, True),         # AMD Instinct reports major version 9
])
def test_cuda_device_max_connections_is_set_where_validate_args_asserts_it(hand_plan, llama_arch, target, system,
                                                                           tp, cp, zero, env):
    """megatron/training/arguments.py (core_v0.15.0) validate_args: with tp > 1 or cp > 1 and
    get_device_arch_version() < 10 it asserts CUDA_DEVICE_MAX_CONNECTIONS == "1" (unless FSDP); with
    --use-megatron-fsdp it asserts the variable is not "1"."""
    launch = megatron_launch(hand_plan(1, 1, 4, tp=tp, cp=cp, zero=zero, target=target, system=system,
                                       architecture=llama_arch))
    check_flags(launch)
    assert (launch.program[:2] == ["env", "CUDA_DEVICE_MAX_CONNECTIONS=1"]) == env
    assert launch.text().count("CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun") == int(env)
    if zero >= 2 and tp > 1:
        assert any("CUDA_DEVICE_MAX_CONNECTIONS is not 1" in n for n in launch.notes)


def test_rotary_base_and_llama_3_1_scaling_come_from_the_model(hand_plan, llama_arch):
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    flags = check_flags(megatron_launch(hand_plan(1, 1, 4, architecture={**llama_arch, "rope_scaling": scaling})))
    assert flags["--rotary-base"] == "500000"
    assert flags["--use-rope-scaling"] is True and flags["--rope-scaling-factor"] == "8.0"
    yarn = megatron_launch(hand_plan(1, 1, 4, architecture={**llama_arch, "rope_scaling": {"rope_type": "yarn",
                                                                                           "factor": 4.0}}))
    assert "--use-rope-scaling" not in check_flags(yarn) and any("yarn" in n for n in yarn.notes)
    unknown = megatron_launch(hand_plan(1, 1, 4, architecture={**llama_arch, "rope_theta": None}))
    assert "--rotary-base" not in check_flags(unknown)
    assert any("rotary base (rope_theta) is unknown" in n for n in unknown.notes)
    gpt2 = {**llama_arch, "positions": "learned", "rope_theta": None}
    assert not any("rotary" in n for n in megatron_launch(hand_plan(1, 1, 4, architecture=gpt2)).notes)


def test_rotary_base_of_a_hugging_face_config_and_of_the_bundled_exports(tmp_path):
    import json

    import narrowpipe
    mixtral = {"model_type": "mixtral", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
               "num_key_value_heads": 8, "vocab_size": 1000, "intermediate_size": 1024, "num_local_experts": 4,
               "num_experts_per_tok": 2, "rope_theta": 1e6, "max_position_embeddings": 4096}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(mixtral))
    plan = narrowpipe.plan(str(path), "dgx-h100", 8, global_batch=16, seq=1024, parallel={"tp": 2, "pp": 1})
    assert plan.architecture["rope_theta"] == 1e6
    assert check_flags(megatron_launch(plan))["--rotary-base"] == "1000000"
    from narrowpipe.costmodel.planner.assemble import architecture
    from narrowpipe.models.examples import load_example
    for name in ("llama-3-8b", "llama-3-70b"):       # exports keep no buffer values: the example's config
        assert architecture(load_example(name))["rope_theta"] == 500000.0
    assert architecture(load_example("gpt2"))["rope_theta"] is None


def test_gpt2s_tanh_gelu_is_a_note_not_the_legacy_only_openai_gelu_flag(hand_plan):
    """--openai-gelu is read only under megatron/legacy (core_v0.15.0): Megatron-Core ignores it."""
    gpt2 = {"layers": 12, "hidden": 768, "heads": 12, "kv_heads": 12, "head_dim": 64, "ffn": 3072, "vocab": 50257,
            "gated_mlp": False, "activation": "gelu_tanh", "norm": "layer", "positions": "learned",
            "max_positions": 1024, "tie_embeddings": True, "attn_bias": True, "out_bias": True, "mlp_bias": True}
    launch = megatron_launch(hand_plan(1, 1, 4, tp=1, architecture=gpt2))
    assert "--openai-gelu" not in check_flags(launch)
    assert any("approximate='tanh'" in n and "--use-legacy-models" in n for n in launch.notes)


def test_synthetic_data_hint_gives_nulltokenizer_the_models_vocabulary(hand_plan, llama_arch):
    """At Megatron-LM main (d98e8a64, megatron/core/tokenizers/text/libraries/null_tokenizer.py)
    NullTokenizer's vocab_size is the --vocab-size given, its eod id vocab_size - 1; core_v0.15.0's
    legacy _NullTokenizer added one (eod = vocab_size), the vocabulary minus one there."""
    notes = megatron_launch(hand_plan(1, 1, 4, architecture=llama_arch)).notes
    assert any("--tokenizer-type NullTokenizer --vocab-size 128256 " in n and "core_v0.15.0" in n and "128255" in n
               for n in notes)


def test_chips_are_told_apart_by_their_software_not_their_execution_family(hand_plan, llama_arch):
    """Gaudi 3 and Trainium2 are 'tpu' (systolic) in the catalog, but neither runs JAX's TPU stack."""
    with pytest.raises(NarrowpipeError, match="Trainium2? .*Neuron") as err:
        megatron_launch(hand_plan(1, 1, 4, target="trainium2", system="trn2-16", architecture=llama_arch))
    assert "jax" not in str(err.value) and "tpu" not in str(err.value).lower()
    with pytest.raises(NarrowpipeError, match="a TPU: use --emit jax"):
        megatron_launch(hand_plan(1, 1, 4, target="tpu-v5p", system="tpu-v5p-8x8x8", architecture=llama_arch))
    gaudi = megatron_launch(hand_plan(1, 1, 4, target="gaudi3", system="gaudi3", architecture=llama_arch))
    assert any("HabanaAI/Megatron-LM" in n for n in gaudi.notes)
    assert gaudi.program[0] == "torchrun"          # no CUDA variable on Gaudi


@pytest.mark.parametrize("eps, flag", [(1e-6, "1e-06"), (1e-5, None)])
def test_the_models_norm_epsilon_is_emitted_where_it_is_not_megatrons_default(tmp_path, eps, flag):
    """DeepSeek-V3's and Qwen's rms_norm_eps is 1e-6; Megatron's --norm-epsilon defaults to 1e-5
    (TransformerConfig.layernorm_epsilon), which the command left in place."""
    import json

    import narrowpipe
    config = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
              "num_key_value_heads": 4, "vocab_size": 1000, "intermediate_size": 512, "num_local_experts": 4,
              "num_experts_per_tok": 2, "max_position_embeddings": 1024, "rms_norm_eps": eps}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    plan = narrowpipe.plan(str(path), "dgx-h100", 8, global_batch=16, seq=512, parallel={"tp": 1, "pp": 1}, top=0)
    launch = megatron_launch(plan)
    assert check_flags(launch).get("--norm-epsilon") == flag
    assert not any("norm_eps" in n for n in launch.notes)         # expressed, not listed as unset


def test_an_fp8_plan_names_the_format_and_scaling_recipe_it_was_timed_with(hand_plan, llama_arch):
    """The plan times Transformer Engine's HYBRID format with per-tensor (delayed) scaling for every FP8
    --dtype; the command says both instead of leaving the recipe to Megatron's default."""
    runtime = {"name": "megatron-core", "fp8": "hybrid", "grad_reduce_dtype": "fp32"}
    launch = megatron_launch(hand_plan(1, 1, 4, architecture=llama_arch, runtime=runtime))
    flags = check_flags(launch)
    assert flags["--fp8-format"] == "hybrid" and flags["--fp8-recipe"] == "delayed" and flags["--bf16"] is True
    assert any("fp8_e4m3" in n and "e4m3" in n for n in launch.notes)


def test_a_plan_timed_as_another_runtime_gets_no_megatron_flags(capsys, monkeypatch, tmp_path):
    """A plan timed under --runtime maxtext (XLA's fusion, JAX's remat policies) emitted as Megatron
    flags would launch a run that behaves as Megatron-Core does: refused, before the search, from the
    CLI, and by the emitter given such a plan (the Python path)."""
    import narrowpipe
    g = narrowpipe.transformer(2, 512, 8, 1000, ffn=1024, seq=256, name="tiny")
    path = tmp_path / "tiny.json"
    g.save(str(path))
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["plan", str(path), "--devices", "8", "--target", "h100", "--global-batch", "8", "--seq", "256",
                 "--runtime", "maxtext", "--emit", "megatron"]) != 0
    out = capsys.readouterr()
    assert "re-plan with --runtime megatron-core" in out.err + out.out and "step" not in out.out
    plan = narrowpipe.plan(g, "h100", 8, global_batch=8, seq=256, runtime="maxtext", top=0)
    with pytest.raises(NarrowpipeError, match="timed as runtime 'maxtext' runs"):
        megatron_launch(plan)
    assert megatron_launch(narrowpipe.plan(g, "h100", 8, global_batch=8, seq=256, top=0)).settings
