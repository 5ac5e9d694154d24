"""Pope et al.'s 2D weight-stationary layout: weights per chip, collectives on the torus, the sum."""

from dataclasses import replace

import pytest

from narrowpipe.backends import get_system, get_target
from narrowpipe.costmodel.execution.collectives import Topology
from narrowpipe.costmodel.serving.ws2d import ws2d_axes, ws2d_decode, ws2d_prefill, ws2d_torus_axes
from narrowpipe.errors import NarrowpipeError
from narrowpipe.ir import DType
from narrowpipe.models.spec import TransformerSpec

PALM = TransformerSpec(layers=118, hidden=18432, heads=48, vocab=256000, ffn=73728, kv_heads=1, head_dim=256,
                       gated_mlp=True, activation="silu", parallel_block=True, tie_embeddings=True, norm="layer")
#: PaLM 62B (Chowdhery et al. 2022, table 1): 64 layers, d_model 8192, 32 heads of 256, multi-query
PALM_62B = replace(PALM, layers=64, hidden=8192, heads=32, ffn=32768)


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
    link = 221e9 / 6                       # the 4x4x4 system's achievable ICI rate per link, one way
    ag_yz = s.per_layer["all-gather yz (B x E/x)"]
    # 2 + 2 hops of 1.45 us on two axes of 4 with wraparound, 15/16 of 64 x 4608 bf16 over both
    # links of both axes, one op's launch
    assert ag_yz == pytest.approx(4 * 1.45e-6 + 15 / 16 * 64 * 4608 * 2 / (4 * link) + v4.launch_overhead,
                                  rel=1e-6)
    ag_x = s.per_layer["all-gather x (B x out/yz)"]
    assert ag_x == pytest.approx(2 * 1.45e-6 + 3 / 4 * 64 * (73728 + 12288) / 16 * 2 / (2 * link)
                                 + v4.launch_overhead, rel=1e-6)


def test_x_and_yz_take_whole_torus_axes():
    assert ws2d_torus_axes((4, 4, 4), 4, 16) == ((4,), (4, 4))
    assert ws2d_torus_axes((2, 2, 4), 2, 8) == ((2,), (2, 4))
    assert ws2d_torus_axes((4, 4, 4), 1, 64) == ((), (4, 4, 4))
    assert ws2d_torus_axes((4, 4, 4), 2, 32) is None          # half an axis: axes filled in order
    assert ws2d_torus_axes((16, 16, 16), 4, 16) is None       # not the slice the layout runs on


def test_a_slice_smaller_than_a_cube_gathers_on_one_link_per_axis():
    """PaLM 62B on a 2x2x2 v4 slice (Pope et al. table 3): no wraparound, so x's reduce-scatter runs
    on the one link to the x neighbour (at the system's achievable 111/3 GB/s), in one hop."""
    s = ws2d_decode(PALM_62B, get_target("tpu-v4"), Topology.of_system(get_system("tpu-v4-2x2x2")), 8,
                    batch=512, context=2048, weights=DType.BF16, axes=(2, 4))
    n_in = 2 * 32768 + 32 * 256 + 2 * 256
    rs_x = s.per_layer["reduce-scatter x (B x in/yz)"]
    assert rs_x == pytest.approx(1.45e-6 + 1 / 2 * 512 * n_in / 4 * 2 / (111e9 / 3)
                                 + get_target("tpu-v4").launch_overhead, rel=1e-6)


@pytest.mark.xfail(strict=True, reason="known gap: the TPU model's 64-row int8 folds are MXU-bound (the 128-cycle "
                   "weight load plus 0.5 x 128 cycles of fill and drain per fold), so int8 saves 5.5 ms, not "
                   "Pope's 8.4; benchmarks/results/serving_validate.md")
