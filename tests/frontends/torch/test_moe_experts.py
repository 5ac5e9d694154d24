"""Mixtral's experts through torch.export: transformers' default grouped implementation (``aten._grouped_mm``
in bf16, the ``transformers::grouped_mm_fallback`` custom op in fp32, counted with ``aten.histc``) lowers to
grouped GEMMs that count exactly what the ``batched_mm`` implementation of the same model counts (one bmm
per routed row), and what torch's FlopCounterMode counts running it; bytes are checked by hand."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.ir import Op, verify  # noqa: E402

H, F, E, K, VOCAB, LAYERS = 64, 96, 8, 2, 300, 1


def _config(experts: str | None, attn: str = "sdpa") -> transformers.MixtralConfig:
    c = transformers.MixtralConfig(hidden_size=H, intermediate_size=F, num_hidden_layers=LAYERS, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=VOCAB, num_local_experts=E,
                                   num_experts_per_tok=K)
    c._attn_implementation = attn
    if experts is not None:
        c._experts_implementation = experts
    return c


def _export(experts: str | None, dtype: torch.dtype) -> narrowpipe.Graph:
    with torch.device("meta"):
        model = transformers.MixtralForCausalLM(_config(experts)).to(dtype).eval()
    ids = torch.zeros(2, 12, dtype=torch.long, device="meta")
    dyn = {"input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=64)}, "use_cache": None}
    return narrowpipe.from_torch(model, (), {"input_ids": ids, "use_cache": False}, dynamic_shapes=dyn)


@pytest.fixture(scope="module")
def graphs() -> dict[str, narrowpipe.Graph]:
    return {"grouped_mm bf16": _export(None, torch.bfloat16), "grouped_mm fp32": _export(None, torch.float32),
            "batched_mm fp32": _export("batched_mm", torch.float32)}


def _grouped(graph):
    return [n for n in graph.nodes if n.op is Op.GROUPED_DOT]


def test_default_experts_lower_to_grouped_gemms_with_nothing_unmodeled(graphs):
    """bf16 exports aten._grouped_mm, fp32 transformers' fallback op; both become two grouped GEMMs
    per layer over the stored [E, out, in] experts (the transpose read through), top-2 found."""
    for name in ("grouped_mm bf16", "grouped_mm fp32"):
        g = graphs[name]
        verify(g)
        nodes = _grouped(g)
        assert len(nodes) == 2 * LAYERS, name
        assert {n.source.op for n in nodes} == ({"aten._grouped_mm.default"} if "bf16" in name
                                                else {"transformers.grouped_mm_fallback.default"})
        assert all(n.attrs == {"rhs_contract": 2, "top_k": K} for n in nodes)
        assert [tuple(n.inputs[1].shape) for n in nodes] == [(E, 2 * F, H), (E, H, F)]
        report = narrowpipe.analyze(g, strict=True, batch=2, seq=12)
        assert report.unmodeled == []
        # aten.histc counts the routed rows into the experts' bins: one add per routed row
        assert report.flops_by_group["gather_scatter"] == LAYERS * K * 2 * 12


@pytest.mark.parametrize("batch,seq", [(2, 12), (3, 7), (1, 1)])
def test_grouped_and_batched_mm_count_the_same_flops(graphs, batch, seq):
    counts = {name: narrowpipe.analyze(g, batch=batch, seq=seq).flops_by_group for name, g in graphs.items()}
    expected = counts["batched_mm fp32"]
    for name, got in counts.items():
        assert got["contraction"] == expected["contraction"], name
        assert got["attention"] == expected["attention"], name
    tokens = batch * seq
    experts = LAYERS * 2 * tokens * K * (2 * F * H + H * F)
    router = LAYERS * 2 * tokens * H * E
    attn_proj = LAYERS * 2 * tokens * H * (H + 2 * (H // 4) * 2 + H)
    assert expected["contraction"] == experts + router + attn_proj + 2 * tokens * H * VOCAB


def test_flop_counter_mode_on_the_batched_mm_model_agrees(graphs):
    """FlopCounterMode runs the batched_mm model (real random weights, real routing) at (2, 12), with eager
    attention (its CPU SDPA kernel has no FlopCounterMode formula)."""
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(_config("batched_mm", "eager")).eval()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.randint(0, VOCAB, (2, 12)), use_cache=False)
    for name in ("grouped_mm bf16", "grouped_mm fp32"):
        g = narrowpipe.analyze(graphs[name], batch=2, seq=12).flops_by_group
        assert g["contraction"] + g["attention"] == counter.get_total_flops(), name


def test_grouped_gemm_bytes_by_hand_at_prefill_and_decode(graphs):
    """Up GEMM [rows, 64] x 8 experts [192, 64] bf16, offsets int32[8]. Prefill (2 x 12 tokens, 48 rows):
    every expert read. Decode (1 token, 2 rows): two experts read."""
    g = graphs["grouped_mm bf16"]
    up, down = _grouped(g)
    for (batch, seq), reached in (((2, 12), E), ((1, 1), 2)):
        rows = K * batch * seq
        ops = {r.name: r for r in narrowpipe.analyze(g, batch=batch, seq=seq, expert_balance="balanced").ops}
        assert ops[up.name].bytes == 2 * rows * H + reached * 2 * (2 * F * H) + 4 * E + 2 * rows * 2 * F
        assert ops[down.name].bytes == 2 * rows * F + reached * 2 * (H * F) + 4 * E + 2 * rows * H
        assert ops[up.name].flops == 2 * rows * H * 2 * F


def test_a_skewed_router_reads_fewer_experts_same_flops(graphs):
    """Decode at batch 4: 8 rows over 8 experts. Balanced reaches all 8; zipf:2 gives the hottest expert
    its cap of 4 rows (one per token) and the rest 2, 1, 1, so 4 experts' weights are not read."""
    g = graphs["grouped_mm bf16"]
    balanced = narrowpipe.analyze(g, "h100", batch=4, seq=1, expert_balance="balanced")
    skewed = narrowpipe.analyze(g, "h100", batch=4, seq=1, expert_balance="zipf:2")
    assert skewed.flops == balanced.flops
    assert balanced.bytes - skewed.bytes == LAYERS * 4 * 2 * (2 * F * H + H * F)
    assert any("hottest expert 4 rows, 4 of 8 experts read" in n for n in skewed.notes)


