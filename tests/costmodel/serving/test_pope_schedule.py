"""The ablation of the released schedule (benchmarks/pope_schedule.py): it switches the model's own
parts, so its last column is the model; what the parts say of the seven rows and the serial check."""

import pytest
from benchmark_module import load_benchmark  # tests/benchmark_module.py

validate = load_benchmark("serving_validate")
schedule = load_benchmark("pope_schedule")


@pytest.fixture(scope="module")
def table():
    return schedule.attribution(validate.POPE, validate.PALM_540B_SERVED, validate.CONTEXT)


def test_all_four_parts_are_the_model_and_no_part_is_the_first_layout(table):
    steps = validate.pope_steps()
    for e, (r, s) in zip(table[:-1], steps):
        assert e["row"] == r.label and e["all"] == pytest.approx(s.time_s * 1e3, rel=1e-12)
    serial = table[-1]
    assert serial["all"] == pytest.approx(validate.serial_check(validate.PALM_540B_SERVED, validate.CONTEXT)[1]["ratio"]
                                          - 1, rel=1e-12)


def test_the_released_schedule_puts_every_row_inside_the_bar_and_the_serial_check_past_it(table):
    rows, serial = table[:-1], table[-1]
    assert len(rows) == 7
    assert all(abs(e["all"] / e["published_ms"] - 1) < 0.2 for e in rows)
    bf16 = rows[1]
    assert (bf16["row"], bf16["batch"]) == ("PaLM 540B bf16", 64)
    assert bf16["none"] / 36.9 - 1 < -0.2 < bf16["all"] / 36.9 - 1
    # section 4.3's +14%: the one-axis collectives and the looped x collectives each take it further off
    assert serial["all"] > serial["published"] + 0.05
    assert serial["split"] > serial["none"] and serial["looped"] > serial["none"]
    # the looped x collectives alone make every row faster than the first layout
    assert all(e["looped"] <= e["none"] + 1e-9 for e in rows)
