"""``plan --emit megatron`` for mixtures of experts and latent attention: every value checked against
the Hugging Face config by hand, each flag's meaning from Megatron-LM at core_v0.15.0
(megatron/training/arguments.py; moe_utils.py's topk_routing_with_score_function; gpt_layer_specs.py).

The configs are transformers' default configs of each class (full size): the graph is only built for
its spec, and the plans are written by hand (tests/render/conftest.py), so nothing is costed."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import narrowpipe
from narrowpipe import Plan
from narrowpipe.costmodel.planner.assemble import architecture
from narrowpipe.render.emit_megatron import megatron_launch
from tests.render.test_emit_megatron import check_flags

_ROPE = {"rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}
QWEN3_MOE = {"model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144,
             "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 4,
             "max_position_embeddings": 32768, "attention_bias": False, "decoder_sparse_step": 1,
             "moe_intermediate_size": 768, "num_experts_per_tok": 8, "num_local_experts": 128, "norm_topk_prob": False,
             "mlp_only_layers": [], **_ROPE}
QWEN2_MOE = {"model_type": "qwen2_moe", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632,
             "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
             "max_position_embeddings": 32768, "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
             "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4, "num_experts": 60,
             "norm_topk_prob": False, "mlp_only_layers": [], "qkv_bias": True, **_ROPE}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
               "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
               "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
               "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
               "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8,
               "first_k_dense_replace": 3, "norm_topk_prob": True, "max_position_embeddings": 4096,
               "attention_bias": False, **_ROPE}


def _plan(hand_plan: Any, config: dict[str, Any], *, ep: int = 8, dp: int = 8) -> Plan:
    arch = architecture(narrowpipe.from_config(config, seq=16))
    return hand_plan(1, 1, 4, tp=1, dp=dp, ep=ep, architecture=arch)


def _unset(launch: Any) -> list[str]:
    return [n for n in launch.notes if n.startswith("model features these flags do not set")]


def megatron_layer_pattern(text: str) -> list[int]:
    """``--moe-layer-freq`` as Megatron's ``moe_freq_type`` reads it (arguments.py ``_eval_pattern``:
    only ``,``, digits, brackets, parentheses, ``+`` and ``*``, then ``eval``)."""
    assert not re.search(r"[^,\d\[\]\(\)\+\*]", text), text
    return list(eval(text))      # noqa: S307 - Megatron's own parsing of this flag


def test_qwen3_moe_gets_its_expert_width_dispatcher_qk_norm_and_unnormalized_routing(hand_plan):
    launch = megatron_launch(_plan(hand_plan, QWEN3_MOE))
    flags = check_flags(launch)
    # Megatron builds experts --ffn-hidden-size wide unless told: 768 per expert, 6144 for dense MLPs
    assert flags["--ffn-hidden-size"] == "6144" and flags["--moe-ffn-hidden-size"] == "768"
    assert flags["--num-experts"] == "128" and flags["--moe-router-topk"] == "8"
    assert flags["--moe-token-dispatcher-type"] == "alltoall"     # the planner times all-to-alls; default allgather
    assert flags["--qk-layernorm"] is True
    # norm_topk_prob=False: softmax over all 128, the top 8 kept as they are = Megatron's pre-softmax routing
    assert flags["--moe-router-pre-softmax"] is True
    assert flags["--moe-grouped-gemm"] is True
    assert "--moe-layer-freq" not in flags and "--moe-shared-expert-intermediate-size" not in flags
    assert _unset(launch) == []


def test_no_expert_parallelism_keeps_megatrons_default_dispatcher(hand_plan):
    flags = check_flags(megatron_launch(_plan(hand_plan, QWEN3_MOE, ep=1)))
    assert "--moe-token-dispatcher-type" not in flags and "--expert-model-parallel-size" not in flags


def test_renormalized_softmax_routing_is_megatrons_default(hand_plan):
    flags = check_flags(megatron_launch(_plan(hand_plan, {**QWEN3_MOE, "norm_topk_prob": True})))
    assert "--moe-router-pre-softmax" not in flags and "--moe-router-score-function" not in flags


def test_qwen2_moe_shared_expert_is_a_flag_and_its_gate_a_note(hand_plan):
    launch = megatron_launch(_plan(hand_plan, QWEN2_MOE, ep=4, dp=4))
    flags = check_flags(launch)
    assert flags["--moe-shared-expert-intermediate-size"] == "5632"
    assert flags["--moe-ffn-hidden-size"] == "1408" and flags["--ffn-hidden-size"] == "5632"
    assert flags["--num-experts"] == "60" and flags["--moe-router-topk"] == "4"
    assert flags["--add-qkv-bias"] is True and flags["--moe-router-pre-softmax"] is True
    assert any("shared_expert_gate" in n and "gate=False" in n for n in launch.notes)
    assert _unset(launch) == []


def test_deepseek_v3_latent_attention_dense_layers_and_sigmoid_group_routing(hand_plan):
    launch = megatron_launch(_plan(hand_plan, DEEPSEEK_V3))
    flags = check_flags(launch)
    c = DEEPSEEK_V3
    assert flags["--multi-latent-attention"] is True
    assert flags["--q-lora-rank"] == str(c["q_lora_rank"]) == "1536"
    assert flags["--kv-lora-rank"] == str(c["kv_lora_rank"]) == "512"
    assert flags["--qk-head-dim"] == str(c["qk_nope_head_dim"]) == "128"      # Megatron's qk_head_dim: the nope part
    assert flags["--qk-pos-emb-head-dim"] == str(c["qk_rope_head_dim"]) == "64"
    assert flags["--v-head-dim"] == "128"
    assert flags["--qk-layernorm"] is True            # MLA: q_a_layernorm / kv_a_layernorm on the latents
    assert flags["--rope-type"] == "rope"             # MLA defaults to YaRN; this config's rotary is plain
    assert "--kv-channels" not in flags
    # the first first_k_dense_replace = 3 layers are dense MLPs of intermediate_size, the other 58 experts
    assert megatron_layer_pattern(str(flags["--moe-layer-freq"])) == [0, 0, 0] + [1] * 58
    assert flags["--ffn-hidden-size"] == "18432" and flags["--moe-ffn-hidden-size"] == "2048"
    assert flags["--moe-shared-expert-intermediate-size"] == str(1 * 2048)    # n_shared_experts x moe_intermediate
    assert flags["--num-experts"] == "256" and flags["--moe-router-topk"] == "8"
    assert flags["--moe-router-score-function"] == "sigmoid" and flags["--moe-router-enable-expert-bias"] is True
    assert "--moe-router-pre-softmax" not in flags    # sigmoid scores renormalized over the top-k: norm_topk_prob
    assert flags["--moe-router-num-groups"] == "8" and flags["--moe-router-group-topk"] == "4"
    assert float(flags["--moe-router-topk-scaling-factor"]) == 2.5
    assert flags["--moe-router-dtype"] == "fp32"
    assert _unset(launch) == [] and not any("group-limited" in n for n in launch.notes)   # 8 // 4 = best two


def test_deepseek_v3_yarn_rotary_becomes_mlas_yarn_flags(hand_plan):
    yarn = {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1, "rope_theta": 10000.0}
    launch = megatron_launch(_plan(hand_plan, {**DEEPSEEK_V3, "rope_parameters": yarn}))
    flags = check_flags(launch)
    assert flags["--rope-type"] == "yarn" and float(flags["--rotary-scaling-factor"]) == 40.0
    assert float(flags["--mscale"]) == 1.0 and float(flags["--mscale-all-dim"]) == 1.0
    # the YaRN softmax scale (attn_scale) is what Megatron's MLA derives from mscale_all_dim: no note for it
    assert _unset(launch) == [] and not any("rotary scaling" in n for n in launch.notes)


def test_a_saved_plan_emits_the_same_moe_flags(hand_plan):
    """The plan JSON keeps the spec's tuples (dense layers, expert groups) as text: they read back."""
    plan = _plan(hand_plan, DEEPSEEK_V3)
    again = Plan.from_json(json.dumps(json.loads(plan.to_json())))
    assert megatron_launch(again).args == megatron_launch(plan).args