def _qwen2_moe():
    return transformers.Qwen2MoeForCausalLM, transformers.Qwen2MoeConfig(
        hidden_size=H, intermediate_size=F, moe_intermediate_size=48, shared_expert_intermediate_size=80,
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB, num_experts=E,
        num_experts_per_tok=K)


def _deepseek_v3():
    """A dense first layer, then routed experts (grouped top-k routing) beside a shared expert; MLA attention."""
    return transformers.DeepseekV3ForCausalLM, transformers.DeepseekV3Config(
        hidden_size=H, intermediate_size=F, moe_intermediate_size=48, num_hidden_layers=2, first_k_dense_replace=1,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=VOCAB, n_routed_experts=E, num_experts_per_tok=K,
        n_shared_experts=1, n_group=2, topk_group=1, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=16)


@pytest.mark.slow
@pytest.mark.parametrize("build", [_qwen2_moe, _deepseek_v3], ids=["qwen2-moe", "deepseek-v3"])
def test_shared_expert_models_equal_flop_counter_mode(build):
    """Qwen2-MoE and DeepSeek-V3 (routed experts beside a shared expert) exported with their default
    grouped experts count what FlopCounterMode counts running the batched_mm experts; top-2 is found
    even behind DeepSeek's group-limited routing."""
    cls, config = build()
    config._attn_implementation, config._experts_implementation = "eager", "batched_mm"
    torch.manual_seed(0)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        cls(config).eval()(torch.randint(0, VOCAB, (2, 12)), use_cache=False)
    config._attn_implementation, config._experts_implementation = "sdpa", "grouped_mm"
    with torch.device("meta"):
        model = cls(config).to(torch.bfloat16).eval()
    ids = torch.zeros(2, 12, dtype=torch.long, device="meta")
    dyn = {"input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=64)}, "use_cache": None}
    g = narrowpipe.from_torch(model, (), {"input_ids": ids, "use_cache": False}, dynamic_shapes=dyn)
    r = narrowpipe.analyze(g, strict=True, batch=2, seq=12)
    assert r.flops_by_group["contraction"] + r.flops_by_group["attention"] == counter.get_total_flops()
    assert [n.attrs["top_k"] for n in _grouped(g)] == [K, K]
