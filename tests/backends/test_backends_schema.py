"""Schema classes built in Python obey the same rules as spec files."""

from __future__ import annotations

import dataclasses

import pytest
from backends_testdata import gpu_kwargs

from narrowpipe.backends import (
    FrozenMap,
    GpuTarget,
    Level,
    System,
    Target,
    TpuTarget,
    get_target,
)
from narrowpipe.errors import TargetSpecError


def test_a_target_built_in_python_normalises_its_containers():
    target = GpuTarget(**gpu_kwargs())
    assert isinstance(target.matrix_flops, FrozenMap)
    assert target.tile_shapes == ((128, 128, 64),)
    assert target.memory_capacity == 80e9 and isinstance(target.memory_capacity, float)


def test_targets_are_frozen_hashable_and_usable_as_cache_keys():
    target = GpuTarget(**gpu_kwargs())
    with pytest.raises(dataclasses.FrozenInstanceError):
        target.memory_bandwidth = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        target.matrix_flops["bf16"] = 1.0  # type: ignore[index]
    assert {target: 1}[GpuTarget(**gpu_kwargs())] == 1


@pytest.mark.parametrize("overrides, message", [
    ({"memory_bandwidth": -1.0}, "field 'memory_bandwidth': expected a positive number"),
    ({"matrix_flops": {"bfloat16": 1e15}}, "unknown dtype 'bfloat16'"),
    ({"matrix_flops": {}}, "needs at least one dtype"),
    ({"family": "tpu"}, "GpuTarget is family 'gpu', got 'tpu'"),
    ({"matmul_efficiency": 0.0}, "expected a fraction in (0, 1]"),
    ({"tile_shapes": []}, "field 'tile_shapes'"),
    ({"sources": {}}, "no source for 'matrix_flops.bf16'"),
    ({"aliases": ("py-gpu",)}, "repeats the name"),
])
def test_invalid_values_raise_spec_errors(overrides, message):
    with pytest.raises(TargetSpecError) as info:
        GpuTarget(**gpu_kwargs(**overrides))
    assert message in str(info.value)


def test_a_number_needs_a_source_and_a_source_needs_a_number():
    kwargs = gpu_kwargs(tdp=700.0)
    with pytest.raises(TargetSpecError, match="no source for 'tdp'"):
        GpuTarget(**kwargs)
    kwargs = gpu_kwargs()
    kwargs["sources"] = {**kwargs["sources"], "tdp": "datasheet"}
    with pytest.raises(TargetSpecError, match="not set"):
        GpuTarget(**kwargs)


def test_the_base_class_is_abstract():
    with pytest.raises(TargetSpecError, match="abstract"):
        Target(**{k: v for k, v in gpu_kwargs().items()
                  if k not in ("sm_count", "l2_bytes", "smem_per_sm", "tile_shapes")})


def test_torus_must_hold_the_domain():
    v5e = get_target("tpu-v5e")
    with pytest.raises(TargetSpecError, match="do not fit the torus"):
        dataclasses.replace(v5e, torus_dims=(4, 4))
    assert isinstance(v5e, TpuTarget)


def test_as_dict_gives_plain_si_values():
    doc = get_target("h100").as_dict()
    assert doc["matrix_flops"]["bf16"] == 989e12 and isinstance(doc["matrix_flops"], dict)


def _level(**overrides):
    kwargs = dict(fabric="NVLink", topology="switch", bandwidth=450e9, latency=3e-6)
    kwargs.update(overrides)
    return Level(**kwargs)


def _system(**overrides):
    kwargs = dict(name="s", display_name="S", chip="h100", devices=8, scale_up_domain=8,
                  scale_up=_level(), sources={"devices": "x", "scale_up_domain": "x",
                                              "scale_up.bandwidth": "x", "scale_up.latency": "x"})
    kwargs.update(overrides)
    return System(**kwargs)


def test_system_checks_its_shape():
    assert _system().topology == "switch"
    with pytest.raises(TargetSpecError, match="do not split"):
        _system(devices=12)
    with pytest.raises(TargetSpecError, match="no scale-out level"):
        _system(devices=16)
    with pytest.raises(TargetSpecError, match="is not 8 devices"):
        _system(scale_up=_level(topology="torus", dims=(2, 2)),
                sources={"devices": "x", "scale_up_domain": "x", "scale_up.bandwidth": "x",
                         "scale_up.latency": "x", "scale_up.dims": "x"})
    with pytest.raises(TargetSpecError, match="needs its dims"):
        _level(topology="torus")
    with pytest.raises(TargetSpecError, match="unknown value 'hypercube'"):
        _level(topology="hypercube")


def test_replicate_requires_a_scale_out_level():
    with pytest.raises(TargetSpecError, match="no scale-out level"):
        _system().replicate(2)
