"""Properties every execution model must keep (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.kernels import fuse
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind
from narrowpipe.models.examples import load_example

TARGETS = ["h100", "mi300x", "tpu-v5e", "tpu-v6e", "groq-lpu", "cerebras-wse3", "xeon-6980p"]
dims = st.integers(1, 3000)


def mlp(m: int, n: int, k: int, dtype: DType = DType.BF16) -> Graph:
    g = Graph()
    x = g.add_input("x", TensorType(dtype, (m, k)))
    w = g.add_input("w", TensorType(dtype, (k, n)), ValueKind.PARAM)
    h = g.add_node(Op.DOT, [x, w], [TensorType(dtype, (m, n))], {"lhs_contract": (1,), "rhs_contract": (0,)})
    a = g.add_node(Op.GELU, h.outputs, [TensorType(dtype, (m, n))])
    g.set_outputs(g.add_node(Op.REDUCE_SUM, a.outputs, [TensorType(dtype, (m,))], {"axes": (1,)}).outputs)
    return g


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=dims, n=dims, k=dims, target=st.sampled_from(TARGETS))
def test_time_never_beats_the_roofline(m, n, k, target):
    t = get_target(target)
    r = narrowpipe.analyze(mlp(m, n, k), target, fusion="none")
    for row in r.ops:
        peak = max(t.matrix_flops.values()) if row.op == "dot" else max(max(t.vector_flops.values(), default=0),
                                                                          max(t.matrix_flops.values()))
        floor = max(row.flops / peak, row.bytes / t.memory_bandwidth)
        if t.family == "dataflow":
            floor /= r.timing.devices
        assert row.time_s >= floor * (1 - 1e-9)


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 2000), n=st.integers(1, 2000), k=st.integers(1, 2000), which=st.sampled_from("mnk"),
       step=st.integers(1, 700), target=st.sampled_from([t for t in TARGETS if t not in ("groq-lpu", "cerebras-wse3")]))
def test_time_grows_monotonically_with_each_dim(m, n, k, which, step, target):
    base = narrowpipe.analyze(mlp(m, n, k), target).time_s
    grown = {"m": (m + step, n, k), "n": (m, n + step, k), "k": (m, n, k + step)}[which]
    assert narrowpipe.analyze(mlp(*grown), target).time_s >= base * (1 - 1e-12)


@pytest.mark.parametrize("name", ["gpt2", "bert-base", "resnet50", "llama-3-8b"])
def test_fusion_never_increases_bytes(name):
    g = load_example(name)
    table = interpret(g, g.default_bindings())
    unfused = sum(k.cost.bytes for k in fuse(table, "none"))
    fused = sum(k.cost.bytes for k in fuse(table, "full"))
    assert fused <= unfused
    assert sum(k.cost.flops for k in fuse(table, "full")) == sum(c.flops for c in table.costs.values())


@settings(max_examples=20, deadline=None)
@given(m=st.integers(1, 512), n=st.integers(1, 512), k=st.integers(1, 512))
def test_fusion_never_increases_bytes_on_random_chains(m, n, k):
    table = interpret(mlp(m, n, k), {})
    assert sum(x.cost.bytes for x in fuse(table, "full")) <= sum(x.cost.bytes for x in fuse(table, "none"))


@pytest.mark.parametrize("target", ["h100", "mi300x", "b200"])
def test_growing_rows_past_a_split_k_threshold_never_gets_faster(target):
    """Found by the property above: with the largest allowed split-K always taken, 186 rows (split,
    with fp32 partial sums) ran 8% slower than 223 rows (no split) of a 242 x 523 GEMM on H100."""
    times = [narrowpipe.analyze(mlp(m, 523, 242), target).time_s for m in range(150, 400, 9)]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:]))


def test_tpu_rows_fill_every_array_so_more_rows_never_run_faster():
    """Found by the monotonicity property: on v5e's 4 MXUs, 1,177 rows in 3 blocks of 400 (one array
    idle) took longer than 1,537 rows in 4 blocks of 392; the compiler cuts M finer to fill them."""
    times = [narrowpipe.analyze(mlp(m, 1, 1), "tpu-v5e").time_s for m in range(1100, 1600, 7)]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:]))
