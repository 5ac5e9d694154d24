"""A damaged report or plan file is refused with the reader's error naming the field (checked
against the shipped schema), never a raw ValueError/TypeError, a silently filled default or a
version that was never written; NaN and Infinity never reach a file we write."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest

import narrowpipe
from narrowpipe import Plan, PlanError
from narrowpipe.costmodel.report import Report, ReportError
from narrowpipe.errors import NarrowpipeError
from narrowpipe.jsonout import dumps


@pytest.fixture(scope="module")
def plan_doc() -> dict[str, Any]:
    g = narrowpipe.transformer(2, 256, 4, 512, seq=128, name="tiny")
    return json.loads(narrowpipe.plan(g, "dgx-h100", 8, global_batch=8,
                                      parallel={"tp": 2, "pp": 1, "microbatch": 1, "zero": 0}).to_json())


@pytest.fixture(scope="module")
def report_doc() -> dict[str, Any]:
    g = narrowpipe.transformer(layers=1, hidden=64, heads=2, vocab=128, seq=16)
    return json.loads(narrowpipe.analyze(g, "h100").to_json())


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    *parents, last = path.split("/")
    node: Any = out
    for key in parents:
        node = node[int(key) if key.isdigit() else key]
    if value is _DELETE:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return out


_DELETE = object()


@pytest.mark.parametrize("path, value, why", [
    ("devices", "abc", "devices: 'abc' is not of type integer"),
    ("parallel", None, "parallel: None is not of type object"),
    ("step_time_s", None, "step_time_s: None is not of type number"),
    ("breakdown", [1, 2], "breakdown: \\[1, 2\\] is not of type object"),
    ("parallel/tp", _DELETE, "parallel: lacks the field 'tp'"),       # was filled in as tp=1
    ("version", 0, "plan version 0 is not one narrowpipe wrote"),
    ("version", -3, "plan version -3 is not one narrowpipe wrote"),
    ("version", True, "plan version True is not a version number"),
    ("version", "6", "plan version '6' is not a version number"),
    ("version", _DELETE, "plan JSON lacks the field 'version'"),      # was "version None is newer"
])
def test_a_damaged_plan_field_is_a_plan_error_naming_it(plan_doc, path, value, why) -> None:
    with pytest.raises(PlanError, match=why):
        Plan.from_json(json.dumps(_set(plan_doc, path, value)))


def test_a_plan_whose_strategy_does_not_cover_its_devices_is_refused(plan_doc) -> None:
    """tp x pp x dp x cp must be the plan's devices (2 x 1 x 4 x 1 = 8 here, by hand)."""
    assert plan_doc["parallel"]["tp"] * plan_doc["parallel"]["dp"] * plan_doc["parallel"]["pp"] == 8
    with pytest.raises(PlanError, match="uses tp x pp x dp x cp = 4 devices, but the plan says devices = 8"):
        Plan.from_json(json.dumps(_set(plan_doc, "parallel/tp", 1)))


@pytest.mark.parametrize("reader, error", [(Plan, PlanError), (Report, ReportError)])
def test_text_that_is_not_json_is_the_readers_error(reader, error) -> None:
    for text in (b"\xff\xfe{", b"\x80abc", "{\"version\": NaN}", "{\"x\": Infinity}"):
        with pytest.raises(error, match="does not parse"):
            reader.from_json(text)
    with pytest.raises(error, match="takes JSON text, got int"):
        reader.from_json(3)


@pytest.mark.parametrize("path, value, why", [
    ("totals/flops", "abc", "totals/flops: 'abc' is not of type integer"),
    ("timing/time_s", "fast", "timing/time_s: 'fast' is not of type number"),
    ("ops/0/flops", None, "ops/0/flops: None is not of type integer"),
    ("totals/flops", -5, "totals/flops: -5 is less than the minimum of 0"),   # counts are never negative
    ("timing/time_s", -1e-3, "timing/time_s: -0.001 is less than the minimum of 0"),
    ("timing/memory_required", -1.0, "timing/memory_required: -1.0 is less than the minimum of 0"),
    ("version", 0, "report version 0 is not one narrowpipe wrote"),
    ("version", -3, "report version -3 is not one narrowpipe wrote"),
    ("version", _DELETE, "report JSON lacks the field 'version'"),
])
def test_a_damaged_report_field_is_a_report_error_naming_it(report_doc, path, value, why) -> None:
    with pytest.raises(ReportError, match=why):
        Report.from_json(json.dumps(_set(report_doc, path, value)))


def test_an_older_report_may_lack_only_what_later_versions_added(report_doc) -> None:
    """Version 4 wrote no timeline pass fields (added in 5) nor timing.hfu (7); version 6 must have
    the pass fields."""
    old = copy.deepcopy(report_doc)
    del old["timing"]["hfu"]
    for k in old["timeline"]:
        for f in ("passes", "every_s", "pass_s", "pass_transfer_s", "reread_s", "shards", "executed_flops"):
            del k[f]
    assert Report.from_json(json.dumps({**old, "version": 4})).flops == report_doc["totals"]["flops"]
    with pytest.raises(ReportError, match="timeline/0: lacks the field 'passes'"):
        Report.from_json(json.dumps({**old, "version": 6}))


def test_no_nan_or_infinity_reaches_a_written_document() -> None:
    with pytest.raises(NarrowpipeError, match="report: timing/price_per_hour is not a finite number"):
        dumps({"timing": {"price_per_hour": math.nan}}, what="report")
    with pytest.raises(NarrowpipeError, match="ops/1: is not a finite number|ops/1 is not a finite number"):
        dumps({"ops": [1.0, math.inf]})
    assert dumps({"a": [1.5, None]}) == '{"a": [1.5, null]}'
