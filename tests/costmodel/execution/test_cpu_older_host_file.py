"""A host file calibrated before the GEMM grid, module-call, pad-row and depthwise terms existed still
loads and predicts through the fallbacks: the per-op depthwise rate (checked by hand), a pad as a plain
copy, no module-call cost, GEMMs on the FLOPs curve; and a malformed grid in a file names the file
and the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.errors import TargetSpecError
from narrowpipe.ir import DType, Graph, Op, TensorType
from tests.graph_builders import gemm_graph

HOST = Path(narrowpipe.__file__).parent / "benchmarks" / "results" / "host.toml"
#: The CpuTarget fields wt-cpu3, wt-cpu4, wt-cpu5, wt-mbv2, wt-cpu6, wt-cpu7 and the unaligned-rows
#: change added (their values and their [sources] lines).
NEW_FIELDS = ("eager_module_call_overhead", "matmul_grid", "pad_row_time", "depthwise_call_time",
              "depthwise_element_time", "depthwise_tap_time", "eager_cold_call_overhead", "eager_cold_call_curve",
              "pad_plane_time", "eager_evicted_call_overhead", "eager_evicted_call_curve",
              "eager_evicted_call_self_curve", "evicted_read_bandwidth", "evicted_read_curve", "bmm_item_time",
              "matmul_unaligned_curve")


@pytest.fixture(scope="module")
def older(tmp_path_factory: pytest.TempPathFactory) -> Path:
    text = HOST.read_text()
    for field in NEW_FIELDS:
        assert re.search(rf"^{field}\w* = ", text, re.M), field     # the current file has it
    lines = [ln for ln in text.splitlines() if not re.match(rf"^({'|'.join(NEW_FIELDS)})\w* = ", ln)]
    path = tmp_path_factory.mktemp("older") / "host.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_older_host_file_loads_without_the_new_terms(older):
    t = get_target(str(older))
    assert t.matmul_grid == () and t.eager_module_call_overhead is None and t.pad_row_time is None
    assert t.eager_evicted_call_overhead is None and t.evicted_read_bandwidth is None and t.bmm_item_time is None
    assert t.matmul_unaligned_curve == ()
    assert (t.depthwise_call_time, t.depthwise_element_time, t.depthwise_tap_time) == (None, None, None)


def test_a_depthwise_layer_falls_back_to_the_per_op_rate(older):
    t = get_target(str(older))
    g = Graph("dw")
    x = g.add_input("x", TensorType(DType.FP32, (1, 96, 56, 56)))
    w = g.add_input("w", TensorType(DType.FP32, (96, 1, 3, 3)))
    g.set_outputs(g.add_node(Op.CONV, [x, w], [TensorType(DType.FP32, (1, 96, 56, 56))],
                             {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 96}).outputs)
    (kt,) = narrowpipe.analyze(g, t, eager_overhead=False).timeline
    assert kt.compute_s == pytest.approx(96 * 56 * 56 / t.vector_op_flops["conv_depthwise"])
    assert kt.overhead_s == pytest.approx(t.launch_overhead)      # no oneDNN set-up per call


def test_pads_gemms_and_module_calls_take_the_old_paths(older):
    t = get_target(str(older))
    g = Graph("pad")
    x = g.add_input("x", TensorType(DType.FP32, (1, 960, 7, 7)))
    g.set_outputs(g.add_node(Op.PAD, [x], [TensorType(DType.FP32, (1, 960, 8, 8))]).outputs)
    old = narrowpipe.analyze(g, t, eager_overhead=False).time_s
    full = get_target(str(HOST))        # the same file with the new terms: the 960 x 7 rows and 960 planes differ
    assert full.pad_row_time and full.pad_plane_time
    assert narrowpipe.analyze(g, full, eager_overhead=False).time_s == pytest.approx(
        old + 960 * 7 * full.pad_row_time + 960 * full.pad_plane_time)
    gemm = gemm_graph(64, 3072, 768, DType.FP32)
    plain = narrowpipe.analyze(gemm, t)
    gemm.meta["module_calls"] = 100
    assert narrowpipe.analyze(gemm, t).time_s == plain.time_s      # no per-call cost to pay
    (kt,) = plain.timeline
    assert 0 < kt.compute_s and kt.time_s > 2 * 64 * 3072 * 768 / t.matrix_flops["fp32"]


def test_a_malformed_grid_in_a_file_names_the_file_and_the_field(tmp_path):
    text = HOST.read_text()
    grid = re.search(r"^matmul_grid = \[\[(\d+), (\d+), (\d+), [0-9.]+\], ", text, re.M)
    assert grid is not None
    broken = tmp_path / "broken.toml"
    broken.write_text(text.replace(grid.group(0), "matmul_grid = [", 1))   # one shape of the grid gone
    with pytest.raises(TargetSpecError, match=r"broken\.toml.*'matmul_grid'.*every combination"):
        get_target(str(broken))
    broken.write_text(text.replace(grid.group(0), f"matmul_grid = [[{grid.group(1)}, 64, 64], ", 1))
    with pytest.raises(TargetSpecError, match=r"broken\.toml.*'matmul_grid\[0\]'"):
        get_target(str(broken))
