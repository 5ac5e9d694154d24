"""A dataflow layout holds no chip past its fast memory, leaves none empty, and splits what is too big.

A QA pass found Llama-3-8B laid over 70 Groq chips (16.06 GB / 230 MB: the right count) with the
embedding and the LM head whole on one chip each (1,051 MB on a 230 MB chip), 34 chips at 436 MB and
~35 empty: cuts moved to low-traffic positions without a capacity check, and the fit compared the
chips' total capacity with the total footprint. At a 512-token prompt the head's chip took 4.09 ms
per pass against a 0.42 ms median stage. Now each chip takes an equal share of the footprint and
never more than its SRAM, a kernel that does not fit what is left of a chip is split over
consecutive chips (as Groq's compiler splits a tensor), and the fit is the fullest chip's.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from graph_builders import gemm_graph  # tests/graph_builders.py

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution import TimingOptions
from narrowpipe.costmodel.execution.dataflow import DataflowModel, hop_seconds
from narrowpipe.costmodel.execution.dataflow_layout import boundary_bytes, cuts
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.sizes import values_bytes
from narrowpipe.costmodel.timing import fused_program
from narrowpipe.ir import DType
from narrowpipe.models.examples import load_example

GROQ_SRAM = 230e6
# Llama-3-8B by hand (config: vocab 128,256, hidden 4,096, 32 layers, 8 KV heads of 128, MLP 14,336, bf16)
VOCAB_MATRIX = 128256 * 4096 * 2                                     # 1,050,673,152 B: embedding, and the head
LAYER = (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336 + 2 * 4096) * 2
LLAMA3_8B_WEIGHTS = 2 * VOCAB_MATRIX + 32 * LAYER + 4096 * 2         # 16,060,522,752 B


@pytest.fixture(scope="module")
def decode():
    return narrowpipe.analyze(load_example("llama-3-8b"), "groq-lpu", dims={"batch": 1, "seq": 1})


def test_llama3_8b_fills_70_chips_none_past_its_sram_and_none_empty(decode):
    plan = decode.timing.plan
    held = plan["chip_bytes"]
    # the export's two 64-value rotary buffers (256 B) aside
    assert sum(plan["chip_weight_bytes"]) == pytest.approx(LLAMA3_8B_WEIGHTS, abs=256)
    assert plan["chips"] == len(held) == math.ceil(sum(held) / GROQ_SRAM) == 70
    assert max(held) <= GROQ_SRAM * (1 + 1e-9) and min(held) > 0.85 * GROQ_SRAM  # equal shares of 229.4 MB
    assert decode.timing.fits


def test_the_vocabulary_matrices_are_split_over_enough_chips(decode):
    split = decode.timing.plan["split_kernels"]
    head = decode.timing.plan["chip_of_kernel"]
    for name in ("embedding", "linear_224"):                            # the embedding and the LM head
        parts = split[name]
        assert len(parts) >= math.ceil(VOCAB_MATRIX / GROQ_SRAM) == 5
        assert sum(f for _, f in parts) == pytest.approx(1.0)
        chips = [c for c, _ in parts]
        assert chips == list(range(chips[0], chips[0] + len(chips)))   # consecutive chips
        assert head[name] in chips
        assert max(f for _, f in parts) * VOCAB_MATRIX <= GROQ_SRAM


def test_a_long_prompt_no_longer_waits_on_the_head_chip():
    r = narrowpipe.analyze(load_example("llama-3-8b"), "groq-lpu", dims={"batch": 1, "seq": 512})
    stages = sorted(r.timing.plan["stage_seconds"])
    assert stages[-1] < 1.5 * stages[len(stages) // 2]                # it was 4.09 ms against 0.42 ms
    assert max(r.timing.plan["chip_bytes"]) <= GROQ_SRAM * (1 + 1e-9)


def test_cuts_move_to_quiet_boundaries_only_while_no_chip_is_empty_or_overfull():
    # 920 bytes on 3 chips of 400: equal shares of 306.7; every kernel boundary crosses nothing, so each
    # cut would move to one if it could; a 500-byte kernel fits no chip and must be split
    sizes = [100, 500, 10, 10, 300]
    quiet, busy = [0.0] * 6, [50.0] * 5
    found = cuts(sizes, quiet, busy, 400, 3)
    edges = [0.0] + [sum(sizes[:i]) + f * sizes[i] for i, f in found] + [sum(sizes)]
    held = [b - a for a, b in zip(edges, edges[1:])]
    assert all(0 < h <= 400 for h in held), held
    assert found[0][0] == 1 and 0 < found[0][1] < 1                   # inside the 500-byte kernel
    assert found[1] in ((3, 0.0), (4, 0.0))                           # a quiet boundary that fits
    # a boundary that would leave the first chip empty or the rest past the capacity is not taken
    assert cuts([10, 790], [0.0] * 3, [1.0] * 2, 400, 2) == [(1, pytest.approx(390 / 790))]


def test_a_gemm_larger_than_a_chip_is_split_with_its_latency_paid_once():
    """64 x 16384 @ 16384 x 16384 fp16: 512 MiB of weights over 3 chips of 230 MB. Each part does its
    share of the work, the kernel's fixed latency is paid once, and a hop links each chip to the next
    (the graph's input reaches every chip from the host and its output leaves from each: no bytes on
    the chain)."""
    groq = get_target("groq-lpu")
    g = gemm_graph(64, 16384, 16384, DType.FP16)
    r = narrowpipe.analyze(g, groq)
    plan = r.timing.plan
    assert plan["chips"] == 3 and max(plan["chip_bytes"]) <= groq.memory_capacity
    (_, parts), = plan["split_kernels"].items()
    assert [c for c, _ in parts] == [0, 1, 2]
    big = dataclasses.replace(groq, memory_capacity=1e12, onchip_capacity=1e12)
    whole = narrowpipe.analyze(g, big)                                 # the same GEMM on one chip
    assert whole.timing.devices == 1
    assert r.time_s == pytest.approx(whole.time_s + 2 * hop_seconds(0, groq), rel=1e-9)


def test_a_hop_inside_a_split_kernel_carries_its_input_and_the_output_made_so_far():
    """Inside Llama-3-8B's LM head the chain carries the final norm's output the head reads (4,096 bf16
    values at batch 1); the logits are the graph's output, read by no later kernel."""
    groq = get_target("groq-lpu")
    table = interpret(load_example("llama-3-8b"), {"batch": 1, "seq": 1})
    program = fused_program(table, groq, TimingOptions())
    layout = DataflowModel().layouts(program, groq, None)[0]
    carried = boundary_bytes(program.kernels, layout.cuts, layout.chips, table)
    head = [c for c, _ in layout.shares["linear_224"]]
    assert [carried[c] for c in head[:-1]] == [4096 * 2] * (len(head) - 1)
    gate = next(name for name, parts in layout.shares.items() if len(parts) == 2 and name.startswith("linear"))
    first = layout.shares[gate][0]
    made = first[1] * values_bytes(table, next(k for k in program.kernels if k.name == gate).outputs)
    assert carried[first[0]] >= made > 0
