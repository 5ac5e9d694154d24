"""``plan --emit torch``: the mesh is the plan's, the snippet runs against the installed PyTorch (its
FSDP2/DDP/ZeRO/checkpointing lines on one CPU process, its tensor-parallel plan and pipeline names
built for real), and ZeRO stages map to the right data-parallel wrapper."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.distributed as dist
from torch import nn

from narrowpipe.render.emit_torch import mesh_axes, torch_launch


class _Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(8, 8, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.o_proj(self.q_proj(x) + self.k_proj(x) + self.v_proj(x))


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(8, 16), nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.gate_proj(x) * self.up_proj(x))


class _Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = nn.LayerNorm(8), nn.LayerNorm(8)
        self.self_attn, self.mlp = _Attn(), _Mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class _Llama(nn.Module):
    """Hugging Face Llama's module names (model.layers[i].self_attn.q_proj, ...), tiny."""

    def __init__(self) -> None:
        super().__init__()
        self.model = nn.Module()
        self.model.layers = nn.ModuleList(_Layer() for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.model.layers:
            x = layer(x)
        return x


@pytest.fixture(scope="module")
def one_process():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")     # inside torch's ZeroRedundancyOptimizer
@pytest.mark.parametrize("zero, recompute, wrapper", [(3, "full", "FSDP"), (2, "none", "FSDP"),
                                                      (1, "full", "DistributedDataParallel")])
def test_the_snippet_runs_a_training_step_with_the_installed_torch(one_process, hand_plan, llama_arch, zero, recompute,
                                                                    wrapper):
    plan = hand_plan(1, 1, 4, tp=1, dp=1, zero=zero, recompute=recompute, architecture=llama_arch)
    code = torch_launch(plan).code.replace('"cuda"', '"cpu"')        # one CPU process stands in for the GPUs
    env = {"model": _Llama()}
    exec(code, env)
    model = env["model"]
    assert wrapper in type(model).__name__
    model(torch.randn(2, 3, 8)).sum().backward()
    if zero == 1:
        assert type(env["optimizer"]).__name__ == "ZeroRedundancyOptimizer"
    if recompute == "full":
        assert all("CheckpointWrapper" in type(layer).__name__ for layer in model.module.model.layers) \
            if zero < 2 else all("CheckpointWrapper" in type(layer).__name__ for layer in model.model.layers)


def test_the_tensor_parallel_plan_and_the_pipeline_schedule_are_real_torch_objects(hand_plan, llama_arch):
    plan = hand_plan(4, 2, 8, tp=4, dp=2, layers=[2] * 8, sequence_parallel=True, zero=3, architecture=llama_arch)
    launch = torch_launch(plan)
    code = launch.code
    head = code[:code.index("mesh = ")]                          # the imports
    env: dict = {}
    exec(head, env)
    start = code.index("layer_plan = {")
    exec(code[start:code.index("}\n", start) + 2], env)          # every style constructs with these arguments
    assert {type(v).__name__ for v in env["layer_plan"].values()} == {
        "ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput"}
    schedule = env["ScheduleInterleaved1F1B"]
    assert {"n_microbatches", "loss_fn"} <= set(inspect.signature(schedule).parameters)
    assert "mesh_dim_names" in inspect.signature(env["init_device_mesh"]).parameters
    assert "reshard_after_forward" in inspect.signature(env["fully_shard"]).parameters
    assert 'init_device_mesh("cuda", (4, 2, 4), mesh_dim_names=("pp", "dp", "tp"))' in code
    assert "n_microbatches=8" in code and "reshard_after_forward=True" in code


@pytest.mark.parametrize("fix, names", [({"tp": 8, "dp": 4}, ["dp", "tp"]),
                                        ({"tp": 2, "pp": 4, "dp": 4}, ["pp", "dp", "tp"]),
                                        ({"tp": 2, "dp": 2, "cp": 2}, ["dp", "cp", "tp"])])
def test_the_mesh_has_the_plans_axes_innermost_last_and_its_devices(hand_plan, fix, names):
    pp = fix.pop("pp", 1)
    plan = hand_plan(pp, 1, 8, **fix)
    axes = mesh_axes(plan)
    assert [a for a, _ in axes] == names
    assert math.prod(n for _, n in axes) == plan.devices
    settings = torch_launch(plan).settings
    assert settings["mesh"]["shape"] == [n for _, n in axes]
    assert settings["data_parallel"]["mesh"] == ("dp_cp" if "cp" in names else "dp")
