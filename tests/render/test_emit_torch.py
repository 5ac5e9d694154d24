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
def test_the_mesh_has_the_plans_axes_innermost_last_and_its_devices(hand_plan, llama_arch, fix, names):
    pp = fix.pop("pp", 1)
    plan = hand_plan(pp, 1, 8, architecture=llama_arch, **fix)
    axes = mesh_axes(plan)
    assert [a for a, _ in axes] == names
    assert math.prod(n for _, n in axes) == plan.devices
    settings = torch_launch(plan).settings
    assert settings["mesh"]["shape"] == [n for _, n in axes]
    assert settings["data_parallel"]["mesh"] == ("dp_cp" if "cp" in names else "dp")


def _hf_llama() -> tuple[nn.Module, nn.Module]:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                                   num_hidden_layers=2, vocab_size=128, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    ref = transformers.LlamaForCausalLM(cfg)
    ref.load_state_dict(model.state_dict())
    return model, ref


@pytest.mark.parametrize("sp, zero", [(True, 0), (True, 1), (False, 0), (True, 3)])
def test_the_tensor_parallel_snippet_trains_hugging_face_llama(one_process, hand_plan, llama_arch, sp, zero):
    """The emitted tensor-parallel plan on transformers' own LlamaForCausalLM, its mesh shrunk to this one
    CPU process: HF's decoder layer passes hidden_states to self_attn by keyword (a positional
    PrepareModuleInput fails: 'module inputs and input_layouts should have same length'), positions
    and mask are read off the embedding's output, and DDP refuses DTensor parameters (ZeRO 0/1 with
    tp: 'aten.cat.default got mixed torch.Tensor and DTensor'). Forward and backward must run and
    give the unsharded model's loss. (Run on 2 and 4 gloo ranks with torchrun, the same code gives
    that loss on every rank.)"""
    import re
    plan = hand_plan(1, 1, 4, tp=2, dp=2, zero=zero, sequence_parallel=sp, architecture=llama_arch)
    code = torch_launch(plan).code.replace('"cuda"', '"cpu"')
    code = re.sub(r'init_device_mesh\("cpu", \([^)]*\)', 'init_device_mesh("cpu", (1, 1)', code)
    model, ref = _hf_llama()
    env = {"model": model}
    exec(code, env)
    x = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    loss = env["model"](input_ids=x, labels=x).loss
    loss.backward()
    expected = ref(input_ids=x, labels=x).loss
    assert float(loss) == pytest.approx(float(expected), rel=1e-2 if zero else 1e-5)   # FSDP2 computes in bf16
    assert all(p.grad is not None for p in env["model"].parameters() if p.requires_grad)


def test_zero_1_with_tensor_parallelism_says_it_shards_gradients_too(hand_plan, llama_arch):
    launch = torch_launch(hand_plan(1, 1, 4, tp=2, dp=2, zero=1, architecture=llama_arch))
    assert launch.settings["data_parallel"] == {"kind": "fsdp2", "mesh": "dp", "reshard_after_forward": False}
    assert "ZeroRedundancyOptimizer" not in launch.code and "DDP(" not in launch.code
    assert any("ZeRO-2" in n for n in launch.notes)
    replicate = torch_launch(hand_plan(1, 1, 4, tp=2, dp=2, zero=0, architecture=llama_arch))
    assert "model = replicate(model, device_mesh=dp_mesh)" in replicate.code and "DDP(" not in replicate.code


def test_the_device_type_follows_the_chips_software(hand_plan, llama_arch):
    from narrowpipe import NarrowpipeError
    gaudi = torch_launch(hand_plan(1, 1, 4, tp=2, dp=2, target="gaudi3", system="gaudi3", architecture=llama_arch))
    assert 'init_device_mesh("hpu", ' in gaudi.code and any("habana_frameworks.torch" in n for n in gaudi.notes)
    with pytest.raises(NarrowpipeError, match="Trainium.*NeuronX Distributed"):
        torch_launch(hand_plan(1, 1, 4, target="trainium2", system="trn2-16", architecture=llama_arch))
    with pytest.raises(NarrowpipeError, match="use --emit jax"):
        torch_launch(hand_plan(1, 1, 4, target="tpu-v5p", system="tpu-v5p-8x8x8", architecture=llama_arch))


@pytest.mark.parametrize("change, reason", [({"experts": 8, "top_k": 2}, "experts.gate_up_proj"),
                                            ({"other": {"kv_lora_rank": 512}}, "latent attention"),
                                            ({"gated_mlp": False, "activation": "gelu_tanh",
                                              "positions": "learned"}, "Conv1D")])
def test_tensor_parallelism_is_refused_where_the_llama_plan_does_not_name_the_models_modules(hand_plan, llama_arch,
                                                                                             change, reason):
    """Mixtral's MoE block is mlp.gate + mlp.experts (3-D parameters), DeepSeek-V3's attention
    q_a_proj/kv_a_proj_with_mqa...: the Llama plan (q_proj, mlp.gate_proj) was emitted for both, torch
    skipped the missing names and the forward failed ('mixed torch.Tensor and DTensor'), the experts
    unsharded though the plan split them over tp. At tp=1 there is no tensor-parallel plan to be wrong."""
    from narrowpipe import NarrowpipeError
    arch = {**llama_arch, **change}
    with pytest.raises(NarrowpipeError, match=reason):
        torch_launch(hand_plan(1, 1, 4, tp=2, dp=2, architecture=arch))
    launch = torch_launch(hand_plan(1, 1, 4, tp=1, dp=4, architecture=arch))
    assert launch.settings["tensor_parallel"] == {} and "q_proj" not in launch.code


def test_hugging_face_mixtral_has_the_parameters_the_refusal_names():
    """The refusal's premise, on transformers' own Mixtral: expert weights are 3-D parameters, no nn.Linear."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.MixtralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                                     num_key_value_heads=2, num_local_experts=4, vocab_size=64)
    layer = transformers.MixtralForCausalLM(cfg).model.layers[0]
    names = dict(layer.named_parameters())
    assert names["mlp.experts.gate_up_proj"].dim() == 3
    assert not any(isinstance(m, nn.Linear) for n, m in layer.named_modules() if n.startswith("mlp.experts"))


@pytest.mark.parametrize("pp, interleave", [(1, 1), (4, 1), (4, 2)])
def test_the_snippet_names_what_it_expects_and_imports_only_what_it_uses(hand_plan, llama_arch, pp, interleave):
    """Its free names are the ones its header says the script around it defines; no unused import
    (PipelineStage was imported and never used, `stage`/`stages` undefined)."""
    import ast
    import builtins
    plan = hand_plan(pp, interleave, 8, tp=2, dp=2, layers=[1] * (pp * interleave), zero=3, recompute="full",
                     architecture=llama_arch)
    code = torch_launch(plan).code
    tree = ast.parse(code)
    imported = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree)
                if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert imported <= loaded | {a.attr for a in ast.walk(tree) if isinstance(a, ast.Attribute)}, imported - loaded
    free = loaded - imported - assigned - set(dir(builtins))
    expected = {"model"} | ({"model_chunks", "loss_fn"} if pp > 1 else set())
    assert free == expected
    header = code.split("import", 1)[0]
    assert all(f"`{name}`" in header for name in expected)
