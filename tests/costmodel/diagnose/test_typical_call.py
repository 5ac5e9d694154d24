"""An op's calls are judged long or short by their typical (median) time, not their mean: one
preempted call must not turn twenty 3 us additions into a latency-bound op."""

from __future__ import annotations

import pytest

from narrowpipe.costmodel.diagnose.charge import Unit
from narrowpipe.costmodel.diagnose.run import _typical_call_s


def _unit(durations_us: list[float], calls: int) -> Unit:
    u = Unit("op", "aten::add", "aten::add", calls=calls)
    t = 0.0
    for d in durations_us:
        u.intervals.append((t, t + d))
        u.time_us += d
        t += d + 10
    return u


def test_one_stalled_call_does_not_make_the_typical_call_long():
    u = _unit([3.0] * 19 + [1000.0], calls=20)
    assert u.time_us / u.calls == pytest.approx(52.85)       # the mean: over 20 launches of 1 us
    assert _typical_call_s(u) == pytest.approx(3e-6)


def test_a_call_of_several_kernels_is_their_typical_kernel_times_the_kernels_per_call():
    u = _unit([10.0, 12.0, 11.0, 10.0, 12.0, 11.0], calls=3)    # two kernels per call on a GPU
    assert _typical_call_s(u) == pytest.approx(11e-6 * 2)
