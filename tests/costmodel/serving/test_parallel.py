"""Tensor- and pipeline-parallel decode: per-device shards and the collectives between devices."""

import dataclasses
import json
from pathlib import Path

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution.algorithms import ring
from narrowpipe.costmodel.serving.serve import replica_for, serve
from narrowpipe.ir import Op

SIZES = dict(layers=32, hidden=4096, heads=32, vocab=128256, ffn=14336, kv_heads=8, gated_mlp=True, seq=2048)


@pytest.fixture(scope="module")
def graph():
    return narrowpipe.transformer(**SIZES)


def test_tp_shards_weights_and_kv_and_adds_two_all_reduces_per_layer(graph):
    one = replica_for(graph, "h100")
    tp4 = replica_for(graph, "h100", tp=4)
    w1, w4 = one.memory(1, 100).weights, tp4.memory(1, 100).weights
    norms = 2 * (2 * 32 * 4096 + 4096)          # replicated on every device
    assert w4 == pytest.approx((w1 - norms) / 4 + norms, rel=1e-6)
    assert tp4.kv_bytes_per_token == one.kv_bytes_per_token // 4
    step = tp4.step(1, 1, 2048)
    assert "65 tensor-parallel collectives" in " ".join(step.notes)   # 2 x 32 all-reduces + logits


def test_small_batch_all_reduce_is_latency_bound(graph):
    """At batch 1 an all-reduce carries 8 KB: its time is latency, not bandwidth. With NCCL alone
    (``peer_all_reduce=False``) NCCL's ring on its LL protocol (NCCL-TUNE: 6.6 us + 0.6 us per step,
    2(n-1) steps, at min(half the link, 141 GB/s)); the Simple ring's 6 steps of 3 us lose. With the
    engine's own kernels (the default: vLLM, SGLang and TensorRT-LLM run them on NVLink) one step of
    4.6 us (SGL-AR) plus 3 x 8 KB of loads. The logits' all-gather (256 KB) takes the faster of the two
    rings."""
    h100 = get_target("h100")
    size = 4096 * 2
    ll = 6.6e-6 + 6 * 0.6e-6 + 2 * 3 / 4 * size / 141e9
    assert ll < ring(Op.ALL_REDUCE, size, 4, h100.scale_up_bandwidth, h100.link_latency).seconds
    logits = 32064 * 4 * 2
    gather = min(ring(Op.ALL_GATHER, logits, 4, h100.scale_up_bandwidth, h100.link_latency).seconds,
                 6.6e-6 + 3 * 0.6e-6 + 3 / 4 * logits / 141e9) + h100.launch_overhead
    nccl = replica_for(graph, "h100", tp=4, peer_all_reduce=False).step(1, 1, 2048).comm_s
    assert nccl == pytest.approx(64 * (ll + h100.launch_overhead) + gather, rel=1e-6)
    engine = replica_for(graph, "h100", tp=4).step(1, 1, 2048).comm_s
    one_shot = 4.6e-6 + 3 * size / 450e9
    assert engine == pytest.approx(64 * (one_shot + 1e-6) + gather, rel=1e-6)


def test_llama_3_8b_decodes_faster_at_tp8_than_at_tp4_on_h100s(graph):
    """Each TP8 device reads half the weights of a TP4 one, and the 64 all-reduces per token no longer
    undo that, with the engines' one-shot all-reduce (one 4.6 us step) or NCCL's LL ring (6.6 us + 14 x
    0.6 us). Priced as 14 Simple-protocol ring steps of 3 us (42 us per 8 KB), NCCL alone read TP8
    slower per token than TP4 (5.06 ms against 4.18 ms); the engines' kernels stay the faster."""
    tpot = {tp: replica_for(graph, "h100", tp=tp).step(1, 1, 2048).time_s for tp in (4, 8)}
    assert tpot[8] < tpot[4]
    nccl = {tp: replica_for(graph, "h100", tp=tp, peer_all_reduce=False).step(1, 1, 2048).time_s for tp in (4, 8)}
    assert nccl[8] < nccl[4]
    assert tpot[8] < nccl[8] and tpot[4] < nccl[4]


def test_a_tp_prefill_gathers_one_row_of_logits_per_sequence(graph):
    """The head runs on each sequence's last token (serving's prefill rewrite), so tensor parallelism
    gathers batch x vocab logits, not batch x prompt x vocab: 2 prompts of 512 tokens on 4 H100s pay
    64 all-reduces of 2 x 512 hidden rows and one all-gather of 2 vocabulary rows (bf16)."""
    h100 = get_target("h100")
    tp4 = replica_for(graph, "h100", tp=4, peer_all_reduce=False)     # NCCL's ring (no two-shot)
    assert tp4.device_graph.head_on_last_token

    def nccl(op, size):
        return ring(op, size, 4, h100.scale_up_bandwidth, h100.link_latency).seconds + h100.launch_overhead
    hand = 64 * nccl(Op.ALL_REDUCE, 2 * 512 * 4096 * 2) + nccl(Op.ALL_GATHER, 2 * 32064 * 4 * 2)
    assert tp4.step(2, 512, 0).comm_s == pytest.approx(hand, rel=1e-6)


