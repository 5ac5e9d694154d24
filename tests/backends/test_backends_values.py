"""Spot checks of catalog numbers against shared/reference/hardware.md, converted by hand to SI."""

from __future__ import annotations

import pytest

from narrowpipe.backends import get_target

GiB = 2**30
MiB = 2**20


def test_h100_sxm_matches_the_datasheet_dense_figures():
    h100 = get_target("h100-sxm")
    assert h100.matrix_flops["bf16"] == 989e12            # 1,979 sparse / 2 (section 2)
    assert h100.matrix_flops["fp8_e4m3"] == 1979e12
    assert h100.matrix_flops["tf32"] == 494.5e12
    assert h100.sparse_matrix_flops["bf16"] == 1979e12
    assert h100.vector_flops["fp32"] == 67e12
    assert h100.memory_bandwidth == 3.35e12
    assert h100.memory_capacity == pytest.approx(81559 * 2**20, rel=1e-5)   # what nvidia-smi reports, not 80e9
    assert h100.onchip_capacity == h100.l2_bytes == 50e6
    assert h100.scale_up_bandwidth == 450e9               # 900 GB/s bidir, one direction
    assert (h100.scale_up_links, h100.scale_up_domain) == (18, 8)
    assert h100.scale_out_bandwidth == 50e9                # 400 Gb/s NDR
    assert (h100.sm_count, h100.clock_hz, h100.tdp) == (132, 1.83e9, 700.0)
    assert h100.smem_per_sm == 228 * 1024
    assert h100.matmul_efficiency == pytest.approx(794.5 / 989, abs=1e-4)
    assert h100.price_per_hour == 55.04 / 8                # AWS p5.48xlarge on demand, 8 GPUs


def test_h200_has_h100_compute_and_more_memory():
    h100, h200 = get_target("h100-sxm"), get_target("h200")
    assert h200.memory_capacity == pytest.approx(143771 * 2**20, rel=1e-5)  # nvidia-smi; the label says 141 GB
    assert h200.memory_bandwidth == 4.8e12
    assert h200.matrix_flops == h100.matrix_flops


def test_a100_has_no_fp8_and_hbm2e_bandwidth():
    a100 = get_target("a100-sxm-80gb")
    assert a100.matrix_flops["bf16"] == 312e12
    assert "fp8_e4m3" not in a100.matrix_flops
    assert a100.memory_bandwidth == 2039e9
    assert a100.scale_up_bandwidth == 300e9


def test_blackwell_parts():
    b200, gb200 = get_target("b200"), get_target("gb200")
    assert b200.matrix_flops["fp4"] == 9000e12
    assert b200.memory_bandwidth == 8e12
    assert b200.scale_up_bandwidth == 900e9
    assert (b200.scale_up_domain, gb200.scale_up_domain) == (8, 72)
    assert gb200.matrix_flops["bf16"] == 2500e12 and gb200.tdp == 1200


def test_amd_parts():
    mi300x, mi355x = get_target("mi300x"), get_target("mi355x")
    assert mi300x.matrix_flops["bf16"] == 1307.4e12
    assert mi300x.scale_up_bandwidth == 448e9 and mi300x.scale_up_links == 7
    assert mi300x.onchip_capacity == 256 * MiB and mi300x.l2_bytes == 32 * MiB
    assert mi355x.matrix_flops["fp4"] == 10100e12
    assert mi355x.scale_up_bandwidth == 535.5e9


@pytest.mark.parametrize("name, mxu", [("tpu-v4", 128), ("tpu-v5e", 128), ("tpu-v5p", 128),
                                       ("tpu-v6e", 256), ("trainium2", 128)])
def test_systolic_array_sizes(name, mxu):
    assert get_target(name).mxu_dim == mxu


def test_tpu_figures():
    v5e, v5p, v4 = get_target("tpu-v5e"), get_target("tpu-v5p"), get_target("tpu-v4")
    assert v5e.matrix_flops["bf16"] == 197e12 and v5e.memory_bandwidth == 819e9
    assert v5e.onchip_capacity == 128 * MiB and v5e.torus_dims == (16, 16)
    assert v5e.scale_up_bandwidth == 200e9                 # 400 GBps bidir
    assert v5p.memory_capacity == 95 * GiB and v5p.torus_dims == (16, 20, 28)
    assert v4.memory_capacity == 32 * GiB and v4.torus_dims == (16, 16, 16)
    assert get_target("tpu-v7").matrix_flops["fp8_e4m3"] == 4614e12


def test_other_systolic_chips_use_the_tpu_family():
    trn2, gaudi3 = get_target("trainium2"), get_target("gaudi3")
    assert trn2.family == gaudi3.family == "tpu"
    assert trn2.matrix_flops["fp8_e4m3"] == 1299e12 and trn2.memory_capacity == 96 * GiB
    assert gaudi3.matrix_flops["bf16"] == 1677e12 and gaudi3.torus_dims == ()
    assert gaudi3.scale_up_bandwidth == 525e9


def test_dataflow_chips():
    groq, wse3, sn = get_target("groq-lpu"), get_target("cerebras-wse3"), get_target("sn40l")
    assert groq.onchip_capacity == groq.memory_capacity == 230e6    # the SRAM is the main memory
    assert groq.external_memory_capacity == 0 and groq.weight_streaming is False
    assert wse3.pe_count == 900_000 and wse3.onchip_capacity == 44e9 and wse3.weight_streaming
    assert wse3.onchip_bandwidth == 21e15
    assert sn.matrix_flops["bf16"] == 638e12 and sn.external_memory_capacity == 1.5e12


def test_cpus():
    xeon, epyc = get_target("xeon-6980p"), get_target("epyc-9755")
    assert xeon.matrix_flops["bf16"] == 128 * 1024 * 2.0e9
    assert xeon.amx_ops_per_cycle == 1024 and epyc.amx_ops_per_cycle == 0
    assert xeon.memory_bandwidth == epyc.memory_bandwidth == 614.4e9
    assert epyc.vector_flops["fp32"] == 128 * 64 * 2.7e9


@pytest.mark.parametrize("name", ["a100-sxm-80gb", "h100-sxm", "h100-pcie", "h200", "b200"])
def test_nvidia_sparse_rates_are_about_twice_dense(name):
    target = get_target(name)
    for dtype, rate in target.sparse_matrix_flops.items():
        assert rate == pytest.approx(2 * target.matrix_flops[dtype], rel=1e-3)  # vendor rounding


def test_derived_and_unconfirmed_values_say_so():
    assert get_target("b200").source("matrix_flops.fp64").startswith("unconfirmed:")
    assert get_target("xeon-6980p").source("matrix_flops.bf16").startswith("derived:")
    assert get_target("tpu-v7").source("mxu_dim").startswith("assumption:")
