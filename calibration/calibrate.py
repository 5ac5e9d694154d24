"""``narrowpipe calibrate``: measure this machine and write a target file with its real ceilings.

On the CPU the target is built from the host's description (cores, clock, SIMD) plus the fit; on a
CUDA device the matching catalog chip is the base and only its measured ceilings change. The raw
measurements are written beside the target (``<out>.measurements.json``) so the fit can be audited
or redone, and ``--from-measurements`` applies a measurement file to any chip (a user's own data).
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

from ..backends import Target, dump_target, get_target
from ..errors import NarrowpipeError
from .fit import apply_measurements, host_target
from .host import describe_cpu
from .sweeps import Measurement, run_all

__all__ = ["calibrate", "measurements_path", "load_measurements", "CUDA_TARGETS", "cuda_target_name"]

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
        return [Measurement.from_dict(m) for m in data["measurements"]]
    except FileNotFoundError:
        raise NarrowpipeError(f"{p}: measurements file not found") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise NarrowpipeError(f"{p}: not a narrowpipe measurements file ({exc})") from None


def calibrate(out: str | Path = "host.toml", *, device: str = "cpu", quick: bool = False, base: str | None = None,
              from_measurements: str | Path | None = None, name: str | None = None,
              progress: Callable[[str], None] | None = None) -> Target:
    """Run (or load) the sweeps, fit, and write the target file and its measurements."""
    import torch
    t0 = time.perf_counter()
    if from_measurements is not None:
        measurements = load_measurements(from_measurements)
    else:
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise NarrowpipeError("no CUDA device is available; calibrate the CPU with --device cpu")
        measurements = run_all(device, quick, progress)
    if base is None and device.startswith("cuda"):
        base = cuda_target_name(torch.cuda.get_device_name())
    if base is not None:
        target = apply_measurements(get_target(base), measurements, name)
        device_name = get_target(base).display_name
    else:
        host = describe_cpu(torch.get_num_threads())
        target = host_target(host, measurements, name or "host")
        device_name = host.model
    out = Path(out)
    dump_target(target, out)
    raw = {"format": "narrowpipe.measurements", "version": 1, "date": date.today().isoformat(),
           "device": device_name, "torch": torch.__version__, "platform": platform.platform(),
           "threads": torch.get_num_threads(), "seconds": time.perf_counter() - t0,
           "measurements": [m.to_dict() for m in measurements]}
    measurements_path(out).write_text(json.dumps(raw, indent=1))
    return target
