"""What a user fixes is checked and, when nothing can satisfy it, refused saying why (QA: ``--fix
tp=0`` crashed with a ZeroDivisionError, ``tp=1,sequence_parallel=on`` planned without sequence
parallelism, ``pp=33`` or ``microbatch=3`` were refused without a reason); the runners-up are listed
in the order of the step times printed beside them."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe import PlanError


@pytest.fixture(scope="module")
def small() -> narrowpipe.Graph:
    return narrowpipe.transformer(4, 1024, 16, 32000, ffn=4096, gated_mlp=True, seq=2048, name="small-4l")


def _plan(g: narrowpipe.Graph, fixed: dict, devices: int = 16, **kw: object) -> narrowpipe.Plan:
    return narrowpipe.plan(g, "dgx-h100", devices, global_batch=64, parallel=fixed, **kw)


@pytest.mark.parametrize("field", ["tp", "pp", "cp", "dp", "microbatch", "interleave", "ep"])
def test_a_size_of_zero_is_refused_before_any_division(small, field):
    with pytest.raises(PlanError, match=f"{field}=0: {field} must be >= 1"):
        _plan(small, {field: 0})


def test_sequence_parallelism_without_tensor_parallelism_is_refused_not_dropped(small):
    with pytest.raises(PlanError, match=r"sequence_parallel=on needs tensor parallelism \(tp > 1\)"):
        _plan(small, {"tp": 1, "sequence_parallel": "on"})
    # on with tp left to the search: only strategies that have it
    p = _plan(small, {"sequence_parallel": "on", "pp": 1}, top=3)
    assert p.parallel.tp > 1 and p.parallel.sequence_parallel
    assert all(r.parallel.tp > 1 and r.parallel.sequence_parallel for r in p.runners_up)


def test_refusals_say_which_fixed_value_cannot_be_met(small):
    """16 devices, 4 layers, global batch 64: by hand, pp=5 and pp=8 are more stages than layers,
    microbatch=3 divides none of 64 / dp for dp in 1..16, tp=3 does not divide 16."""
    with pytest.raises(PlanError, match=r"pp=5 pipeline stages are more than the model's 4 layers"):
        _plan(small, {"pp": 5})
    with pytest.raises(PlanError, match=r"4 layers cannot fill pp=8"):
        _plan(small, {"pp": 8})
    with pytest.raises(PlanError, match=r"tp=3 does not divide the 16 devices"):
        _plan(small, {"tp": 3})
    with pytest.raises(PlanError, match=r"microbatch=3 divides no data-parallel replica's batch \(global batch 64 "
                                        r"/ dp = 64, 32, 16, 8, 4 sequences"):
        _plan(small, {"microbatch": 3})
    with pytest.raises(PlanError, match=r"tp=4 x pp=4 x cp=2|tp=4 x cp=2 x pp=4 = 32 does not divide the 16"):
        _plan(small, {"tp": 4, "pp": 4, "cp": 2}, seq=8192)


def test_runners_up_are_listed_fastest_first_by_the_step_they_print():
    """QA's case: they were picked and ordered by the closed form but print simulated steps, so 3.129 s
    came before 3.074 s."""
    p = narrowpipe.plan("llama-3-8b", "dgx-h100", 64, global_batch=512, seq=4096, top=5)
    fitting = [r.step_time_s for r in p.runners_up if "does not fit" not in r.why]
    assert len(fitting) >= 3 and fitting == sorted(fitting)


def test_a_single_strategy_is_not_said_to_be_ranked(small):
    p = _plan(small, {"tp": 2, "pp": 2, "cp": 1, "microbatch": 1, "recompute": "none", "zero": 1,
                      "interleave": 1, "sequence_parallel": "on"}, top=0)
    assert any("one strategy satisfies the constraints and fits: nothing to rank" in n for n in p.notes)
    assert not any("0 strategies simulated" in n for n in p.notes)


def test_the_search_tries_the_uneven_interleaving_that_fix_accepts():
    """QA: the search tried interleaving only when layers % (pp x v) == 0, though ``--fix interleave``
    takes uneven chunks (balanced by time, Megatron-Core's --pipeline-model-parallel-layout) and they
    were faster (405B, 126 layers on pp16: v1 11.4 s, v7 7.72 s). Here 10 layers on pp=4: v=2 makes
    8 chunks of 1 or 2 layers; the search must find what fixing each interleave finds."""
    g = narrowpipe.transformer(10, 4096, 32, 32000, ffn=14336, kv_heads=8, gated_mlp=True, seq=4096, name="mid-10l")
    fix = {"tp": 1, "pp": 4, "microbatch": 1, "recompute": "none", "zero": 1}
    found = narrowpipe.plan(g, "dgx-h100", 8, global_batch=8, top=0, parallel=fix)
    each = {v: narrowpipe.plan(g, "dgx-h100", 8, global_batch=8, top=0, parallel={**fix, "interleave": v}).step_time_s
            for v in (1, 2)}
    assert each[2] < each[1]
    assert found.parallel.interleave == 2 and found.step_time_s == pytest.approx(each[2], rel=1e-12)


def test_a_uniform_runtime_interleaves_only_equal_chunks():
    """Megatron-LM v2 asserts num_layers % (pp x v) == 0: its runtime is searched that way still."""
    from narrowpipe.costmodel.planner.planner import Planner
    from narrowpipe.costmodel.planner.search import candidates
    g = narrowpipe.transformer(12, 256, 8, 512, seq=512, name="tiny-12l")
    core = {(p.pp, p.interleave) for p in candidates(Planner(g, "dgx-h100", 8, global_batch=64), {"tp": 1})}
    old = {(p.pp, p.interleave) for p in candidates(Planner(g, "dgx-h100", 8, global_batch=64,
                                                           runtime="megatron-lm-2021"), {"tp": 1})}
    assert (4, 2) in core and (2, 4) in core                  # 12 layers in 8 chunks: uneven
    assert all(12 % (pp * v) == 0 for pp, v in old if v > 1) and (2, 3) in old and (4, 3) in old


def test_a_parallel_object_is_a_whole_strategy_and_the_refusal_says_so(small):
    """QA: ``Parallel(tp=2)`` on 16 devices was refused as 'no strategy ... satisfies {tp: 2, pp: 1,
    dp: 1, ...}': its defaults (pp = dp = cp = 1) are fixed too, 2 x 1 x 1 x 1 = 2 devices, not 16."""
    with pytest.raises(PlanError, match=r"parallel=Parallel\(tp=2\) uses tp x pp x dp x cp = 2 x 1 x 1 x 1 = 2 "
                                        r"devices, not the 16 planned for: a Parallel object fixes every field.*"
                                        r"pass parallel=\{'tp': 2\}"):
        _plan(small, narrowpipe.Parallel(tp=2))   # type: ignore[arg-type]
    # 16 devices but microbatch=5 divides no replica's 64 / 16 = 4 sequences: the hint comes with the reason
    with pytest.raises(PlanError, match=r"microbatch=5.*a Parallel object fixes every field"):
        _plan(small, narrowpipe.Parallel(dp=16, microbatch=5, global_batch=80))   # type: ignore[arg-type]
    assert _plan(small, {"tp": 2}).parallel.tp == 2    # the dict form fixes tp alone


@pytest.mark.parametrize("value", ["2", 2.0, True])
def test_a_size_must_be_an_integer_in_the_dict_form_as_in_parallel(small, value):
    with pytest.raises(PlanError, match=f"plan: tp must be an integer, got {value!r}"):
        _plan(small, {"tp": value})
    with pytest.raises(PlanError, match="parallel: tp must be a positive integer"):
        narrowpipe.Parallel(tp=value)   # type: ignore[arg-type]
