"""Context parallelism with tensor and sequence parallelism is sharded as Megatron-LM runs it: each
context-parallel rank computes its own tokens' weight gradients, loss and embedding lookups; only
keys and values cross the context-parallel group (Megatron-Core's ``cp_comm_type`` all-gather or
ring of K/V in attention), and the partial weight gradients join the ``dp x cp`` gradient
reduction. The reference is the unsharded step's own FLOP count: every contraction of the step
runs on exactly one device of the ``tp x cp`` group, so the local FLOPs times ``tp x cp`` are the
unsharded FLOPs, with nothing recomputed on gathered tokens."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.costmodel.planner import Parallel, shard
from narrowpipe.costmodel.planner.dp_comm import dp_collectives
from narrowpipe.costmodel.planner.planner import Planner
from narrowpipe.costmodel.training import build_training_graph

S, V = 1024, 2048
DIMS = {"batch": 1, "seq": S}


def _llama(vocab: int = V) -> narrowpipe.Graph:
    return narrowpipe.transformer(2, 256, 8, vocab, seq=S, kv_heads=8, gated_mlp=True)


@pytest.fixture(scope="module")
def step() -> narrowpipe.Graph:
    return build_training_graph(_llama(), recompute="none", loss="cross_entropy")


def _purposes(g: narrowpipe.Graph) -> set[str]:
    return {str(n.attrs["purpose"]) for n in g.nodes if n.attrs.get("purpose")}


@pytest.mark.parametrize("tp,cp,sp", [(1, 2, False), (2, 2, False), (2, 2, True), (2, 4, True)])
def test_every_contraction_runs_once_over_the_tp_x_cp_group(step, tp, cp, sp):
    """QA found tp2 cp2 sp at 1.212 and tp2 cp4 sp at 1.630 times the unsharded contraction FLOPs
    (every weight gradient on the whole cp-gathered sequence), cp2 alone at 1.059 (the loss and the
    backward seeds whole over cp)."""
    full = narrowpipe.analyze(step, dims=DIMS).flops_by_group["contraction"]
    local = shard(step, Parallel(tp=tp, cp=cp, sequence_parallel=sp), dims=DIMS)
    assert narrowpipe.analyze(local).flops_by_group["contraction"] * tp * cp == full
    # nothing but keys and values is gathered over cp; the key/value gradients come back reduce-scattered
    assert {p for p in _purposes(local) if "cp" in p or "context" in p} == {
        "context-parallel key/value exchange", "context-parallel gradient reduce-scatter"}


def test_weight_gradients_under_cp_and_sp_gather_only_the_tp_part_of_the_tokens(step):
    local = shard(step, Parallel(tp=2, cp=2, sequence_parallel=True), dims=DIMS)
    regathers = [n for n in local.nodes if n.attrs.get("purpose") == "sequence-parallel all-gather"
                 and n.attrs["phase"] == "backward" and n.name.endswith("grad_rhs_all_gather_tp")]
    assert regathers
    # the gathered input holds this cp rank's S / cp tokens, not the sequence
    assert {tuple(n.outputs[0].shape)[1] for n in regathers} == {S // 2}
    # the weight gradients are partial over cp only: summed by the dp x cp gradient reduction
    assert set(local.meta["deferred_reductions"]) == {"cp"}


def test_the_word_embedding_is_split_over_tp_when_larger_than_the_tokens_each_device_looks_up():
    """Seq 1024 is larger than a 512-row vocabulary, but each of cp=4 ranks looks up 256 tokens:
    the table is split over tp (Megatron's vocab-parallel embedding), as it is without cp at a
    shorter sequence."""
    step = build_training_graph(_llama(512), recompute="none", loss="cross_entropy")
    w = shard(step, Parallel(tp=2, cp=4, sequence_parallel=True), dims=DIMS).meta["weight_sharding"]
    assert w["model.embed_tokens.weight"] == "[tp, -]"
    w1 = shard(step, Parallel(tp=2, cp=1, sequence_parallel=True), dims=DIMS).meta["weight_sharding"]
    assert w1["model.embed_tokens.weight"] == "[-, -]"        # 1024 tokens looked up per device


def test_the_gradient_reduction_over_dp_x_cp_carries_the_gradients_once():
    """QA's 8B case: 14.05 GB reduce-scattered at dp8 and 18.26 GB at dp4 x cp2, the same group of 8.
    By hand: the reduction moves each parameter's gradient once, in the runtime's fp32."""
    g = _llama()
    planner = Planner(g, "dgx-h100", 8, global_batch=8, seq=S)
    sizes = []
    for dp, cp in ((8, 1), (4, 2), (2, 4)):
        p = Parallel(tp=1, dp=dp, cp=cp, global_batch=8, microbatch=1)
        ev = planner.evaluate(p)
        d = planner.layout(p).devices[0]
        ops = dp_collectives(d, p, planner.runtime)
        sizes.append([n for _, n, _, _ in ops])
        assert ops[0][1] == g.param_count() * 4
        assert ev.fits
    assert sizes[0] == sizes[1] == sizes[2]
