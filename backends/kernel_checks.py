"""How well each chip's kernel model is checked: its held-out error on public per-kernel timings.

A predicted time is only as good as the execution model behind it, and that differs by chip: the
kernel benchmark (``benchmarks/kernel_accuracy.py``) predicts thousands of published GEMM and
convolution timings, fits each chip's library terms on one half and reports the error on the other.
This module ships that result with the package (``kernel_checks.toml``, written by the benchmark
from its results file, never by hand), so a comparison can say how far each column was checked:
a chip read within a few percent on hundreds of held-out kernels is not the same evidence as a
chip with no public timings at all.

A chip whose fitted GEMM terms are copies of another chip's (its source says ``assumption: as
NAME``) has no check of its own; :func:`copied_from` names where its terms come from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from .target import Target
from .tomlio import dumps, read_toml

__all__ = ["KernelCheck", "ClassCheck", "kernel_check", "kernel_checks", "copied_from", "copy_source",
           "checks_document", "write_checks", "CHECKS_FILE", "check_text", "checks_line", "check_bars", "check_percent"]

CHECKS_FILE = Path(__file__).parent / "kernel_checks.toml"
#: Where a copied field's source names the chip it copies (``assumption: as t4 (...)``).
_COPY = re.compile(r"assumption: as ([a-z0-9.-]+)")
#: Fields that, when copied, make a chip's kernel terms another chip's.
_KERNEL_TERMS = ("gemm_latency", "gemm_wave_overhead", "gemm_epilogue_exposed", "mxu_fold_overhead")


@dataclass(frozen=True)
class ClassCheck:
    """The held-out error of one kernel class (small GEMM, conv fwd, ...) on one chip."""

    rows: int
    median_abs: float
    p90_abs: float


@dataclass(frozen=True)
class KernelCheck:
    """One chip's held-out error on the kernel benchmark: ``rows`` timings the fit never saw, the
    median and 90th percentile of |predicted / measured - 1|, the signed median (> 0: predicted
    slow), the public sources of those timings and the error per kernel class."""

    chip: str
    rows: int
    median_abs: float
    p90_abs: float
    median_signed: float
    sources: tuple[str, ...]
    classes: Mapping[str, ClassCheck] = field(default_factory=dict)
    run: str = ""

    def meets(self, median_bar: float, p90_bar: float) -> bool:
        return self.median_abs <= median_bar and self.p90_abs <= p90_bar


@cache
def kernel_checks() -> dict[str, KernelCheck]:
    """Every chip's check, by catalog name (only chips with held-out timings)."""
    doc = read_toml(CHECKS_FILE)
    out = {}
    for chip, c in doc.get("chips", {}).items():
        classes = {k: ClassCheck(int(v["rows"]), float(v["median_abs"]), float(v["p90_abs"]))
                   for k, v in c.get("classes", {}).items()}
        out[chip] = KernelCheck(chip, int(c["rows"]), float(c["median_abs"]), float(c["p90_abs"]),
                                float(c["median_signed"]), tuple(c.get("sources", ())), classes, doc.get("run", ""))
    return out


@cache
def check_bars() -> tuple[float, float]:
    """The bars the benchmark holds every chip to: (held-out median, p90) |error|."""
    bars = read_toml(CHECKS_FILE)["bars"]
    return float(bars["median_abs"]), float(bars["p90_abs"])


def kernel_check(target: Target | str) -> KernelCheck | None:
    """The check of ``target`` (a Target or catalog name); None where it has no held-out timings,
    and for a Target that only shares a catalog chip's name (a user's file with other numbers:
    the check is of the catalog's terms, not its; :func:`.twins.differing_fields`, the rule that
    renames such a file's chip where it is loaded, so a report's name finds the check only when
    the numbers are the catalog's)."""
    if isinstance(target, str):
        return kernel_checks().get(target)
    check = kernel_checks().get(target.name)
    if check is None:
        return None
    from .registry import get_target
    from .twins import differing_fields
    return None if differing_fields(target, get_target(target.name)) else check


def copy_source(source: str) -> str | None:
    """The chip a field's source says its value copies (``assumption: as NAME ...``), else None."""
    m = _COPY.match(source)
    return m.group(1) if m else None


def copied_from(target: Target) -> str | None:
    """The chip whose fitted kernel terms ``target`` copies (its source: ``assumption: as NAME``)."""
    for name in _KERNEL_TERMS:
        src = copy_source(target.sources.get(name, ""))
        if src:
            return src
    return None


def check_text(target: Target | str) -> str:
    """A short phrase: ``6.0%/22% on 376 timings`` (held-out median / p90 |error|), ``unchecked
    (h100-sxm's terms)`` for a chip whose fitted terms are copied, ``unchecked`` for none (also for a
    name outside the catalog: a user's own target)."""
    c = kernel_check(target)
    if c is not None:
        return f"{check_percent(c.median_abs)}/{check_percent(c.p90_abs)} on {c.rows} timings"
    if isinstance(target, str):
        from .registry import get_target, targets
        if target not in {name for name, _ in targets()}:
            return "unchecked"
        target = get_target(target)
    src = copied_from(target)
    return f"unchecked ({src}'s terms)" if src else "unchecked"


def checks_line(names: Sequence[str]) -> str:
    """The line ``compare`` and ``plan`` end with: how far each named chip's kernel model is checked
    against public kernel timings, so an unchecked chip's number does not read like a checked one's."""
    cells = "; ".join(f"{name} {check_text(name)}" for name in names)
    return (f"kernel model checked on public kernel timings (held-out median/p90 |error|): {cells} "
            "(narrowpipe targets --checks)")


def check_percent(x: float) -> str:
    """An error as the checks print it: one decimal under 10%, whole percents above."""
    return f"{x * 100:.1f}%" if x < 0.1 else f"{x * 100:.0f}%"


def checks_document(results: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``kernel_checks.toml`` document from the kernel benchmark's results (its JSON: ``env``,
    ``held_out`` per chip) and its held-out rows (``chip`` and ``source`` of each): one place turns
    a benchmark run into the shipped checks, so the two cannot disagree."""
    sources: dict[str, set[str]] = {}
    for r in rows:
        sources.setdefault(r["chip"], set()).add(r["source"])
    chips: dict[str, Any] = {}
    for chip, s in sorted(results["held_out"].items()):
        a = s["all"]
        if not a.get("n"):
            continue
        classes = {k: {"rows": v["n"], "median_abs": v["median_abs"], "p90_abs": v["p90_abs"]}
                   for k, v in s.items() if k != "all" and v.get("n")}
        chips[chip] = {"rows": a["n"], "median_abs": a["median_abs"], "p90_abs": a["p90_abs"],
                       "median_signed": a["median_signed"], "sources": sorted(sources.get(chip, ())),
                       "classes": classes}
    env = results.get("env", {})
    return {"run": env.get("date", ""), "command": env.get("command", ""), "bars": dict(results["bars"]),
            "chips": chips}


_HEADER = """Each chip's held-out error on the public per-kernel timings of benchmarks/kernel_accuracy.py:
written by that script (with --no-fit or --write-catalog) from its results, not by hand.
rows: held-out timings; median_abs, p90_abs: of |predicted / measured - 1|; median_signed > 0: slow."""


def write_checks(doc: Mapping[str, Any], path: Path = CHECKS_FILE) -> Path:
    """Write :func:`checks_document`'s output as the shipped checks file."""
    path.write_text(dumps(doc, header=_HEADER))
    kernel_checks.cache_clear()
    check_bars.cache_clear()
    return path
