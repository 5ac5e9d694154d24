"""The readers' schema checker (narrowpipe.schema.check, no jsonschema needed) agrees with the
jsonschema package, the reference implementation of JSON Schema 2020-12, on good and damaged
documents; and validate refuses the NaN and Infinity Python's json reads."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import jsonschema
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


def _damaged(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Each leaf and object of ``doc`` in turn replaced by a wrong value, and each key dropped."""
    out: list[dict[str, Any]] = []

    def walk(node: Any, path: list[Any]) -> None:
        keys = list(node) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else []
        for k in list(keys)[:12]:
            for bad in ("abc", None, [1, 2], True, 3.5):
                d = copy.deepcopy(doc)
                target = d
                for p in path:
                    target = target[p]
                target[k] = bad
                out.append(d)
            if isinstance(node, dict):
                d = copy.deepcopy(doc)
                target = d
                for p in path:
                    target = target[p]
                del target[k]
                out.append(d)
            walk(node[k], [*path, k])

    walk(doc, [])
    return out


def test_the_readers_checker_agrees_with_jsonschema(docs) -> None:
    disagreements = []
    n = 0
    for doc in docs:
        fmt = doc["format"]
        reference = jsonschema.Draft202012Validator(schema.schema_for(fmt))
        for d in [doc, *_damaged(doc)]:
            n += 1
            ok = reference.is_valid(d)
            try:
                schema.check(d, fmt)
                mine = True
            except schema.SchemaMismatch:
                mine = False
            if ok != mine:
                disagreements.append((fmt, ok, json.dumps(d)[:200]))
    assert n > 800 and not disagreements, disagreements[:3]


def test_validate_refuses_nan_and_infinity(docs) -> None:
    report = copy.deepcopy(docs[1])
    report["timing"]["price_per_hour"] = math.nan
    with pytest.raises(NarrowpipeError, match="timing/price_per_hour: not a finite number"):
        schema.validate(report)
    report["timing"]["price_per_hour"] = -math.inf
    with pytest.raises(NarrowpipeError, match="not a finite number"):
        schema.validate(report)
