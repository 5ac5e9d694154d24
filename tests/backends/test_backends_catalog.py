"""The shipped catalog: every file loads, names and aliases resolve, every number is sourced."""

from __future__ import annotations

import pytest

from narrowpipe.backends import (
    CpuTarget,
    DataflowTarget,
    GpuTarget,
    TpuTarget,
    get_system,
    get_target,
    source_refs,
    systems,
    targets,
)
from narrowpipe.backends.loader import load_target_file
from narrowpipe.backends.registry import CATALOG_DIR, _Index
from narrowpipe.backends.sourcing import value_keys
from narrowpipe.backends.tomlio import read_toml
from narrowpipe.errors import TargetSpecError, UnknownTargetError

REQUIRED_TARGETS = {
    "a100-sxm-80gb": "gpu", "h100-sxm": "gpu", "h100-pcie": "gpu", "h200": "gpu", "b200": "gpu",
    "gb200": "gpu", "mi300x": "gpu", "mi355x": "gpu", "tpu-v4": "tpu", "tpu-v5e": "tpu",
    "tpu-v5p": "tpu", "tpu-v6e": "tpu", "tpu-v7": "tpu", "tpu-v7-tensorcore": "tpu", "trainium2": "tpu",
    "gaudi3": "tpu",
    "groq-lpu": "dataflow", "cerebras-wse3": "dataflow", "sambanova-sn40l": "dataflow",
    "xeon-6980p": "cpu", "epyc-9755": "cpu",
    # older GPUs that public per-kernel benchmarks ran on (benchmarks/kernel_accuracy.py)
    "v100-sxm2": "gpu", "p100-pcie": "gpu", "t4": "gpu", "mi25": "gpu",
}
REQUIRED_SYSTEMS = {"dgx-h100", "hgx-h200", "dgx-b200", "gb200-nvl72", "mi300x-8",
                    "tpu-v5p-8x8x8", "tpu-v5e-256", "trn2-16", "groq-node", "cerebras-cs3"}
CLASSES = {"gpu": GpuTarget, "tpu": TpuTarget, "dataflow": DataflowTarget, "cpu": CpuTarget}
ALL_TARGETS = [name for name, _ in targets()]
ALL_SYSTEMS = [name for name, _ in systems()]


def test_catalog_has_the_required_chips_with_their_families():
    assert dict(targets()) == REQUIRED_TARGETS


def test_targets_are_sorted_by_name():
    assert targets() == sorted(targets())


@pytest.mark.parametrize("name", ALL_TARGETS)
def test_every_catalog_file_loads_into_its_family_class(name):
    target = get_target(name)
    assert type(target) is CLASSES[target.family]
    assert target.name == name
    assert load_target_file(CATALOG_DIR / f"{name}.toml") == target


@pytest.mark.parametrize("name", ALL_TARGETS)
def test_every_number_in_a_catalog_target_has_a_source(name):
    target = get_target(name)
    assert set(value_keys(target)) == set(target.sources)
    assert all(text.strip() for text in target.sources.values())


def _cites_a_known_source(text: str, refs: set[str]) -> bool:
    return text.startswith("assumption:") or any(ref in text for ref in refs)


@pytest.mark.parametrize("name", ALL_TARGETS)
def test_catalog_target_sources_cite_a_known_key_or_say_assumption(name):
    refs = set(source_refs())
    bad = {k: v for k, v in get_target(name).sources.items() if not _cites_a_known_source(v, refs)}
    assert not bad


@pytest.mark.parametrize("name", ALL_SYSTEMS)
def test_catalog_system_sources_cite_a_known_key_or_say_assumption(name):
    refs = set(source_refs())
    bad = {k: v for k, v in get_system(name).sources.items() if not _cites_a_known_source(v, refs)}
    assert not bad


@pytest.mark.parametrize("name", ALL_TARGETS)
def test_catalog_sources_are_keyed_as_their_values_are_written(name):
    """``clock_mhz = 1830`` has its source under ``clock_mhz``, not ``clock_hz``: one spelling."""
    raw = read_toml(CATALOG_DIR / f"{name}.toml")
    written = set(raw) - {"sources"}
    bad = [k for k in _flat(raw["sources"]) if k.split(".")[0] not in written]
    assert not bad


