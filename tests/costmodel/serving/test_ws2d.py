"""Pope et al.'s 2D weight-stationary layout: weights per chip, collectives on the torus, the sum."""

import pytest

from narrowpipe.backends import get_system, get_target
from narrowpipe.costmodel.execution.collectives import Topology
from narrowpipe.costmodel.serving.ws2d import ws2d_axes, ws2d_decode
from narrowpipe.ir import DType
from narrowpipe.models.spec import TransformerSpec

PALM = TransformerSpec(layers=118, hidden=18432, heads=48, vocab=256000, ffn=73728, kv_heads=1, head_dim=256,
                       gated_mlp=True, activation="silu", parallel_block=True, tie_embeddings=True, norm="layer")


@pytest.fixture(scope="module")
def steps():
    t, topo = get_target("tpu-v4"), Topology.of_system(get_system("tpu-v4-4x4x4"))
    return {w: ws2d_decode(PALM, t, topo, 64, batch=64, context=2048, weights=w, axes=(4, 16))
            for w in (DType.INT8, DType.BF16)}


def test_each_chip_holds_a_64th_of_palm(steps):
    per_layer = 18432 * (2 * 73728 + 48 * 256 + 2 * 256) + 18432 * (73728 + 48 * 256) + 18432
    params = 118 * per_layer + 256000 * 18432
    assert params == pytest.approx(540.35e9, rel=1e-4)                      # PaLM 540B
    assert steps[DType.INT8].weight_bytes_per_chip == pytest.approx(params / 64, rel=1e-6)
    assert steps[DType.BF16].weight_bytes_per_chip == pytest.approx(2 * params / 64, rel=1e-6)


def test_gathers_over_yz_span_two_torus_axes_and_over_x_one(steps):
    s = steps[DType.INT8]
    v4 = get_target("tpu-v4")
    ag_yz = s.per_layer["all-gather yz (B x E/x)"]
    # 3 + 3 steps of 1 us on two axes of 4, 15/16 of 64 x 4608 bf16 over both links of both axes, a launch
    assert ag_yz == pytest.approx(6e-6 + 15 / 16 * 64 * 4608 * 2 / (4 * 45e9) + v4.launch_overhead, rel=1e-6)
    ag_x = s.per_layer["all-gather x (B x out/yz)"]
    assert ag_x == pytest.approx(3e-6 + 3 / 4 * 64 * (73728 + 12288) / 16 * 2 / (2 * 45e9) + v4.launch_overhead,
                                 rel=1e-6)


def test_the_step_is_every_layer_plus_the_head_and_weights_decide_the_difference(steps):
    for s in steps.values():
        layer = sum(s.per_layer.values())
        assert layer * 118 < s.time_s < layer * 118 * 1.05
        assert s.time_s == pytest.approx(s.compute_s + s.collectives_s)
    assert steps[DType.BF16].collectives_s == pytest.approx(steps[DType.INT8].collectives_s)
    assert steps[DType.BF16].compute_s > steps[DType.INT8].compute_s


def test_axes_minimise_the_layer_traffic():
    x, yz = ws2d_axes(64, 18432, 73728)
    assert x * yz == 64
    best = 2 * 18432 / x + 4 * 73728 / yz
    assert all(best <= 2 * 18432 / a + 4 * 73728 / (64 // a) for a in (1, 2, 4, 8, 16, 32, 64))
