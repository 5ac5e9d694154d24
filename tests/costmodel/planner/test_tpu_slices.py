"""A TPU job on fewer chips than a pod runs on the standard slice of that many chips (Google's
published slice shapes, GCP-V5P / GCP-V5E / GCP-V4), with wraparound where the slice has it (SB-TPU
tpus.md: any multiple of a full 4x4x4 cube wraps every axis, smaller slices none; a v5e axis of 16
wraps, shorter ones do not); a count that is no slice is refused unless whole slices join over DCN.

Expected times are hand computations from the system files' numbers: one ICI link of TPU v5p carries
0.82 x 9e10 B/s one way (SB-SHARD's measured efficiency on SB-TPU's per-link rate; the file's 443 GB/s
over 6 links), one of v5e 0.82 x 4.5e10 (148 GB/s over 4); 1.45 us per hop. A bidirectional all-gather
over an axis of k with wraparound takes k // 2 hops on both links of the axis, over a line k - 1 hops on
one (SB-TPU sharding.md)."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe import PlanError
from narrowpipe.backends import get_system
from narrowpipe.costmodel.execution.collectives import Topology
from narrowpipe.costmodel.planner.planner import Planner, resolve_machine
from narrowpipe.ir import Op

GB = 1e9
V5P_LINK = 443e9 / 6            # one ICI link of a v5p chip, one way: 0.82 x 9e10 (SB-SHARD on SB-TPU's rate)
V5E_LINK = 148e9 / 4            # one ICI link of a v5e chip: 0.82 x 4.5e10, as the files round it
HOP = 1.45e-6


@pytest.fixture(scope="module")
def model() -> narrowpipe.Graph:
    return narrowpipe.transformer(2, 512, 8, 1000, seq=128, name="tiny")


def test_64_v5p_chips_are_a_4x4x4_cube_with_wraparound_not_an_8x8_plane(model):
    """MaxText's 32B on v5p-128 (64 chips) runs tp=4 on a cube axis closed by wraparound: 1 GB
    gathered over 4 chips moves 0.75 GB over both links of the axis in 2 hops; on the 8x8x8 slice's
    first axis the 4 chips were a line (one link, 3 hops): twice the time."""
    plan = Planner(model, "tpu-v5p", 64, global_batch=64)
    assert plan.system is not None and plan.system.name == "tpu-v5p-4x4x4"
    assert plan.system.scale_up.dims == (4, 4, 4) and plan.system.scale_up.wraps == (True,) * 3
    cube = plan.topology.time(Op.ALL_GATHER, 1 * GB, 4)
    assert cube.seconds == pytest.approx(2 * HOP + 0.75 * GB / (2 * V5P_LINK), rel=1e-3)
    pod = Topology.of_system(get_system("tpu-v5p-8x8x8")).time(Op.ALL_GATHER, 1 * GB, 4)
    assert pod.seconds == pytest.approx(3 * HOP + 0.75 * GB / V5P_LINK, rel=1e-3)


def test_32_v5p_chips_are_a_2x4x4_mesh_with_five_links_per_chip():
    """Below a full cube no axis wraps (SB-TPU: 'a 2x2x4 won't have any wraparounds'): an all-gather
    over all 32 runs one link per axis, 1 + 3 + 3 hops."""
    _, system = resolve_machine("tpu-v5p", devices=32)
    assert system is not None and system.scale_up.dims == (2, 4, 4) and not any(system.scale_up.wraps)
    assert system.scale_up.links == 5 and system.scale_up.topology == "mesh"
    t = Topology.of_system(system).time(Op.ALL_GATHER, 1 * GB, 32)
    assert t.seconds == pytest.approx(7 * HOP + 31 / 32 * GB / (3 * V5P_LINK), rel=1e-3)


def test_a_v5e_8x16_slice_wraps_its_long_axis_only():
    """128 v5e chips: 8x16, wraparound on the 16-long axis (SB-TPU). tp=8 on the short axis is a line
    (7 hops, one link); dp=16 eight ranks apart spans the long axis, a ring (8 hops, both links)."""
    _, system = resolve_machine("tpu-v5e", devices=128)
    assert system is not None and system.scale_up.dims == (8, 16) and system.scale_up.wraps == (False, True)
    topo = Topology.of_system(system)
    assert topo.time(Op.ALL_GATHER, 1 * GB, 8).seconds == pytest.approx(7 * HOP + 7 / 8 * GB / V5E_LINK, rel=1e-3)
    assert topo.time(Op.ALL_GATHER, 1 * GB, 16, 8).seconds == pytest.approx(
        8 * HOP + 15 / 16 * GB / (2 * V5E_LINK), rel=1e-3)


@pytest.mark.parametrize("chip, devices, shape", [
    ("tpu-v4", 4, (2, 2, 1)), ("tpu-v4", 32, (2, 4, 4)), ("tpu-v5p", 128, (4, 4, 8)), ("tpu-v5p", 256, (4, 8, 8)),
    ("tpu-v5e", 16, (4, 4)), ("tpu-v5e", 64, (8, 8)),
])
def test_each_published_slice_size_gets_its_shape(chip, devices, shape):
    _, system = resolve_machine(chip, devices=devices)
    assert system is not None and system.devices == devices and system.scale_up.dims == shape


def test_the_v4_slices_with_their_own_files_keep_them():
    """tpu-v4-2x2x2 and 2x2x4 keep their files' numbers (111 and 148 GB/s bus bandwidth)."""
    assert resolve_machine("tpu-v4", devices=8)[1].name == "tpu-v4-2x2x2"
    assert resolve_machine("tpu-v4", devices=16)[1].scale_up.bus_bandwidth == pytest.approx(148e9)


def test_a_count_that_is_no_slice_is_refused_with_the_slice_sizes(model):
    """TPU v4 has no scale-out level in the catalog: 48 chips are no slice and cannot be joined. The
    pod (tpu-v4-16x16x16) lists the slices of whole cubes too (GCP-V4: v4-384 is 4x4x12)."""
    with pytest.raises(PlanError, match=r"48 x tpu-v4 is not a slice of tpu-v4-16x16x16: its standard slices have "
                                        r"4, 8, 16, 32, 64, 128, 192, 256, .* chips; .*no scale-out level"):
        Planner(model, "tpu-v4", 48, global_batch=48)


def test_whole_slices_join_over_dcn_where_the_pod_has_it(model):
    """96 v5p chips = 3 slices of 2x4x4 (32) over DCN (multislice; GCP-V5P 50 Gbps per chip)."""
    plan = Planner(model, "tpu-v5p", 96, global_batch=96)
    assert plan.system is not None and plan.system.scale_up.dims == (2, 4, 4)
    assert plan.topology.scale_up_domain == 32 and plan.topology.scale_out is not None
    assert plan.topology.scale_out.bandwidth == pytest.approx(50e9 / 8)


def test_an_explicit_pod_system_also_runs_fewer_chips_on_their_slice():
    _, system = resolve_machine("tpu-v5p", "tpu-v5p-8x8x8", devices=64)
    assert system is not None and system.name == "tpu-v5p-4x4x4"


def test_a_slice_shape_is_checked():
    from narrowpipe.backends.slices import parse_slice
    from narrowpipe.errors import TargetSpecError

    assert parse_slice("s", "4wx4wx8w") == ((4, 4, 8), (True, True, True))
    assert parse_slice("s", "8x16w") == ((8, 16), (False, True))
    with pytest.raises(TargetSpecError, match="not a slice shape"):
        parse_slice("s", "4xwx4")


def test_a_multislice_plan_says_it_is_several_slices(model):
    from narrowpipe.costmodel.planner.domain_notes import domain_notes
    from narrowpipe.costmodel.planner.strategy import Parallel

    plan = Planner(model, "tpu-v5e", 96, global_batch=96)
    notes = domain_notes(plan.topology, Parallel(tp=1, pp=1, dp=96, global_batch=96), plan.system_name)
    assert any(n.startswith("96 devices are 3 slices of 32 (tpu-v5e-4x8, 4x8)") for n in notes)


def test_a_plans_slice_name_reads_back_as_that_slice():
    """The plan names its system tpu-v5p-4x4x4; --system with that name (or a plan file read back)
    gets the same derived slice."""
    system = get_system("tpu-v5p-4x4x4")
    assert system.devices == 64 and system.scale_up.wraps == (True, True, True)
    assert resolve_machine("tpu-v5p", "tpu-v5p-4x4x4", devices=64)[1].scale_up.dims == (4, 4, 4)


def test_maxtext_32b_on_v5p_128_lands_near_its_published_mfu(tmp_path):
    """MaxText's v5p perf table (MaxText/configs/v5p/32b.sh, its README): the 32B model (8192 wide,
    64 heads, 28,672 MLP, 32 layers) on v5p-128 (64 chips), tensor 4 x FSDP 16, batch 7 per device,
    seq 2048: 71.47% MFU. On part of the 8x8x8 slice (tp=4 as a line, 1 us hops at the links' peak)
    the plan read 65.2%; on the 4x4x4 cube it reads 70.7% (Megatron-Core's selective recomputation) and,
    under the TPU default runtime (maxtext) with the script's remat_policy minimal (dots), 70.0%."""
    import json

    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "vocab_size": 32000,
        "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 64, "intermediate_size": 28672,
        "num_hidden_layers": 32, "head_dim": 128}))
    plan = narrowpipe.plan(str(config), "tpu-v5p", 64, global_batch=448, seq=2048, parallel={
        "tp": 4, "pp": 1, "dp": 16, "zero": 3, "recompute": "dots", "microbatch": 7})
    assert plan.system == "tpu-v5p-4x4x4" and plan.runtime["name"] == "maxtext"
    assert plan.mfu == pytest.approx(0.7147, abs=0.02)


def test_1024_and_2048_v5p_chips_are_one_torus_not_slices_over_dcn(model):
    """MaxText's 1x v5p-2048 and 1x v5p-4096 rows are single slices: 8x8x16 and 8x16x16, every axis
    closed (GCP-V5P's topology table; 'All 4x4x4 and larger slices have full 3D torus connectivity'),
    not 8x8x8 slices joined over 50 Gbps of DCN per chip."""
    for devices, dims in ((1024, (8, 8, 16)), (2048, (8, 16, 16))):
        plan = Planner(model, "tpu-v5p", devices, global_batch=devices)
        assert plan.system is not None and plan.system.scale_up.dims == dims
        assert plan.system.scale_up.wraps == (True, True, True)
        assert plan.topology.scale_up_domain == devices


def test_192_v4_chips_are_the_4x4x12_slice_of_the_pod(model):
    """MaxText's 52B row runs on v4-384: 192 chips, 4x4x12 (GCP-V4: each axis a multiple of 4)."""
    plan = Planner(model, "tpu-v4", 192, global_batch=192)
    assert plan.system is not None and plan.system.name == "tpu-v4-4x4x12"
    assert plan.system.scale_up.dims == (4, 4, 12)
