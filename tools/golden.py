"""Golden outputs that pin narrowpipe's numbers across refactors.

``python tools/golden.py --write`` records, for every bundled example on every catalog target,
what ``compare --json`` reports (totals, the timing summary, and every op's time, bound and kernel),
and ``diagnose --json`` on the bundled traces (``tests/golden/traces``). ``tests/test_golden.py``
recomputes them and lists every number that moved. A change that moves numbers on purpose rewrites
the files and names each difference and its reason in the commit message.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "golden"

#: Extra bindings beyond each example's defaults: decode-shaped runs take other code paths.
VARIANTS: dict[str, list[dict[str, int]]] = {
    "gpt2": [{}, {"seq": 1}],
    "llama-3-8b": [{}, {"seq": 1}, {"batch": 8, "seq": 2048}],
}


def _compact_report(rep: dict[str, Any]) -> dict[str, Any]:
    ops = [[o["name"], o["op"], o["flops"], o["bytes"], o.get("time_s"), o.get("bound"), o.get("kernel")]
           for o in rep["ops"]]
    return {"target": rep["target"], "totals": rep["totals"], "flops_by_group": rep["flops_by_group"],
            "bytes_by_group": rep["bytes_by_group"], "unmodeled": rep["unmodeled"], "timing": rep["timing"],
            "ops": ops}


def compare_goldens() -> dict[str, Any]:
    from narrowpipe.models.examples import example_names

    out: dict[str, Any] = {}
    for name in example_names():
        out.update(compare_golden(name))
    return out


def golden_key(name: str, extra: dict[str, int]) -> str:
    return name + "".join(f",{k}={v}" for k, v in sorted(extra.items()))


def compare_golden(name: str) -> dict[str, Any]:
    """One example's entries (one per dims variant): the test checks each example on its own, so the
    examples spread over the test workers."""
    from narrowpipe.backends.registry import targets as catalog
    from narrowpipe.costmodel.compare import compare
    from narrowpipe.models.examples import load_example

    graph = load_example(name)
    targets = [t for t, _ in catalog()]
    out: dict[str, Any] = {}
    for extra in VARIANTS.get(name, [{}]):
        d = compare(graph, targets, dims=extra).to_dict()
        out[golden_key(name, extra)] = {"dims": d["dims"], "targets": [_compact_report(r) for r in d["targets"]]}
    return out


def diagnose_goldens() -> dict[str, Any]:
    from narrowpipe.costmodel.diagnose import diagnose

    out: dict[str, Any] = {}
    for trace in sorted((GOLDEN / "traces").glob("*.json*")):
        for target in ("h100", "epyc-9755"):
            d = diagnose(trace, target).to_dict()
            d["trace"] = trace.name      # not the absolute path: goldens hold in every checkout
            out[f"{trace.name}@{target}"] = d
    return out


def diffs(old: Any, new: Any, path: str = "", rel: float = 1e-9, limit: int = 50) -> list[str]:
    """Every leaf that differs (numbers beyond ``rel``), as 'path: old -> new'."""
    found: list[str] = []

    def walk(a: Any, b: Any, p: str) -> None:
        if len(found) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b), key=str):
                walk(a.get(k, "<missing>"), b.get(k, "<missing>"), f"{p}.{k}")
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{p}[{i}]")
        elif isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            if not (a == b or (math.isfinite(a) and math.isfinite(b)
                               and math.isclose(a, b, rel_tol=rel, abs_tol=1e-15))):
                found.append(f"{p}: {a!r} -> {b!r}")
        elif a != b:
            found.append(f"{p}: {str(a)[:80]} -> {str(b)[:80]}")
    walk(old, new, path)
    return found


def _write(name: str, data: Any) -> None:
    with gzip.open(GOLDEN / name, "wt") as f:
        json.dump(data, f, sort_keys=True)


def read(name: str) -> Any:
    with gzip.open(GOLDEN / name, "rt") as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--write", action="store_true", help="rewrite the golden files")
    args = ap.parse_args(argv)
    current = {"compare.json.gz": compare_goldens(), "diagnose.json.gz": diagnose_goldens()}
    if args.write:
        for name, data in current.items():
            _write(name, data)
        return 0
    bad = 0
    for name, data in current.items():
        d = diffs(read(name), json.loads(json.dumps(data)), name, limit=200)
        bad += len(d)
        print("\n".join(d))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