def test_int8_saves_the_weight_bytes_at_hbm_speed_as_pope_measured():
    """Pope et al. section 4.4: PaLM 540B (heads padded to 64, section 4) at batch 64 on 64 TPU v4
    takes 28.5 ms per step with int8 weights and 36.9 ms with bf16: 8.4 ms for the bytes int8
    saves. The model's difference is those bytes at the achievable HBM rate: the 64-row int8
    matmuls are memory-bound, not held up by the MXU's weight loads."""
    t, topo = get_target("tpu-v4"), Topology.of_system(get_system("tpu-v4-4x4x4"))
    padded = replace(PALM, heads=64)
    i8, b16 = (ws2d_decode(padded, t, topo, 64, batch=64, context=2048, weights=w, axes=(4, 16))
               for w in (DType.INT8, DType.BF16))
    saved = b16.weight_bytes_per_chip - i8.weight_bytes_per_chip
    assert saved == pytest.approx(558.2e9 / 64, rel=1e-3)          # 540B + 18B of padding, 1 byte each
    gap = b16.time_s - i8.time_s
    assert gap == pytest.approx(saved / (1200e9 * 0.85), rel=0.03)
    assert gap == pytest.approx(36.9e-3 - 28.5e-3, rel=0.05)


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


def test_a_prefill_gathers_the_kv_head_onto_every_chip_instead_of_two_all_to_alls():
    """Head-sharded prefill attention (Pope et al. section 3.3): 2048 tokens of the one K/V head,
    bf16, all-gathered over the whole cube (2 hops per axis, all 6 links), no all-to-alls."""
    t, topo = get_target("tpu-v4"), Topology.of_system(get_system("tpu-v4-4x4x4"))
    s = ws2d_prefill(replace(PALM, heads=64), t, topo, 64, batch=1, seq=2048, weights=DType.INT8, axes=(4, 16))
    assert not any("all-to-all" in k for k in s.per_layer)
    kv = s.per_layer["all-gather k,v (B L x 2d)"]
    assert kv == pytest.approx(3 * 2 * 1.45e-6 + 63 / 64 * 2048 * 2 * 256 * 2 / 221e9 + t.launch_overhead, rel=1e-6)
    assert "1 head(s) per chip" in s.notes[0]


def test_a_prefill_refuses_heads_that_do_not_split_over_the_chips():
    t, topo = get_target("tpu-v4"), Topology.of_system(get_system("tpu-v4-4x4x4"))
    with pytest.raises(NarrowpipeError, match="48 heads to split over 64"):
        ws2d_prefill(PALM, t, topo, 64, batch=1, seq=2048, axes=(4, 16))
    with pytest.raises(NarrowpipeError, match="2 tokens or more"):
        ws2d_prefill(PALM, t, topo, 64, batch=1, seq=1, axes=(4, 16))


@pytest.mark.parametrize("spec, chips, system, axes, published_s", [
    (replace(PALM, heads=64), 64, "tpu-v4-4x4x4", (4, 16), 0.29),   # Pope et al. table 2
    (PALM_62B, 16, "tpu-v4-2x2x4", (2, 8), 0.16),                   # table 3
])
def test_batch_one_int8_prefills_are_within_the_issue_bar_of_pope(spec, chips, system, axes, published_s):
    s = ws2d_prefill(spec, get_target("tpu-v4"), Topology.of_system(get_system(system)), chips, batch=1, seq=2048,
                     weights=DType.INT8, axes=axes)
    assert s.time_s == pytest.approx(published_s, rel=0.2)


SERVED = replace(PALM, heads=64)       # Pope et al. section 4: 48 heads padded to 64


