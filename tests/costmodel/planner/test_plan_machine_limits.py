"""What plan refuses to time rather than time wrongly, and the TPU ICI figures the slices share.

- A chip planned with its own fields beyond its scale-up domain and with no scale-out figure (TPU
  v6e: 256-chip pods, no DCN figure in its spec) would time a 1,024-chip all-gather as one on the
  pod's ICI; refused, as a system without a scale-out level refuses more chips than it holds.
- A dataflow chip's training step is laid out by the dataflow training model (``analyze --train``);
  plan's Megatron strategies would treat its SRAM as HBM.
- The TPU v5e and v5p systems run collectives at the ICI efficiency and per-hop latency measured
  on TPU v5e (SB-SHARD), as the v4 files already did.
"""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe import PlanError
from narrowpipe.backends import get_system
from narrowpipe.costmodel.planner.planner import Planner, resolve_machine
from narrowpipe.ir import Op


@pytest.fixture(scope="module")
def model() -> narrowpipe.Graph:
    return narrowpipe.transformer(2, 512, 8, 1000, seq=128, name="tiny")


def test_a_chip_without_a_scale_out_figure_is_refused_beyond_its_pod(model):
    with pytest.raises(PlanError, match=r"1024 x tpu-v6e: its scale-up domain holds 256 devices .* at most 256"):
        Planner(model, "tpu-v6e", 1024, global_batch=1024)
    assert Planner(model, "tpu-v6e", 256, global_batch=256).topology.scale_up_domain == 256


def test_a_dataflow_chip_is_pointed_at_the_dataflow_training_model(model):
    with pytest.raises(PlanError, match=r"dataflow chip.*analyze MODEL --train --target cerebras-wse3"):
        Planner(model, "cerebras-wse3", 8, global_batch=16)


@pytest.mark.parametrize("system, links, per_link", [
    ("tpu-v5e-256", 4, 45e9),     # SB-TPU: 4.5e10 B/s one way per v5e link
    ("tpu-v5p-8x8x8", 6, 90e9),   # SB-TPU: 9e10 B/s one way per v5p link
    ("tpu-v4-4x4x4", 6, 45e9),
])
def test_tpu_ici_runs_at_the_measured_fraction_of_its_links(system, links, per_link):
    """SB-SHARD: a 34 MB gather on v5e took ~680 us against 560 us at the links' rate, 0.82 of it;
    per hop (8 us - 1 us - 2.7 us) / 3 = 1.45 us. Applied alike to every TPU system file."""
    level = get_system(system).scale_up
    assert level is not None and level.bus_bandwidth == pytest.approx(0.82 * links * per_link, rel=3e-3)
    assert level.latency == pytest.approx(1.45e-6)


def test_the_v5e_slice_reproduces_the_gather_it_was_measured_on():
    """SB-SHARD pop quiz 2: an AllGather of 34 MB over the axis of 4 (no wraparound) of a v5e 8x4
    slice measured ~680 us: 3 hops + 0.75 x 34 MB over one link at 0.82 x 45 GB/s = 695 us (+2%)."""
    _, system = resolve_machine("tpu-v5e", devices=32)
    from narrowpipe.costmodel.execution.collectives import Topology

    t = Topology.of_system(system).time(Op.ALL_GATHER, 34e6, 4)
    assert t.seconds == pytest.approx(680e-6, rel=0.03)
