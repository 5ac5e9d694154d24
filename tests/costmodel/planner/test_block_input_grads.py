"""A planner block's backward computes its activation input's gradient as the whole model's backward
does (QA plan report item 1), never the model's own inputs'; and a tied embedding split over the
first and last pipeline stage has its gradient all-reduced between them (item 4).

References are hand counts: a contraction's backward is two contractions of its forward's size
(weight and input gradients) unless its input carries no gradient; the all-reduce's buffer is the
weight's local shard in the runtime's gradient dtype."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.planner.block_cost import BlockCost, loss_outputs
from narrowpipe.costmodel.planner.planner import Planner
from narrowpipe.costmodel.planner.runtime import RUNTIMES
from narrowpipe.costmodel.planner.step import CollectiveTimer, layout, step_time
from narrowpipe.costmodel.planner.strategy import Parallel
from narrowpipe.costmodel.training import build_training_graph, differentiable_outputs
from narrowpipe.ir import Op
from narrowpipe.models.examples import load_example

CORE = RUNTIMES["megatron-core"]
S, H, F, L = 128, 256, 1024, 2


@pytest.fixture(scope="module")
def encoder() -> narrowpipe.Graph:
    """BERT's post-norm layout: the layer input feeds q, k and v directly (no norm before them)."""
    return narrowpipe.transformer(L, H, 4, 1000, ffn=F, seq=S, encoder=True, norm="layer", positions="learned",
                                  max_positions=S, type_vocab=2, dtype="fp32", name="tiny-bert")


def _flops_by_phase(graph: narrowpipe.Graph, dims: dict[str, int], op: Op) -> dict[str, int]:
    table = interpret(graph, dims)
    out: dict[str, int] = {}
    for node, cost in table.costs.items():
        if node.op is op:
            phase = str(node.attrs.get("phase"))
            out[phase] = out.get(phase, 0) + cost.flops
    return out


def _block_train(planner: Planner, block) -> narrowpipe.Graph:
    return build_training_graph(block.graph, outputs=loss_outputs(block.graph, "sum", block.grad_inputs),
                                inputs=block.grad_inputs)


def test_a_post_norm_layer_gets_its_q_k_v_input_gradients(encoder):
    """One sequence through a layer: forward matmuls 2 s (4 h^2 + 2 h f) (q, k, v, o, fc1, fc2); the
    backward twice that, weight and input gradient of each. Without the block input's gradient
    the q, k and v input gradients (3 x 2 s h^2) were missing."""
    planner = Planner(encoder, "h100", 1, global_batch=1)
    layer = planner.blocks.layers[0]
    assert layer.grad_inputs, "the residual stream handed in by the embedding carries a gradient"
    dots = _flops_by_phase(_block_train(planner, layer), planner.dims(1), Op.DOT)
    forward = 2 * S * (4 * H * H + 2 * H * F)
    assert dots["forward"] == forward
    assert dots["backward"] == 2 * forward


def test_the_model_inputs_get_no_gradient(encoder):
    """The embedding block reads token ids (integers) and the first ResNet block (the stem) pixels:
    neither is an activation an earlier block computed, so neither gets a gradient; the stem's
    convolution has a weight gradient only (backward = forward FLOPs), the first bottleneck's
    four convolutions weight and data gradients (backward = 2 x forward)."""
    planner = Planner(encoder, "h100", 1, global_batch=1)
    assert planner.blocks.prologue is not None and not planner.blocks.prologue.grad_inputs
    resnet = Planner(load_example("resnet50"), "h100", 1, global_batch=1)
    stem, first = resnet.blocks.prologue, resnet.blocks.layers[0]
    assert stem is not None and not stem.grad_inputs
    convs = _flops_by_phase(_block_train(resnet, stem), resnet.dims(1), Op.CONV)
    assert convs["backward"] == convs["forward"] == 2 * 112 * 112 * 64 * 3 * 7 * 7
    convs = _flops_by_phase(_block_train(resnet, first), resnet.dims(1), Op.CONV)
    # conv1 1x1 64->64, conv2 3x3 64->64, conv3 1x1 64->256, downsample 1x1 64->256, at 56 x 56
    forward = 2 * 56 * 56 * (64 * 64 + 9 * 64 * 64 + 64 * 256 + 64 * 256)
    assert convs["forward"] == forward
    assert convs["backward"] == 2 * forward


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-bert"])
def test_planner_flops_per_sequence_are_the_whole_training_graphs(name, encoder):
    """Forward and backward FLOPs summed over the planner's blocks equal the whole model's training
    graph (tp=1, the model's vocabulary), the loss on every output the blocks differentiate. One add
    is the whole graph's alone: the encoder's last hidden state is both an output (seeded by the
    loss) and the pooler's input, and the whole backward sums the two gradients (s x h FLOPs) where
    the planner's last layer takes its seed and the head hands its gradient back separately."""
    g = encoder if name == "tiny-bert" else narrowpipe.transformer(
        3, H, 4, 1000, kv_heads=2, gated_mlp=True, seq=S, dtype="fp32", name=name)
    planner = Planner(g, "h100", 1, global_batch=1)
    counted: dict[int, tuple[float, float]] = {}
    f = b = 0.0
    for block in planner.blocks.all:
        fb = counted.setdefault(id(block), planner._block_flops(block, None))
        f, b = f + fb[0], b + fb[1]
    table = interpret(build_training_graph(g, outputs=differentiable_outputs(g)), planner.dims(1))
    whole = {p: sum(c.flops for n, c in table.costs.items() if n.attrs.get("phase") == p)
             for p in ("forward", "backward")}
    joined = S * H if name == "tiny-bert" else 0
    assert (f, b) == (whole["forward"], whole["backward"] - joined)
    model, executed, _ = planner.model_flops(1)
    assert executed >= model            # hardware FLOPs never below the 3 x forward of model FLOPs


