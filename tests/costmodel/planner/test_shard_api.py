"""``narrowpipe.shard`` refuses what ``narrowpipe.plan`` refuses, and resolves dims as ``analyze`` does:
a strategy Megatron cannot run (heads % tp != 0) is never turned silently into an unsharded or
half-sharded program, and a misspelt or non-integer dim is named instead of ignored or crashing."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.errors import NarrowpipeError, PlanError

D = {"batch": 1, "seq": 32}


def _model() -> narrowpipe.Graph:   # 16 query heads, 4 KV heads (grouped-query attention)
    return narrowpipe.transformer(layers=1, hidden=256, heads=16, vocab=512, ffn=512, kv_heads=4, seq=64)


@pytest.mark.parametrize("tp, why", [(3, "16 attention heads do not split over tp=3"),
                                     (5, "16 attention heads do not split over tp=5"),
                                     (8, "4 KV heads \\(query groups\\) do not split over tp=8")])
def test_a_tp_that_does_not_divide_the_heads_is_refused(tp: int, why: str) -> None:
    with pytest.raises(PlanError, match=why):
        narrowpipe.shard(_model(), narrowpipe.Parallel(tp=tp), dims=D)


def test_plan_and_shard_give_the_same_reason() -> None:
    with pytest.raises(PlanError, match="16 attention heads do not split over tp=3"):
        narrowpipe.plan(_model(), "h100", 3, global_batch=3, parallel={"tp": 3})


def test_a_tp_that_divides_both_head_counts_shards_the_contractions() -> None:
    """Megatron's layout halves every matmul of the layer and the lm head (hand count: all the
    contraction FLOPs are in tp-split weights, none replicated)."""
    g = _model()
    whole = narrowpipe.analyze(g, dims=D).flops_by_group["contraction"]
    local = narrowpipe.analyze(narrowpipe.shard(g, narrowpipe.Parallel(tp=4), dims=D)).flops_by_group["contraction"]
    assert local * 4 == whole


@pytest.mark.parametrize("dims, why", [({"batch": 1, "seqq": 32}, "unknown dim\\(s\\) seqq"),
                                       ({"batch": 1, "seq": "4k"}, "dim seq must be an integer"),
                                       ({"batch": 0, "seq": 32}, "dim batch must be >= 1")])
def test_dims_are_resolved_as_analyze_resolves_them(dims: dict[str, object], why: str) -> None:
    with pytest.raises(NarrowpipeError, match=why):
        narrowpipe.shard(_model(), narrowpipe.Parallel(tp=2), dims=dims)  # type: ignore[arg-type]


def test_the_bound_seq_reaches_the_sharded_program() -> None:
    """seq=32 of a default 64: the token ids arrive as (batch, seq) = (1, 32)."""
    s = narrowpipe.shard(_model(), narrowpipe.Parallel(tp=2), dims=D)
    assert [tuple(v.shape) for v in s.inputs if v.name == "input_ids"] == [(1, 32)]
