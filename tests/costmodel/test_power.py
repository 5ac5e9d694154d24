"""Energy by utilization: idle + compute + memory terms, checked by hand and against the anchors."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.backends.defaults import IDLE_POWER_FRACTION, MEMORY_POWER_FRACTION
from narrowpipe.costmodel.execution.common import KernelTime
from narrowpipe.costmodel.power import kernel_power, power_model
from narrowpipe.models import transformer
from narrowpipe.models.examples import load_example

H100 = get_target("h100")


def test_terms_by_hand():
    pm = power_model(H100)
    assert pm is not None
    assert pm.idle_w == pytest.approx(700 * IDLE_POWER_FRACTION)
    assert pm.memory_w == pytest.approx(700 * MEMORY_POWER_FRACTION)
    assert pm.idle_w + pm.compute_w + pm.memory_w == pytest.approx(700)
    stream = KernelTime(1e-3, 0.0, 1e-3, 0.0, 0.0, "memory", "hbm", 0.85)
    assert kernel_power(stream, pm) == pytest.approx(pm.idle_w + pm.memory_w)
    both = KernelTime(1e-3, 1e-3, 1e-3, 0.0, 0.0, "compute", "tc", 0.8)
    assert kernel_power(both, pm) == pytest.approx(700)                  # saturating both: TDP, no more
    gap = KernelTime(1e-6, 0.0, 0.0, 0.0, 1e-6, "overhead", "", 0.0)
    assert kernel_power(gap, pm) == pytest.approx(pm.idle_w)             # a launch gap idles
    padded = KernelTime(1e-3, 0.5e-3, 1e-3, 0.0, 0.0, "memory", "tc", 0.9, executed_flops=128.0)
    assert kernel_power(padded, pm, useful_flops=1.0) == pytest.approx(
        pm.idle_w + pm.memory_w + pm.compute_w * 0.5 / 128)               # padding is not power


def test_decode_draws_far_less_than_tdp_and_prefill_near_it():
    """LLM decode at batch 1 is memory-bound: its energy is well under TDP x time (the old model);
    a long prefill is compute-bound and draws most of TDP."""
    g = transformer(layers=4, hidden=4096, heads=32, vocab=128256, ffn=14336, kv_heads=8, gated_mlp=True)
    decode = narrowpipe.analyze(g, "h100", seq=1).timing
    prefill = narrowpipe.analyze(g, "h100", seq=4096).timing
    decode_w = decode.energy_j / decode.time_s
    prefill_w = prefill.energy_j / prefill.time_s
    assert decode.bound_mix["memory"] > 0.8 and prefill.bound_mix["compute"] > 0.8
    # measured H100 SXM LLM serving draws 267-680 W from batch 1 to 128 (defaults.py's source)
    assert 0.3 * 700 < decode_w < 0.5 * 700
    assert 0.75 * 700 < prefill_w <= 700
    assert prefill_w > 1.5 * decode_w


def test_no_tdp_means_no_energy():
    t = narrowpipe.analyze(transformer(layers=1, hidden=256, heads=4, vocab=1000), "tpu-v5e", seq=8).timing
    assert get_target("tpu-v5e").tdp is None and t.energy_j is None


def _one_kernel_program() -> object:
    from types import SimpleNamespace
    return SimpleNamespace(kernels=[SimpleNamespace(cost=SimpleNamespace(flops=None))])


def test_pipelined_schedule_charges_busy_time_not_shares():
    """A pipelined layout's times are shares of the pipelined total; the chips are busy
    ``fixed + m x reads + work`` per piece (Pipelining's own definition). By hand: one memory-bound
    kernel (power idle + memory_w) on 2 chips, pieces (fixed 1 us, reads 10 us, work 40 us) each,
    m = 8: busy 2 x (1 + 80 + 40) us = 242 us, where its scaled share in the times is 100 us."""
    from narrowpipe.costmodel.execution.pipeline import Pipelining
    from narrowpipe.costmodel.execution.program import Schedule
    from narrowpipe.costmodel.power import schedule_energy
    groq = get_target("groq-lpu")
    pm = power_model(groq)
    assert pm is not None
    share = KernelTime(100e-6, 0.0, 100e-6, 0.0, 0.0, "memory", "sram", 0.9)
    pipe = Pipelining(8, (((0, 0.5, 1e-6, 10e-6, 40e-6), (1, 0.5, 1e-6, 10e-6, 40e-6)),))
    total = 150e-6
    s = Schedule([share], total, 2, {"k": 0}, 0.0, 1.0, True, 2, pipelining=pipe)
    busy = 2 * (1e-6 + 8 * 10e-6 + 40e-6)
    assert schedule_energy(_one_kernel_program(), s, groq) == pytest.approx(  # type: ignore[arg-type]
        2 * total * pm.idle_w + busy * pm.memory_w)


def test_sharded_schedule_charges_every_shard():
    """A tensor-parallel dataflow schedule's times are one chip's and ``shards`` chips run each
    kernel at once: 4 chips x 100 us of a memory-bound kernel add 4 x 100 us x memory_w."""
    from narrowpipe.costmodel.execution.program import Schedule
    from narrowpipe.costmodel.power import schedule_energy
    groq = get_target("groq-lpu")
    pm = power_model(groq)
    assert pm is not None
    kt = KernelTime(100e-6, 0.0, 100e-6, 0.0, 0.0, "memory", "sram", 0.9)
    s = Schedule([kt], 100e-6, 4, {"k": 0}, 0.0, 1.0, True, 4, shards=4)
    assert schedule_energy(_one_kernel_program(), s, groq) == pytest.approx(  # type: ignore[arg-type]
        4 * 100e-6 * pm.idle_w + 4 * 100e-6 * pm.memory_w)


def test_a_scaled_kernel_keeps_its_padding_discount():
    """A pipelined layout scales each kernel's time (and, for its rate, its work) to its share of the
    total; the padding discount compares the kernel's own work with the model's FLOPs, whatever the
    share (scaled by 0.5, 128 executed FLOPs became 64 and the discount halved)."""
    pm = power_model(H100)
    assert pm is not None
    padded = KernelTime(1e-3, 0.5e-3, 1e-3, 0.0, 0.0, "memory", "tc", 0.9, executed_flops=128.0)
    for k in (0.5, 2.0, 1e-3):
        assert kernel_power(padded.scaled(k), pm, useful_flops=1.0) == pytest.approx(
            kernel_power(padded, pm, useful_flops=1.0))


def test_a_last_wave_of_few_ctas_draws_compute_power_on_its_busy_sms_only():
    """136 tiles on 132 SMs run in two waves, the second with 4 busy SMs: the compute term spans
    both waves but only 136 / 264 of its SM-time works, so it draws that share of the compute watts."""
    pm = power_model(H100)
    assert pm is not None
    busy = 136 / (2 * 132)
    kt = KernelTime(1e-3, 1e-3, 0.0, 0.0, 0.0, "compute", "tc", 0.5, executed_flops=1.0, busy_fraction=busy)
    assert kernel_power(kt, pm) == pytest.approx(pm.idle_w + pm.compute_w * busy)


def test_causal_attention_executes_its_padded_blocks_not_the_idle_sms():
    """Llama-3-8B causal attention at 512 tokens on an H100: 4 query blocks of 128 rows over 4 key
    blocks execute 4 + 3 + 2 + 1 = 10 of 16 blocks, 5/8 of the full count FlopCounterMode gives; 32
    heads x 4 blocks = 128 items fill 128 of 132 SMs, which the executed count used to add (0.6445)."""
    report = narrowpipe.analyze(load_example("llama-3-8b"), "h100", dims={"batch": 1, "seq": 512})
    entry = next(e for e in report.timeline if e.op == "attention")
    assert entry.executed_flops / entry.flops == pytest.approx(5 / 8)