def test_a_post_norm_layer_all_reduces_its_input_gradient_once_per_column_parallel_input(encoder):
    """At tp=2 a layer's backward all-reduces the input gradient of the column-parallel projections
    twice, as Megatron's fused QKV and fc1 do: q, k and v's partial input gradients are added
    before the one all-reduce, then the residual's joins."""
    planner = Planner(encoder, "dgx-h100", 2, global_batch=1)
    layers, _, _ = planner.costs(Parallel(tp=2, global_batch=1))
    backward = [u for u in layers[0].collectives if u.phase == "backward" and u.op == "all_reduce"]
    assert sum(u.count for u in backward) == 2
    assert sum(u.comm_bytes for u in backward) == 2 * S * H * 4     # 2 x (2 (n-1)/n = 1) x s h fp32


def _cost(name: str, kind: str, weights: tuple[tuple[str, int, int], ...]) -> BlockCost:
    params = sum(w[1] for w in weights)
    return BlockCost(name, kind, {"forward": 1.0, "backward": 2.0, "optimizer": 0.0}, 0.0, 0.0, {}, params,
                     2 * params, 0, 0, 0, {}, (), (), weights)


def test_tied_embedding_gradients_are_all_reduced_between_the_first_and_last_stage():
    """Embedding and head share ``embed.weight`` (N local elements); the layers' repeated cost stands
    for distinct layers. pp=2 on two 8-GPU nodes (tp=8: the stages are 8 ranks apart, a node
    apart): one all-reduce of N x 4 bytes (fp32 gradients) over 2 members at stride 8, exposed
    after the data-parallel reduction; pp=1 holds both on one device and sends nothing."""
    from narrowpipe.costmodel.execution.collectives import NetLevel, Topology
    gb = 1e9
    topo = Topology(8, NetLevel(400 * gb, 1e-6), NetLevel(50 * gb, 5e-6))
    n = 32000 // 8 * 1024
    emb = _cost("prologue", "prologue", (("embed.weight", n, 2 * n),))
    head = _cost("epilogue", "epilogue", (("embed.weight", n, 2 * n), ("norm.weight", 1024, 2048)))
    layer = _cost("layer.0", "layer", (("layers.0.w", 10**6, 2 * 10**6),))
    p = Parallel(tp=8, pp=2, global_batch=4)
    lay = layout(p, [layer] * 4, emb, head, CORE)
    assert [(t.name, t.devices, t.numel) for t in lay.tied] == [("embed.weight", (0, 1), n)]
    step = step_time(p, lay, CollectiveTimer(topo), CORE)
    expected = topo.time(Op.ALL_REDUCE, n * 4, 2, 8).seconds
    assert topo.link(2, 8).bandwidth == 50 * gb                      # across the network
    assert step.breakdown["tied_grad"] == pytest.approx(expected)
    assert sum(step.breakdown.values()) == pytest.approx(step.total_s)
    one = Parallel(tp=8, pp=1, global_batch=4)
    assert step_time(one, layout(one, [layer] * 4, emb, head, CORE), CollectiveTimer(topo), CORE) \
        .breakdown["tied_grad"] == 0.0


def test_a_tied_plan_lists_the_embedding_all_reduce_with_the_local_gradient_bytes():
    """A tied model planned at tp=2, pp=2: the vocabulary 4,000 is padded to a multiple of 128 x 2
    (4,096) and split, so each device's gradient is 2,048 x 512 fp32 values; a 2-member all-reduce
    sends 2 (n-1)/n = 1 x that."""
    g = narrowpipe.transformer(4, 512, 8, 4000, seq=256, tie_embeddings=True, dtype="bf16")
    plan = narrowpipe.plan(g, "dgx-h100", 8, global_batch=8, parallel={"tp": 2, "pp": 2, "dp": 2, "microbatch": 1})
    rows = [c for c in plan.collectives if str(c["purpose"]).startswith("tied-embedding")]
    assert len(rows) == 1
    assert rows[0]["comm_bytes"] == 2048 * 512 * 4 and rows[0]["group_size"] == 2
    assert plan.breakdown["tied_grad"] == pytest.approx(rows[0]["exposed_s"])
    assert plan.breakdown["tied_grad"] > 0
