"""Collectives that leave one scale-up domain: never cheaper than the same bytes inside it.

NCCL's tree all-reduce is hierarchical (NCCL-TUNE: src/graph/connect.cc chains the ranks of a node,
src/graph/trees.cc builds the double binary tree over nodes; src/graph/tuning.cc prices it
``2 * ((nRanks/nNodes-1) * intraLat + log2i(nNodes) * interLat)``). A flat binary tree over every rank
at 3 us a step priced a 16 KiB all-reduce over 2 x 8 H100s at 24.1 us, under the 42.1 us of the
8-GPU ring inside one node, and made Llama-3-70B decode faster at TP16 than the model allowed. The
expected times below are hand computations from the system files' numbers (3 us per NVLink step,
derived from MLE-NET's 8xH200 sweep; 5 us per network hop, an assumption NCCL's tuner corroborates
with 5.0 us for a network tree hop), not the code's output."""

from __future__ import annotations

import pytest

from narrowpipe.backends import get_system, get_target
from narrowpipe.costmodel.execution.algorithms import tree
from narrowpipe.costmodel.execution.collectives import Topology
from narrowpipe.ir import Op

KiB = 1024
NVLINK_STEP, NET_HOP = 3e-6, 5e-6            # dgx-h100.toml: scale_up.latency, scale_out.latency


def test_tree_latency_is_a_chain_inside_each_domain_and_a_binary_tree_over_the_domains():
    """Two DGX H100 nodes: 7 chain steps and 1 tree level each way; 4 nodes: 7 and 2."""
    two = tree(Op.ALL_REDUCE, 16 * KiB, 2, 370e9, NET_HOP, local=8, local_alpha=NVLINK_STEP)
    assert two is not None
    assert two.latency_s == pytest.approx(2 * (7 * 3e-6 + 1 * 5e-6))                 # 52 us
    assert two.transfer_s == pytest.approx(2 * 16 * KiB / 370e9)
    four = tree(Op.ALL_REDUCE, 16 * KiB, 4, 370e9, NET_HOP, local=8, local_alpha=NVLINK_STEP)
    assert four is not None and four.latency_s == pytest.approx(2 * (7 * 3e-6 + 2 * 5e-6))   # 62 us
    three = tree(Op.ALL_REDUCE, 16 * KiB, 3, 370e9, NET_HOP, local=8, local_alpha=NVLINK_STEP)
    assert three is not None and three.latency_s == pytest.approx(2 * (7 * 3e-6 + 2 * 5e-6))  # btree depth 2
    flat = tree(Op.ALL_REDUCE, 16 * KiB, 16, 370e9, NET_HOP)          # one device per domain: 4 levels
    assert flat is not None and flat.latency_s == pytest.approx(2 * 4 * 5e-6)
    assert tree(Op.ALL_GATHER, 16 * KiB, 2, 370e9, NET_HOP, local=8, local_alpha=NVLINK_STEP) is None


def test_a_16_kib_all_reduce_over_two_dgx_h100_nodes_costs_more_than_over_one():
    """Inside: the ring on NCCL's LL protocol, 6.6 us + 14 steps of 0.6 us plus 2 x 7/8 x 16 KiB at
    min(370 / 2, 141) GB/s = 15.2 us (NCCL-TUNE's constants; NVLS's 49 us fixed cost and the Simple
    ring's 14 x 3 us lose). Across: NCCL's tree, 2 x (7 x 3 + 5) us plus 2 x 16 KiB at 370 GB/s (the
    ring's rate, 8 NICs x 50 GB/s being more) = 52.1 us; the ring across would take 30 steps."""
    topo = Topology.of_system(get_system("dgx-h100").replicate(2))
    size = 16 * KiB
    inside = topo.time(Op.ALL_REDUCE, size, 8)
    assert inside.algorithm == "ring (LL)"
    assert inside.seconds == pytest.approx(6.6e-6 + 14 * 0.6e-6 + 2 * 7 / 8 * size / 141e9)
    across = topo.time(Op.ALL_REDUCE, size, 16)
    assert across.algorithm == "tree"
    assert across.seconds == pytest.approx(2 * (7 * 3e-6 + 1 * 5e-6) + 2 * size / 370e9)
    assert across.seconds >= inside.seconds


def test_chip_fields_price_two_nodes_no_cheaper_than_one():
    """QA's repro (h100 chip fields, one 3 us latency for both levels, no measured busbw): 42.1 us
    over 8 GPUs was 24.1 us over 16; now 2 x (7 + 1) x 3 us + 2 x 16 KiB at min(450, 8 x 50) GB/s
    across, and NCCL's LL ring inside (6.6 + 14 x 0.6 us, 141 GB/s)."""
    topo = Topology.of(get_target("h100"))
    inside, across = topo.time(Op.ALL_REDUCE, 16 * KiB, 8), topo.time(Op.ALL_REDUCE, 16 * KiB, 16)
    assert inside.seconds == pytest.approx(6.6e-6 + 14 * 0.6e-6 + 2 * 7 / 8 * 16 * KiB / 141e9)
    assert across.seconds == pytest.approx(2 * (7 + 1) * 3e-6 + 2 * 16 * KiB / 400e9)
    assert across.seconds > inside.seconds


@pytest.mark.parametrize("system", ["dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "gb200-nvl72", "mi300x-8"])
@pytest.mark.parametrize("op", [Op.ALL_REDUCE, Op.ALL_GATHER, Op.REDUCE_SCATTER, Op.ALL_TO_ALL])
def test_no_collective_spanning_domains_is_cheaper_than_one_domain_of_the_same_bytes(system, op):
    """Every size from 64 B to 4 GiB, two and four domains against one: each cross-domain path (ring
    through the NICs, NCCL's tree, the two-level form) pays at least the domain's own steps."""
    sys_ = get_system(system)
    topo = Topology.of_system(sys_.replicate(4))
    d = sys_.scale_up_domain
    for k in range(6, 33, 2):
        size = float(2 ** k)
        one = topo.time(op, size, d).seconds
        for n in (2 * d, 4 * d):
            assert topo.time(op, size, n).seconds >= one * (1 - 1e-12), (size, n)