def test_tp_lowers_latency_and_pp_keeps_throughput(graph):
    r1 = serve(graph, "h100", batch=1, context=2048, with_crossover=False)
    r4 = serve(graph, "h100", batch=1, context=2048, tp=4, with_crossover=False)
    p2 = serve(graph, "h100", batch=2, context=2048, pp=2, with_crossover=False)
    assert r4.tpot_s < r1.tpot_s and r4.devices == 4
    assert p2.tpot_s > r1.tpot_s                         # a token passes both stages
    assert p2.memory.weights < 0.6 * r1.memory.weights


def test_dataflow_chips_lay_themselves_out(graph):
    with pytest.raises(narrowpipe.NarrowpipeError, match="dataflow"):
        replica_for(graph, "groq-lpu", tp=2)
    r = serve(graph, "groq-lpu", batch=1, context=2048, with_crossover=False)
    assert r.devices > 1 and "dataflow layout" in r.layout


def test_a_pipeline_stage_keeps_its_layers_windows_and_experts():
    """Layers that differ are renumbered per stage: the stage taken is a real one (here layers 4..7 of 8,
    the one with the most full-attention layers, then the most expert layers)."""
    from narrowpipe.costmodel.serving.parallel import pp_spec
    from narrowpipe.models import TransformerSpec
    spec = TransformerSpec(layers=8, hidden=64, heads=2, vocab=100, ffn=128, kv_heads=2, head_dim=32,
                           sliding_window=16, sliding_layers=(0, 1, 2, 4, 6), experts=4, top_k=2,
                           dense_layers=(0, 5))
    stage = pp_spec(spec, 2)
    assert stage.layers == 4 and stage.sliding_layers == (0, 2) and stage.dense_layers == (1,)
    uniform = pp_spec(TransformerSpec(layers=5, hidden=64, heads=2, vocab=100, ffn=128, kv_heads=2, head_dim=32,
                                      sliding_window=16), 2)
    assert uniform.layers == 3 and uniform.sliding_layers is None and uniform.window(2) == 16


def test_the_heaviest_stage_may_be_the_shorter_one():
    """Seven layers, the first three dense, on two stages: layers 0-3 (three dense MLPs of 128 and
    one layer of 8 experts of 128) and 4-6 (three expert layers). Each stage has the same attention
    per layer; an expert layer holds 8 x 3 x 64 x 128 MLP parameters and its router, a dense one
    3 x 64 x 128, so the shorter stage holds more and is the one served."""
    from narrowpipe.costmodel.serving.formats import Formats
    from narrowpipe.costmodel.serving.parallel import pp_spec, stage_weight_bytes
    from narrowpipe.models import TransformerSpec
    spec = TransformerSpec(layers=7, hidden=64, heads=2, vocab=100, ffn=128, kv_heads=2, head_dim=32, gated_mlp=True,
                           experts=8, top_k=2, dense_layers=(0, 1, 2))
    attention, norms = 4 * 64 * 64, 2 * 64
    dense, moe = attention + 3 * 64 * 128 + norms, attention + 8 * 3 * 64 * 128 + 64 * 8 + norms
    weigh = stage_weight_bytes(spec, Formats())
    assert weigh(range(0, 4)) == 2 * (3 * dense + moe + 100 * 64)            # bf16, the embedding
    assert weigh(range(4, 7)) == 2 * (3 * moe + 100 * 64 + 64)               # the head and final norm
    stage = pp_spec(spec, 2)
    assert stage.layers == 3 and stage.dense_layers == ()


