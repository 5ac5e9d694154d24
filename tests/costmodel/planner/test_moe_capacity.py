"""The capacity-factor (token-dropping) MoE form of the ``maxtext-dropped`` runtime, checked against a
hand count of what MaxText@e7292a3a MaxText/layers/linears.py ``MoeBlock.dense_matmul`` computes with
``capacity_factor > 0`` and ``megablox: False``: per sequence of S tokens each of the E experts gets
``C = int(S k / E x cf)`` slots; the dispatch einsum ``BSM,BSEC -> EBCM`` and the combine einsum
``EBCM,BSEC -> BSM`` cost ``2 B S E C M`` each; the expert GEMMs run ``B E C`` rows.

The model is a small Mixtral-style MoE (hidden 256, 8 experts of ffn 512, top-2, seq 128)."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.planner.block_cost import block_cost
from narrowpipe.costmodel.planner.blocks import split_blocks
from narrowpipe.costmodel.planner.moe_capacity import capacity_dispatch
from narrowpipe.costmodel.planner.runtime import RUNTIMES
from narrowpipe.costmodel.planner.runtime_form import apply_runtime_form
from narrowpipe.costmodel.planner.strategy import Parallel
from narrowpipe.ir import Op, OpGroup

H, F, E, K, SEQ, B = 256, 512, 8, 2, 128, 2
CAP = int(SEQ * K / E * 1.25)            # MaxText's expert_capacity_per_batch: 40 slots


@pytest.fixture(scope="module")
def layer():
    g = narrowpipe.transformer(1, H, 4, 1000, ffn=F, kv_heads=4, gated_mlp=True, experts=E, top_k=K, seq=SEQ,
                               name="tiny-moe")
    return split_blocks(g).layers[0]


def _flops(graph) -> int:
    """The matmul FLOPs (the mask and weighting steps are elementwise, checked in the step test)."""
    t = interpret(graph, {"batch": B, "seq": SEQ})
    return sum(c.flops for n, c in t.costs.items() if n.group is OpGroup.CONTRACTION)


def test_forward_adds_the_padding_and_two_einsums_by_hand(layer):
    """Over the dropless form: the expert GEMMs (gate-up 2 x 2F x H, down 2 x H x F per row) run
    B E C rows instead of B k S, plus dispatch and combine at 2 B S E C H each."""
    dropless = _flops(apply_runtime_form(layer.graph, RUNTIMES["maxtext"]))
    dropped = _flops(apply_runtime_form(layer.graph, RUNTIMES["maxtext-dropped"]))
    per_row = 2 * 2 * F * H + 2 * H * F
    padding = B * (E * CAP - K * SEQ) * per_row
    einsums = 2 * (2 * B * SEQ * E * CAP * H)
    assert dropped - dropless == padding + einsums


def test_training_step_differentiates_the_masks_as_jax_does(layer):
    """Backward over the dropless form: the padded expert rows twice (data and weight gradients), the
    dispatch einsum once (its one-hot mask is boolean: only the tokens' gradient), the combine einsum
    twice (the combine mask carries the router probabilities). Full remat recomputes the forward."""
    par = Parallel(dp=1, microbatch=B, global_batch=B, recompute="full")
    dims = {"batch": B, "seq": SEQ}
    a = block_cost(layer, par, get_target("tpu-v5p"), RUNTIMES["maxtext"], dims=dims)
    b = block_cost(layer, par, get_target("tpu-v5p"), RUNTIMES["maxtext-dropped"], dims=dims)
    per_row = 2 * 2 * F * H + 2 * H * F
    padding = B * (E * CAP - K * SEQ) * per_row
    einsum = 2 * B * SEQ * E * CAP * H
    # beside the matmuls, the masks' elementwise steps: at most a few FLOPs per mask element
    slack = 4 * B * SEQ * E * CAP
    assert abs(b.flops["forward"] - a.flops["forward"] - (padding + 2 * einsum)) <= slack
    assert abs(b.flops["recompute"] - a.flops["recompute"] - (padding + 2 * einsum)) <= slack
    assert abs(b.flops["backward"] - a.flops["backward"] - (2 * padding + 3 * einsum)) <= slack
    # full remat saves the layer input only: the masks and buckets are recomputed, not kept
    assert b.saved_bytes == a.saved_bytes


def test_dropless_runtime_and_zero_factor_leave_the_dispatch_alone(layer):
    """``maxtext`` (megablox, MaxText's default) keeps the sorted gather and the grouped GEMMs' top-k."""
    g = apply_runtime_form(layer.graph, RUNTIMES["maxtext"])
    assert not any("einsum" in n.name for n in g.nodes)
    assert any(n.op is Op.GATHER and n.attrs.get("role") == "dispatch" for n in g.nodes)
    assert capacity_dispatch(layer.graph.clone(), 0.0) is False


def test_capacity_buckets_do_not_follow_a_skewed_router_under_expert_parallelism():
    """A hot expert fills its C slots and drops the rest (generate_masks truncates at the capacity),
    so the busiest expert-parallel device runs the same padded rows as under balanced routing; the
    dropless form's busiest device takes the hot expert's extra rows."""
    from narrowpipe.costmodel.planner.assemble import assemble
    from narrowpipe.costmodel.planner.planner import Planner

    g = narrowpipe.transformer(2, H, 4, 1000, ffn=F, kv_heads=4, gated_mlp=True, experts=E, top_k=K, seq=SEQ,
                               name="tiny-moe")
    par = Parallel(dp=8, ep=2, microbatch=2, global_batch=16, zero=1, recompute="full")
    step = {}
    for rt in ("maxtext", "maxtext-dropped"):
        for bal in (None, "hot:0.5"):
            pl = Planner(g, "tpu-v5p", 8, global_batch=16, seq=SEQ, runtime=rt, expert_balance=bal)
            step[rt, bal] = assemble(pl, pl.evaluate(par)).step_time_s
    assert step["maxtext-dropped", "hot:0.5"] == pytest.approx(step["maxtext-dropped", None], rel=1e-9)
    assert step["maxtext", "hot:0.5"] > step["maxtext", None] * 1.02


def test_a_dropped_plan_records_its_capacity_factor_and_round_trips():
    """Plan version 10: the runtime's ``moe_capacity_factor`` is written (1.25, the
    mixtral_8x7b_dropped config's) and validates against the schema on the way back."""
    import json

    from narrowpipe.costmodel.planner.assemble import assemble
    from narrowpipe.costmodel.planner.plan import Plan
    from narrowpipe.costmodel.planner.planner import Planner

    g = narrowpipe.transformer(2, H, 4, 1000, ffn=F, kv_heads=4, gated_mlp=True, experts=E, top_k=K, seq=SEQ,
                               name="tiny-moe")
    pl = Planner(g, "tpu-v5p", 8, global_batch=16, seq=SEQ, runtime="maxtext-dropped")
    plan = assemble(pl, pl.evaluate(Parallel(dp=8, microbatch=2, global_batch=16, zero=3, recompute="full")))
    data = json.loads(plan.to_json())
    assert data["version"] == 10 and data["runtime"]["moe_capacity_factor"] == 1.25
    assert Plan.from_json(plan.to_json()).runtime["moe_capacity_factor"] == 1.25
