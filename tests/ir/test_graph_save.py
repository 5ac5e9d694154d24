"""Graph.save / narrowpipe.load as documented API: a graph round-trips through JSON with its dims."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.errors import IRError, ModelLoadError
from narrowpipe.ir import DimSpec, DType, Graph, Op, Sym, TensorType, ValueKind


def _graph() -> Graph:
    g = Graph("proj")
    g.declare_dim(DimSpec("seq", 4, 1, 64))
    x = g.add_input("x", TensorType(DType.BF16, (Sym("seq"), 8)))
    w = g.add_input("w", TensorType(DType.BF16, (8, 8)), ValueKind.PARAM)
    y = g.add_node(Op.DOT, [x, w], [TensorType(DType.BF16, (Sym("seq"), 8))],
                   {"lhs_contract": (1,), "rhs_contract": (0,)})
    g.set_outputs(y.outputs)
    return g


def test_graph_save_and_load_round_trip(tmp_path):
    g = _graph()
    path = g.save(tmp_path / "new" / "proj.json")
    back = narrowpipe.load(path)
    assert back.dims == g.dims
    a, b = narrowpipe.analyze(g, seq=16), narrowpipe.analyze(back, seq=16)
    assert (a.flops, a.bytes, a.params) == (b.flops, b.bytes, b.params)
    with pytest.raises(IRError, match="save_pt2"):
        g.save(tmp_path / "proj.pt2")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ModelLoadError, match="bad.json"):
        narrowpipe.load(bad)