def test_a_serial_layer_costs_what_pope_measured_against_the_parallel_block():
    """Pope et al. section 4.3: PaLM 540B with serial attention and MLP blocks takes 14% longer per
    decode step than with PaLM's parallel block (2D weight-stationary, 64 chips, batch 512), 'because
    of the increased communication time for activations': the second block's gathers and scatters."""
    t, topo = get_target("tpu-v4"), Topology.of_system(get_system("tpu-v4-4x4x4"))
    par, ser = (ws2d_decode(replace(SERVED, parallel_block=p), t, topo, 64, batch=512, context=2048,
                            weights=DType.BF16, axes=(4, 16)) for p in (True, False))
    assert ser.time_s / par.time_s == pytest.approx(1.14, abs=0.02)
    assert ser.weight_bytes_per_chip - par.weight_bytes_per_chip == 2 * 118 * 18432 / 64     # a second norm
    assert "serial attention and MLP blocks" in ser.notes[0]


def test_a_serial_layer_gathers_and_scatters_once_per_block():
    t, topo = get_target("tpu-v4"), Topology.of_system(get_system("tpu-v4-4x4x4"))
    s = ws2d_decode(replace(SERVED, parallel_block=False), t, topo, 64, batch=64, context=2048,
                    weights=DType.INT8, axes=(4, 16))
    comm = [k for k in s.per_layer if k != "kernels"]
    assert sum(k.startswith("attention ") for k in comm) == 7 and sum(k.startswith("mlp ") for k in comm) == 5
    link = 221e9 / 6
    # the MLP's reduce-scatter over x: its gate and up columns only, 64 rows of 2 x 73728 / 16 in bf16,
    # 3/4 of them over both links of the x axis of 4, 2 hops, one launch
    rs = s.per_layer["mlp reduce-scatter x (B x in/yz)"]
    assert rs == pytest.approx(2 * 1.45e-6 + 3 / 4 * 64 * 2 * 73728 / 16 * 2 / (2 * link) + t.launch_overhead,
                               rel=1e-6)


def test_rotary_embeddings_turn_q_and_the_new_k_each_step():
    """PaLM uses RoPE (Chowdhery et al. 2022, section 2): q and the new token's k turn each step,
    elementwise kernels beside the attention; a model without rotary positions has none of them."""
    t, topo = get_target("tpu-v4"), Topology.of_system(get_system("tpu-v4-4x4x4"))
    rope, plain = (ws2d_decode(replace(SERVED, positions=pos), t, topo, 64, batch=64, context=2048,
                               weights=DType.INT8, axes=(4, 16)) for pos in ("rotary", "none"))
    turned = [k for k in rope.layer_kernels if "rope" in k]
    assert turned and not any("rope" in k for k in plain.layer_kernels)
    assert rope.per_layer["kernels"] - plain.per_layer["kernels"] == pytest.approx(
        sum(rope.layer_kernels[k] for k in turned), rel=1e-9)
    assert sum(rope.layer_kernels.values()) == pytest.approx(rope.per_layer["kernels"], rel=1e-9)


@pytest.mark.parametrize("weights, published_ms", [
    (DType.INT8, 28.5),
    pytest.param(DType.BF16, 36.9, marks=pytest.mark.xfail(
        strict=True, reason="known gap: 29.3 ms predicted, 21% short; the published int8/bf16 pair leaves "
        "170 us per layer besides the weights' stream (at 0.865 of the HBM peak), the model 97 us: a term common to "
        "both formats, none bf16-only fits (benchmarks/pope_pair.py); the released implementation's schedule timed "
        "with the model's costs reaches -16% but takes the serial check to +24% (benchmarks/pope_schedule.py); "
        "sources read: benchmarks/results/pope_sources.md")),
])
def test_batch_64_decode_is_within_the_issue_bar_of_pope(weights, published_ms):
    """Issue 10's bar: Pope et al. section 4.4, PaLM 540B on 64 TPU v4 at batch 64 and 2048 tokens
    of context: 28.5 ms per step with int8 weights, 36.9 ms with bf16; within 20%."""
    t, topo = get_target("tpu-v4"), Topology.of_system(get_system("tpu-v4-4x4x4"))
    s = ws2d_decode(SERVED, t, topo, 64, batch=64, context=2048, weights=weights, axes=(4, 16))
    assert s.time_s == pytest.approx(published_ms * 1e-3, rel=0.2)