def test_top_1_softmax_routing_asks_for_pre_softmax_as_megatron_requires(hand_plan):
    mixtral = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
               "num_key_value_heads": 4, "vocab_size": 1000, "intermediate_size": 512, "num_local_experts": 4,
               "num_experts_per_tok": 1}
    launch = megatron_launch(_plan(hand_plan, mixtral, ep=4, dp=4))
    assert check_flags(launch)["--moe-router-pre-softmax"] is True
    assert any("top-1 routing" in n for n in launch.notes)


@pytest.mark.parametrize("fix, message", [
    ("tp=2,pp=1,ep=0", "ep=0: ep must be >= 1"),
    ("tp=2,pp=2,ep=8", "ep=8 must divide the data-parallel size dp = devices/(tp*pp*cp) = 8/(2*2*1) = 2"),
])
def test_an_expert_parallel_size_that_cannot_be_is_named(tmp_path, capsys, fix, message):
    from narrowpipe.cli import main
    config = {"model_type": "mixtral", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
              "num_key_value_heads": 4, "vocab_size": 1000, "intermediate_size": 512, "num_local_experts": 8,
              "num_experts_per_tok": 2, "max_position_embeddings": 4096}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["plan", str(path), "--devices", "8", "--target", "dgx-h100", "--global-batch", "16", "--seq", "512",
                 "--fix", fix]) != 0
    assert message in capsys.readouterr().err


def test_moe_with_tp_and_no_sequence_parallelism_is_refused_as_megatron_core_refuses_it(hand_plan):
    """Megatron-Core's MoELayer.forward raises ValueError when training with a tensor-parallel group
    larger than 1 and sequence_parallel off (moe_layer.py, core_v0.12.0 to main): no command for it."""
    arch = architecture(narrowpipe.from_config(QWEN3_MOE, seq=16))
    with pytest.raises(narrowpipe.NarrowpipeError, match="without --sequence-parallel"):
        megatron_launch(hand_plan(1, 1, 4, tp=2, dp=4, ep=4, architecture=arch))
    flags = check_flags(megatron_launch(hand_plan(1, 1, 4, tp=2, dp=4, ep=4, sequence_parallel=True,
                                                  architecture=arch)))
    assert flags["--sequence-parallel"] is True and flags["--tensor-model-parallel-size"] == "2"


def test_a_plan_that_hid_its_all_to_alls_asks_megatron_for_the_overlap(hand_plan):
    """A plan whose hidden_comm holds expert all-to-all seconds timed Megatron-Core's batch-level
    overlap: the command passes --overlap-moe-expert-parallel-comm and CUDA_DEVICE_MAX_CONNECTIONS=32
    (the MoE README: the overlap needs more than 1); a plan with its all-to-alls exposed does not."""
    arch = architecture(narrowpipe.from_config(QWEN3_MOE, seq=16))
    plan = hand_plan(1, 1, 4, tp=1, dp=8, ep=8, architecture=arch)
    assert "--overlap-moe-expert-parallel-comm" not in check_flags(megatron_launch(plan))
    plan.hidden_comm["ep_comm"] = 0.5
    launch = megatron_launch(plan)
    assert check_flags(launch)["--overlap-moe-expert-parallel-comm"] is True
    assert launch.program[:2] == ["env", "CUDA_DEVICE_MAX_CONNECTIONS=32"]
