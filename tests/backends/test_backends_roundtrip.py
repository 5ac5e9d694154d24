"""dump -> load returns an equal object, for every catalog entry and for awkward values."""

from __future__ import annotations

import dataclasses

import pytest

from narrowpipe.backends import (
    dump_system,
    dump_target,
    get_system,
    get_target,
    load_system_file,
    load_target_file,
    system_from_dict,
    system_to_dict,
    systems,
    target_from_dict,
    target_to_dict,
    targets,
)


@pytest.mark.parametrize("name", [n for n, _ in targets()])
def test_every_catalog_target_round_trips_exactly(name, tmp_path):
    target = get_target(name)
    path = dump_target(target, tmp_path / f"{name}.toml")
    again = load_target_file(path)
    assert again == target
    assert hash(again) == hash(target)
    # Writing the reloaded target gives the same text: the format is stable.
    assert dump_target(again, tmp_path / "second.toml").read_text() == path.read_text()


@pytest.mark.parametrize("name", [n for n, _ in systems()])
def test_every_catalog_system_round_trips_exactly(name, tmp_path):
    system = get_system(name)
    assert load_system_file(dump_system(system, tmp_path / f"{name}.toml")) == system
    assert system_from_dict(system_to_dict(system)) == system


def test_dict_round_trip_without_files():
    target = get_target("tpu-v5p")
    assert target_from_dict(target_to_dict(target)) == target


def test_dump_uses_human_units():
    doc = target_to_dict(get_target("h100-sxm"))
    assert doc["memory_bandwidth_tbps"] == 3.35
    assert doc["matrix_tflops"]["bf16"] == 989
    assert doc["launch_overhead_us"] == 1


def test_value_with_no_exact_human_form_falls_back_to_si(tmp_path):
    # Neither value survives x / 1e12 * 1e12 exactly, so the SI spelling must be used.
    odd = dataclasses.replace(get_target("groq-lpu"), memory_bandwidth=4384393972260.0283,
                              matrix_flops={"fp16": 9287261735244422.0, "int8": 750e12})
    doc = target_to_dict(odd)
    assert "memory_bandwidth_bytes_per_s" in doc and "matrix_flops" in doc
    assert load_target_file(dump_target(odd, tmp_path / "odd.toml")) == odd


def test_awkward_strings_round_trip(tmp_path):
    odd = dataclasses.replace(get_target("groq-lpu"),
                              notes='quotes " and \\ backslash\nnew line, tab\t, µs, del \x7f')
    assert load_target_file(dump_target(odd, tmp_path / "odd.toml")) == odd


def test_scaled_and_curved_targets_round_trip(tmp_path):
    base = get_target("mi300x")
    curved = dataclasses.replace(
        base.scaled(peak_flops=1.5, interconnect_bandwidth=2),
        matmul_curve=((1e9, 0.2), (1e12, 0.6), (1e15, 0.78)),
        bandwidth_curve=((4096.0, 0.05), (1 << 30, 0.9)),
        sources={**base.scaled(peak_flops=1.5, interconnect_bandwidth=2).sources,
                 "matmul_curve": "measured: test", "bandwidth_curve": "measured: test"})
    assert load_target_file(dump_target(curved, tmp_path / "c.toml")) == curved


def test_replicated_system_round_trips(tmp_path):
    cluster = get_system("dgx-h100").replicate(16)
    assert cluster.devices == 128 and cluster.domains == 16
    assert load_system_file(dump_system(cluster, tmp_path / "c.toml")) == cluster
