"""The strategy value and the pipeline schedule arithmetic, against hand computation and the
formulas of Narayanan et al. (SC'21, section 2.2)."""

from __future__ import annotations

import pytest

from narrowpipe.costmodel.planner.pipeline import Stage, assign_stages, bubble_fraction, pipeline_time
from narrowpipe.costmodel.planner.strategy import Parallel
from narrowpipe.errors import PlanError


def test_megatron_rank_order_gives_each_axis_its_stride():
    p = Parallel(tp=8, cp=2, dp=4, pp=2, ep=2, global_batch=8)
    assert p.devices == 128
    assert [p.axis(a) for a in ("tp", "cp", "dp", "pp", "ep", "dp_cp")] == \
        [(8, 1), (2, 8), (4, 16), (2, 64), (2, 16), (8, 8)]


@pytest.mark.parametrize("fields,message", [
    ({"tp": 0}, "tp must be a positive integer"),
    ({"recompute": "some"}, "recompute must be one of"),
    ({"zero": 4}, "zero must be 0, 1, 2 or 3"),
    ({"interleave": 2}, "needs pipeline stages"),
    ({"dp": 3, "global_batch": 8}, "not a multiple of dp x microbatch"),
    ({"pp": 4, "interleave": 2, "global_batch": 6}, "multiple of pp=4"),
    ({"dp": 2, "ep": 4, "global_batch": 2}, "ep=4 must divide dp=2"),
])
def test_invalid_strategies_say_which_field_and_why(fields, message):
    with pytest.raises(PlanError, match=message):
        Parallel(**fields)


def test_strategy_round_trips_through_a_dict_and_rejects_unknown_fields():
    p = Parallel(tp=4, pp=2, dp=2, interleave=2, global_batch=16, sequence_parallel=True, recompute="selective")
    assert Parallel.from_dict(p.to_dict()) == p
    assert p.microbatches == 8 and p.schedule == "interleaved-1f1b"
    assert p.describe() == "tp4 pp2 (v2) dp2 mb1 x8 sp recompute=selective"
    with pytest.raises(PlanError, match="unknown field"):
        Parallel.from_dict({"tpp": 2})


def test_bubble_is_p_minus_one_over_v_m():
    assert bubble_fraction(8, 96, 2) == pytest.approx(7 / 192)
    assert bubble_fraction(1, 4) == 0.0


@pytest.mark.parametrize("p,m,v", [(4, 8, 1), (8, 96, 2), (8, 16, 4)])
def test_equal_stages_take_m_plus_p_minus_one_over_v_stage_times(p, m, v):
    t = 0.5
    stages = [Stage(i, (i,), 0.2, 0.3) for i in range(p)]
    total, bubble = pipeline_time(stages, m, v)
    assert total == pytest.approx((m + (p - 1) / v) * t)
    assert bubble / (total - bubble) == pytest.approx(bubble_fraction(p, m, v))


def test_a_slower_stage_paces_the_steady_state():
    stages = [Stage(0, (0,), 1.0, 1.0), Stage(1, (1,), 2.0, 2.0)]
    total, bubble = pipeline_time(stages, 10)
    assert total == pytest.approx(10 * 4.0 + 2.0) and bubble == pytest.approx(2.0)


def test_stage_assignment_is_contiguous_and_minimizes_the_slowest_chunk():
    costs = [1.0] * 10 + [5.0]                   # a heavy last layer (the head)
    parts = assign_stages(costs, 3)
    assert [i for part in parts for i in part] == list(range(11))
    assert parts == [list(range(5)), list(range(5, 10)), [10]]      # 5 | 5 | 5: the head gets a chunk
    assert assign_stages([1.0] * 8, 2, 2) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    with pytest.raises(PlanError, match="cannot fill"):
        assign_stages([1.0] * 3, 2, 2)
