"""Pope et al.'s int8/bf16 pair read by hand (benchmarks/pope_pair.py): the HBM rate and the per-layer
time besides the weights that the two published steps imply, from the paper's figures and PaLM's
shapes alone, and the serialized-matmul hypothesis from the MXU's fold count."""

import pytest
from benchmark_module import load_benchmark  # tests/benchmark_module.py

validate = load_benchmark("serving_validate")
pair = load_benchmark("pope_pair")

LAYERS, E, F, HEADS, D, V, CHIPS = 118, 18432, 73728, 64, 256, 256000, 64   # PaLM 540B, heads padded to 64


@pytest.fixture(scope="module")
def steps():
    return validate.pope_steps()


def _params_per_chip_per_layer() -> float:
    """PaLM's parallel layer as the released code holds it (section 4: 64 heads of 256): fused input
    (gate, up, q) and output (down, o) matrices and a norm split over the 64 chips, the one K/V head's
    E/x x 2d matrix whole on each chip; the embedding stays bf16 in both formats (checkpoint.py)."""
    n_in, n_out = 2 * F + HEADS * D, F + HEADS * D
    return E * (n_in + n_out + 1) / CHIPS + E / 4 * 2 * D


def test_the_published_pair_implies_the_saved_bytes_at_0_884_of_the_hbm_peak(steps):
    p = pair.read_pair(steps[0], steps[1])
    saved = _params_per_chip_per_layer()                     # int8 saves one byte per parameter
    diff = (36.9e-3 - 28.5e-3) / LAYERS                      # section 4.4
    assert p.saved_per_layer == pytest.approx(saved, rel=1e-3)
    assert p.published_diff == pytest.approx(diff, rel=1e-9)
    assert p.rate == pytest.approx(saved / diff, rel=1e-3)
    assert p.fraction == pytest.approx(0.884, abs=0.002)
    # t = C + W / R through the bf16 point (2 bytes per parameter, and the bf16 table's share of a
    # step, V E / 64 x 2 bytes over the layers, in both formats) gives C for both formats
    table = V * E / CHIPS * 2 / LAYERS
    c = 36.9e-3 / LAYERS - (2 * saved + table) / (saved / diff)
    assert p.intercept == pytest.approx(c, rel=1e-3)
    # ... and the line passes through the int8 point too (1 byte per parameter): the reading's C
    assert p.intercept == pytest.approx(28.5e-3 / LAYERS - (saved + table) / (saved / diff), rel=1e-3)
    assert p.intercept == pytest.approx(169e-6, rel=0.02)


def test_no_bf16_only_term_fits_inside_the_published_difference(steps):
    """At the full 1.2 TB/s the saved bytes take 62.9 us of the 71.2 us per layer; at the catalog's
    measured 0.83 of it they take more than the whole difference."""
    p = pair.read_pair(steps[0], steps[1])
    saved = _params_per_chip_per_layer()
    assert p.bf16_only_at_peak == pytest.approx(8.4e-3 / LAYERS - saved / 1.2e12, rel=1e-3)
    assert p.bf16_only_at_peak < 10e-6
    assert p.bf16_only_at_catalog == pytest.approx(8.4e-3 / LAYERS - saved / (0.83 * 1.2e12), rel=1e-3)
    assert p.bf16_only_at_catalog < 0
    # the common term the model lacks is most of C's excess over the model's own non-weight time
    assert 50e-6 < p.missing < 90e-6


def test_serialized_matmuls_add_the_mxu_fold_time_by_hand(steps):
    """bf16 at batch 64: both matmuls are bound by their weights' stream, so summing adds their MXU
    time: 128-row weight tiles, 8 MXUs at 1.049 GHz, each fold 128 cycles of weight load (64 rows
    cannot hide it) plus 0.5 x 128 of fill and drain, and one full fill and drain per kernel."""
    r, s = steps[1]
    assert (r.label, r.batch) == ("PaLM 540B bf16", 64)
    clock = 275e12 / (2 * 8 * 128 * 128)
    n_in, n_out = 2 * F + HEADS * D, F + HEADS * D                  # K/V apart: their own matmul
    folds_in = -(-E // 4 // 128) * -(-(n_in // 16) // 128)      # E/x rows of K, (n_in/yz) columns
    folds_out = -(-(n_out // 16) // 128) * -(-E // 4 // 128)
    mxu = sum((-(-folds // 8) * (128 + 64) + 2 * 128) / clock for folds in (folds_in, folds_out))
    assert pair.serialized(r, s) - s.time_s == pytest.approx(LAYERS * mxu, rel=1e-3)


def test_weight_tile_loads_by_hand_and_where_they_would_show(steps):
    """540B on 4 x 16 chips: 36 x 80 input tiles and 44 x 36 output tiles of 128 x 128 over 8 MXUs,
    128 cycles each at 1.049 GHz. Exposed after the stream they add all of it to the memory-bound
    batch-64 bf16 step and nothing to the compute-bound batch-512 one."""
    clock = 275e12 / (2 * 8 * 128 * 128)
    r, s = steps[1]
    loads = pair.weight_loads(r, s)
    assert loads["layer_w_in"] == pytest.approx(-(-36 * 80 // 8) * 128 / clock, rel=1e-9)
    assert loads["layer_w_out"] == pytest.approx(-(-44 * 36 // 8) * 128 / clock, rel=1e-9)
    assert pair.loads_exposed(r, s) - s.time_s == pytest.approx(LAYERS * sum(loads.values()), rel=1e-9)
    r512, s512 = steps[2]
    assert (r512.label, r512.batch) == ("PaLM 540B bf16", 512)
    assert pair.loads_exposed(r512, s512) == pytest.approx(s512.time_s, rel=1e-12)
