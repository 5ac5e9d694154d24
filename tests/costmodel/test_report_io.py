"""A report reads back only when it is one this narrowpipe can read, says what is wrong otherwise,
and prints as one notebook line (the dataclass default printed every op row and timeline entry)."""

from __future__ import annotations

import json

import pytest

import narrowpipe
from narrowpipe.costmodel.report import REPORT_VERSION, Report, ReportError
from narrowpipe.errors import NarrowpipeError


@pytest.fixture(scope="module")
def timed() -> Report:
    return narrowpipe.analyze(narrowpipe.transformer(layers=2, hidden=256, heads=4, vocab=512, seq=64), "h100")


def test_from_json_round_trips(timed: Report) -> None:
    back = Report.from_json(timed.to_json())
    assert (back.flops, back.params, back.time_s, len(back.ops)) == (timed.flops, timed.params, timed.time_s,
                                                                     len(timed.ops))


@pytest.mark.parametrize("change, why", [
    ({"version": REPORT_VERSION + 92}, f"report version {REPORT_VERSION + 92} is newer than this narrowpipe reads"),
    ({"version": "7"}, "report version '7' is not a version number"),
    ({"format": "narrowpipe.plan"}, "not a narrowpipe report"),
    ({"totals": None}, "totals: None is not of type object"),
])
def test_a_wrong_report_is_refused_naming_why(timed: Report, change: dict[str, object], why: str) -> None:
    with pytest.raises(ReportError, match=why):
        Report.from_dict({**timed.to_dict(), **change})


def test_a_missing_field_is_named(timed: Report) -> None:
    data = timed.to_dict()
    del data["totals"]
    with pytest.raises(ReportError, match="lacks the field 'totals'"):
        Report.from_dict(data)


def test_text_given_to_from_dict_points_at_from_json(timed: Report) -> None:
    with pytest.raises(ReportError, match="use Report.from_json"):
        Report.from_dict(timed.to_json())  # type: ignore[arg-type]
    with pytest.raises(ReportError, match="does not parse"):
        Report.from_json("{not json")
    with pytest.raises(ReportError, match="not an object"):
        Report.from_json("[1]")


def test_report_errors_are_narrowpipe_errors_and_still_value_errors() -> None:
    assert issubclass(ReportError, NarrowpipeError) and issubclass(ReportError, ValueError)


def test_repr_is_one_compact_line(timed: Report) -> None:
    text = repr(timed)
    assert "\n" not in text and len(text) < 300
    assert text.startswith("Report('transformer' on h100-sxm, ")
    assert f"{len(timed.ops)} op rows, {len(timed.timeline)} timeline entries" in text
    h, f, v, layers = 256, 1024, 512, 2         # embedding + lm head, 4 h x h projections, up/down, 2 norms a layer
    assert timed.params == 2 * v * h + layers * (4 * h * h + 2 * h * f + 2 * h) + h == 1_836_288
    assert "1.84 M params" in text
    assert "\n" not in repr(timed.timing) and repr(timed.timing).startswith("Timing(h100-sxm: ")


def test_a_comparison_prints_one_line_per_target() -> None:
    c = narrowpipe.compare(narrowpipe.transformer(layers=1, hidden=128, heads=4, vocab=256, seq=32), ["h100", "a100"])
    lines = repr(c).splitlines()
    assert len(lines) == 4 and all(len(line) < 300 for line in lines)
    assert json.loads(c.to_json())["graph"] == "transformer"


def test_an_op_row_keeps_its_field_by_field_repr(timed: Report) -> None:
    row = timed.ops[0]
    assert repr(row).startswith("OpRow(") and f"flops={row.flops}" in repr(row)
