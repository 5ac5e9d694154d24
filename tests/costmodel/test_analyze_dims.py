"""``analyze``/``compare``/``whatif`` take dims as ``dims={...}``, so a dim may share an option's name."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.errors import NarrowpipeError
from narrowpipe.ir import DimSpec, DType, Graph, Op, Sym, TensorType


def _graph(dim: str) -> Graph:
    g = Graph("g")
    g.declare_dim(DimSpec(dim, 2))
    x = g.add_input("x", TensorType(DType.FP32, (Sym(dim), 8)))
    g.set_outputs(g.add_node(Op.RELU, [x], [x.type]).outputs)
    return g


def test_a_dim_named_like_an_option_binds_through_dims():
    g = _graph("fusion")
    assert narrowpipe.analyze(g, dims={"fusion": 5}).dims == {"fusion": 5}
    assert narrowpipe.analyze(g, "h100", dims={"fusion": 5}, fusion="none").dims == {"fusion": 5}
    assert narrowpipe.compare(g, ["h100"], dims={"fusion": 3}).dims == {"fusion": 3}
    assert narrowpipe.whatif(g, "h100", {"hbm_bandwidth": 2}, dims={"fusion": 3}).base.dims == {"fusion": 3}


def test_keywords_stay_a_convenience_and_agree_with_dims():
    g = _graph("batch")
    assert narrowpipe.analyze(g, batch=4).flops == narrowpipe.analyze(g, dims={"batch": 4}).flops == 32
    assert narrowpipe.analyze(g, dims={"batch": 4}, batch=4).dims == {"batch": 4}
    with pytest.raises(NarrowpipeError, match="both"):
        narrowpipe.analyze(g, dims={"batch": 4}, batch=5)


def test_unknown_dim_in_dims_is_an_error_naming_the_graph_dims():
    with pytest.raises(NarrowpipeError, match="batch"):
        narrowpipe.analyze(_graph("batch"), dims={"sequence": 3})


def test_a_count_that_is_not_a_whole_number_is_refused_not_truncated():
    """``batch=2.9`` was costed as batch 2, while serve divided its throughput by 2.9."""
    import numpy as np
    g = _graph("batch")
    for ok in (4, 4.0, np.int64(4), "4"):
        assert narrowpipe.analyze(g, dims={"batch": ok}).flops == 4 * 8
    for bad in (2.9, True, "four"):
        with pytest.raises(NarrowpipeError, match="dim batch must be an integer"):
            narrowpipe.analyze(g, dims={"batch": bad})
    decoder = narrowpipe.transformer(1, 64, 2, 100, seq=1, past=8)
    for kw in ({"batch": 2.7}, {"context": 100.5}, {"tp": 1.5}):
        with pytest.raises(NarrowpipeError, match=f"{next(iter(kw))} must be an integer"):
            narrowpipe.serve(decoder, "h100", mode="decode", **kw)


def test_compare_takes_a_comma_separated_string_and_refuses_no_targets():
    g = _graph("batch")
    assert [r.target for r in narrowpipe.compare(g, "h100, mi300x").reports] == ["h100-sxm", "mi300x"]
    assert [r.target for r in narrowpipe.compare(g, (t for t in ["h100", "b200"])).reports] == ["h100-sxm", "b200"]
    with pytest.raises(NarrowpipeError, match="no targets"):
        narrowpipe.compare(g, [])


def test_a_whatif_writes_json_and_the_schema_module_comes_with_the_package():
    import json
    w = narrowpipe.whatif(_graph("batch"), "h100", {"hbm_bandwidth": 2})
    doc = json.loads(w.to_json())
    assert doc["format"] == "narrowpipe.whatif" and doc["speedup"] == w.speedup
    assert callable(narrowpipe.schema.validate)


def test_a_sliding_window_cache_follows_past_and_never_holds_more():
    """Layers 0 and 2 keep at most W - 1 = 15 past tokens: at past=4 they hold 4, not the default 15."""
    g = narrowpipe.transformer(4, 256, 4, 1000, ffn=512, kv_heads=2, gated_mlp=True, seq=1, past=64,
                               sliding_window=16, sliding_layers=[0, 2])
    short = narrowpipe.analyze(g, dims={"past": 4})
    assert short.dims["past_window"] == 4
    assert short.flops == narrowpipe.analyze(g, dims={"past": 4, "past_window": 4}).flops
    assert narrowpipe.analyze(g, dims={"past": 100}).dims["past_window"] == 15
    # past 4 -> 15: every layer attends 11 more keys (the windowed ones too, their cap being 15): 4 layers
    # x 2 matmuls (q k^T, p v) x 2 FLOPs x 4 heads x 64 dims x 11 keys, for the one new token
    longer = narrowpipe.analyze(g, dims={"past": 15})
    assert longer.flops_by_group["attention"] - short.flops_by_group["attention"] == 4 * 2 * 2 * 4 * 64 * 11
    with pytest.raises(NarrowpipeError, match="past_window=10 but a sliding-window cache holds at most"):
        narrowpipe.analyze(g, dims={"past": 4, "past_window": 10})


def test_a_whatif_that_changes_a_dataflow_chip_count_says_so():
    """Groq with twice the SRAM lays the model over half the chips (ceil(footprint / capacity)), so
    the 'speed-up' is below 1: the what-if must say it compares two deployments."""
    g = narrowpipe.transformer(4, 1024, 8, 32000, seq=128)
    w = narrowpipe.whatif(g, "groq-lpu", {"memory_capacity": 2}, dims={"batch": 1})
    assert w.scaled.timing.devices < w.base.timing.devices
    assert any("compares two deployments" in n for n in w.scaled.timing.notes)
    same = narrowpipe.whatif(g, "groq-lpu", {"compute": 2}, dims={"batch": 1})
    assert not any("compares two deployments" in n for n in same.scaled.timing.notes)
