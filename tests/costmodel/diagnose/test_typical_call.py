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


#: QA's calibrated host (2-core EPYC VM): best add bandwidth and the measured add-bandwidth curve
#: (transfer bytes, fraction of the best), as in test_diagnose_reach_and_labels.
_HOST_BW = 133338760559.03781
_HOST_CURVE = ((73728.0, 0.8011), (196608.0, 1.0), (589824.0, 0.9284), (2359296.0, 0.5159), (6291456.0, 0.2148),
               (18874368.0, 0.1598), (50331648.0, 0.113), (201326592.0, 0.0935), (603979776.0, 0.0539))


def _stream_trace(tmp_path, durations_us: list[float]):
    import json
    n = 2 ** 20
    events, ts = [], 0.0
    for d in durations_us:
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": ts, "dur": d, "pid": 1, "tid": 1,
                       "args": {"Input Dims": [[n], [n], []], "Input type": ["float", "float", "Scalar"]}})
        ts += d + 5
    p = tmp_path / "stream.json"
    p.write_text(json.dumps({"traceEvents": events}))
    return p


@pytest.mark.parametrize("stall_us", [700.0, 300000.0])
def test_one_preempted_call_does_not_flip_a_streaming_add_to_latency_bound(tmp_path, stall_us):
    """Twenty adds of 1M fp32 (QA's stream_clean / stream_one_preempted): 3 x 4 MiB = 12,582,912 B per
    call. The curve, log-linear between 6,291,456 B (0.2148) and 18,874,368 B (0.1598), gives
    0.2148 - ln 2 / ln 3 x 0.0550 = 0.1801 of 133.3 GB/s = 24.0 GB/s reachable: 524 us per call
    against the 700 us median, 74.9% whether or not one call stalls 300 ms. The mean call of the
    stalled run (15.7 ms) read 3.3%: below the 5% threshold, latency-bound. Its time share stays real."""
    import math
    from dataclasses import replace

    from narrowpipe.backends import get_target
    from narrowpipe.costmodel.diagnose import diagnose

    base = get_target("epyc-9755")
    host = replace(base, memory_bandwidth=_HOST_BW, memory_efficiency=_HOST_CURVE[-1][1],
                   bandwidth_curve=_HOST_CURVE, sources={**base.sources, "bandwidth_curve": "QA host"})
    durs = [700.0] * 7 + [stall_us] + [700.0] * 12
    d = diagnose(_stream_trace(tmp_path, durs), host)
    per_call = 3 * 4 * 2 ** 20
    eff = 0.2148 + math.log(per_call / 6291456.0) / math.log(3.0) * (0.1598 - 0.2148)
    add = d.ops[0]
    assert add.memory_reach_utilization == pytest.approx(per_call / (_HOST_BW * eff) / 700e-6, rel=1e-6)   # 74.9%
    assert add.memory_utilization == pytest.approx(per_call / _HOST_BW / 700e-6, rel=1e-6)
    assert add.bound == "memory" and d.label == "memory"
    assert add.time_s == pytest.approx(sum(durs) * 1e-6)
    assert d.time_by_bound["memory"] == pytest.approx(sum(durs) * 1e-6)
