"""What every benchmark records beside its numbers: when, on what machine, with which versions, how.

A number without the machine and the command that produced it cannot be compared or reproduced,
so each results file starts with this header (and the JSON carries the same fields under "env").
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SCRATCH = HERE / "out"          # gitignored: where smoke runs write


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, Any]:
    """Date, machine and versions; torch and transformers only if already imported by the caller."""
    env: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "command": "python " + " ".join(shlex.quote(a) for a in [_rel(sys.argv[0]), *sys.argv[1:]]),
    }
    for mod in ("torch", "transformers", "fvcore", "narrowpipe"):
        m = sys.modules.get(mod)
        if m is not None:
            env[mod] = getattr(m, "__version__", "?")
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch_threads"] = torch.get_num_threads()
    try:
        mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal"))
        env["mem_gb"] = round(mem_kb / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        pass
    return env


def _rel(path: str) -> str:
    p = Path(path).resolve()
    try:
        return str(p.relative_to(HERE.parent))
    except ValueError:
        return path


def env_header(env: dict[str, Any]) -> str:
    """The markdown header of a results file."""
    versions = ", ".join(f"{k} {env[k]}" for k in ("torch", "transformers", "fvcore", "narrowpipe") if k in env)
    return (f"- date: {env['date']}\n"
            f"- machine: {env['nproc']} CPUs (`nproc`), {env['cpu']}, {env.get('mem_gb', '?')} GB RAM, "
            f"torch threads {env.get('torch_threads', '?')}; {env['platform']}\n"
            f"- versions: Python {env['python']}, {versions}\n"
            f"- command (from the repository root): `{env['command']}`\n")


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def write_results(directory: Path, stem: str, markdown: str, data: dict[str, Any]) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    md, js = directory / f"{stem}.md", directory / f"{stem}.json"
    md.write_text(markdown)
    js.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    return md, js


def no_options(doc: str | None) -> None:
    """The command line of a script without options: ``--help`` prints its docstring and an unknown
    argument is refused, where both ran the whole benchmark and rewrote its committed results."""
    text = (doc or "").strip()
    ap = argparse.ArgumentParser(description=text.splitlines()[0] if text else None,
                                 epilog="\n".join(text.splitlines()[1:]).strip() or None,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args()


def rounds_args(doc: str, rounds: int, stem: str) -> argparse.Namespace:
    """The command line of a microbenchmark timed in interleaved rounds: ``--rounds`` (default
    ``rounds``) and ``--out`` (default ``results/<stem>``), described by ``doc``'s first line."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--out", default=str(RESULTS / stem))
    return ap.parse_args()


def publish(out: Path, page: str, data: dict[str, Any]) -> int:
    """Write ``out``.md (``page``) and ``out``.json (``data``), print the page; a script's exit status."""
    write_results(out.parent, out.name, page, data)
    print(page)
    return 0


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "") -> str:
    """A GitHub markdown table; ``align`` is one char per column ('l' or 'r', default right)."""
    align = align.ljust(len(header), "r")
    sep = ["---" if a == "l" else "--:" for a in align]
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def fmt_s(seconds: float) -> str:
    if seconds != seconds:  # nan
        return "-"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def fmt_g(flops: float | None) -> str:
    """FLOPs as GFLOP with enough digits to see small differences."""
    return "-" if flops is None else f"{flops / 1e9:,.3f}"


def fmt_flops(flops: float) -> str:
    """A FLOP count with the unit that keeps it readable (a difference can be small or large)."""
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if abs(flops) >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:g} FLOP"
