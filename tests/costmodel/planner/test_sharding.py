"""The sharding pass finds Megatron's layouts from contractions alone and inserts exactly the
collectives Megatron-LM runs (Shoeybi et al. 2019, section 3; Korthikanti et al. 2022, section 4),
with bytes checked by hand."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.costmodel.planner import Parallel, shard
from narrowpipe.costmodel.training import build_training_graph
from narrowpipe.errors import PlanError
from narrowpipe.models.examples import load_example

B, S, H, HEADS, F, V = 1, 64, 256, 8, 1024, 1024


def _gpt(layers: int = 2, **kw: object) -> narrowpipe.Graph:
    return narrowpipe.transformer(layers, H, HEADS, V, seq=S, norm="layer", positions="learned", max_positions=S,
                                  attn_bias=True, out_bias=True, mlp_bias=True, tie_embeddings=True, **kw)


def _collectives(g: narrowpipe.Graph, phase: str | None = None) -> list[tuple[str, str, tuple[int, ...]]]:
    return [(n.op.value, n.attrs["purpose"], tuple(n.outputs[0].shape)) for n in g.nodes
            if n.group.value == "collective" and (phase is None or n.attrs["phase"] == phase)]


def test_megatron_column_row_pairs_are_found_from_contractions():
    s = shard(_gpt(), Parallel(tp=2), dims={"batch": B, "seq": S})
    w = s.meta["weight_sharding"]
    for proj in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.up_proj"):
        assert w[f"model.layers.1.{proj}.weight"] == "[tp, -]"        # column parallel: output features split
        assert w[f"model.layers.1.{proj}.bias"] == "[tp]"
    for proj in ("self_attn.o_proj", "mlp.down_proj"):
        assert w[f"model.layers.1.{proj}.weight"] == "[-, tp]"        # row parallel: input features split
        assert w[f"model.layers.1.{proj}.bias"] == "[-]"
    assert w["model.embed_tokens.weight"] == "[tp, -]"                # vocab-parallel embedding (tied head)
    assert w["model.embed_positions.weight"] == "[-, -]"              # a table no larger than what it gathers
    assert w["model.layers.0.input_layernorm.weight"] == "[-]"


def test_forward_has_one_all_reduce_per_row_parallel_layer_of_the_full_activation():
    s = shard(_gpt(), Parallel(tp=2), dims={"batch": B, "seq": S})
    coll = _collectives(s)
    # embedding (vocab-parallel) + attention output + MLP output in each of the 2 layers
    assert [c[0] for c in coll] == ["all_reduce"] * 5
    assert all(c[2] == (B, S, H) for c in coll)
    report = narrowpipe.analyze(s)
    # ring all-reduce: each device sends 2(n-1)/n of the bf16 activation, here n = 2
    assert report.comm_bytes == 5 * 2 * (2 - 1) // 2 * B * S * H * 2


def test_sharded_contraction_flops_are_the_unsharded_ones_split_over_tp():
    g = _gpt()
    full = narrowpipe.analyze(g, dims={"batch": B, "seq": S})
    for tp in (2, 4):
        local = narrowpipe.analyze(shard(g, Parallel(tp=tp), dims={"batch": B, "seq": S}))
        assert local.flops_by_group["contraction"] * tp == full.flops_by_group["contraction"]
        assert local.flops_by_group["attention"] * tp == full.flops_by_group["attention"]


def test_sequence_parallel_turns_each_all_reduce_into_reduce_scatter_and_all_gather():
    s = shard(_gpt(1), Parallel(tp=2, sequence_parallel=True), dims={"batch": B, "seq": S})
    ops = [(c[0], c[2]) for c in _collectives(s)]
    half, whole = (B, S // 2, H), (B, S, H)
    assert ops == [("reduce_scatter", half),          # embedding output, onto the sequence
                   ("all_gather", whole),             # before q/k/v
                   ("reduce_scatter", half),          # after o_proj
                   ("all_gather", whole),             # before up_proj
                   ("reduce_scatter", half),          # after down_proj
                   ("all_gather", whole)]             # before the vocab-parallel head
    plain = narrowpipe.analyze(shard(_gpt(1), Parallel(tp=2), dims={"batch": B, "seq": S}))
    sp = narrowpipe.analyze(s)
    # a reduce-scatter and an all-gather move what one all-reduce moves: (n-1)/n of the tensor each
    assert sp.comm_bytes == plain.comm_bytes == 3 * 2 * (B * S * H * 2) // 2


def test_training_step_backward_mirrors_the_forward_collectives():
    train = build_training_graph(_gpt(1), recompute="none")
    s = shard(train, Parallel(tp=2), dims={"batch": B, "seq": S})
    fwd = [c[0] for c in _collectives(s, "forward")]
    bwd = [c[0] for c in _collectives(s, "backward")]
    assert fwd == ["all_reduce"] * 3
    # Megatron's f/g conjugates: one all-reduce of the input gradient per column-parallel group
    # (q, k and v gradients summed first, as one fused QKV projection), plus the head's
    assert bwd == ["all_reduce"] * 3
    assert s.meta["deferred_reductions"] == {}        # weight gradients are split, never partial


def test_sequence_parallel_backward_regathers_inputs_for_weight_gradients():
    train = build_training_graph(_gpt(1), recompute="none")
    s = shard(train, Parallel(tp=2, sequence_parallel=True), dims={"batch": B, "seq": S})
    bwd = _collectives(s, "backward")
    gathers = [c for c in bwd if c[1] == "sequence-parallel all-gather"]
    scatters = [c for c in bwd if c[1] == "sequence-parallel reduce-scatter"]
    # the layer: 2 gathers of the row-parallel layers' output gradients, 2 re-gathers of the
    # column-parallel layers' inputs for their weight gradients (q/k/v share one); 2 reduce-scatters
    # of the column-parallel input gradients, and the head's
    assert len(gathers) == 4 and all(c[2] == (B, S, H) for c in gathers)
    assert len(scatters) == 3 and all(c[2] == (B, S // 2, H) for c in scatters)
    # layer-norm weight gradients are partial over tp: left to the data-parallel reduction
    assert s.meta["deferred_reductions"]["tp"] > 0


def test_context_parallel_gathers_keys_and_values_and_splits_attention_work():
    g = _gpt(1)
    s = shard(g, Parallel(tp=1, cp=2), dims={"batch": B, "seq": S})
    kv = [c for c in _collectives(s) if c[1] == "context-parallel key/value exchange"]
    assert [c[2] for c in kv] == [(B, HEADS, S, H // HEADS)] * 2
    full = narrowpipe.analyze(g, dims={"batch": B, "seq": S})
    local = narrowpipe.analyze(s)
    assert local.flops_by_group["attention"] * 2 == full.flops_by_group["attention"]


def test_a_torch_export_is_sharded_the_same_way_without_builder_names():
    g = load_example("gpt2")          # HF GPT-2: Conv1D weights [in, out], fused c_attn split in three
    s = shard(g, Parallel(tp=4), dims={"batch": 1, "seq": 128})
    coll = _collectives(s)
    assert [c[0] for c in coll] == ["all_reduce"] * (1 + 2 * 12)
    full = narrowpipe.analyze(g, dims={"batch": 1, "seq": 128})
    local = narrowpipe.analyze(s)
    assert local.flops_by_group["attention"] * 4 == full.flops_by_group["attention"]


def test_heads_that_do_not_divide_are_refused_as_the_planner_refuses_them():
    g = narrowpipe.transformer(1, 96, 6, 64, seq=16)          # 6 heads over tp=4 (Megatron asserts heads % tp == 0)
    with pytest.raises(PlanError, match="6 attention heads do not split over tp=4"):
        shard(g, Parallel(tp=4), dims={"batch": 1, "seq": 16})


def test_unbound_dims_are_a_plan_error():
    g = narrowpipe.transformer(1, 64, 4, 64)
    g.dims["seq"] = type(g.dims["seq"])("seq", default=None, role=g.dims["seq"].role)
    with pytest.raises(PlanError, match="bind the dims"):
        shard(g, Parallel(tp=2))


def test_an_exported_llama_with_grouped_query_attention_is_sharded_like_megatron():
    g = load_example("llama-3-8b")    # rotate_half slices, repeat_kv expands 8 KV heads to 32
    s = shard(g, Parallel(tp=8), dims={"batch": 1, "seq": 256})
    assert [c[0] for c in _collectives(s)] == ["all_reduce"] * (1 + 2 * 32)
    w = {k.removeprefix("p_model_layers_0_"): v for k, v in s.meta["weight_sharding"].items()
         if k.startswith("p_model_layers_0_")}
    assert w["self_attn_k_proj_weight"] == w["mlp_gate_proj_weight"] == "[tp, -]"
    assert w["self_attn_o_proj_weight"] == w["mlp_down_proj_weight"] == "[-, tp]"


def test_a_pipeline_stage_program_sends_and_receives_at_its_boundaries():
    from narrowpipe.costmodel.planner import pipeline_stage

    train = build_training_graph(narrowpipe.transformer(4, H, HEADS, V, seq=S), recompute="none")
    p = Parallel(pp=2, global_batch=1)
    first = pipeline_stage(train, p, 0, dims={"batch": B, "seq": S})
    last = pipeline_stage(train, p, 1, dims={"batch": B, "seq": S})
    sends0 = [n for n in first.nodes if n.op.value == "send" and n.attrs["phase"] == "forward"]
    recvs1 = [n for n in last.nodes if n.op.value == "recv" and n.attrs["phase"] == "forward"]
    assert (B, S, H) in [tuple(n.outputs[0].shape) for n in sends0]          # the residual stream goes on
    assert len(recvs1) == len(sends0)
    assert any(n.op.value == "send" and n.attrs["phase"] == "backward" for n in last.nodes)
    assert all(n.attrs["stride"] == 1 and n.attrs["group_size"] == 2 for n in sends0)
    # the stage holds its two layers: half the layer contractions of the whole step
    whole = narrowpipe.analyze(train, dims={"batch": B, "seq": S}).flops_by_group["contraction"]
    parts = sum(narrowpipe.analyze(s).flops_by_group["contraction"] for s in (first, last))
    assert parts == whole
    with pytest.raises(PlanError, match="do not split evenly"):
        pipeline_stage(train, Parallel(pp=3, global_batch=1), 0, dims={"batch": B, "seq": S})


def test_the_backward_reads_sums_the_forward_settled_instead_of_reducing_them_again():
    """A Llama layer under tp=2 with sequence parallelism: the vocab-parallel embedding's output and the
    residual sums are reduce-scattered once in the forward and saved; the RMSNorm backward read them
    through a second reduce-scatter each. Megatron's count per layer and microbatch: forward 2
    all-gathers + 2 reduce-scatters, backward 4 all-gathers + 2 reduce-scatters."""
    g = narrowpipe.transformer(1, 1024, 8, 1000, seq=S, ffn=4096, gated_mlp=True)
    s = shard(build_training_graph(g, loss="cross_entropy", recompute="none"),
              Parallel(tp=2, sequence_parallel=True), dims={"batch": 1, "seq": S})
    def count(phase: str, op: str, where: str) -> int:
        return sum(1 for n in s.nodes if n.group.value == "collective" and n.attrs["phase"] == phase
                   and n.op.value == op and where in n.name)
    layer = "model_layers_0_"
    assert (count("forward", "all_gather", layer), count("forward", "reduce_scatter", layer)) == (2, 2)
    assert (count("backward", "all_gather", layer), count("backward", "reduce_scatter", layer)) == (4, 2)
    assert count("backward", "reduce_scatter", "model_norm") == 1     # the final norm's input gradient


def test_a_per_head_q_k_norm_keeps_the_projections_column_parallel():
    """A norm over each head's q and k (Qwen3, Gemma-3, MaxText's 2023 decoder) normalizes head_dim,
    not the split heads: q/k/v stay column parallel and the layer runs Megatron's two all-reduces
    forward (Shoeybi et al. 2019), no more. The column rule once refused any norm after the split
    and left q and k whole, which made attention gather k and v over the heads."""
    g = narrowpipe.transformer(2, H, HEADS, V, seq=S, qk_norm=True)
    s = shard(g, Parallel(tp=2), dims={"batch": B, "seq": S})
    w = s.meta["weight_sharding"]
    for proj in ("q_proj", "k_proj", "v_proj"):
        assert w[f"model.layers.1.self_attn.{proj}.weight"] == "[tp, -]"
    assert w["model.layers.1.self_attn.q_norm.weight"] == "[-]"
    coll = _collectives(s)
    assert [c[0] for c in coll] == ["all_reduce"] * 5        # embedding + 2 per layer (attention, MLP)
    assert all(c[2] == (B, S, H) for c in coll)
