"""Peer-load (one-shot / two-shot) all-reduces: serving engines' own kernels inside a switch domain.

Hand numbers pin each formula; the published kernel times they are checked against (sglang's and
vLLM's benchmarks on H100, backends/catalog/SOURCES.toml SGL-AR and VLLM-SYMM) are rows of
benchmarks/collective_validate.py (tests/costmodel/execution/test_collective_validation.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from narrowpipe.backends import get_system, get_target
from narrowpipe.costmodel.execution.algorithms import one_shot, ring, two_shot
from narrowpipe.costmodel.execution.collectives import Topology
from narrowpipe.ir import Op

KiB, MiB = 1024, 1024 * 1024


def test_one_shot_reads_every_peers_buffer_in_one_step_and_two_shot_moves_the_ring_bytes_in_two():
    one = one_shot(Op.ALL_REDUCE, 8 * KiB, 8, 450e9, 4.6e-6)
    assert one.latency_s == pytest.approx(4.6e-6)
    assert one.transfer_s == pytest.approx(7 * 8192 / 450e9)                  # 0.13 us
    two = two_shot(Op.ALL_REDUCE, 8 * MiB, 8, 450e9, 4.6e-6)
    assert two.seconds == pytest.approx(2 * 4.6e-6 + 2 * 7 / 8 * 8 * MiB / 450e9)
    assert one_shot(Op.ALL_GATHER, 8 * KiB, 8, 450e9, 4.6e-6) is None
    assert two_shot(Op.ALL_REDUCE, 8 * KiB, 1, 450e9, 4.6e-6) is None


def test_a_decode_all_reduce_over_eight_h100s_is_one_step_with_the_engines_kernels_and_an_ll_ring_with_nccl():
    """8 KiB (one token of a 4,096-wide model in bf16) over 8 H100s: NCCL's ring on its LL protocol
    takes 6.6 us + 2 x 7 steps of 0.6 us (NCCL-TUNE) = 15 us; the engines' one-shot one step of 4.6 us
    (peer_all_reduce_latency_us, SGL-AR: 5.7 us measured at 4 KiB less a 1 us launch) plus 7 x 8 KiB
    at 450 GB/s."""
    h100 = get_target("h100")
    nccl = Topology.of(h100)
    assert not nccl.peer_all_reduce
    t = nccl.time(Op.ALL_REDUCE, 8 * KiB, 8)
    assert t.algorithm == "ring (LL)" and t.seconds == pytest.approx(6.6e-6 + 14 * 0.6e-6 + 1.75 * 8192 / 141e9)
    engine = replace(nccl, peer_all_reduce=True)
    t = engine.time(Op.ALL_REDUCE, 8 * KiB, 8)
    assert t.algorithm == "one-shot" and t.seconds == pytest.approx(4.6e-6 + 7 * 8192 / 450e9)
    assert engine.time(Op.ALL_GATHER, 8 * KiB, 8).algorithm == "ring (LL)"   # all-reduce kernels only


def test_mid_sized_all_reduces_take_the_two_shot_and_large_ones_nvls_on_a_dgx_h100():
    """At 4 MiB over 6 H100s: two-shot 2 x 4.6 us + 5/3 x 4 MiB / 370 GB/s = 28.1 us, under the ring's
    10 x 3 us + the same bytes (48.9 us) and NVLS's 49 us fixed time; at 1 GiB NVLS's 480 GB/s wins."""
    topo = replace(Topology.of_system(get_system("dgx-h100")), peer_all_reduce=True)
    t = topo.time(Op.ALL_REDUCE, 4 * MiB, 6)
    assert t.algorithm == "two-shot" and t.seconds == pytest.approx(2 * 4.6e-6 + 5 / 3 * 4 * MiB / 370e9)
    assert topo.time(Op.ALL_REDUCE, 1 << 30, 8).algorithm == "in-network"


def test_the_engines_kernels_stay_inside_one_domain_and_off_chips_without_their_latency():
    """Custom all-reduce is intra-node (peer memory over NVLink): 16 ranks over two DGX H100 use NCCL's
    algorithms; a TPU torus and a chip without ``peer_all_reduce_latency`` never get one-shot."""
    two_nodes = replace(Topology.of_system(get_system("dgx-h100").replicate(2)), peer_all_reduce=True)
    assert two_nodes.time(Op.ALL_REDUCE, 8 * KiB, 16).algorithm not in ("one-shot", "two-shot")
    tpu = replace(Topology.of(get_target("tpu-v5e")), peer_all_reduce=True)
    assert tpu.time(Op.ALL_REDUCE, 8 * KiB, 4).algorithm not in ("one-shot", "two-shot")
    b200 = get_target("b200")
    assert getattr(b200, "peer_all_reduce_latency", None) is None
    plain = replace(Topology.of(b200), peer_all_reduce=True)
    assert plain.time(Op.ALL_REDUCE, 8 * KiB, 8).seconds == pytest.approx(min(
        ring(Op.ALL_REDUCE, 8 * KiB, 8, b200.scale_up_bandwidth, b200.link_latency).seconds,
        6.6e-6 + 14 * 0.6e-6 + 1.75 * 8 * KiB / min(b200.scale_up_bandwidth / 2, 282e9)))
