"""What ``validate`` checks before it runs anything: that measuring here can answer the question
(this machine's CPU against a CPU target), and that the model fits in this machine's memory before
its weights are materialized (a 70B model used to be killed by the OOM killer half-way).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from ..backends import Target
from ..errors import NarrowpipeError

__all__ = ["ValidationError", "check_target_family", "check_fits_in_memory", "available_memory",
           "quiet_native_stderr", "MEMORY_HEADROOM"]

#: Share of the available memory a validation model may take: weights, activations, the eager
#: runtime and the export all live at once (assumption: 2x the weights, see check_fits_in_memory).
MEMORY_HEADROOM = 0.8


class ValidationError(NarrowpipeError):
    """A validation that cannot give a meaningful answer on this machine."""


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
