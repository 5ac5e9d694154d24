"""Expert-parallel serving (vLLM's ``--enable-expert-parallel``, ep = tp x dp): hand-computed bytes,
per-device expert weights and one small MoE decode step."""

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution.collectives import Topology
from narrowpipe.costmodel.experts import RANDOM, expected_reached, node_reached_experts, node_received_rows
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.serving import Layout
from narrowpipe.costmodel.serving.parallel import ep_all_to_all_s, ep_dispatch_bytes, tp_spec
from narrowpipe.costmodel.serving.serve import replica_for, serve
from narrowpipe.errors import NarrowpipeError
from narrowpipe.ir import Op
from narrowpipe.render.emit_vllm import parse_expert_layout, vllm_launch

# a tiny Mixtral: 2 layers, hidden 64, 8 experts of 128 (gated), top-2, bf16
TINY = dict(layers=2, hidden=64, heads=4, vocab=256, ffn=128, kv_heads=4, gated_mlp=True, experts=8, top_k=2,
            seq=512)


@pytest.fixture(scope="module")
def moe():
    return narrowpipe.transformer(**TINY)


def _params_per_device(ep: int) -> int:
    """Hand count of one device's parameters at tp=1 with ``ep`` expert-parallel devices."""
    embed_and_head = 2 * 256 * 64
    final_norm = 64
    attention = 4 * 64 * 64                  # q, k, v, o (4 heads of 16, no bias)
    norms = 2 * 64
    router = 8 * 64
    experts = (8 // ep) * 3 * 128 * 64      # gate, up and down of each local expert, whole
    return embed_and_head + final_norm + 2 * (attention + norms + router + experts)


@pytest.mark.parametrize("ep", [2, 4, 8])
def test_per_device_expert_weights_are_the_whole_experts_over_ep(moe, ep):
    replica = replica_for(moe, "h100", ep=ep)
    inv_freq = 8 * 4                          # the rotary table's fp32 buffer, head_dim / 2 entries
    assert replica.memory(1, 16).weights == 2 * _params_per_device(ep) + inv_freq    # bf16
    assert replica.layout.label == f"DP{ep} x EP{ep}" and replica.layout.devices == ep


def test_tp_with_ep_splits_attention_not_experts(moe):
    shard = tp_spec(replica_for(moe, "h100").source.spec, 2, 4)
    assert (shard.heads, shard.ffn, shard.expert_ffn, shard.expert_parallel) == (2, 64, 128, (4, 2))


def test_dispatch_bytes_and_all_to_all_count_by_hand(moe):
    spec = replica_for(moe, "h100").source.spec
    # 12 tokens of a data-parallel rank over tp=2: each device sends 6 tokens x top-2 x 64 x 2 bytes
    assert ep_dispatch_bytes(spec, 2, 12, 2.0) == 6 * 2 * 64 * 2
    # of which (ep - 1) / ep leave the device: the collective model's all-to-all volume
    target = get_target("h100")
    topo = Topology.of(target)
    seconds, count = ep_all_to_all_s(spec, 2, 8, 12, 2.0, topo, target)
    assert count == 2 * 2                       # dispatch + combine per MoE layer, 2 layers
    one = topo.time(Op.ALL_TO_ALL, 1536, 8)
    assert seconds == pytest.approx(4 * (one.seconds + target.launch_overhead))
    # tp = ep (dp = 1): vLLM runs no all-to-all (use_all2all_kernels needs dp_size > 1)
    assert ep_all_to_all_s(spec, 8, 8, 12, 2.0, topo, target) == (0.0, 0)


def test_busiest_device_reads_its_share_of_the_group_reached_experts():
    """DeepSeek-V3's routing on DP8 x EP8: each device routes 4 tokens x top-8 = 32 rows; the group routes
    32 tokens over 256 experts and reaches E(1 - (1 - k/E)^T) of them, 1/8 on each device."""
    attrs = {"top_k": 8, "expert_parallel": (8, 8)}
    assert node_received_rows(attrs, 32) == 32
    hand = 256 * (1 - (1 - 8 / 256) ** 32) / 8
    assert node_reached_experts(attrs, 32, 32, RANDOM) == pytest.approx(hand)
    assert hand == pytest.approx(expected_reached(32, 256, 8) / 8)
    # TP2 x DP4 x EP8: two TP ranks hold the same tokens; the device receives dp x rows / ep
    assert node_received_rows({"top_k": 8, "expert_parallel": (8, 4)}, 32) == 16


def test_small_moe_decode_step_by_hand(moe):
    """Batch 8 on DP4 x EP4: every rank decodes 2 sequences; the replica's FLOPs are one device's at
    batch 8 plus the rotary tables each rank builds for itself (8 frequencies, 16 cos and 16 sin casts:
    40 FLOPs, 3 more times), the experts' share by hand: 8 tokens x top-2 rows, each
    2 x (64 x 256 + 128 x 64) FLOPs per layer; the step adds 4 all-to-alls of 2 x 2 x 64 x 2 bytes."""
    one = serve(moe, "h100", mode="decode", batch=8, context=64, with_crossover=False)
    ep4 = serve(moe, "h100", mode="decode", batch=8, context=64, ep=4, with_crossover=False)
    assert ep4.devices == 4 and ep4.layout == "DP4 x EP4"
    assert ep4.decode.flops == one.decode.flops + 3 * (8 + 16 + 16)
    expert_flops = 2 * 8 * 2 * 2 * (64 * 256 + 128 * 64)      # 2 layers x 16 rows x (up + down)
    replica = replica_for(moe, "h100", ep=4)
    sg = replica.decode_graph
    table = interpret(sg.graph, sg.bindings(2, 1, 64))
    per_device = sum(c.flops for n, c in table.costs.items() if n.op is Op.GROUPED_DOT)
    assert 4 * per_device == expert_flops
    assert any("4 expert-parallel all-to-alls" in n for n in ep4.decode.notes)
    # every rank holds its own 2 sequences' cache
    assert ep4.memory.kv_cache == one.memory.kv_cache / 4


def test_refusals(moe):
    dense = narrowpipe.transformer(layers=2, hidden=64, heads=4, vocab=256, ffn=128, kv_heads=4, seq=512)
    with pytest.raises(NarrowpipeError, match="no experts"):
        replica_for(dense, "h100", ep=2)
    with pytest.raises(NarrowpipeError, match="do not split over 16"):
        replica_for(moe, "h100", ep=16)
    with pytest.raises(NarrowpipeError, match="not a multiple of tp=4"):
        replica_for(moe, "h100", tp=4, ep=2)


def test_vllm_emit_enables_expert_parallel_with_the_dp_size():
    assert parse_expert_layout(Layout(2, 1, 8).label) == (2, 1, 4, 8)
    assert parse_expert_layout(Layout(8, 1, 8).label) == (8, 1, 1, 8)
    launch = vllm_launch("m", "h100", "TP2 x DP4 x EP8", batch=64, max_model_len=4096, model_dtype="bf16",
                         formats={}, source={})
    assert launch.settings["--enable-expert-parallel"] is True
    assert launch.settings["--data-parallel-size"] == 4 and launch.settings["--tensor-parallel-size"] == 2
    assert launch.settings["--max-num-seqs"] == 16          # each data-parallel rank schedules its own share
    assert "--enable-expert-parallel" in launch.args
    with pytest.raises(NarrowpipeError, match="spans tp x dp"):
        parse_expert_layout("TP2 x DP4 x EP4")


def test_capacity_search_adds_wide_expert_parallel_layouts_for_moe_only(moe):
    from narrowpipe.costmodel.serving.capacity import layouts_for
    sg = replica_for(moe, "h100").source
    labels = [lay.label for lay in layouts_for(sg, get_target("h100"))]
    assert labels == ["TP1", "TP2", "TP4", "DP2 x EP2", "DP4 x EP4", "DP8 x EP8"]   # 4 heads: no TP8
    dense = replica_for(narrowpipe.transformer(layers=2, hidden=64, heads=4, vocab=256, ffn=128, kv_heads=4,
                                               seq=512), "h100").source
    assert not any("EP" in lay.label for lay in layouts_for(dense, get_target("h100")))


def test_crossover_reads_a_shards_share_of_the_group_reached_experts():
    """A DP4 x EP4 shard of 8 experts, top-2: at a rank's batch B the group's 4B tokens reach
    8 (1 - (1 - 2/8)^(4B)) experts, a quarter of them on the device; all 8 from B = 1 under balanced."""
    from narrowpipe.costmodel.serving.crossover import RoutedWeights
    r = RoutedWeights(1000, 8, 2, True, 4, 4)
    assert r.read(3) == pytest.approx(1000 * 8 * (1 - 0.75 ** 12) / 4)
    b = RoutedWeights(1000, 8, 2, False, 4, 4)
    assert (b.saturation, b.read(1), b.read(5), b.per_sequence) == (1.0, 2000.0, 2000.0, 2000.0)
