"""A user's own chip is a TOML file; bad files fail with the file and the field in the message."""

from __future__ import annotations

import pytest
from backends_testdata import MINIMAL_GPU_TOML

from narrowpipe.backends import GpuTarget, dump_target, get_system, get_target, load_target_file
from narrowpipe.backends.defaults import DEFAULTS
from narrowpipe.backends.registry import CATALOG_DIR
from narrowpipe.backends.sourcing import UNSOURCED, UnsourcedSpecWarning
from narrowpipe.errors import NarrowpipeError, TargetSpecError


def test_a_user_chip_loads_from_a_path_with_no_code_change(write_spec):
    path = write_spec(MINIMAL_GPU_TOML)
    target = get_target(str(path))
    assert isinstance(target, GpuTarget)
    assert target == load_target_file(path) == get_target(path)
    assert target.matrix_flops == {"bf16": 1e15, "fp8_e4m3": 2e15}
    assert target.memory_capacity == 96e9 and target.memory_bandwidth == 4e12
    assert target.l2_bytes == 64e6 and target.smem_per_sm == 200 * 1024


def test_missing_ceilings_get_documented_assumption_defaults(write_spec):
    target = load_target_file(write_spec(MINIMAL_GPU_TOML))
    assert target.matmul_efficiency == DEFAULTS["gpu"]["matmul_efficiency"][0]
    assert target.scale_up_domain == 1
    assert target.tile_shapes  # the GEMM model always has tiles to choose from
    for field in ("matmul_efficiency", "memory_efficiency", "launch_overhead", "tile_shapes",
                  "scale_up_domain", "link_latency"):
        assert target.source(field).startswith("assumption:"), field


def test_units_in_key_suffixes_are_converted(write_spec):
    text = MINIMAL_GPU_TOML.replace("memory_capacity_gb = 96", "memory_capacity_gib = 96") \
        .replace("memory_bandwidth_tbps = 4", "memory_bandwidth_gbps = 4000") \
        .replace("scale_up_bandwidth_gbps = 400", "scale_up_bandwidth_gbitps = 3200")
    target = load_target_file(write_spec(text + "\n"))
    assert target.memory_capacity == 96 * 2**30
    assert target.memory_bandwidth == 4e12
    assert target.scale_up_bandwidth == 400e9


def test_sources_may_use_toml_dotted_keys(write_spec):
    text = MINIMAL_GPU_TOML.replace('matrix_flops = "Acme datasheet"',
                                    'matrix_flops.bf16 = "p. 3"\nmatrix_flops.fp8_e4m3 = "p. 4"')
    target = load_target_file(write_spec(text))
    assert target.source("matrix_flops.bf16") == "p. 3"
    assert target.source("matrix_flops.fp8_e4m3") == "p. 4"


def test_user_system_file_loads(write_spec):
    path = write_spec('''
name = "my-pod"
display_name = "Two H100 nodes"
chip = "h100"
devices = 16
scale_up_domain = 8
[scale_up]
fabric = "NVLink"
topology = "switch"
bandwidth_gbps = 450
latency_us = 3
[scale_out]
fabric = "IB"
topology = "fat-tree"
bandwidth_gbitps = 400
latency_us = 5
[sources]
devices = "me"
scale_up_domain = "me"
"scale_up.bandwidth" = "me"
"scale_up.latency" = "me"
scale_out.bandwidth = "me"
scale_out.latency = "me"
''', name="pod.toml")
    system = get_system(path)
    assert system.domains == 2 and system.target().name == "h100-sxm"


def _edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


