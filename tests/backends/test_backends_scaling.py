"""Target.scaled(): what-if copies with resources multiplied, provenance kept, typos rejected."""

from __future__ import annotations

import dataclasses

import pytest

import narrowpipe
from narrowpipe.backends import DTYPES, RESOURCES, get_target
from narrowpipe.errors import TargetSpecError
from narrowpipe.models.examples import load_example


def test_documented_resource_names_are_exported():
    required = {"peak_flops", "vector_flops", "hbm_bandwidth", "memory_bandwidth",
                "memory_capacity", "onchip_capacity", "interconnect_bandwidth", "launch_overhead"}
    assert required <= set(RESOURCES)
    assert {f"peak_{d}" for d in DTYPES} <= set(RESOURCES)


def test_peak_flops_scales_every_matrix_rate_dense_and_sparse():
    h100 = get_target("h100-sxm")
    fast = h100.scaled(peak_flops=2)
    assert all(fast.matrix_flops[d] == 2 * r for d, r in h100.matrix_flops.items())
    assert all(fast.sparse_matrix_flops[d] == 2 * r for d, r in h100.sparse_matrix_flops.items())
    assert fast.vector_flops == h100.vector_flops
    assert fast.memory_bandwidth == h100.memory_bandwidth


def test_compute_scales_every_flop_rate_matrix_and_vector():
    h100 = get_target("h100-sxm")
    fast = h100.scaled(compute=2)
    for table in ("matrix_flops", "sparse_matrix_flops", "vector_flops"):
        assert all(getattr(fast, table)[d] == 2 * r for d, r in getattr(h100, table).items())
    assert fast.memory_bandwidth == h100.memory_bandwidth


def test_scaled_target_is_a_new_named_target_and_the_original_is_untouched():
    h100 = get_target("h100-sxm")
    fast = h100.scaled(peak_flops=2, hbm_bandwidth=1.5)
    assert fast.name == "h100-sxm@peak_flops=2,hbm_bandwidth=1.5"
    assert fast.aliases == ()
    assert "x1.5" in fast.display_name
    assert h100.matrix_flops["bf16"] == 989e12
    assert fast != h100 and type(fast) is type(h100)


def test_peak_dtype_scales_one_dtype_only():
    h100 = get_target("h100-sxm")
    fp8 = h100.scaled(peak_fp8_e4m3=1.5)
    assert fp8.matrix_flops["fp8_e4m3"] == 1.5 * 1979e12
    assert fp8.sparse_matrix_flops["fp8_e4m3"] == 1.5 * 3958e12
    assert fp8.matrix_flops["bf16"] == h100.matrix_flops["bf16"]


def test_hbm_bandwidth_is_an_alias_of_memory_bandwidth():
    h200 = get_target("h200")
    assert h200.scaled(hbm_bandwidth=2).memory_bandwidth == h200.scaled(
        memory_bandwidth=2).memory_bandwidth == 9.6e12


def test_interconnect_scales_scale_up_scale_out_and_family_links():
    v5p = get_target("tpu-v5p")
    wide = v5p.scaled(interconnect_bandwidth=2)
    assert wide.scale_up_bandwidth == 2 * v5p.scale_up_bandwidth
    assert wide.scale_out_bandwidth == 2 * v5p.scale_out_bandwidth
    assert wide.ici_link_bandwidth == 2 * v5p.ici_link_bandwidth
    groq = get_target("groq-lpu").scaled(scale_up_bandwidth=2)
    assert groq.chip_to_chip_bandwidth == 480e9


def test_onchip_capacity_scales_the_family_onchip_field_too():
    b200 = get_target("b200").scaled(onchip_capacity=2)
    assert b200.onchip_capacity == b200.l2_bytes == 252e6
    wse = get_target("cerebras-wse3").scaled(onchip_capacity=0.5)
    assert wse.onchip_capacity == 22e9


def test_capacity_latency_and_overhead_scale():
    mi = get_target("mi300x").scaled(memory_capacity=1.5, launch_overhead=0.5, link_latency=2)
    assert mi.memory_capacity == 1.5 * 192 * 2**30          # 192 GiB x 1.5
    assert mi.launch_overhead == 0.5e-6
    assert mi.link_latency == 6e-6


def test_scaled_sources_record_the_factor():
    fast = get_target("h100-sxm").scaled(peak_bf16=2)
    assert fast.source("matrix_flops.bf16").endswith("scaled x2 (peak_bf16 what-if)")
    assert "scaled" not in fast.source("matrix_flops.fp16")


def test_unknown_resource_lists_the_valid_names():
    with pytest.raises(TargetSpecError) as info:
        get_target("h100").scaled(hbm_bandwith=2)
    assert "'hbm_bandwith'" in str(info.value) and "hbm_bandwidth" in str(info.value)
    assert all(name in str(info.value) for name in RESOURCES)


@pytest.mark.parametrize("factor", [0, -1, float("inf"), float("nan"), "2", True, None])
def test_bad_factors_are_rejected(factor):
    with pytest.raises(TargetSpecError, match="positive number"):
        get_target("h100").scaled(peak_flops=factor)


def test_scaling_a_rate_the_chip_lacks_is_an_error():
    with pytest.raises(TargetSpecError, match="no fp4 matrix rate"):
        get_target("h100").scaled(peak_fp4=2)
    with pytest.raises(TargetSpecError, match="no value for 'onchip_capacity'"):
        get_target("tpu-v6e").scaled(onchip_capacity=2)


def test_no_factors_returns_the_target_itself():
    h100 = get_target("h100")
    assert h100.scaled() is h100


def test_scaled_targets_can_be_scaled_again():
    twice = get_target("h100").scaled(peak_flops=2).scaled(peak_flops=2)
    assert twice.matrix_flops["bf16"] == 4 * 989e12
    assert dataclasses.replace(twice) == twice


def test_a_chip_whose_sram_is_its_memory_scales_both_names_together():
    """Groq and Cerebras read weights from SRAM (memory_* = onchip_*): onchip_capacity=2 did nothing
    (the layout reads memory_capacity) and hbm_bandwidth scaled a memory the chip does not have."""
    groq = get_target("groq-lpu")
    for resource in ("onchip_capacity", "memory_capacity"):
        bigger = groq.scaled(**{resource: 2})
        assert bigger.memory_capacity == bigger.onchip_capacity == 2 * groq.memory_capacity == 460e6
    faster = groq.scaled(onchip_bandwidth=2)
    assert faster.memory_bandwidth == faster.onchip_bandwidth == 160e12
    with pytest.raises(TargetSpecError, match="has no HBM"):
        groq.scaled(hbm_bandwidth=2)
    with pytest.raises(TargetSpecError, match="both scale"):
        groq.scaled(onchip_capacity=2, memory_capacity=2)
    # SambaNova's memory is its HBM, apart from its SRAM: each name moves its own
    sn = get_target("sambanova-sn40l")
    assert sn.scaled(onchip_capacity=2).memory_capacity == sn.memory_capacity
    # an H100's on-chip capacity is its L2, not its HBM
    h100 = get_target("h100")
    assert h100.scaled(onchip_capacity=2).memory_capacity == h100.memory_capacity


def test_doubling_memory_on_groq_is_one_doubling_of_its_sram():
    r = narrowpipe.analyze(load_example("llama-3-8b"), "groq-lpu", dims={"seq": 1})
    assert r.timing.speedup_if_doubled["memory"] > 1.0