def test_deepseek_v3_pipeline_binds_on_its_heavier_expert_stage():
    """DeepSeek-V3 in fp8 on TP8 x PP2, H100 (QA's hand count): 61 layers split 31/30. The first stage
    holds 3 dense and 28 expert layers and the embedding (41.2 GB a device), the second 30 expert
    layers and the head: per device an expert layer holds q_a 7168 x 1536, kv_a 7168 x 576 (latent
    down-projections, replicated), q_b 1536 x 128 x 192 / 8, kv_b 512 x 128 x 256 / 8, o 128 x 128 x 7168 / 8,
    256 routed and 1 shared expert of 3 x 7168 x 2048 / 8 and the 256 x 7168 router in fp8, the fp32
    routing bias and the bf16 norms: 1.4533 GB; the head 129280 / 8 x 7168 bf16. The KV cache is the
    576-value bf16 latent of its 30 layers, 4,097 tokens a sequence: (0.9 x 85.5 GB - 43.8 GB) / 141.6 MB
    leaves room for 234 sequences and 6.1 MB, less than the activations of a 117-sequence microbatch, so
    233 fit (it took the first stage: 41.2 GB, 244)."""
    cfg = json.loads((Path(__file__).parent / "configs" / "dsv3.json").read_text())
    attention = 7168 * 1536 + 7168 * 576 + 1536 * 128 * 192 // 8 + 512 * 128 * 256 // 8 + 128 * 128 * 7168 // 8
    moe_layer = attention + 257 * 3 * 7168 * 2048 // 8 + 256 * 7168 + 256 * 4 + 2 * (2 * 7168 + 1536 + 512)
    assert moe_layer == pytest.approx(1.4533e9, rel=1e-4)
    stage_b = 30 * moe_layer + 2 * (129280 // 8 * 7168 + 7168)
    r = serve(narrowpipe.from_config(cfg), "h100", mode="decode", batch=32, context=4096, tp=8, pp=2,
              weights="fp8_e4m3", with_crossover=False)
    assert r.memory.weights == pytest.approx(stage_b, rel=1e-6) and stage_b == pytest.approx(43.83e9, rel=1e-3)
    h100 = get_target("h100")
    kv_per_sequence = 30 * 576 * 2 * 4097
    room = 0.9 * h100.memory_capacity - stage_b
    assert int(room // kv_per_sequence) == 234 and room - 234 * kv_per_sequence < 6.2e6
    assert r.max_batch == 233


def test_tensor_parallel_splits_routed_and_shared_experts():
    from narrowpipe.costmodel.serving.parallel import tp_spec
    from narrowpipe.models import TransformerSpec
    spec = TransformerSpec(layers=2, hidden=64, heads=4, vocab=100, ffn=256, kv_heads=4, head_dim=48,
                           kv_lora_rank=32, qk_rope_head_dim=16, v_head_dim=32, experts=8, top_k=2,
                           expert_ffn=96, shared_ffn=192)
    shard = tp_spec(spec, 4)
    assert (shard.heads, shard.kv_heads, shard.ffn, shard.expert_ffn, shard.shared_ffn) == (1, 1, 64, 24, 48)
    assert shard.kv_lora_rank == 32                      # the latent is replicated, not split
    with pytest.raises(narrowpipe.NarrowpipeError, match="expert_ffn width 90"):
        tp_spec(dataclasses.replace(spec, expert_ffn=90), 4)


def test_pipeline_stages_hold_the_embedding_first_and_the_head_last(graph):
    """Llama-3-8B's sizes in bf16 on four stages of 8 layers: a layer holds 4096 x (4096 + 2 x 1024 + 4096)
    attention, 3 x 4096 x 14336 MLP and 2 x 4096 norm parameters; the first stage adds the 128256 x 4096
    embedding, the last the head of the same size and the final norm; every stage its rotary table's 64
    fp32 frequencies. The fullest (last) stage holds (8 x 218,112,000 + 525,340,672) x 2 B + 256 B =
    4.540 GB (each stage charged both ends: 5.59 GB)."""
    layer = 4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336 + 2 * 4096
    assert layer == 218_112_000
    hand = (8 * layer + 128256 * 4096 + 4096) * 2 + 64 * 4
    assert replica_for(graph, "h100", pp=4).memory(1, 100).weights == hand


def test_a_token_at_batch_one_passes_each_stage_once(graph):
    """One sequence is one microbatch: its step is the sum over the stages (the layers once, the
    embedding and the head once) plus three hops of 4096 bf16 activations, within 1% of the one-device
    step (each stage charged the embedding and the head: 8.27 ms against 7.11, +16%)."""
    one = replica_for(graph, "h100").step(1, 1, 2048).time_s
    pp4 = replica_for(graph, "h100", pp=4).step(1, 1, 2048).time_s
    assert one < pp4 < 1.01 * one


def test_the_pipeline_schedule_by_hand():
    """One microbatch: its trip, 4 stages of 1.0 s, 0.1 s of embedding, 0.5 s of head, 3 hops of 0.01 s.
    Four in flight: the last stage runs its layers and the head on each, 4 x 1.5 s."""
    from narrowpipe.costmodel.serving.parallel import pipeline_s
    assert pipeline_s(4, 1, 1.0, 0.1, 0.5, 0.01) == pytest.approx(4.63)
    assert pipeline_s(4, 4, 1.0, 0.1, 0.5, 0.01) == pytest.approx(6.0)
    assert pipeline_s(1, 1, 1.0, 0.1, 0.5, 0.0) == pytest.approx(1.6)


def test_a_continuous_batching_iteration_is_pipelined_over_its_tokens(graph):
    """64 decodes and 2048 prompt tokens per iteration (64 in flight, 2048 in, 64 out): on two stages
    the iteration's 2112 tokens go as two microbatches of 1056, so its dense part is one microbatch's
    trip, the one-device dense time over 1056 tokens plus a hop and the last stage's second head run
    (within 3%); it was the trip of all 2112 tokens (48.5 ms against 51.1 on one device)."""
    from narrowpipe.costmodel.serving.generate import steady_state
    one, pp2 = replica_for(graph, "h100"), replica_for(graph, "h100", pp=2)
    half = one.step(1, 1056, 0).dense_s
    s1, s2 = steady_state(one, 64, 2048, 64), steady_state(pp2, 64, 2048, 64)
    assert s2.dense_s == pytest.approx(half, rel=0.03)
    assert s2.iteration_s < 0.6 * s1.iteration_s
    # per device, two stages keep most of one device's output rate (it halved: 660 against 1252 tokens/s)
    assert 64 / s2.iteration_s / 2 > 0.85 * 64 / s1.iteration_s
