"""What ``validate`` checks before it runs anything: that measuring here can answer the question
(this machine's CPU against a CPU target), and that the model fits in this machine's memory before
its weights are materialized (a 70B model used to be killed by the OOM killer half-way).
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections.abc import Iterator

from ..backends import CpuTarget, Target
from ..errors import NarrowpipeError, NarrowpipeWarning

__all__ = ["ValidationError", "ValidationWarning", "check_target_family", "check_fits_in_memory",
           "available_memory", "check_threads", "check_this_machine", "warn_if_not_this_machine",
           "is_calibrated_host", "quiet_native_stderr", "MEMORY_HEADROOM"]

#: Share of the available memory a validation model may take: weights, activations, the eager
#: runtime and the export all live at once (assumption: 2x the weights, see check_fits_in_memory).
MEMORY_HEADROOM = 0.8


class ValidationError(NarrowpipeError):
    """A validation that cannot give a meaningful answer on this machine."""


class ValidationWarning(NarrowpipeWarning):
    """A validation that runs, but whose errors may compare two different machines."""


def is_calibrated_host(target: Target) -> bool:
    """A target ``calibrate`` wrote for a host CPU: its rates are the host's at ``cores`` threads."""
    return isinstance(target, CpuTarget) and target.vendor == "host"


def check_threads(target: Target, threads: int) -> None:
    """A calibrated host's rates are those of the threads it was measured with (``cores``), and the
    CPU model does not scale them by threads: measured at other threads, a validation compares two
    different machines (a 1-thread file validated at 2 threads read +72.7% on gpt2 --tiny)."""
    if not is_calibrated_host(target):
        return
    assert isinstance(target, CpuTarget)
    if threads != target.cores:
        t = "thread" if target.cores == 1 else "threads"
        raise ValidationError(
            f"target {target.name!r} was calibrated at {target.cores} {t} (its rates are {target.cores} "
            f"{t}'s), but torch runs {threads} thread{'s' if threads != 1 else ''} here: the prediction does "
            f"not scale with threads, so the errors would measure the thread count. Validate at --threads "
            f"{target.cores}, or calibrate at --threads {threads} (narrowpipe calibrate --threads {threads} "
            "--out FILE) and validate that")


def _model_tokens(name: str) -> set[str]:
    """The words of a CPU's name that carry a digit (its model number: '9755', '6980p')."""
    return {w for w in re.findall(r"[a-z0-9]+", name.lower()) if any(ch.isdigit() for ch in w)}


def check_this_machine(target: Target, host_model: str, host_cpus: int) -> str | None:
    """Why ``target`` may not be this machine (``host_model``, as lscpu names it, with ``host_cpus``
    logical CPUs), or None where it looks like it: validate measures this machine and predicts the
    target, so on another CPU the errors compare two machines (the 128-core xeon-6980p validated on a
    2-CPU EPYC VM read -97.5% on gpt2 --tiny). A calibrated host file names its CPU in its display name; a catalog CPU
    is this machine when its model number is in this CPU's name and it has no more cores than this
    machine has CPUs. A warning, not a refusal: a VM may hide its model number."""
    if not isinstance(target, CpuTarget):
        return None
    here = f"this machine ({host_model}, {host_cpus} CPU{'s' if host_cpus != 1 else ''})"
    if is_calibrated_host(target):
        if target.display_name.startswith(f"{host_model} ("):
            return None
        return (f"target {target.name!r} was calibrated on {target.display_name.split(' (')[0]!r}, not on "
                f"{here}: its errors compare two machines; calibrate this one (narrowpipe calibrate --out FILE)")
    tokens = _model_tokens(target.display_name)
    if tokens and tokens <= _model_tokens(host_model) and target.cores <= host_cpus:
        return None
    return (f"target {target.name!r} is the catalog's {target.display_name} ({target.cores} cores), not {here}: "
            f"validate measures this machine, so its errors compare two machines; calibrate this one "
            f"(narrowpipe calibrate --out host.toml) and validate that")


def warn_if_not_this_machine(target: Target) -> None:
    """:func:`check_this_machine` for the machine this runs on, as a :class:`ValidationWarning`."""
    from .host import describe_cpu
    reason = check_this_machine(target, describe_cpu().model, os.cpu_count() or 1)
    if reason is not None:
        warnings.warn(reason, ValidationWarning, stacklevel=3)


def check_target_family(target: Target) -> None:
    """Validation measures eager torch on this machine's CPU, so only a CPU target is comparable."""
    if target.family != "cpu":
        raise ValidationError(
            f"validate measures eager torch on this machine's CPU, but target {target.name!r} is a "
            f"{target.family}: CPU measurements say nothing about that prediction. Validate a CPU target "
            f"(`narrowpipe calibrate --out host.toml` makes one of this machine), or run "
            f"benchmarks/gpu_validate.py on a machine with the GPU")


def available_memory() -> int | None:
    """Bytes the kernel reports as available (MemAvailable), or None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_fits_in_memory(name: str, param_count: int, bytes_per_param: int = 4,
                         available: int | None = None) -> None:
    """Refuse a model whose weights, twice over (weights plus the activations, the exported copy
    and the allocator's slack of an eager run), exceed :data:`MEMORY_HEADROOM` of what is free."""
    free = available if available is not None else available_memory()
    if free is None:
        return
    need = 2 * param_count * bytes_per_param
    if need > MEMORY_HEADROOM * free:
        raise ValidationError(
            f"{name} needs about {need / 1e9:.3g} GB to run eagerly here ({param_count / 1e9:.3g} B parameters "
            f"x {bytes_per_param} bytes, twice), but {free / 1e9:.3g} GB is available; use --tiny, or "
            f"analyze/compare, which never materialize weights")


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Silence what native code writes to file descriptor 2 (torch's profiler prints
    ``profiler_start``/``profiler_stop`` lines from C++ that no Python setting reaches)."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w", encoding="ascii") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
