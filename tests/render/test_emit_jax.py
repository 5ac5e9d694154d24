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
    assert launch.settings["remat_policy"] == "jax.checkpoint_policies.dots_with_no_batch_dims_saveable"
    assert 'mesh = jax.make_mesh((1, 4, 4), ("data", "fsdp", "tensor"))' in launch.code


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
