"""validate and the readers' check refuse the NaN and Infinity Python's json reads (JSON has none;
jsonschema counts them as numbers)."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest

import narrowpipe
from narrowpipe import schema
from narrowpipe.errors import NarrowpipeError


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    g = narrowpipe.transformer(2, 256, 4, 512, seq=128, name="tiny")
    plan = narrowpipe.plan(g, "dgx-h100", 8, global_batch=8, parallel={"tp": 2, "pp": 1, "microbatch": 1, "zero": 0})
    report = narrowpipe.analyze(g, "h100")
    serving = narrowpipe.serve(g, "h100", mode="decode", batch=2, context=64)
    return [json.loads(x.to_json()) for x in (plan, report, serving)]


def test_validate_refuses_nan_and_infinity(docs) -> None:
    report = copy.deepcopy(docs[1])
    report["timing"]["price_per_hour"] = math.nan
    with pytest.raises(NarrowpipeError, match="timing/price_per_hour: not a finite number"):
        schema.validate(report)
    report["timing"]["price_per_hour"] = -math.inf
    with pytest.raises(NarrowpipeError, match="not a finite number"):
        schema.validate(report)


def test_the_readers_check_refuses_nan_by_its_path(docs) -> None:
    report = copy.deepcopy(docs[1])
    report["ops"][0]["flops"] = math.inf
    with pytest.raises(schema.SchemaMismatch, match="ops/0/flops: is not a finite number"):
        schema.check(report, "narrowpipe.report")
