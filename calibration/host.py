"""What the host is: CPU model, cores, clock and SIMD features (from /proc/cpuinfo and lscpu),
or the CUDA device torch sees. The theoretical peaks derived here are the datasheet-like numbers a
calibrated target keeps beside its measured ceilings; where a fact is unknown the source says so.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from dataclasses import dataclass, field

from ..backends.defaults import AMX_BF16_OPS_PER_CYCLE

__all__ = ["HostCpu", "describe_cpu", "cache_bytes"]


@dataclass
class HostCpu:
    model: str
    cores: int
    clock_hz: float
    simd_bits: int
    fma_units: int
    bf16_simd: bool
    amx: bool
    l3_bytes: float | None
    sources: dict[str, str] = field(default_factory=dict)
    #: One core's L2 (data or unified), from the OS; None where it does not say.
    l2_bytes: float | None = None

    @property
    def fp32_peak(self) -> float:
        """cores x (SIMD lanes) x 2 (FMA) x FMA units x clock."""
        return self.cores * (self.simd_bits / 32) * 2 * self.fma_units * self.clock_hz

    @property
    def bf16_peak(self) -> float:
        if self.amx:
            return self.cores * AMX_BF16_OPS_PER_CYCLE * self.clock_hz
        return self.fp32_peak * (2 if self.bf16_simd else 1)


def _lscpu() -> dict[str, str]:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines()) if v}


def _cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _cpuinfo_field(info: str, key: str) -> str | None:
    """The first ``key : value`` of /proc/cpuinfo's text, or None where the kernel does not report it."""
    m = re.search(rf"{key}\s*:\s*(.+)", info)
    return m.group(1) if m else None


_SIZE = re.compile(r"([\d.]+)\s*([KMG])i?B?", re.IGNORECASE)


def _bytes(text: str) -> float | None:
    m = _SIZE.match(text.strip())
    return float(m.group(1)) * {"K": 2**10, "M": 2**20, "G": 2**30}[m.group(2).upper()] if m else None


def cache_bytes(level: int, sysfs: str = "/sys/devices/system/cpu/cpu0/cache") -> float | None:
    """CPU 0's cache of ``level`` (a data or unified one) as the kernel describes it
    (``/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}``: the per-core L2, the L3 the
    core shares); None where the OS does not say."""
    try:
        names = sorted(os.listdir(sysfs))
    except OSError:
        return None
    for name in names:
        d = os.path.join(sysfs, name)
        try:
            with open(os.path.join(d, "level"), encoding="utf-8") as fh:
                lvl = int(fh.read().strip())
            with open(os.path.join(d, "type"), encoding="utf-8") as fh:
                kind = fh.read().strip()
            with open(os.path.join(d, "size"), encoding="utf-8") as fh:
                size = _bytes(fh.read())
        except (OSError, ValueError):
            continue
        if lvl == level and kind in ("Data", "Unified") and size:
            return size
    return None


def describe_cpu(threads: int | None = None) -> HostCpu:
    info, ls = _cpuinfo(), _lscpu()
    sources: dict[str, str] = {}
    model = ls.get("Model name") or _cpuinfo_field(info, "model name") or platform.processor() or "unknown CPU"
    cores = threads or os.cpu_count() or 1
    sources["cores"] = "measured: threads torch uses (os.cpu_count / torch.get_num_threads)"
    clock = None
    for key in ("CPU max MHz", "CPU MHz"):
        if ls.get(key):
            clock = float(ls[key]) * 1e6
            sources["clock_hz"] = f"lscpu '{key}'"
            break
    if clock is None:
        m = re.search(r"cpu MHz\s*:\s*([\d.]+)", info)
        if m:
            clock = float(m.group(1)) * 1e6
            sources["clock_hz"] = "/proc/cpuinfo 'cpu MHz'"
    if clock is None and ls.get("BogoMIPS"):
        clock = float(ls["BogoMIPS"]) / 2 * 1e6
        sources["clock_hz"] = "derived: lscpu BogoMIPS / 2 (no MHz reported, e.g. in a VM)"
    if clock is None:
        clock = 2.5e9
        sources["clock_hz"] = "assumption: 2.5 GHz (the host reports no clock)"
    flags = set((ls.get("Flags") or _cpuinfo_field(info, "flags") or "").split())
    simd = 512 if "avx512f" in flags else 256 if "avx2" in flags else 128
    sources["simd_width_bits"] = f"cpu flags ({'avx512f' if simd == 512 else 'avx2' if simd == 256 else 'sse'})"
    sources["fma_units"] = ("assumption: 2 FMA pipes per core (most x86 server cores); "
                            "the measured efficiency absorbs the difference")
    l3 = None
    m = re.match(r"([\d.]+)\s*([KMG])i?B", ls.get("L3 cache", ""))
    if m:
        l3 = float(m.group(1)) * {"K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]
        sources["onchip_capacity"] = "lscpu 'L3 cache'"
    l2 = cache_bytes(2)
    if l2:
        sources["l2_bytes"] = "/sys/devices/system/cpu/cpu0/cache (level 2)"
    return HostCpu(str(model), cores, clock, simd, 2, "avx512_bf16" in flags, "amx_bf16" in flags, l3, sources, l2)
