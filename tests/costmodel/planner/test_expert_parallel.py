"""Expert parallelism in the planner, checked against hand computations: experts per device, ZeRO
over the experts' own replicas, the dispatch and combine all-to-alls (bytes, count per step, the links
they run on), the busiest device's rows under a skewed router, and the search over ``ep``.

The model is a small Mixtral-style mixture of experts (2 layers, hidden 256, 8 experts of ffn 512,
top-2, bf16) so that every block costs in well under a second; the system is DGX H100 (8 GPUs per
NVLink domain, 16 devices = 2 nodes)."""

from __future__ import annotations

import json

import pytest

import narrowpipe
from narrowpipe import Parallel, PlanError
from narrowpipe.cli import main
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.planner.planner import Planner
from narrowpipe.costmodel.planner.search import candidates
from narrowpipe.costmodel.planner.sharding import shard
from narrowpipe.costmodel.training import build_training_graph
from narrowpipe.ir import Op

L, H, F, E, K, V, SEQ = 2, 256, 512, 8, 2, 1000, 128
EXPERT_PARAMS = L * E * (2 * F * H + H * F)          # gate_up [E, 2F, H] and down [E, H, F] per layer
#: Megatron pads the vocabulary to a multiple of 128 x tp (1,000 -> 1,024 rows at tp=1): the embedding and
#: the untied head each hold 24 more rows
PADDING = 2 * (1024 - V) * H
BATCH = 32


@pytest.fixture(scope="module")
def moe() -> narrowpipe.Graph:
    return narrowpipe.transformer(L, H, 4, V, ffn=F, kv_heads=4, gated_mlp=True, experts=E, top_k=K, seq=SEQ,
                                  name="tiny-moe")


def _planner(moe, balance=None, devices=16):
    return Planner(moe, "dgx-h100", devices, global_batch=BATCH, seq=SEQ, expert_balance=balance)


def _par(**kw) -> Parallel:
    base = {"dp": 16, "global_batch": BATCH, "microbatch": 1}
    return Parallel(**{**base, **kw})


def test_each_device_holds_its_experts_share_and_the_dense_layers_whole(moe):
    """ep=8 over dp=16: the 8 experts split 1 per device, attention, router, norms and embeddings
    whole; with tp=2 too every expert is cut in half by columns (gate-up) and rows (down). The
    embedding and the untied head hold Megatron's padded vocabulary (``PADDING``)."""
    planner = _planner(moe)
    dense = moe.param_count() - EXPERT_PARAMS + PADDING
    load = planner.layout(_par(ep=8)).devices[0]
    assert load.expert_params == EXPERT_PARAMS // 8
    assert load.params == dense + EXPERT_PARAMS // 8
    load = planner.layout(_par(tp=2, dp=8, ep=8, sequence_parallel=True)).devices[0]
    assert load.expert_params == EXPERT_PARAMS // (8 * 2)


def test_zero_shards_expert_states_over_the_experts_replicas_not_over_dp(moe):
    """Mixed-precision Adam, ZeRO-1, dp=16, ep=8: bf16 weights (2 B) and fp32 gradients (4 B) of what
    the device holds; fp32 master + two moments (12 B) sharded: the dense parameters over the 16
    data-parallel ranks, the experts (1/8 on each device) over their 16/8 = 2 replicas."""
    planner = _planner(moe)
    ev = planner.evaluate(_par(ep=8, zero=1))
    m = ev.memory[0]
    dense = moe.param_count() - EXPERT_PARAMS + PADDING
    local_experts = EXPERT_PARAMS // 8
    assert m.weights == 2 * (dense + local_experts)
    assert m.gradients == 4 * (dense + local_experts)
    assert m.optimizer_states == pytest.approx(12 * dense / 16 + 12 * local_experts / 2)


