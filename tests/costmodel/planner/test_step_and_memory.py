"""Step composition and memory per device from block costs, on synthetic blocks whose every number
is chosen so that the expected result can be written down by hand."""

from __future__ import annotations

import dataclasses

import pytest

from narrowpipe.costmodel.execution.collectives import NetLevel, Topology
from narrowpipe.costmodel.planner.block_cost import BlockCost, unique_params
from narrowpipe.costmodel.planner.memory import device_memory, in_flight
from narrowpipe.costmodel.planner.runtime import RUNTIMES
from narrowpipe.costmodel.planner.step import CollectiveTimer, layout, step_time
from narrowpipe.costmodel.planner.strategy import Parallel
from narrowpipe.ir import Op

GB = 1e9
# 8 devices per node on a 100 GB/s switch, 10 GB/s per device between nodes, no latency
TOPO = Topology(8, NetLevel(100 * GB, 0.0), NetLevel(10 * GB, 0.0))
CORE = RUNTIMES["megatron-core"]
OLD = RUNTIMES["megatron-lm-2021"]


def _block(name: str = "layer.0", kind: str = "layer", f: float = 1.0, b: float = 2.0, params: int = 10**9,
           weights: tuple[tuple[str, int, int], ...] | None = None, saved: int = 10**8) -> BlockCost:
    return BlockCost(name, kind, {"forward": f, "backward": b, "optimizer": 0.0}, 0.0, 0.0, {}, params,
                     2 * params, saved, 0, 10**6, {}, (), (),
                     weights if weights is not None else ((f"{name}.w", params, 2 * params),))


