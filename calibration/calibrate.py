"""``narrowpipe calibrate``: measure this machine and write a target file with its real ceilings.

On the CPU the target is built from the host's description (cores, clock, SIMD) plus the fit; on a
CUDA device the matching catalog chip is the base and only its measured ceilings change. The raw
measurements are written beside the target (``<out>.measurements.json``) so the fit can be audited
or redone, and ``--from-measurements`` applies a measurement file to any chip (a user's own data):
this tool's JSON, or a CSV of per-kernel timings (:mod:`.kernel_measurements`) that fits a GPU's or
TPU's kernel terms.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import statistics
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

from ..backends import CpuTarget, Target, dump_target, get_target
from ..errors import NarrowpipeError
from ..jsonout import dumps, nonfinite_path
from .bmm_sweep import with_bmm_item_time
from .cold_calls import fit_cold_calls, stack_facts
from .contention import HOST_CALL_FIELDS, contention, file_clocks, warn_contention
from .eager import eager_reference, fit_eager_overhead
from .evicted_calls import fit_evicted_calls, fit_evicted_reads, read_operand_bytes
from .fit import apply_measurements, host_target
from .host import describe_cpu
from .kernel_fit import OPTIONAL_TERMS, TERM_GRIDS, FitResult, errors, fit_kernel_terms, kernel_cases
from .kernel_measurements import read_kernel_measurements
from .measurement import Measurement
from .run import run_all
from .vector_measurements import VECTOR_KINDS

__all__ = ["calibrate", "measurements_path", "load_measurements", "measured_threads", "check_device", "CUDA_TARGETS",
           "cuda_target_name", "check_measured_device"]

#: Substrings of torch.cuda.get_device_name() -> catalog target.
CUDA_TARGETS = (("H200", "h200"), ("H100 PCIe", "h100-pcie"), ("H100", "h100-sxm"), ("A100", "a100-sxm-80gb"),
                ("GB200", "gb200"), ("B200", "b200"), ("MI300X", "mi300x"), ("MI355X", "mi355x"))


def cuda_target_name(device_name: str) -> str:
    for key, target in CUDA_TARGETS:
        if key.lower() in device_name.lower():
            return target
    raise NarrowpipeError(f"no catalog target for CUDA device {device_name!r}; pass --base NAME")


def measurements_path(target_path: str | Path) -> Path:
    p = Path(target_path)
    return p.with_name(p.stem + ".measurements.json")


def load_measurements(path: str | Path) -> list[Measurement]:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
        bad = nonfinite_path(data)   # json reads NaN/Infinity, which would fit NaN rates silently
        if bad is not None:
            raise NarrowpipeError(f"{p}: {bad} is not a finite number")
        return [Measurement.from_dict(m) for m in data["measurements"]]
    except FileNotFoundError:
        raise NarrowpipeError(f"{p}: measurements file not found") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise NarrowpipeError(f"{p}: not a narrowpipe measurements file ({exc})") from None


def measured_threads(path: str | Path) -> int | None:
    """The torch threads a measurements JSON was taken at (None: a CSV, or a file that does not say)."""
    p = Path(path)
    if p.suffix.lower() == ".csv":
        return None
    try:
        threads = json.loads(p.read_text()).get("threads")
    except (OSError, ValueError, AttributeError):
        return None
    return threads if isinstance(threads, int) and threads > 0 else None


def check_measured_threads(path: str | Path, threads: int) -> None:
    """``--threads`` beside ``--from-measurements``: the file's threads are the target's (its rates
    are theirs), so a different count is refused rather than written into the target."""
    measured = measured_threads(path)
    if measured is not None and measured != threads:
        raise NarrowpipeError(f"--threads {threads}: {path} was measured at {measured} thread(s), and the target's "
                              f"rates are those threads'; drop --threads (the file's {measured} is used)")


#: Measurement kinds calibration takes on a CPU only (:func:`.run.calibration_cases`: the eager stack,
#: the module-call chains, the host's evicted-input stalls): a file holding any was measured on a CPU.
_CPU_ONLY_KINDS = frozenset({"eager_model", "eager_cold", "module_chain", "evicted_call", "evicted_read"})


def check_measured_device(path: str | Path, measurements: list[Measurement], base: Target) -> None:
    """Refuse a measurements file taken on another kind of device than ``base``: a CPU's GEMMs fitted to
    a GPU's peak read as an efficiency of 0.0027 and the error blamed a busy machine. The file says
    what it measured: the CPU-only kinds, and its ``device``."""
    cpu = any(m.kind in _CPU_ONLY_KINDS for m in measurements)
    try:
        device = json.loads(Path(path).read_text()).get("device") or "an unnamed device"
    except (OSError, ValueError, AttributeError):
        device = "an unnamed device"
    if cpu and base.family != "cpu":
        raise NarrowpipeError(
            f"{path} was measured on a CPU ({device!r}: it holds the CPU-only eager and host-call sweeps), and "
            f"--base {base.name} is a {base.family} target: a CPU's timings are not that chip's ceilings. Calibrate "
            "the chip itself (calibrate --device cuda on it), fit its kernel terms from a CSV of its timings "
            "(--from-measurements FILE.csv), or apply this file without --base on the machine that measured it")
    if not cpu and base.family == "cpu" and any(k.lower() in device.lower() for k, _ in CUDA_TARGETS):
        raise NarrowpipeError(
            f"{path} was measured on {device!r}, a GPU (it lacks the CPU-only eager and host-call sweeps), and "
            f"--base {base.name} is a CPU target: give --base the chip it was measured on")


def check_device(device: str) -> None:
    """Calibration measures a real device: the CPU, or a CUDA GPU torch sees. Anything else is
    refused here, not fitted: on ``meta`` every op returns at once and the fit wrote a target of a
    100% GEMM plateau at 10 GB/s; ``tpu`` failed inside torch with a traceback."""
    if device == "cpu":
        return
    m = re.fullmatch(r"cuda(?::(\d+))?", device)
    if m is None:
        raise NarrowpipeError(f"--device {device!r}: calibrate measures this machine's CPU ('cpu') or a CUDA GPU "
                              "('cuda' or 'cuda:N'); for another chip, calibrate --base NAME --from-measurements FILE")
    import torch
    if not torch.cuda.is_available():
        raise NarrowpipeError("no CUDA device is available; calibrate the CPU with --device cpu")
    if m.group(1) is not None and int(m.group(1)) >= torch.cuda.device_count():
        raise NarrowpipeError(f"--device {device}: torch sees {torch.cuda.device_count()} CUDA device(s) "
                              f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})")


def calibrate(out: str | Path = "host.toml", *, device: str = "cpu", quick: bool = False, base: str | None = None,
              from_measurements: str | Path | None = None, name: str | None = None,
              progress: Callable[[str], None] | None = None, report: Callable[[str], None] | None = None) -> Target:
    """Run (or load) the sweeps, fit, and write the target file and its measurements; ``report``
    takes a kernel CSV fit's summary lines (its error before and after, what it fitted).

    ``from_measurements`` is a measurements JSON (this function's own output) or a kernel
    measurements CSV (:mod:`.kernel_measurements`: per-shape GEMM and convolution times from any
    benchmark), whose rows fit ``base``'s kernel terms (GPU: GEMM latency floor, wave fill,
    exposed epilogue, split-K limit and efficiencies; TPU: MXU fold overhead)."""
    if from_measurements is None:
        check_device(device)
    out = _writable(Path(out))    # before minutes of measuring, not after
    if from_measurements is not None and Path(from_measurements).suffix.lower() == ".csv":
        return _calibrate_kernels(Path(from_measurements), base, name, out, report)
    import torch
    t0, c0 = time.perf_counter(), time.thread_time()
    threads = torch.get_num_threads()
    if from_measurements is not None:
        measurements = load_measurements(from_measurements)
        # the rates are those of the threads the file was measured at, not of this process's
        threads = measured_threads(from_measurements) or threads
    else:
        measurements = run_all(device, quick, progress)
    if base is None and device.startswith("cuda"):
        check_device(device)
        base = cuda_target_name(torch.cuda.get_device_name(device))
    if base is not None:
        if from_measurements is not None:
            check_measured_device(from_measurements, measurements, get_target(base))
        target = apply_measurements(get_target(base), measurements, name)
        device_name = get_target(base).display_name
    else:
        host = describe_cpu(threads)
        target = host_target(host, measurements, name or "host")
        device_name = host.model
    # the measuring run's clocks (a file's own, when refitted): the evidence of a shared machine
    clocks = (time.perf_counter() - t0, time.thread_time() - c0) if from_measurements is None else \
        file_clocks(from_measurements)
    target = _with_host_calls(target, measurements, threads, clocks)
    raw = {"format": "narrowpipe.measurements", "version": 1, "date": date.today().isoformat(),
           "device": device_name, "torch": torch.__version__, "platform": platform.platform(),
           "threads": threads, "seconds": clocks[0] if clocks[0] is not None else time.perf_counter() - t0,
           "thread_seconds": clocks[1], "measurements": [m.to_dict() for m in measurements]}
    _write(out, target, raw)
    return target


def _with_host_calls(target: Target, measurements: list[Measurement], threads: int,
                     clocks: tuple[float | None, float | None]) -> Target:
    """``target`` with the eager host-call terms fitted (per-op and module-call overheads, cold and
    evicted calls) and the batched-GEMM item time, on a CPU target with an eager reference measured;
    the host-call terms are left out, with a warning, where the run shows contention
    (:mod:`.contention`: ``clocks`` are the run's wall and measuring-thread CPU seconds)."""
    eager = eager_reference(measurements)
    if eager is None or not isinstance(target, CpuTarget):
        return target
    before = target
    module = [m for m in measurements if m.kind == "module_call"]
    per_call = module[-1].seconds if module else None
    overhead, kernels, _ = fit_eager_overhead(target, eager, per_call or 0.0)
    sources = {**target.sources, "eager_op_overhead":
               f"measured: an eager {eager.shape} transformer stack's forward"
               + (" (interleaved rounds)" if eager.kind == "eager_cold" else "") + f" minus its {kernels} ops' "
               "predicted bare times" + (" and its module calls" if module else "") + ", per op (calibrate)"}
    fields: dict[str, object] = {"eager_op_overhead": overhead}
    if module:
        fields["eager_module_call_overhead"] = per_call
        sources["eager_module_call_overhead"] = (
            f"measured: {module[-1].shape[1]} adds through {module[-1].shape[0]} nested trivial modules minus "
            "the same adds inline, per module call (calibrate)")
    target = dataclasses.replace(target, sources=sources, **fields)  # type: ignore[arg-type]
    target = _with_evicted_calls(_with_cold_calls(target, measurements), measurements)
    target = with_bmm_item_time(target, measurements)
    signs = contention(clocks[0], clocks[1], threads, eager.rounds)
    if not signs:
        return target
    left = [f for f in HOST_CALL_FIELDS if getattr(target, f, None) != getattr(before, f, None)]
    warn_contention(signs, left)
    sources = {k: v for k, v in target.sources.items() if k not in left}
    sources.update({k: before.sources[k] for k in left if k in before.sources})
    return dataclasses.replace(target, sources=sources, **{f: getattr(before, f) for f in left})


def _writable(out: Path) -> Path:
    """``out`` with its folder made and checked before anything is measured: minutes of sweeps lost
    to a missing or read-only folder at the final write (a traceback then) help nobody."""
    if out.is_dir():
        raise NarrowpipeError(f"--out {out}: is a folder; name the target file in it (e.g. {out / 'host.toml'})")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = "a file stands in its path" if isinstance(exc, (FileExistsError, NotADirectoryError)) else exc.strerror
        raise NarrowpipeError(f"--out {out}: cannot create the folder {out.parent}: {why or exc}") from None
    if not os.access(out.parent, os.W_OK | os.X_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise NarrowpipeError(f"--out {out}: cannot write there (permission denied)")
    return out


def _write(out: Path, target: Target, raw: dict[str, Any] | None) -> None:
    """Write the target file and, if measured, the measurements beside it; an OS error (the disk
    filled, the folder went away since :func:`_writable`) as an error naming the file."""
    try:
        dump_target(target, out)
        if raw is not None:
            measurements_path(out).write_text(dumps(raw, indent=1, what=str(measurements_path(out))))
    except OSError as exc:
        raise NarrowpipeError(f"--out {out}: cannot write the target file: {exc.strerror or exc}") from None


def _with_cold_calls(target: CpuTarget, measurements: list[Measurement]) -> CpuTarget:
    """``target`` with the eager host calls' cold-state cost fitted (:mod:`.cold_calls`), if measured."""
    cold = [m for m in measurements if m.kind == "eager_cold"]
    if len(cold) < 2:
        return target
    facts = stack_facts(target)
    fit = fit_cold_calls(target, cold, facts)
    if fit is None:
        return target
    per_call, curve = fit
    deepest = max(cold, key=lambda m: m.shape[0]).shape
    sources = {**target.sources, "eager_cold_call_overhead": (
        f"measured: the eager stack {deepest} ({facts(deepest)[2] / 2**20:.0f} MiB) per host call minus the same "
        f"stack at {min(m.shape[0] for m in cold)} layers, its weights at the memory rate taken out (calibrate)")}
    fields: dict[str, object] = {"eager_cold_call_overhead": per_call}
    if curve:
        fields["eager_cold_call_curve"] = curve
        sources["eager_cold_call_curve"] = ("measured: the same at each depth, by its footprint, as a fraction "
                                            "of the deepest (calibrate)")
    return dataclasses.replace(target, sources=sources, **fields)  # type: ignore[arg-type]


def _with_evicted_calls(target: CpuTarget, measurements: list[Measurement]) -> CpuTarget:
    """``target`` with the host stall after heavy traffic and the re-read stall of evicted inputs
    fitted (:mod:`.evicted_calls`), where measured."""
    reads = fit_evicted_reads(measurements)
    if reads is not None:
        top = max(m.shape[0] for m in measurements if m.kind == "evicted_read")
        operand = read_operand_bytes([m.shape[0] for m in measurements if m.kind == "evicted_call"])
        target = dataclasses.replace(target, evicted_read_bandwidth=reads[0], evicted_read_curve=reads[1], sources={
            **target.sources, "evicted_read_bandwidth": (
                f"measured: an add of two {operand // 1024} KiB inputs last touched before an add that moved "
                f"{top / 2**20:.0f} MiB, minus the same add in a hot loop, per input byte (calibrate)"),
            "evicted_read_curve": "measured: the same after adds of L2/2 to 64 x L2 bytes, by the bytes moved since "
                                  "the inputs were touched, as a fraction of it (calibrate)"})
    fit = fit_evicted_calls(measurements)
    if fit is None:
        return target
    full, after, own = fit
    top = max(m.shape[0] for m in measurements if m.kind == "evicted_call")
    sources = {**target.sources, "eager_evicted_call_overhead": (
        f"measured: a tiny eager op (add, relu, batch/layer norm, hardtanh, pad, GELU, 1x1 conv, softmax, mm, in "
        f"turn) right after an add that moved {top / 2**20:.0f} MiB, minus the same op right after (calibrate)"),
        "eager_evicted_call_curve": "measured: the same after adds of L2/8 to 64 x L2 bytes, as a fraction of it "
                                    "(calibrate)"}
    fields: dict[str, object] = {"eager_evicted_call_overhead": full, "eager_evicted_call_curve": after}
    if own:
        fields["eager_evicted_call_self_curve"] = own
        sources["eager_evicted_call_self_curve"] = (
            "measured: an add in a hot loop minus the same add right after a one-element add, by its bytes, as "
            "a fraction of the stall (calibrate)")
    return dataclasses.replace(target, sources=sources, **fields)  # type: ignore[arg-type]


def _other_chips(rows: list[Any], target: Target) -> dict[str, int]:
    """Rows whose ``chip`` is not ``target`` (by name or alias; an unknown name counts as other),
    counted per chip name; each distinct name is resolved once."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.chip] = counts.get(r.chip, 0) + 1
    names = {target.name.lower(), *(a.lower() for a in target.aliases)}

    def same(chip: str) -> bool:
        if chip.lower() in names:
            return True
        try:
            return get_target(chip).name == target.name
        except NarrowpipeError:
            return False
    return {chip: n for chip, n in counts.items() if not same(chip)}


#: The plateau fields by the units they are for, as the fit's summary names them.
_PLATEAUS = {"matmul_efficiency": "16-bit (and narrower)", "matmul_efficiency_tf32": "TF32",
             "matmul_efficiency_fp32": "fp32"}


def _fit_report(cases: list[Any], base: Target, res: FitResult, label: str) -> list[str]:
    """What the fit did, for the user to judge it: the error on the given rows with the base chip's
    terms and with the fitted ones, the plateaus fitted, the fields moved, confirmed and left alone."""
    def spread(t: Target) -> str:
        e = sorted(abs(x) for x in errors(cases, t, res.host_overhead))
        return f"median {statistics.median(e):.1%}, p90 {e[min(len(e) - 1, int(0.9 * len(e)))]:.1%}"
    lines = [f"{len(cases)} rows of {label}, |predicted / measured - 1|: {base.name} {spread(base)}; "
             f"fitted {spread(res.target)}"]
    plateaus = [f"{unit} {res.values[f]:.1%} of peak (was {getattr(base, f):.1%})"
                for f, unit in _PLATEAUS.items() if f in res.values]
    lines.append("matmul plateau fitted: " + "; ".join(plateaus) if plateaus else
                 "matmul plateaus kept: no row's time depends on them")
    moved = [f for f, v in res.values.items() if v != getattr(base, f)]
    lines.append("changed: " + (", ".join(moved) or "none") + "; confirmed: "
                 + (", ".join(f for f in res.values if f not in moved) or "none"))
    if res.unconstrained:
        lines.append("kept (no row's time depends on them): " + ", ".join(res.unconstrained))
    return lines


def _calibrate_kernels(path: Path, base: str | None, name: str | None, out: Path,
                       report: Callable[[str], None] | None = None) -> Target:
    """Fit a catalog chip's kernel terms to a kernel measurements CSV and write the target."""
    if base is None:
        raise NarrowpipeError(f"{path}: a kernel measurements file calibrates a catalog chip; pass --base NAME")
    target = get_target(base)
    rows = read_kernel_measurements(path)
    if not rows:
        raise NarrowpipeError(f"{path}: no measurements")
    other = _other_chips(rows, target)
    if other:
        raise NarrowpipeError(f"{path}: --base is {target.name}, but rows were measured on "
                              + ", ".join(f"{chip} ({n} rows)" for chip, n in other.items())
                              + ": a chip's terms are fitted to its own rows only (split the file by chip)")
    rows = [r for r in rows if r.kind not in VECTOR_KINDS]    # predicted by the benchmark; no terms of theirs
    if not rows:
        raise NarrowpipeError(f"{path}: no GEMM or convolution rows; norm and elementwise rows have no kernel "
                              "terms to fit (benchmarks/kernel_accuracy.py predicts them)")
    # which of them the rows can tell is decided by the fit (kernel_fit.constrained_fields): a
    # field no row's prediction depends on keeps its value and its source
    fields = [f for f in TERM_GRIDS.get(target.family, {}) if f not in OPTIONAL_TERMS or getattr(target, f) is not None]
    if target.family == "tpu":
        fields = ["mxu_fold_overhead"]        # matmul_efficiency stays: the fold model holds the losses
    cases = kernel_cases(rows, target)
    res = fit_kernel_terms(cases, target, fields,
                           source=f"measured: fitted to {path.name} (calibrate --from-measurements)")
    if not res.values:
        raise NarrowpipeError(f"{path}: no kernel term of {target.name} changes any of these rows' predicted "
                              f"times ({', '.join(res.unconstrained)} each tried): nothing to fit")
    if report is not None:
        for line in _fit_report(cases, target, res, path.name):
            report(line)
    # its own display name too: compared beside its base, the two rows must not read alike
    fitted = dataclasses.replace(res.target, name=name or f"{target.name}-calibrated", aliases=(),
                                 display_name=f"{target.display_name} (fitted to {path.name})")
    _write(out, fitted, None)
    return fitted
