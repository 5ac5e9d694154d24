"""Every ONNX node test model (built by the ``onnx`` wheel's own generator) through ``narrowpipe.load``.

``onnx.backend.test.case.node.collect_testcases(None)`` builds the 1,884 single-node models of ONNX's
conformance suite (the wheel ships the generator, not the files). Each is saved to a file, loaded
and analyzed; the result per case is ``ok`` or the :class:`NarrowpipeError` raised, and per op type
the canonical ops it lowered to. ``tests/onnx/test_node_sweep.py`` asserts the load rate and
``benchmarks/onnx_ops_doc.py`` turns the per-op results into ``docs/onnx_ops.md``.

    python benchmarks/onnx_node_sweep.py     # ~15 s; writes results/onnx_node_sweep.{md,json}
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import narrowpipe  # noqa: E402
from narrowpipe.errors import NarrowpipeError  # noqa: E402
from narrowpipe.ir import Graph, Op, Sym, node_subgraphs  # noqa: E402

from _common import RESULTS, env_header, environment, no_options, write_results  # noqa: E402

__all__ = ["CaseResult", "collect_cases", "run_case", "sweep"]


@dataclass
class CaseResult:
    name: str
    op_types: tuple[str, ...]          # the (domain::)op types the test model uses
    ok: bool
    error: str = ""                    # "ErrorType: message" when not ok
    canonical: dict[str, set[str]] = field(default_factory=dict)  # op type -> canonical ops emitted
    unmodeled: tuple[str, ...] = ()


Case = tuple[str, onnx.ModelProto, list[Any]]


def collect_cases() -> list[Case]:
    """(name, model, the first data set's inputs) of every node test."""
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            cases = collect_testcases(None)
    return [(c.name, c.model, list(c.data_sets[0][0]) if c.data_sets else []) for c in cases]


def bindings_from_inputs(graph: Graph, model: onnx.ModelProto, inputs: list[Any]) -> dict[str, int]:
    """Symbolic input dims bound to the test's input data (what a user passes with --set)."""
    names = [vi.name for vi in model.graph.input]
    out: dict[str, int] = {}
    for v in graph.inputs:
        if v.source_name not in names or names.index(v.source_name) >= len(inputs):
            continue
        data = inputs[names.index(v.source_name)]
        if isinstance(data, list):
            shape = (len(data), *np.shape(data[0])) if data else (0,)
        elif data is None:
            continue
        else:
            shape = np.shape(data)
        for d, size in zip(v.type.shape, shape):
            if isinstance(d, Sym) and d.symbols == {d.expr}:
                out.setdefault(d.expr, int(size))
    return out


def _key(domain: str, op_type: str) -> str:
    return op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"


def _walk(graph: Graph):
    for node in graph.nodes:
        yield node
        for sub in node_subgraphs(node):
            yield from _walk(sub)


def run_case(name: str, model: onnx.ModelProto, inputs: list[Any], directory: str) -> CaseResult:
    ops = tuple(sorted({_key(n.domain, n.op_type) for n in model.graph.node}))
    path = os.path.join(directory, f"{name}.onnx")
    onnx.save(model, path)
    try:
        graph = narrowpipe.load(path)
        report = narrowpipe.analyze(graph, dims=bindings_from_inputs(graph, model, inputs))
    except NarrowpipeError as exc:
        return CaseResult(name, ops, False, f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # a crash: reported, and counted against the frontend
        import traceback
        return CaseResult(name, ops, False, f"CRASH {type(exc).__name__}: {exc} "
                                            f"{traceback.format_exc(limit=-3)}")
    canonical: dict[str, set[str]] = {}
    for node in _walk(graph):
        src = node.source.op.split("::", 1)[-1] if node.source.op.startswith("ai.onnx::") else node.source.op
        canonical.setdefault(src, set()).add(node.op.value if node.op is not Op.UNKNOWN else "unknown")
    return CaseResult(name, ops, True, canonical=canonical, unmodeled=tuple(u.op for u in report.unmodeled))


def sweep(cases: list[Case] | None = None) -> list[CaseResult]:
    cases = collect_cases() if cases is None else cases
    with tempfile.TemporaryDirectory() as d:
        return [run_case(name, model, inputs, d) for name, model, inputs in cases]


def _clean(error: str) -> str:
    """The error without the temporary directory the case was saved in."""
    return re.sub(r"file '[^']*/([^/']+)'", r"file '\1'", error)


def main() -> int:
    t = time.perf_counter()
    results = sweep()
    seconds = time.perf_counter() - t
    ok = sum(r.ok for r in results)
    errors = Counter(r.error.split(":")[0] for r in results if not r.ok)
    unmodeled = Counter(u for r in results for u in r.unmodeled)
    print(f"{ok}/{len(results)} cases load and analyze ({100 * ok / len(results):.2f}%) in {seconds:.1f} s")
    print("failures by error type:", dict(errors))
    print("unmodeled ops:", dict(unmodeled))
    env = {**environment(), "onnx": onnx.__version__}
    lines = [f"# ONNX node test models through narrowpipe.load\n\n{env_header(env)}"
             f"- also: onnx {onnx.__version__} (opsets up to {onnx.defs.onnx_opset_version()})\n\n",
             f"**{ok} of {len(results)}** node test models ({100 * ok / len(results):.2f}%) load and analyze "
             f"(symbolic input dims bound to the test's own input sizes) in {seconds:.1f} s. Every other one "
             f"raises a `NarrowpipeError` subclass naming the file, the node and the reason: "
             + ", ".join(f"{n} {k}" for k, n in errors.most_common()) + ". Ops left unmodeled (no canonical "
             "lowering, reported in `Report.unmodeled`): "
             + ", ".join(f"`{k}` ({n} models)" for k, n in unmodeled.most_common()) + ".\n\n",
             "| failing model | error |\n|---|---|\n"]
    lines += [f"| `{r.name}` | {_clean(r.error).replace('|', '/')[:240]} |\n" for r in results if not r.ok]
    write_results(RESULTS, "onnx_node_sweep", "".join(lines),
                  {"env": env, "ok": ok, "total": len(results), "seconds": seconds,
                   "failures": {r.name: _clean(r.error) for r in results if not r.ok}, "unmodeled": dict(unmodeled)})
    return 0


if __name__ == "__main__":
    no_options(__doc__)
    sys.exit(main())