M = MINIMAL_GPU_TOML
MALFORMED = {
    "negative number": (_edit(M, "memory_bandwidth_tbps = 4", "memory_bandwidth_tbps = -3"),
                        "field 'memory_bandwidth_tbps': expected a positive number, got -3"),
    "zero": (_edit(M, "sm_count = 100", "sm_count = 0"),
             "field 'sm_count': expected a positive integer, got 0"),
    "missing field": (_edit(M, "memory_bandwidth_tbps = 4\n", ""),
                      "missing required field 'memory_bandwidth'"),
    "missing family": (_edit(M, 'family = "gpu"\n', ""), "missing required field 'family'"),
    "unknown key typo": (_edit(M, "memory_bandwidth_tbps", "memory_bandwith_tbps"),
                         "field 'memory_bandwith_tbps': unknown key (did you mean "
                         "'memory_bandwidth_tbps'"),
    "unknown unit": (_edit(M, "memory_bandwidth_tbps", "memory_bandwidth_tbs"),
                     "field 'memory_bandwidth_tbs': unknown key"),
    "field of another family": (_edit(M, "[matrix_tflops]", "mxu_dim = 128\n[matrix_tflops]"),
                                "field 'mxu_dim': unknown key"),
    "wrong type string": (_edit(M, "sm_count = 100", 'sm_count = "100"'),
                          "field 'sm_count': expected a positive integer, got '100' (a string)"),
    "wrong type float count": (_edit(M, "sm_count = 100", "sm_count = 100.5"),
                               "field 'sm_count': expected a positive integer, got 100.5"),
    "wrong type bool": (_edit(M, "l2_mb = 64", "l2_mb = true"),
                        "field 'l2_mb': expected a positive number, got True (a boolean)"),
    "wrong type table": (_edit(M, "[matrix_tflops]\nbf16 = 1000\nfp8_e4m3 = 2000",
                               "matrix_tflops = 1000"),
                         "field 'matrix_tflops': expected a table of dtype = number"),
    "bad family": (_edit(M, 'family = "gpu"', 'family = "npu"'),
                   "field 'family': unknown family 'npu'; expected one of: gpu, tpu, dataflow"),
    "unknown dtype": (_edit(M, "bf16 = 1000", "bfloat16 = 1000"),
                      "field 'matrix_tflops.bfloat16': unknown dtype 'bfloat16'"),
    "fraction above one": (_edit(M, "[matrix_tflops]", "matmul_efficiency = 1.5\n[matrix_tflops]"),
                           "field 'matmul_efficiency': expected a fraction in (0, 1], got 1.5"),
    "same field twice": (M.replace("memory_bandwidth_tbps = 4",
                                   "memory_bandwidth_tbps = 4\nmemory_bandwidth_gbps = 4000"),
                         "'memory_bandwidth' is already given as 'memory_bandwidth_tbps'"),
    "source typo": (_edit(M, 'sm_count = "Acme', 'sm_cont = "Acme'),
                    "field 'sources.sm_cont': no such field (did you mean 'sm_count'"),
    "source without value": (M + 'tdp = "datasheet"\n',
                             "field 'sources.tdp': a source for a value that is not set"),
    "uppercase name": (_edit(M, 'name = "my-gpu"', 'name = "My GPU"'),
                       "field 'name': 'My GPU' is not a valid target name"),
    "sparse without dense": (M + "\n[sparse_matrix_tflops]\nint8 = 4000\n",
                             "int8 has a sparse rate but no dense rate"),
    "bad tile": (_edit(M, "l2_mb = 64", "l2_mb = 64\ntile_shapes = [[128, 128]]"),
                 "field 'tile_shapes[0]': expected an [M, N, K] array of 3 positive integers"),
    "invalid toml": ('name = "x"\nfamily = gpu\n', "not valid TOML"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_spec_names_the_file_and_field(case, write_spec):
    text, expected = MALFORMED[case]
    path = write_spec(text)
    with pytest.raises(TargetSpecError) as info:
        load_target_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert expected in message, message


def test_every_problem_in_a_file_is_reported_at_once(write_spec):
    text = _edit(_edit(_edit(M, "memory_bandwidth_tbps = 4", "memory_bandwidth_tbps = -3"),
                       "sm_count = 100", "sm_cont = 100"), "memory_capacity_gb = 96\n", "")
    with pytest.raises(TargetSpecError) as info:
        load_target_file(write_spec(text))
    message = str(info.value)
    assert "4 problems" in message, message   # no echo: the bad value is not also "missing"
    for part in ("'memory_bandwidth_tbps': expected a positive number, got -3",
                 "'sm_cont': unknown key (did you mean 'sm_count'", "missing required field 'sm_count'",
                 "missing required field 'memory_capacity'"):
        assert part in message, message


def test_a_user_file_may_leave_sources_out_with_a_warning(write_spec):
    path = write_spec(_edit(_edit(M, 'sm_count = "Acme datasheet"\n', ""),
                            'l2_bytes = "Acme datasheet"\n', ""))
    with pytest.warns(UnsourcedSpecWarning, match=r"no source for sm_count, l2_mb;") as caught:
        target = load_target_file(path)
    assert str(path) in str(caught[0].message)
    assert target.sm_count == 100 and target.source("sm_count") == UNSOURCED
    with pytest.raises(TargetSpecError, match="no source for 'sm_count'"):   # the catalog's rule
        load_target_file(path, require_sources=True)


def test_a_source_may_be_keyed_as_its_value_is_written(write_spec):
    text = _edit(_edit(M, 'l2_bytes = "Acme datasheet"', 'l2_mb = "L2 table"'),
                 'matrix_flops = "Acme datasheet"', '"matrix_tflops.bf16" = "p. 3"\n'
                 'matrix_flops.fp8_e4m3 = "p. 4"')
    target = load_target_file(write_spec(text))
    assert target.source("l2_bytes") == "L2 table"
    assert target.source("matrix_flops.bf16") == "p. 3"
    twice = _edit(M, 'l2_bytes = "Acme datasheet"', 'l2_bytes = "a"\nl2_mb = "b"')
    with pytest.raises(TargetSpecError, match="the source of 'l2_bytes' is given twice"):
        load_target_file(write_spec(twice))


def test_a_dumped_file_keys_sources_as_its_values(write_spec, tmp_path):
    target = load_target_file(write_spec(M))
    dump_target(target, tmp_path / "out.toml")
    text = (tmp_path / "out.toml").read_text()
    values, sources = text.split("\n[sources]\n")
    for written in ("l2_mb", "smem_per_sm_kib", "memory_bandwidth_tbps", "matrix_pflops.bf16"):
        assert written.split(".")[0] in values, written
        assert written in sources, sources
    assert load_target_file(tmp_path / "out.toml") == target
    assert "default for gpu targets" in sources   # the assumption names the family, not "{family}"


def test_negative_number_message_is_exactly_the_documented_one(write_spec):
    path = write_spec(MALFORMED["negative number"][0])
    with pytest.raises(TargetSpecError) as info:
        load_target_file(path)
    assert str(info.value) == f"{path}: field 'memory_bandwidth_tbps': expected a positive " \
                              "number, got -3"


def test_non_toml_bytes_raise_a_spec_error(write_spec):
    path = write_spec(b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary junk")
    with pytest.raises(TargetSpecError, match="not a TOML file") as info:
        get_target(path)
    assert str(path) in str(info.value)


def test_missing_file_is_a_spec_error_naming_it(tmp_path):
    with pytest.raises(TargetSpecError, match="no such file"):
        get_target(tmp_path / "nope.toml")


def test_spec_errors_are_narrowpipe_errors():
    assert issubclass(TargetSpecError, NarrowpipeError)


def test_malformed_system_names_the_nested_field(write_spec):
    path = write_spec('''
name = "bad"
display_name = "bad"
chip = "h100"
devices = 8
scale_up_domain = 8
[scale_up]
fabric = "NVLink"
topology = "hypercube"
bandwidth_gbps = 450
latency_us = 3
[sources]
devices = "x"
scale_up_domain = "x"
"scale_up.bandwidth" = "x"
"scale_up.latency" = "x"
''')
    with pytest.raises(TargetSpecError, match=r"field 'scale_up.topology': unknown value"):
        get_system(path)


def _user_system(folder, devices_key: str = "devices") -> str:
    """An 8-chip system of a user's chip file beside it (the catalog H100 renamed), named relatively."""
    import re
    chip = (CATALOG_DIR / "h100-sxm.toml").read_text()
    chip = re.sub(r'(?m)^name = .*$', 'name = "my-h100"', chip)
    chip = re.sub(r'(?m)^aliases = .*$', 'aliases = []', chip)
    (folder / "my-h100.toml").write_text(chip)
    (folder / "my-8.toml").write_text(f'''name = "my-8"
display_name = "8x my H100"
chip = "my-h100.toml"
{devices_key} = 8
scale_up_domain = 8

[scale_up]
fabric = "NVLink"
topology = "switch"
bandwidth_gbps = 450
latency_us = 3
''')
    return str(folder / "my-8.toml")


def test_a_systems_relative_chip_is_the_file_beside_it_from_any_folder(tmp_path, monkeypatch):
    path = _user_system(tmp_path)
    monkeypatch.chdir("/")
    assert get_system(path).target().name == "my-h100"


def test_a_system_file_given_as_the_target_reports_its_own_mistakes(tmp_path):
    from narrowpipe.costmodel.planner.planner import resolve_machine
    from narrowpipe.costmodel.serving import serve
    from narrowpipe.models import transformer
    good = _user_system(tmp_path)
    chip, system = resolve_machine(good)
    assert (chip.name, system.devices) == ("my-h100", 8)
    bad = tmp_path / "typo"
    bad.mkdir()
    path = _user_system(bad, devices_key="device")
    for call in (lambda: resolve_machine(path),
                 lambda: serve(transformer(1, 64, 2, 100, seq=1, past=8), path, mode="decode")):
        with pytest.raises(NarrowpipeError, match="unknown key .*did you mean 'devices'"):
            call()
