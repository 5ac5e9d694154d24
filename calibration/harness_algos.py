"""Convolution algorithms a benchmark harness forces, as a property of its measured rows.

Why: a row timed by a harness that *forces* an algorithm says nothing about the library's own
choice, so it must be predicted with that algorithm, not with the fastest plan the model knows
(what a user's framework gets, cuDNN's own pick, is unchanged: the rule touches measured rows only).
The harness may also time a different problem than the row reports: DeepBench's tensor-core runs
pad the input and output channels up to a multiple of 8 before timing (``PAD_KERNELS``).

A rules file (TOML) has one table per ``"SOURCE@dtype"``::

    ["DEEPBENCH@fp16"]
    chips = ["t4", "v100-sxm2"]          # the runs the rule is for (one build of the harness)
    channel_multiple = 8                  # C and K padded up to this multiple before timing
    conv_fwd = "IMPLICIT_PRECOMP_GEMM"    # the algorithm forced per direction (cuDNN's names)
    conv_bwd_data = "BWD_DATA_ALGO_1"
    conv_bwd_filter = "BWD_FILTER_ALGO_1"

The algorithm names map to the model's convolution plans in
:data:`narrowpipe.costmodel.execution.conv_algos.FORCED_PLANS`; a name without a plan is an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..backends.tomlio import read_toml
from ..costmodel.execution.conv_algos import FORCED_PLANS
from ..errors import NarrowpipeError
from .kernel_measurements import KernelMeasurement

__all__ = ["ForcedConvAlgos", "read_forced_algos", "apply_forced_algos", "CONV_KINDS"]

CONV_KINDS = ("conv_fwd", "conv_bwd_data", "conv_bwd_filter")


@dataclass(frozen=True)
class ForcedConvAlgos:
    """What one harness build does to the convolution rows of one source and dtype."""

    source: str
    dtype: str
    chips: frozenset[str]
    channel_multiple: int
    algos: Mapping[str, str]          # row kind -> forced algorithm (cuDNN's name)

    def applies(self, m: KernelMeasurement) -> bool:
        return (m.source == self.source and m.dtype == self.dtype and m.chip in self.chips
                and m.kind in self.algos)


def read_forced_algos(path: str | Path) -> list[ForcedConvAlgos]:
    """The rules of a harness rules file; a bad entry is an error naming the file, table and reason."""
    p = Path(path)
    data: dict[str, Any] = read_toml(p)      # a missing or malformed file: an error naming it
    out = []
    for key, table in data.items():
        where = f"{p}, table [{key!r}]"
        source, sep, dtype = key.partition("@")
        if not sep or not isinstance(table, dict):
            raise NarrowpipeError(f"{where}: expected a table named \"SOURCE@dtype\"")
        algos = {k: str(table[k]) for k in CONV_KINDS if k in table}
        unknown = sorted(set(algos.values()) - set(FORCED_PLANS))
        if unknown:
            raise NarrowpipeError(f"{where}: no convolution plan models {', '.join(unknown)} "
                                  f"(known: {', '.join(sorted(FORCED_PLANS))})")
        multiple = table.get("channel_multiple", 1)
        if not isinstance(multiple, int) or multiple < 1:
            raise NarrowpipeError(f"{where}: channel_multiple must be a positive integer, got {multiple!r}")
        chips = table.get("chips")
        if not isinstance(chips, list) or not chips:
            raise NarrowpipeError(f"{where}: chips must list the chips the harness build ran on")
        out.append(ForcedConvAlgos(source, dtype, frozenset(str(c) for c in chips), multiple, algos))
    return out


def apply_forced_algos(rows: Iterable[KernelMeasurement], rules: Iterable[ForcedConvAlgos]) -> list[KernelMeasurement]:
    """``rows`` with each rule's forced algorithm and channel padding set where it applies (the
    reported shape, and with it the held-out split and the row's FLOPs, stay the problem's)."""
    rules = list(rules)
    out = []
    for m in rows:
        rule = next((r for r in rules if r.applies(m)), None)
        out.append(m if rule is None else
                   replace(m, forced_algo=rule.algos[m.kind], channel_multiple=rule.channel_multiple))
    return out
