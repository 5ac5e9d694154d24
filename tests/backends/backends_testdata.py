"""Test data for the backends tests: a minimal valid user chip, as TOML text and as kwargs.

A plain module with a distinctive name (not conftest) so test files can import it without clashing
with other packages' conftest modules.
"""

from __future__ import annotations

MINIMAL_GPU_TOML = '''\
name = "my-gpu"
family = "gpu"
vendor = "Acme"
display_name = "Acme MyGPU"
memory_capacity_gb = 96
memory_bandwidth_tbps = 4
scale_up_bandwidth_gbps = 400
sm_count = 100
l2_mb = 64
smem_per_sm_kib = 200

[matrix_tflops]
bf16 = 1000
fp8_e4m3 = 2000

[sources]
matrix_flops = "Acme datasheet"
memory_capacity = "Acme datasheet"
memory_bandwidth = "Acme datasheet"
scale_up_bandwidth = "Acme datasheet"
sm_count = "Acme datasheet"
l2_bytes = "Acme datasheet"
smem_per_sm = "Acme datasheet"
'''


def gpu_kwargs(**overrides):
    """Keyword arguments for a valid GpuTarget built in Python (SI units)."""
    kwargs = dict(
        name="py-gpu", family="gpu", vendor="Acme", display_name="Acme PyGPU",
        matrix_flops={"bf16": 1e15}, memory_capacity=80e9, memory_bandwidth=3e12,
        scale_up_domain=8, matmul_efficiency=0.8, memory_efficiency=0.9, launch_overhead=1e-6,
        sm_count=132, l2_bytes=50e6, smem_per_sm=228 * 1024, tile_shapes=[(128, 128, 64)],
    )
    kwargs.update(overrides)
    keys = ["matrix_flops." + d for d in kwargs["matrix_flops"]]
    keys += [k for k in ("memory_capacity", "memory_bandwidth", "scale_up_domain",
                         "matmul_efficiency", "memory_efficiency", "launch_overhead", "sm_count",
                         "l2_bytes", "smem_per_sm", "tile_shapes") if kwargs.get(k) is not None]
    kwargs.setdefault("sources", {k: "test" for k in keys})
    return kwargs
