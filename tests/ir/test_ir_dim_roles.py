"""Dims carry roles (batch, sequence, KV length, other) that planners bind instead of names."""

from __future__ import annotations

import pytest

from narrowpipe.errors import IRError, UnboundDimError
from narrowpipe.ir import DimRole, DimSpec, DType, Graph, Op, Sym, TensorType, from_json, graph_to_dict, to_json


def _graph() -> Graph:
    g = Graph("g")
    g.declare_dim(DimSpec("b", 2, role=DimRole.BATCH))
    g.declare_dim(DimSpec("beams", 3, role=DimRole.BATCH))
    g.declare_dim(DimSpec("s", 16, role=DimRole.SEQUENCE))
    g.declare_dim(DimSpec("h", 224))
    x = g.add_input("x", TensorType(DType.FP32, (Sym("b"), Sym("beams"), Sym("s"), Sym("h"))))
    g.set_outputs(g.add_node(Op.RELU, [x], [x.type]).outputs)
    return g


def test_dims_with_role_lists_names_in_declaration_order():
    g = _graph()
    assert g.dims_with_role(DimRole.BATCH) == ["b", "beams"]
    assert g.dims_with_role(DimRole.SEQUENCE) == ["s"]
    assert g.dims_with_role(DimRole.KV_LENGTH) == []
    assert g.dims_with_role(DimRole.OTHER) == ["h"]


def test_role_size_is_the_product_of_its_dims_and_one_when_none():
    g = _graph()
    assert g.role_size(DimRole.BATCH) == 6                        # defaults
    assert g.role_size(DimRole.BATCH, {"b": 4}) == 12              # bindings first
    assert g.role_size(DimRole.KV_LENGTH, {"b": 4}) == 1
    g.declare_dim(DimSpec("past", None, role=DimRole.KV_LENGTH))
    with pytest.raises(UnboundDimError, match="past"):
        g.role_size(DimRole.KV_LENGTH)


def test_roles_round_trip_and_files_without_roles_load_as_other():
    g = _graph()
    again = from_json(to_json(g))
    assert {n: s.role for n, s in again.dims.items()} == {n: s.role for n, s in g.dims.items()}
    data = graph_to_dict(g)
    assert "role" not in data["dims"][3]                           # OTHER is not written
    for d in data["dims"]:
        d.pop("role", None)
    assert all(s.role is DimRole.OTHER for s in from_json(__import__("json").dumps(data)).dims.values())


def test_unknown_role_text_is_an_error_naming_the_roles():
    """It used to read as OTHER, so a misspelt "batch" silently left every planner's batch at 1."""
    with pytest.raises(IRError, match=r"unknown dim role 'beam'; roles: batch, sequence, kv_length, other"):
        DimRole.parse("beam")
    assert DimRole.parse(None) is DimRole.OTHER and DimRole.parse("") is DimRole.OTHER
    assert DimRole.parse("kv_length") is DimRole.KV_LENGTH