def test_unsynchronized_gradient_all_reduce_is_fully_exposed_after_the_backward():
    p = Parallel(dp=16, global_batch=64)            # 16 devices at stride 1: 2 nodes of 8
    blocks = [_block()] * 4
    lay = layout(p, blocks, None, None, OLD)
    step = step_time(p, lay, CollectiveTimer(TOPO), OLD)
    nbytes = 4 * 10**9 * 2                           # fp16 gradients of 4e9 parameters (the 2021 runtime)
    # NCCL's rings across the 2 nodes: each member's rate is capped by its 100 GB/s link and its node's
    # 8 NICs x 10 GB/s = 80 GB/s together; a ring all-reduce over 16 moves 2 x 15/16 of the buffer
    # (faster than the hierarchical 0.24 s: reduce-scatter in the node, all-reduce of 1/8 across, gather)
    expected = 2 * (15 / 16) * nbytes / (80 * GB)
    assert step.breakdown["dp_comm"] == pytest.approx(expected)
    assert step.total_s == pytest.approx(64 // 16 * 4 * 3.0 + expected)
    assert sum(step.breakdown.values()) == pytest.approx(step.total_s)


def test_overlapped_gradient_reduction_hides_behind_all_but_the_last_layer():
    p = Parallel(dp=16, global_batch=64)
    blocks = [_block(b=0.5)] * 4
    lay = layout(p, blocks, None, None, CORE)
    t = TOPO.time(Op.ALL_REDUCE, 4 * 10**9 * 4, 16).seconds          # fp32 gradients
    step = step_time(p, lay, CollectiveTimer(TOPO), CORE)
    window = 4 * 0.5 * 3 / 4                                         # the backward of three of four layers
    assert step.breakdown["dp_comm"] == pytest.approx(max(t - window, t / 4))
    assert step.hidden["dp_comm"] == pytest.approx(t - step.breakdown["dp_comm"])


def test_zero3_prefetch_hides_the_gathers_that_fit_behind_the_previous_block():
    p = Parallel(dp=8, zero=3, global_batch=8)      # one node: 8 devices, 100 GB/s
    blocks = [_block(f=1.0, b=2.0)] * 3
    lay = layout(p, blocks, None, None, CORE)
    step = step_time(p, lay, CollectiveTimer(TOPO), CORE)
    ag = TOPO.time(Op.ALL_GATHER, 2 * 10**9, 8).seconds               # 17.5 ms: hidden after the first block
    rs = TOPO.time(Op.REDUCE_SCATTER, 4 * 10**9, 8).seconds
    assert step.breakdown["param_gather"] == pytest.approx(ag + ag + rs)   # only the first block's are exposed
    assert step.breakdown["dp_comm"] == 0.0


def test_pipeline_sends_and_bubble_enter_the_breakdown():
    p = Parallel(pp=2, global_batch=4)
    blocks = [dataclasses.replace(_block(), boundary_bytes=10**8)] * 4
    lay = layout(p, blocks, None, None, CORE)
    step = step_time(p, lay, CollectiveTimer(TOPO), CORE)
    send = 10**8 / (100 * GB)                                          # stride 1: inside the node
    per_mb = 2 * 3.0 + 2 * send
    assert step.total_s == pytest.approx(4 * per_mb + per_mb)
    assert step.breakdown["bubble"] == pytest.approx(per_mb)
    assert step.breakdown["p2p"] == pytest.approx(4 * 2 * send)


def test_mixed_precision_adam_bytes_per_parameter_and_zero_stages():
    blocks = [_block(params=10**9), _block("layer.1", params=2 * 10**9)]
    p0 = Parallel(dp=4, global_batch=4)
    lay = layout(p0, blocks, None, None, CORE)
    P = 3 * 10**9
    m = device_memory(p0, lay.devices[0], CORE)
    assert (m.weights, m.gradients, m.optimizer_states) == (2 * P, 4 * P, 12 * P)   # fp16, fp32 grad, master+2 moments
    m1 = device_memory(dataclasses.replace(p0, zero=1), lay.devices[0], CORE)
    m2 = device_memory(dataclasses.replace(p0, zero=2), lay.devices[0], CORE)
    m3 = device_memory(dataclasses.replace(p0, zero=3), lay.devices[0], CORE)
    assert m1.optimizer_states == 12 * P / 4 and m1.gradients == 4 * P
    assert m2.gradients == 4 * P / 4
    assert m3.weights == 2 * P / 4 + 2 * (2 * 2 * 10**9)                  # shard + gathered and prefetched block


def test_activations_held_follow_the_schedule_in_flight_count():
    assert [in_flight(Parallel(pp=4, global_batch=8), s) for s in range(4)] == [4, 3, 2, 1]
    p = Parallel(pp=4, interleave=2, global_batch=8)
    assert in_flight(p, 0) == ((4 - 1) * 2 + (2 - 1) * 4 + 1) / 2         # Megatron's interleaved warm-up
    assert in_flight(Parallel(global_batch=8), 0) == 1


def test_a_weight_two_blocks_share_is_held_once_and_repeated_layers_count_each_time():
    emb = _block("prologue", "prologue", weights=(("embed.weight", 5, 10),))
    head = _block("epilogue", "epilogue", weights=(("embed.weight", 5, 10), ("norm.weight", 1, 2)))
    layer = _block("layer.0", weights=(("layers.0.w", 3, 6),))
    assert unique_params([emb, layer, layer, head]) == (5 + 3 + 3 + 1, 10 + 6 + 6 + 2)


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_parameter_terms_agree_with_the_training_memory_of_the_whole_graph(zero):
    import narrowpipe
    from narrowpipe.costmodel.planner.planner import Planner

    g = narrowpipe.transformer(4, 512, 8, 4096, seq=256, tie_embeddings=True, dtype="bf16")
    planner = Planner(g, "dgx-h100", 16, global_batch=16, runtime=dataclasses.replace(CORE, grad_reduce_dtype=
                                                                                   narrowpipe.ir.DType.BF16))
    ev = planner.evaluate(Parallel(tp=2, dp=8, zero=zero, global_batch=16))
    ref = narrowpipe.training_memory(g, zero=zero, dp=8, tp=2, microbatch=1).terms()
    mine = ev.memory[0].terms()
    for term in ("weights", "gradients", "optimizer_states"):
        # the same bytes per parameter, counted independently: the planner from its sharded blocks
        # (norm scales whole on every tensor-parallel rank), training_memory as parameters / tp
        assert mine[term] == pytest.approx(ref[term], rel=0.02), term


@pytest.mark.parametrize("recompute, per_layer_sbh_over_t, eager_sbh_over_t", [("none", 34, 43),
                                                                                ("full", 2, 2)])
def test_a_sequence_parallel_layer_receives_the_stream_split_and_saves_what_korthikanti_counts(
        recompute, per_layer_sbh_over_t, eager_sbh_over_t):
    """Under tp x sequence parallelism a layer receives the residual stream split over the sequence
    (the layer before left it so): its norm runs on s/t rows, an all-gather precedes each
    column-parallel matmul (2 all-gathers and 2 reduce-scatters in the forward, Megatron's g and g-bar),
    and the activations it saves per microbatch are Korthikanti et al. 2022's for Megatron-Core's
    gated layer, by hand in sbh/t (2-byte values, GQA with 2 of 8 heads, ffn 3.5h): norm input 2, QKV
    input 2, Q 2 + K 0.5 + V 0.5, flash output 2 (the projection's input: no transposed copy), norm
    input 2, fc1 input 2, fc1 output 7 + 7 (the fused SwiGLU saves its input), fc2 input 7 = 34;
    2 under full recomputation. Eager torch's form (SiLU's output and the transposed copy kept, as
    training_memory counts the whole graph) is 9 more: the planner read 43 for Megatron-Core too
    before its runtime form said which kernels it fuses (QA)."""
    import collections
    import dataclasses

    import narrowpipe
    from narrowpipe import Parallel
    from narrowpipe.costmodel.planner.planner import Planner
    h, s, b, t = 1024, 512, 2, 4
    graph = narrowpipe.transformer(4, h, 8, 32000, ffn=3584, kv_heads=2, gated_mlp=True, seq=s)
    par = Parallel(tp=t, pp=1, dp=2, microbatch=b, global_batch=4, sequence_parallel=True, recompute=recompute)
    layer = Planner(graph, "dgx-h100", 8, global_batch=4).costs(par)[0][1]
    sbh = s * b * h
    # a layer block also keeps the rotary cos/sin tables it was handed (seq x head dim, bf16, two of
    # them), which the whole-model count holds once for every layer
    rope = 2 * s * (h // 8) * 2
    assert layer.saved_bytes == per_layer_sbh_over_t * sbh // t + rope
    eager = dataclasses.replace(CORE, name="eager", attention_layout="bhsd", fused_glu=False, fused_norm=False)
    eager_layer = Planner(graph, "dgx-h100", 8, global_batch=4, runtime=eager).costs(par)[0][1]
    tm = [narrowpipe.training_memory(narrowpipe.transformer(n, h, 8, 32000, ffn=3584, kv_heads=2, gated_mlp=True,
                                                            seq=s), zero=1, dp=2, tp=t, recompute=recompute,
                                     microbatch=b, dims={"seq": s}).terms()["activations"] for n in (2, 4)]
    reference = (tm[1] - tm[0]) / 2
    assert reference * t / sbh == pytest.approx(eager_sbh_over_t, abs=0.01)
    assert eager_layer.saved_bytes == pytest.approx(reference + rope, rel=1e-9)
    forward = collections.Counter(u.op for u in layer.collectives if u.phase == "forward"
                                  and u.purpose.startswith("sequence-parallel") for _ in range(u.count))
    assert forward == {"all_gather": 2, "reduce_scatter": 2}
