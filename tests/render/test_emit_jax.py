"""``plan --emit jax``: the mesh is the plan's (ZeRO-3 as the ``fsdp`` axis), the weights' specs put
Megatron's column/row split on the ``tensor`` axis, remat policies follow the recomputation, and a
pipeline is refused; with JAX installed, the snippet builds its shardings on fake CPU devices."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

from narrowpipe import NarrowpipeError
from narrowpipe.render.emit_jax import jax_launch, jax_mesh


@pytest.mark.parametrize("fix, axes", [
    ({"tp": 4, "dp": 8, "zero": 1}, [("data", 8), ("fsdp", 1), ("tensor", 4)]),
    ({"tp": 2, "dp": 16, "zero": 3}, [("data", 1), ("fsdp", 16), ("tensor", 2)]),
    ({"tp": 2, "dp": 4, "cp": 2}, [("data", 4), ("fsdp", 1), ("context", 2), ("tensor", 2)]),
])
def test_the_mesh_is_the_plans_with_zero_3_as_the_fsdp_axis(hand_plan, llama_arch, fix, axes):
    plan = hand_plan(1, 1, 8, target="tpu-v5e", system="tpu-v5e-256", architecture=llama_arch, **fix)
    assert jax_mesh(plan) == axes
    assert math.prod(n for _, n in axes) == plan.devices
    settings = jax_launch(plan).settings
    assert settings["mesh"] == {"shape": [n for _, n in axes], "axis_names": [a for a, _ in axes]}


def test_weights_split_like_megatron_over_the_tensor_axis(hand_plan, llama_arch):
    plan = hand_plan(1, 1, 8, tp=4, dp=4, zero=3, recompute="selective", sequence_parallel=True,
                     architecture=llama_arch)
    launch = jax_launch(plan)
    specs = launch.settings["partition_specs"]
    assert specs["attention q [hidden, heads, head_dim]"] == ["fsdp", "tensor", None]      # column-wise: heads
    assert specs["attention out [heads, head_dim, hidden]"] == ["tensor", None, "fsdp"]    # row-wise
    assert specs["mlp in (gate, up) [hidden, ffn]"] == ["fsdp", "tensor"]
    assert specs["mlp out [ffn, hidden]"] == ["tensor", "fsdp"]
    assert specs["embedding [vocab, hidden]"][0] == "tensor"
    assert specs["activations between layers (sequence parallel) [batch, seq, hidden]"][1] == "tensor"
    # Megatron's selective under fused attention recomputes nothing (it used to be emitted as the dots
    # policy, which recomputes the norms, activations and attention: not what the plan's memory assumed)
    assert launch.settings["remat_policy"] == "jax.checkpoint_policies.everything_saveable"
    assert 'mesh = jax.make_mesh((1, 4, 4), ("data", "fsdp", "tensor"))' in launch.code


@pytest.mark.parametrize("recompute, policy, maxtext", [
    ("none", "everything_saveable", "none"),
    ("dots", "dots_with_no_batch_dims_saveable", "minimal"),
    ("full", "nothing_saveable", "full"),
])
def test_each_recomputation_is_the_jax_policy_that_saves_the_same(hand_plan, llama_arch, recompute, policy, maxtext):
    """JAX's jax/_src/ad_checkpoint.py: dots_with_no_batch_dims_saveable keeps dot_general outputs without
    batch dims (the plan's ``dots``), nothing_saveable only the checkpointed function's inputs (``full``);
    MaxText's remat_policy names them minimal (MaxText/layers/models.py, 2023) and full."""
    launch = jax_launch(hand_plan(1, 1, 8, tp=2, dp=4, zero=3, recompute=recompute, architecture=llama_arch))
    assert launch.settings["remat_policy"] == f"jax.checkpoint_policies.{policy}"
    assert f"policy=jax.checkpoint_policies.{policy})" in launch.code
    assert any(f"MaxText remat_policy={maxtext}" in n for n in launch.notes)


def test_selective_with_eager_attention_has_no_jax_policy(hand_plan, llama_arch):
    """Selective over an eager attention keeps everything but the softmax region: no built-in policy
    saves that, so it is refused with the way out; a plan that recomputed something is eager."""
    unfused = {**hand_plan(1, 1, 8).runtime, "attention": "unfused"}
    with pytest.raises(NarrowpipeError, match="--recompute dots"):
        jax_launch(hand_plan(1, 1, 8, tp=2, dp=4, recompute="selective", runtime=unfused, architecture=llama_arch))
    plan = hand_plan(1, 1, 8, tp=2, dp=4, recompute="selective", architecture=llama_arch)
    plan.breakdown["recompute"] = 1e-3
    with pytest.raises(NarrowpipeError, match="eager attention"):
        jax_launch(plan)


def test_kv_heads_that_do_not_split_stay_replicated(hand_plan, llama_arch):
    plan = hand_plan(1, 1, 8, tp=16, dp=1, target="tpu-v5e", system="tpu-v5e-256", architecture=llama_arch)
    assert jax_launch(plan).settings["partition_specs"]["attention k, v [hidden, kv_heads, head_dim]"][1] is None


def test_a_pipeline_or_a_chip_jax_does_not_run_on_is_refused(hand_plan, llama_arch):
    with pytest.raises(NarrowpipeError, match="no pipeline-parallel schedule"):
        jax_launch(hand_plan(2, 1, 8, architecture=llama_arch))
    with pytest.raises(NarrowpipeError, match="TPUs and GPUs"):
        jax_launch(hand_plan(1, 1, 8, tp=1, dp=1, target="groq-lpu", system="groq-node", architecture=llama_arch))


def test_the_snippet_builds_its_shardings_with_jax(hand_plan, llama_arch):
    pytest.importorskip("jax")
    plan = hand_plan(1, 1, 8, tp=2, dp=4, zero=3, recompute="full", architecture=llama_arch)
    code = jax_launch(plan).code.replace("jax.checkpoint(layer_fn,", "jax.checkpoint(lambda x: x,")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def _shards(spec: list, sizes: dict[str, int]) -> int:
    """How many ways a PartitionSpec (as settings data) splits a weight over the mesh."""
    ways = 1
    for entry in spec:
        for axis in ([] if entry is None else entry if isinstance(entry, list) else [entry]):
            ways *= sizes[axis]
    return ways


@pytest.mark.parametrize("fix", [{"tp": 2, "dp": 32, "ep": 4, "zero": 3}, {"tp": 2, "dp": 8, "cp": 4, "zero": 3},
                                 {"tp": 4, "dp": 16, "zero": 3}])
def test_zero_3_shards_weights_as_many_ways_as_the_plans_memory_assumes(hand_plan, llama_arch, fix):
    """The planner's memory (search.static_memory) splits dense weights over tp x dp x cp under ZeRO-3 and
    expert weights over tp x ep x (dp x cp / ep) = tp x dp x cp: with ep or cp the 'fsdp' axis alone
    (dp / ep ways) left the weights 4x bigger per device than predicted."""
    arch = {**llama_arch, "experts": 8, "top_k": 2} if fix.get("ep") else llama_arch
    plan = hand_plan(1, 1, 4, target="tpu-v5p", system="tpu-v5p-8x8x8", architecture=arch, **fix)
    launch = jax_launch(plan)
    sizes = dict(jax_mesh(plan))
    specs = launch.settings["partition_specs"]
    whole = plan.parallel.tp * plan.parallel.dp * plan.parallel.cp
    for name in ("attention q [hidden, heads, head_dim]", "attention out [heads, head_dim, hidden]",
                 "mlp in (gate, up) [hidden, ffn]", "mlp out [ffn, hidden]", "head [hidden, vocab]",
                 "embedding [vocab, hidden]"):
        assert _shards(specs[name], sizes) == whole, name
    if fix.get("ep"):
        for name in ("experts in (gate, up) [experts, hidden, expert_ffn]",
                     "experts out [experts, expert_ffn, hidden]"):
            assert specs[name][0] == "expert" and _shards(specs[name], sizes) == whole, name
        assert 'P("expert", "fsdp", "tensor")' in launch.code
    for spec in specs.values():                       # a mesh axis shards at most one dim of a weight
        used = [a for e in spec if e is not None for a in (e if isinstance(e, list) else [e])]
        assert len(used) == len(set(used)), spec


def test_zero_1_states_are_sharded_over_every_data_axis(hand_plan, llama_arch):
    plan = hand_plan(1, 1, 4, tp=2, dp=8, cp=2, zero=1, target="tpu-v5p", system="tpu-v5p-8x8x8",
                     architecture=llama_arch)
    assert any('over ("data", "context")' in n and "16 ways" in n for n in jax_launch(plan).notes)


def test_gaudi_runs_pytorch_not_jax_and_trainium_jax_goes_through_neuron(hand_plan, llama_arch):
    """Gaudi 3 and Trainium2 are 'tpu' (systolic) in the catalog; the software decides."""
    with pytest.raises(NarrowpipeError, match="Intel Gaudi.*--emit torch"):
        jax_launch(hand_plan(1, 1, 4, target="gaudi3", system="gaudi3", architecture=llama_arch))
    trn = jax_launch(hand_plan(1, 1, 4, target="trainium2", system="trn2-16", architecture=llama_arch))
    assert any("jax-neuronx" in n for n in trn.notes)
