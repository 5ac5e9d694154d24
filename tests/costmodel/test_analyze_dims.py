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
