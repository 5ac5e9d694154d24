"""Symbolic dim arithmetic used to fold ONNX shape computations: exact, canonical, and equal to
integer arithmetic once the dims are bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from narrowpipe.frontends.onnx.dim_params import DimParams
from narrowpipe.frontends.onnx.symdims import (
    dim_add,
    dim_ceildiv,
    dim_eq,
    dim_floordiv,
    dim_max,
    dim_min,
    dim_mod,
    dim_mul,
    dim_sub,
    to_dim,
    to_poly,
)
from narrowpipe.ir import Sym

B, S = Sym("batch"), Sym("sequence")


def value(d, **bind) -> int:
    d = to_dim(d)
    return d if isinstance(d, int) else d.evaluate(bind)


def test_products_are_canonical() -> None:
    assert to_dim(dim_mul(B, S)) == to_dim(dim_mul(S, B))
    assert to_dim(dim_floordiv(dim_mul(dim_mul(B, S), 64), dim_mul(S, 64))) == B
    assert to_dim(dim_sub(dim_add(S, 3), 3)) == S


def test_dims_are_never_negative() -> None:
    assert dim_eq(S, -1) is False
    assert dim_eq(B, S) is None
    assert to_dim(dim_max(S, dim_add(S, 1))) == to_dim(dim_add(S, 1))


def test_dim_params_from_exporters() -> None:
    names = DimParams(["batch", "sequence", "N/A", "max"])
    assert names.read("batch*sequence") == names.read("sequence * batch") == B * S
    assert names.read("N/A") == Sym("N_A") and names.source("N_A") == "N/A"
    assert names.read("max") == Sym("max_")


ints = st.integers(min_value=1, max_value=50)


@settings(max_examples=200, deadline=None)
@given(b=ints, s=ints, k=st.integers(min_value=1, max_value=9), c=st.integers(min_value=0, max_value=9))
def test_symbolic_arithmetic_matches_integers(b: int, s: int, k: int, c: int) -> None:
    bind = {"batch": b, "sequence": s}
    x = dim_add(dim_mul(B, S), c)
    assert value(x, **bind) == b * s + c
    assert value(dim_floordiv(x, k), **bind) == (b * s + c) // k
    assert value(dim_ceildiv(x, k), **bind) == -(-(b * s + c) // k)
    assert value(dim_mod(x, k), **bind) == (b * s + c) % k
    assert value(dim_max(B, S), **bind) == max(b, s)
    assert value(dim_min(dim_mul(B, k), S), **bind) == min(b * k, s)
    assert value(to_poly(to_dim(x)), **bind) == b * s + c