def _flat(table, prefix=""):
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield prefix + key


def test_source_refs_come_from_the_reference_key_table():
    refs = source_refs()
    assert "nvidia.com" in refs["NV-H100"]["source"]
    assert {"NV-H100", "SB-TPU", "GCP-V5E", "GROQ", "CER3", "TURIN", "2ND"} <= set(refs)


@pytest.mark.parametrize("spelling, name", [
    ("h100", "h100-sxm"), ("H100", "h100-sxm"), ("H100_SXM", "h100-sxm"),
    ("  h100-sxm5 ", "h100-sxm"), ("TPU v5e", "tpu-v5e"), ("ironwood", "tpu-v7"),
    ("tpu7x", "tpu-v7"), ("trn2", "trainium2"), ("a100", "a100-sxm-80gb"), ("groq", "groq-lpu"),
    ("MI300X", "mi300x"), ("trillium", "tpu-v6e"), ("wse-3", "cerebras-wse3"),
])
def test_aliases_and_case_resolve_to_the_canonical_target(spelling, name):
    assert get_target(spelling).name == name


def test_lookup_is_cached_and_returns_the_same_object():
    assert get_target("h100") is get_target("h100-sxm")


def test_unknown_target_suggests_close_names():
    with pytest.raises(UnknownTargetError) as info:
        get_target("h10")
    message = str(info.value)
    assert "'h10'" in message and "h100-sxm" in message and "Did you mean" in message


def test_unknown_target_is_a_narrowpipe_error_not_a_key_error():
    with pytest.raises(UnknownTargetError):
        get_target("quantum-chip-9000")


def test_get_target_passes_a_target_through():
    target = get_target("b200")
    assert get_target(target) is target


def test_duplicate_alias_in_a_catalog_folder_is_rejected(tmp_path):
    text = (CATALOG_DIR / "h200.toml").read_text()
    (tmp_path / "h200.toml").write_text(text)
    clash = text.replace('name = "h200"', 'name = "h200-copy"')
    (tmp_path / "h200-copy.toml").write_text(clash)
    with pytest.raises(TargetSpecError, match="already used"):
        _Index(tmp_path, load_target_file)


def test_catalog_file_name_must_match_target_name(tmp_path):
    (tmp_path / "other.toml").write_text((CATALOG_DIR / "h200.toml").read_text())
    with pytest.raises(TargetSpecError, match="must match the file name"):
        _Index(tmp_path, load_target_file)


def test_catalog_has_the_required_systems():
    assert set(ALL_SYSTEMS) >= REQUIRED_SYSTEMS


@pytest.mark.parametrize("name", ALL_SYSTEMS)
def test_every_system_names_a_catalog_chip_whose_domain_can_hold_it(name):
    system = get_system(name)
    chip = system.target()
    assert chip.name == system.chip
    assert system.scale_up_domain <= chip.scale_up_domain
    assert set(value_keys(system)) == set(system.sources)


@pytest.mark.parametrize("name, topology", [
    ("dgx-h100", "switch"), ("gb200-nvl72", "switch"), ("mi300x-8", "full-mesh"),
    ("tpu-v5p-8x8x8", "torus"), ("tpu-v5e-256", "torus"), ("trn2-16", "torus"),
    ("groq-node", "full-mesh"), ("cerebras-cs3", "single"), ("tpu-v4-2x2x2", "mesh"), ("tpu-v4-2x2x4", "mesh"),
])
def test_system_topology_kinds(name, topology):
    assert get_system(name).topology == topology


def test_system_aliases_resolve_case_insensitively():
    assert get_system("NVL72").name == "gb200-nvl72"
    assert get_system("v5p-1024").name == "tpu-v5p-8x8x8"
    with pytest.raises(UnknownTargetError, match="dgx-h100"):
        get_system("dgx-h10")
