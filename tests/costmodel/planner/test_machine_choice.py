"""Which system a plan runs on: a chip with several catalog systems (TPU v4 slices of 8, 16 and 64
chips, no scale-out level) takes the one of its device count, or the standard slice of that many
chips derived from the cube (4: 2x2x1, 32: 2x4x4; GCP-V4), and a count that is no slice is refused
instead of being timed on part of a larger slice's topology."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe import PlanError
from narrowpipe.costmodel.planner.planner import Planner, resolve_machine


@pytest.fixture(scope="module")
def model() -> narrowpipe.Graph:
    return narrowpipe.transformer(2, 512, 8, 1000, seq=128, name="tiny")


@pytest.mark.parametrize("devices, system", [
    (8, "tpu-v4-2x2x2"), (16, "tpu-v4-2x2x4"), (64, "tpu-v4-4x4x4"),   # the slice of that size
    (4, "tpu-v4-2x2x1"), (32, "tpu-v4-2x4x4"),                         # the cube's standard slices
])
def test_a_tpu_v4_plan_runs_on_the_slice_that_holds_its_chips(devices, system):
    assert resolve_machine("tpu-v4", devices=devices)[1].name == system


def test_chips_no_slice_holds_are_refused_with_the_slices_named(model):
    with pytest.raises(PlanError, match=r"96 x tpu-v4 is not a slice of tpu-v4-16x16x16: .*4, 8, 16, 32, 64, 128, "
                                        r"192, 256, 512, .* chips"):       # 4x4x6: 6 is no multiple of 4 (GCP-V4)
        Planner(model, "tpu-v4", 96, global_batch=96)
    assert Planner(model, "tpu-v4", 512, global_batch=512).system_name == "tpu-v4-8x8x8"   # 8 whole cubes
    with pytest.raises(PlanError, match=r"12 x tpu-v4 is not a slice"):     # was timed on part of the 2x2x4
        Planner(model, "tpu-v4", 12, global_batch=12)


def test_a_named_slice_refuses_more_chips_than_it_has(model):
    with pytest.raises(PlanError, match="64 devices do not fit tpu-v4-2x2x2 \\(8 devices\\)"):
        Planner(model, "tpu-v4-2x2x2", 64, global_batch=64)
    with pytest.raises(PlanError, match="128 x tpu-v4 is not a slice of tpu-v4-4x4x4"):
        Planner(model, "tpu-v4", 128, global_batch=128, system="tpu-v4-4x4x4")


def test_a_system_with_a_network_still_replicates(model):
    p = Planner(model, "h100", 32, global_batch=32)
    assert p.system is not None and p.system.name == "dgx-h100"
    assert p.topology.scale_up_domain == 8 and p.topology.scale_out is not None
    assert resolve_machine("h100", devices=4)[1].name == "dgx-h100"


def test_a_system_of_another_chip_than_the_target_is_refused(model):
    """--target tpu-v5e --system dgx-h100 planned 16 x h100-sxm and served a TPU's collectives on
    NVLink, saying nothing; the same chip by an alias is the system's chip."""
    from narrowpipe.costmodel.serving import serve
    from narrowpipe.errors import TargetSpecError

    with pytest.raises(TargetSpecError, match="--target tpu-v5e and --system dgx-h100, a system of h100-sxm"):
        Planner(model, "tpu-v5e", 16, global_batch=16, system="dgx-h100")
    with pytest.raises(TargetSpecError, match="a system of h100-sxm"):
        serve(model, "tpu-v5e", tp=8, system="dgx-h100")
    chip, system = resolve_machine("h100", "dgx-h100")
    assert (chip.name, system.name) == ("h100-sxm", "dgx-h100") and system.target().name == chip.name
