"""How much back-to-back calibrations of the same machine disagree, term by term (issue 12).

    python benchmarks/calibration_spread.py --set before b1.toml b2.toml b3.toml --set after a1.toml a2.toml a3.toml

Each ``--set`` is a label and host files ``narrowpipe calibrate`` wrote, one set per code version
(e.g. before and after a change in how calibration measures). For each key fitted term the table
lists every calibration's value and each set's spread, (max - min) / median: a term that moves
between calibrations of an unchanged machine moves every prediction made from it. Writes
``benchmarks/results/calibration_spread.md`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from narrowpipe.backends import CpuTarget, load_target_file
from narrowpipe.costmodel.execution.common import interpolate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, env_header, environment  # noqa: E402

Term = Callable[[CpuTarget], float | None]


def _curve(name: str, x: float) -> Term:
    def at(t: CpuTarget) -> float | None:
        curve = getattr(t, name)
        return interpolate(curve, x, 0.0) if curve else None
    return at


def _grid_median(t: CpuTarget) -> float | None:
    return statistics.median(e for *_, e in t.matmul_grid) if t.matmul_grid else None


#: (term, unit scale, unit, reader)
TERMS: tuple[tuple[str, float, str, Term], ...] = (
    ("dispatch (launch_overhead)", 1e6, "us", lambda t: t.launch_overhead),
    ("add bandwidth, best", 1e-9, "GB/s", lambda t: t.memory_bandwidth),
    ("add-bandwidth plateau (memory_efficiency)", 1, "of best", lambda t: t.memory_efficiency),
    ("add bandwidth at 1 MiB moved", 1, "of best", _curve("bandwidth_curve", 2**20)),
    ("add bandwidth at 16 MiB moved", 1, "of best", _curve("bandwidth_curve", 16 * 2**20)),
    ("add bandwidth at 64 MiB moved", 1, "of best", _curve("bandwidth_curve", 64 * 2**20)),
    ("GEMM plateau (matmul_efficiency)", 1, "of peak", lambda t: t.matmul_efficiency),
    ("GEMM grid, median point", 1, "of peak", _grid_median),
    ("1x1 conv plateau", 1, "of peak", _curve("conv_curve", 1)),
    ("3x3 conv plateau", 1, "of peak", _curve("conv_curve", 9)),
    ("7x7 conv plateau", 1, "of peak", _curve("conv_curve", 49)),
    ("attention at 512 keys", 1, "of peak", _curve("attention_curve", 512)),
    ("layer_norm rate", 1e-9, "G elem/s", lambda t: t.vector_op_flops.get("layer_norm")),
    ("batch_norm rate", 1e-9, "G elem/s", lambda t: t.vector_op_flops.get("batch_norm")),
    ("eager per-op overhead", 1e6, "us", lambda t: t.eager_op_overhead),
    ("module call", 1e6, "us", lambda t: t.eager_module_call_overhead),
    ("cold host call", 1e6, "us", lambda t: t.eager_cold_call_overhead),
    ("depthwise call", 1e6, "us", lambda t: t.depthwise_call_time),
    ("depthwise element", 1e9, "ns", lambda t: t.depthwise_element_time),
    ("depthwise tap", 1e9, "ns", lambda t: t.depthwise_tap_time),
    ("pad row", 1e9, "ns", lambda t: t.pad_row_time),
    ("pad plane", 1e9, "ns", lambda t: t.pad_plane_time),
    ("fresh pages", 1e-9, "GB/s", lambda t: t.fresh_page_bandwidth),
)


def spread(values: list[float]) -> float | None:
    """(max - min) / median of the values (None for fewer than two, or a zero median)."""
    if len(values) < 2:
        return None
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med else None


def _cells(targets: list[CpuTarget], read: Term, scale: float) -> tuple[list[str], float | None]:
    values = [read(t) for t in targets]
    shown = [f"{v * scale:.4g}" if v is not None else "-" for v in values]
    return shown, spread([v for v in values if v is not None])


def _pct(x: float | None) -> str:
    return f"{x:.0%}" if x is not None else "-"


def table(sets: list[tuple[str, list[CpuTarget]]]) -> tuple[list[str], list[list[float]]]:
    """Markdown rows (every calibration's value, then each set's spread), and per term the spreads of
    the sets, for the terms every set has."""
    head = ["term", "unit"] + [f"{label} {i + 1}" for label, ts in sets for i in range(len(ts))] \
        + [f"spread {label}" for label, _ in sets]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "--:|" * (len(head) - 2)]
    spreads = []
    for name, scale, unit, read in TERMS:
        cells, per_set = [], []
        for _, ts in sets:
            shown, sp = _cells(ts, read, scale)
            cells += shown
            per_set.append(sp)
        rows.append("| " + " | ".join([name, unit, *cells, *(_pct(x) for x in per_set)]) + " |")
        if all(x is not None for x in per_set):
            spreads.append([x for x in per_set if x is not None])
    return rows, spreads


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", nargs="+", action="append", required=True, metavar=("LABEL", "HOST_TOML"),
                    help="a label and the host files of one set of calibrations (repeat for each set)")
    ap.add_argument("--note", default="", help="a paragraph put under the header (how and when each set ran)")
    ap.add_argument("--out", type=Path, default=RESULTS / "calibration_spread.md")
    args = ap.parse_args(argv)
    sets: list[tuple[str, list[CpuTarget]]] = []
    for label, *paths in args.set:
        targets = [load_target_file(p) for p in paths]
        if not paths or not all(isinstance(t, CpuTarget) for t in targets):
            ap.error(f"--set {label}: give one or more calibrated CPU host files")
        sets.append((label, targets))  # type: ignore[arg-type]
    rows, spreads = table(sets)
    env = environment()
    lines = [f"# Calibration spread over back-to-back runs ({env['date'][:10]})", "", env_header(env).rstrip(), "",
             "Spread = (max - min) / median of a term over the calibrations of one set.", ""]
    if args.note:
        lines += [args.note, ""]
    lines += [*rows, ""]
    meds = [statistics.median(sp[i] for sp in spreads) for i in range(len(sets))] if spreads else []
    lines.append(f"Median spread over the {len(spreads)} terms every set has: "
                 + ", ".join(f"{label} {_pct(m)}" for (label, _), m in zip(sets, meds)) + ".")
    for i in range(1, len(sets)):
        fell = sum(sp[i] < sp[0] for sp in spreads)
        lines.append(f"Terms whose spread is lower in `{sets[i][0]}` than in `{sets[0][0]}`: {fell} of {len(spreads)}.")
    lines.append("")
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
