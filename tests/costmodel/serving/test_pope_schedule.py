"""The released implementation's schedule as a reading of the Pope rows (benchmarks/pope_schedule.py):
the looped collective matmuls by hand, the one-axis collectives from the torus figures, and what the
reading says of the seven rows and the serial check."""

import pytest
from benchmark_module import load_benchmark  # tests/benchmark_module.py

from narrowpipe.backends import get_target
from narrowpipe.ir import DType

validate = load_benchmark("serving_validate")
schedule = load_benchmark("pope_schedule")

LINK = 221e9 / 6               # the 4x4x4 system's achievable ICI rate per link, one way
HOP = 1.45e-6


@pytest.fixture(scope="module")
def steps():
    return validate.pope_steps()


@pytest.fixture(scope="module")
def table(steps):
    return schedule.attribution(steps, validate.PALM_540B_SERVED, validate.CONTEXT)


def test_the_latency_form_sends_the_last_partial_sums_after_the_last_chunk():
    # x = 4: two chunks; the second runs under the first permute, the last permute is exposed
    assert schedule.looped_reduce_scatter(10.0, 4.0, 2, True) == 10 + 10 + 4
    assert schedule.looped_reduce_scatter(10.0, 14.0, 2, True) == 10 + 14 + 14
    # one-way form, x = 4: four chunks, each permute under the next chunk, none after the last
    assert schedule.looped_reduce_scatter(10.0, 4.0, 4, False) == 40
    # the gather's latency form sends the neighbour's shard before the first chunk
    assert schedule.looped_all_gather(10.0, 4.0, 2, True) == 4 + 10 + 10
    assert schedule.looped_all_gather(10.0, 4.0, 4, False) == 40


def test_the_yz_gather_becomes_one_gather_per_axis(steps):
    r, s = steps[1]                                   # 540B bf16, batch 64, 4x4x4
    _, layer, _ = schedule.reading(r.served, s, r.system, r.batch, r.seq, DType.BF16, ("split",))
    lo = get_target("tpu-v4").launch_overhead
    e_x = 18432 / 4 * 2                               # bytes of one row of E/x in bf16
    # y: 16 rows (B/z) grow from E/xy to E/x; z: 64 rows from 16; each two hops both ways on its axis
    ag_y = 2 * HOP + 3 / 4 * 16 * e_x / (2 * LINK) + lo
    ag_z = 2 * HOP + 3 / 4 * 64 * e_x / (2 * LINK) + lo
    old = s.per_layer["all-gather yz (B x E/x)"]
    assert layer["all-gather y, z (was yz)"] == pytest.approx(ag_y + ag_z - old, rel=1e-6)


def test_the_parts_touch_different_terms_so_they_add_up(table, steps):
    for e in table[:-1]:
        assert e["all"] - e["model_ms"] == pytest.approx(
            sum(e[p] - e["model_ms"] for p in schedule.PARTS), rel=1e-6, abs=1e-9)


def test_the_reading_puts_every_row_inside_the_bar_but_misses_the_serial_check(table):
    rows, serial = table[:-1], table[-1]
    assert len(rows) == 7
    assert all(abs(e["all"] / e["published_ms"] - 1) < 0.2 for e in rows)
    bf16 = rows[1]
    assert bf16["row"] == "PaLM 540B bf16" and bf16["batch"] == 64
    assert bf16["model_ms"] / 36.9 - 1 < -0.2 < bf16["all"] / 36.9 - 1
    # section 4.3's +14%: the one-axis collectives take the serial penalty well past it
    assert serial["all"] > serial["published"] + 0.05 and serial["split"] > serial["published"] + 0.05
    # and the looped x collectives alone make every row faster than the model
    assert all(e["looped"] <= e["model_ms"] + 1e-9 for e in rows)