def test_expert_gradients_reduce_over_dp_over_ep_replicas(moe):
    """The gradient reduction: dense parameters all-reduced over the 16 data-parallel ranks (stride
    1), the experts over their 2 replicas, ep x tp = 8 ranks apart (one per node), in fp32."""
    planner = _planner(moe)
    p = _par(ep=8)
    lay = planner.layout(p)
    d = lay.devices[0]
    dense = moe.param_count() - EXPERT_PARAMS + PADDING
    timer = planner.timer
    want = timer.seconds(Op.ALL_REDUCE, dense * 4, 16, 1) + timer.seconds(Op.ALL_REDUCE, EXPERT_PARAMS // 8 * 4, 2, 8)
    assert d.params * 4 == (dense + EXPERT_PARAMS // 8) * 4
    assert planner.evaluate(p).step.collectives["dp_reduction"] == pytest.approx(want, rel=1e-9)
    # the same groups in the sharded program of a whole step (grad_sync), read off its collectives
    step = build_training_graph(moe, optimizer="adam")
    local = shard(step, p, dims={"batch": 1, "seq": SEQ}, grad_sync=True)
    groups = {(n.attrs["axis"], n.attrs["group_size"], n.attrs["stride"]) for n in local.nodes
              if n.attrs.get("phase") == "grad_sync"}
    assert groups == {("dp_cp", 16, 1), ("edp", 2, 8)}


@pytest.mark.parametrize("recompute,exchanges", [("none", 2), ("full", 3)])
def test_dispatch_and_combine_move_two_tokens_topk_hidden_per_layer_in_each_pass(moe, recompute, exchanges):
    """Per MoE layer and microbatch, forward: dispatch + combine = 2 x (tokens x top_k x hidden x 2 B)
    x (ep-1)/ep; the backward the same again, and the recomputed forward once more under full
    recomputation. 32 sequences over dp=16: 2 microbatches of 1 x 128 tokens."""
    ep = 8
    plan = narrowpipe.plan(moe, "dgx-h100", 16, global_batch=BATCH, seq=SEQ,
                           parallel={"tp": 1, "pp": 1, "ep": ep, "microbatch": 1, "recompute": recompute, "zero": 1})
    rows = {c["purpose"]: c for c in plan.collectives if c["axis"] == "ep"}
    assert set(rows) == {"expert-parallel dispatch all-to-all", "expert-parallel combine all-to-all"}
    microbatches = BATCH // 16
    each = SEQ * K * H * 2 * (ep - 1) // ep
    for row in rows.values():
        assert row["op"] == "all_to_all" and row["group_size"] == ep
        assert row["per_step"] == L * microbatches * exchanges
        assert row["comm_bytes"] == L * microbatches * exchanges * each
    assert plan.breakdown["ep_comm"] == pytest.approx(sum(r["exposed_s"] for r in rows.values()), rel=1e-9)
    total = sum(r["seconds"] for r in rows.values())
    if recompute == "full":        # Megatron-Core asserts against the batch-level overlap with full recomputation
        assert plan.breakdown["ep_comm"] == pytest.approx(total, rel=1e-9)
        assert any("all-to-alls are exposed" in n for n in plan.notes)
    else:                          # 2 microbatches: the first forward and the last backward have no partner
        assert plan.breakdown["ep_comm"] == pytest.approx(total / 2, rel=1e-9)
        assert plan.hidden_comm["ep_comm"] == pytest.approx(total / 2, rel=1e-9)
        assert any("overlapped across microbatches" in n for n in plan.notes)


def test_all_to_all_runs_on_the_ep_groups_links(moe):
    """ep=8 with tp=1 is one NVLink domain (ranks 0-7); with tp=2 its members are 2 ranks apart and
    span two nodes, so the exchange crosses InfiniBand: the block's all-to-all takes what the topology
    gives that group, and far longer across nodes. With tp=2 and sequence parallelism each tensor-
    parallel rank exchanges its half of the rows (Megatron-Core's dispatcher), all-gathered after."""
    planner = _planner(moe)
    size = SEQ * K * H * 2
    near = planner.timer.seconds(Op.ALL_TO_ALL, size, 8, 1)
    far = planner.timer.seconds(Op.ALL_TO_ALL, size // 2, 8, 2)
    # bandwidth-bound: across nodes 4/8 of the buffer (the other node's 4 peers) through one 400 Gb/s
    # NIC per GPU, inside one node 7/8 over NVLink's ~340 GB/s of 8 GPUs: about 3.9x
    big = 64 << 20
    assert far > near and planner.timer.seconds(Op.ALL_TO_ALL, big, 8, 2) > 3 * planner.timer.seconds(
        Op.ALL_TO_ALL, big, 8, 1)
    layer = planner.cost(planner.blocks.layers[0], _par(ep=8))
    use = next(u for u in layer.collectives if u.purpose.startswith("expert-parallel dispatch")
               and u.phase == "forward")
    launch = planner.target.launch_overhead                # every kernel, a collective too, pays one launch
    assert use.seconds == pytest.approx(near + launch, rel=1e-9)
    assert use.comm_bytes == size * 7 // 8
    layer = planner.cost(planner.blocks.layers[0], _par(tp=2, dp=8, ep=8, sequence_parallel=True))
    use = next(u for u in layer.collectives if u.purpose.startswith("expert-parallel dispatch")
               and u.phase == "forward")
    assert use.seconds == pytest.approx(far + launch, rel=1e-9)
    assert use.comm_bytes == size // 2 * 7 // 8
    gathered = [u for u in layer.collectives if u.phase == "forward" and u.op == "all_gather"
                and "grouped_dot" in u.purpose]
    assert gathered and gathered[0].comm_bytes == size // 2      # the other rank's half, over tp


def _expert_flops(moe, p, balance=None) -> int:
    step = build_training_graph(moe, optimizer="adam")
    local = shard(step, p, dims={"batch": 1, "seq": SEQ}, expert_balance=balance)
    table = interpret(local, {})
    return sum(c.flops for n, c in table.costs.items() if n.op is Op.GROUPED_DOT and n.attrs["phase"] == "forward")


def test_the_busiest_device_sets_the_expert_compute(moe):
    """Balanced: each of ep=8 devices receives its tokens' 128 x 2 = 256 rows' worth, forward
    2 x 256 x (H x 2F + F x H) per layer. hot:0.5: the hottest expert takes half of the group's
    8 x 256 rows, 1024, which its device (one expert each) runs: 4x the even share."""
    even = _expert_flops(moe, _par(ep=8))
    assert even == L * 2 * SEQ * K * (H * 2 * F + F * H)
    assert _expert_flops(moe, _par(ep=8), "hot:0.5") == 4 * even
    # without expert parallelism a skew moves no FLOPs: the one device runs every expert
    assert _expert_flops(moe, _par(ep=1), "hot:0.5") == _expert_flops(moe, _par(ep=1))
    skewed = _planner(moe, "hot:0.5").evaluate(_par(ep=8)).step.total_s
    assert skewed > _planner(moe).evaluate(_par(ep=8)).step.total_s


def test_the_search_tries_ep_on_experts_only_and_says_when_all_to_all_lost(moe):
    fixed = {"tp": 1, "pp": 1, "microbatch": 1, "recompute": "none", "zero": 1}
    planner = _planner(moe)
    eps = {p.ep for p in candidates(planner, fixed)}
    assert eps == {1, 2, 4, 8}                           # divisors of dp=16 that divide the 8 experts
    dense = narrowpipe.transformer(L, H, 4, V, ffn=F, kv_heads=4, gated_mlp=True, seq=SEQ)
    dense_planner = Planner(dense, "dgx-h100", 16, global_batch=BATCH, seq=SEQ)
    assert {p.ep for p in candidates(dense_planner, fixed)} == {1}
    with pytest.raises(PlanError, match="no experts"):
        dense_planner.evaluate(_par(ep=2))
    plan = narrowpipe.plan(moe, "dgx-h100", 16, global_batch=BATCH, seq=SEQ, parallel=fixed)
    assert {r.parallel.ep for r in plan.runners_up} | {plan.parallel.ep} == {1, 2, 4, 8}
    lost = [r for r in plan.runners_up if r.parallel.ep > plan.parallel.ep]
    assert lost and all("expert-parallel all-to-all" in r.why for r in lost)


def test_ep_must_divide_the_experts(moe):
    with pytest.raises(PlanError, match="does not divide the model's 8 experts"):
        narrowpipe.plan(moe, "dgx-h100", 12, global_batch=12, seq=SEQ, parallel={"tp": 1, "pp": 1, "ep": 3})


def test_cli_plan_fixes_ep_on_a_mixtral_config(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "mixtral", "hidden_size": H, "intermediate_size": F,
                                  "num_hidden_layers": L, "num_attention_heads": 4, "num_key_value_heads": 4,
                                  "vocab_size": V, "num_local_experts": E, "num_experts_per_tok": K}))
    out = tmp_path / "plan.json"
    assert main(["plan", str(config), "--devices", "16", "--target", "dgx-h100", "--global-batch", "32", "--seq",
                 str(SEQ), "--fix", "ep=8,tp=1,pp=1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ep8" in text and "expert-parallel" in text
    data = json.loads(out.read_text())
    assert data["parallel"]["ep"] == 8 and data["breakdown"]["ep_comm"] > 0


def test_the_expert_data_parallel_group_is_dp_over_ep_ranks_ep_x_tp_apart():
    """Megatron's order (tp innermost, ep carved from dp next to it): tp=2, dp=8, ep=4 puts an
    expert's 8 / 4 = 2 replicas 4 x 2 = 8 ranks apart; without ep it is the data-parallel group."""
    assert Parallel(tp=2, dp=8, ep=4, global_batch=8).axis("edp") == (2, 8)
    assert Parallel(tp=2, dp=8, ep=4, global_batch=8).axis("ep") == (4, 2)
    assert Parallel(tp=2, dp=8, cp=2, global_batch=8).axis("edp") == Parallel(tp=2, dp=8, cp=2, global_batch=8).axis(
        "dp_cp") == (16, 2)


def test_a_torch_exported_mixtral_shards_its_grouped_mm_offsets_with_the_experts():
    """transformers' grouped_mm experts carry per-expert offsets [E]: under ep=4 each device reads the
    offsets of its own 2 experts, and the program verifies (NARROWPIPE_VERIFY=1 in the tests)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.MixtralConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                                        num_attention_heads=4, num_key_value_heads=2, vocab_size=300,
                                        num_local_experts=8, num_experts_per_tok=2)
    with torch.device("meta"):
        model = transformers.MixtralForCausalLM(config).to(torch.bfloat16).eval()
    ids = torch.zeros(2, 16, dtype=torch.long, device="meta")
    dyn = {"input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=64)}, "use_cache": None}
    graph = narrowpipe.from_torch(model, (), {"input_ids": ids, "use_cache": False}, dynamic_shapes=dyn)
    local = shard(build_training_graph(graph, optimizer="adam"), Parallel(dp=4, ep=4, global_batch=4),
                  dims={"batch": 1, "seq": 16})
    grouped = [n for n in local.nodes if n.op is Op.GROUPED_DOT]
    assert len(grouped) == 6 and all(tuple(n.inputs[2].shape) == (2,) for n in grouped)
    assert sum(n.op is Op.ALL_TO_ALL for n in local.nodes) == 4


def _tp_ep(**kw) -> Parallel:
    return _par(tp=2, dp=8, ep=8, sequence_parallel=True, **kw)


def test_an_odd_row_count_splits_unevenly_over_tp_and_exchanges_the_largest_share(moe):
    """zipf:1 sends the busiest device (one expert each, ep=8) 753 of the group's 8 x 256 routed rows:
    odd, so tp=2 cannot halve them. Each tensor-parallel rank still exchanges its share, the busiest
    ceil(753 / 2) = 377 rows: the forward dispatch moves (ep-1)/ep x 377 x H x 2 B = 7/8 x 377 x 512
    = 168,896 B (the whole tensor on every rank, 7/8 x 753 x 512 = 337,344 B, was the bug), the
    experts all-gather the 753 rows over tp, and the combine reduce-scatters the down projection's
    partial sum onto 377 rows per rank before its own exchange (no all-reduce of all 753)."""
    rows, share = 753, 377
    planner = _planner(moe, "zipf:1")
    layer = planner.cost(planner.blocks.layers[0], _tp_ep())
    forward = [u for u in layer.collectives if u.phase == "forward"]
    dispatch = next(u for u in forward if u.purpose.startswith("expert-parallel dispatch"))
    combine = next(u for u in forward if u.purpose.startswith("expert-parallel combine"))
    assert dispatch.comm_bytes == 7 * share * H * 2 // 8 == 168_896
    assert combine.comm_bytes == 7 * share * H * 2 // 8          # sends 377 rows, receives 128 x 2 / 2
    assert not any(u.op == "all_reduce" and u.axis == "tp" and u.purpose == "tensor-parallel all-reduce"
                   for u in layer.collectives)
    local = shard(build_training_graph(moe, optimizer="adam"), _tp_ep(), dims={"batch": 1, "seq": SEQ},
                  expert_balance="zipf:1")
    exchanged = {tuple(n.outputs[0].shape) for n in local.nodes if n.op is Op.ALL_TO_ALL
                 and "dispatch" in n.attrs["purpose"]}
    assert exchanged == {(share, H)}
    gathered = {tuple(n.outputs[0].shape) for n in local.nodes if n.op is Op.ALL_GATHER
                and n.inputs[0].producer is not None and "dispatch" in n.inputs[0].producer.attrs.get("purpose", "")}
    assert gathered == {(rows, H)}
    scattered = {(tuple(n.inputs[0].shape), tuple(n.outputs[0].shape)) for n in local.nodes
                 if n.op is Op.REDUCE_SCATTER and any(u.node.op is Op.ALL_TO_ALL for u in n.outputs[0].uses)}
    assert scattered == {((rows, H), (share, H))}


def test_the_step_time_does_not_fall_as_the_router_skews_more(moe):
    """zipf 0.98 .. 1.02 gives the busiest device 741, 747, 753, 760, 766 rows: odd, odd, odd, even,
    even. More rows can only cost more; the step time and the bytes of a dispatch are non-decreasing
    (an odd count exchanged whole made them zig-zag by about 2x in the exchange). The dispatch moves
    7/8 x ceil(rows / 2) x 512 B."""
    times, sent = [], []
    for z, rows in (("0.98", 741), ("0.99", 747), ("1", 753), ("1.01", 760), ("1.02", 766)):
        planner = _planner(moe, f"zipf:{z}")
        times.append(planner.evaluate(_tp_ep()).step.total_s)
        layer = planner.cost(planner.blocks.layers[0], _tp_ep())
        use = next(u for u in layer.collectives if u.purpose.startswith("expert-parallel dispatch")
                   and u.phase == "forward")
        assert use.comm_bytes == 7 * ((rows + 1) // 2) * H * 2 // 8
        sent.append(use.comm_bytes)
    assert times == sorted(times) and sent == sorted(sent)


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_the_experts_input_gradient_is_reduce_scattered_over_tp_per_microbatch_not_deferred(moe, recompute):
    """With tp=2 the row-parallel experts leave a partial sum over tp on the routed rows: the down
    projection's output (forward, and the recomputed forward) and the gate-up projection's input
    gradient (backward). Both are activations, settled per microbatch by a tp reduce-scatter onto
    the rows before the combine all-to-all, as Megatron-Core's dispatcher does (256 balanced rows:
    [256, H] -> [128, H], one per layer and pass). Only weight gradients are deferred to the data-
    parallel reduction, the same ones as without expert parallelism: the routers' [E, H] and the
    vocabulary table's [V, H] (1000 rows do not split over tp) in fp32, 4 x (L x E x H + V x H)
    = 4 x (4096 + 256,000) = 1,040,384 B; the experts' 2 x 256 x H x 2 B per layer never joins them."""
    dims = {"batch": 1, "seq": SEQ}
    step = narrowpipe.training_step(moe, recompute=recompute)
    local = shard(step, _tp_ep(recompute=recompute), dims=dims)
    dense = shard(step, _par(tp=2, dp=8, sequence_parallel=True, recompute=recompute), dims=dims)
    assert local.meta["deferred_reductions"] == dense.meta["deferred_reductions"] == {"tp": 4 * (L * E * H + V * H)}
    settled = [n for n in local.nodes if n.op is Op.REDUCE_SCATTER and n.attrs["axis"] == "tp"
               and any(u.node.op is Op.ALL_TO_ALL for u in n.outputs[0].uses)]
    phases = ["forward", "backward"] + (["recompute"] if recompute == "full" else [])
    assert sorted(n.attrs["phase"] for n in settled) == sorted(phases * L)
    assert all(tuple(n.inputs[0].shape) == (SEQ * K, H) and tuple(n.outputs[0].shape) == (SEQ * K // 2, H)
               for n in settled)
    # the planner times them as tp collectives of every pass: per layer and microbatch each pass has two
    # sequence-parallel reduce-scatters, attention's [128, H] (1/2 x 128 x 256 x 2 = 32,768 B) and the
    # experts' [256, H] (1/2 x 256 x 256 x 2 = 65,536 B); the layer defers only its router's 4 x E x H
    planner = _planner(moe)
    layer = planner.cost(planner.blocks.layers[0], _tp_ep(recompute=recompute))
    scatters = {u.phase: (u.count, u.comm_bytes) for u in layer.collectives
                if u.axis == "tp" and u.op == "reduce_scatter"}
    assert scatters == {phase: (2, SEQ * H * 2 // 2 + SEQ * K * H * 2 // 2) for phase in phases}
    assert layer.deferred == {"tp": 4 * E * H}
