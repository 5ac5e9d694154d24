"""Interleaved timing: one turn of each workload per round in a rotated order, samples on two clocks."""

from __future__ import annotations

import mmap
import sys
import time

import pytest

from narrowpipe.calibration.interleave import Samples, interleaved_samples
from narrowpipe.calibration.validate import Case


def test_rounds_rotate_the_order_and_every_call_is_a_sample():
    calls: list[str] = []
    fns = [lambda k=k: calls.append(k) for k in "abc"]
    out = interleaved_samples(fns, warmup=1, rounds=3, min_seconds=0.0)
    assert calls[:3] == ["a", "b", "c"]                         # warm-up
    assert calls[3:] == list("abc" "bca" "cab")                 # each round starts one later
    assert [len(s.wall) for s in out] == [3, 3, 3]
    assert all(s.cpu is not None and len(s.cpu) == 3 for s in out)


def test_a_short_call_is_repeated_within_its_turn():
    calls: list[str] = []

    def slow() -> None:
        calls.append("slow")
        time.sleep(0.02)

    out = interleaved_samples([slow, lambda: calls.append("fast")], warmup=1, rounds=2, min_seconds=0.01)
    assert len(out[0].wall) == 2                     # 20 ms >= 10 ms: once per turn
    assert len(out[1].wall) > 2                      # microseconds: repeated until its turn lasts 10 ms
    assert calls[1] == "fast" and calls[2] == "slow"


def test_sleeping_counts_on_the_wall_clock_not_on_the_threads_cpu_clock():
    # a descheduled thread is what another process's burst looks like to the timed thread
    out = interleaved_samples([lambda: time.sleep(0.02)], warmup=1, rounds=3, min_seconds=0.0)
    assert out[0].wall_median >= 0.02
    assert out[0].cpu_median is not None and out[0].cpu_median < 0.01


def test_without_the_thread_clock_there_are_no_cpu_samples():
    out = interleaved_samples([lambda: None], warmup=1, rounds=2, min_seconds=0.0, thread_clock=False)
    assert out[0].cpu is None and out[0].cpu_median is None and out[0].cpu_spread is None


def test_medians_spreads_and_the_cpu_error():
    s = Samples([1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 1.0, 1.0, 1.0, 1.0])
    assert s.wall_median == 3.0 and s.cpu_median == 1.0
    assert s.wall_spread == pytest.approx((4.0 - 2.0) / 3.0) and s.cpu_spread == 0.0
    c = Case("model", "m", 3.0, 1.2, s.wall_spread, 1.0, 0.0)
    assert c.error == pytest.approx(-0.6) and c.cpu_error == pytest.approx(0.2)
    assert c.to_dict()["cpu_error"] == pytest.approx(0.2)
    assert Case("model", "m", 3.0, 1.2).cpu_error is None


def test_calibration_samples_do_not_count_time_the_thread_was_descheduled(one_thread):
    # at one torch thread a sample is min(wall, thread CPU): a sleep (what another process's burst
    # looks like to this thread) costs wall time only
    from narrowpipe.calibration.timer import time_samples
    samples = time_samples(lambda: time.sleep(0.01), warmup=0, repeats=3, min_seconds=0.0)
    assert len(samples) == 3 and max(samples) < 0.005


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread fault counts are Linux's")
def test_each_call_counts_the_pages_it_faults_in():
    def fresh_40_mib() -> None:          # a new mapping, touched page by page, then unmapped
        with mmap.mmap(-1, 40 * 2**20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as m:
            for i in range(0, len(m), mmap.PAGESIZE):
                m[i] = 1

    (s,) = interleaved_samples([fresh_40_mib], warmup=1, rounds=3, min_seconds=0.0)
    assert len(s.faults) == 3
    assert all(abs(f - 40 * 2**20 // mmap.PAGESIZE) < 200 for f in s.faults)
