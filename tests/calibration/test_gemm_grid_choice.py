"""The CPU GEMM grid ``calibrate`` measures shares no dim with the validation's GEMMs, so the
validation checks interpolation between measured shapes, as an unseen model's GEMMs would get."""

from narrowpipe.calibration.bmm_sweep import BMM_SHAPES
from narrowpipe.calibration.gemm_grid_sweep import GRID_M, GRID_N, GRID_NK, WIDE_N

#: calibration/validate.py's held-out per-op GEMMs (m, n, k)
HELD_OUT = [(100, 100, 100), (300, 500, 700), (1000, 200, 1000), (777, 777, 777), (1, 4096, 1024),
            (4, 1024, 4096), (64, 3072, 768), (512, 768, 3072), (1536, 1024, 256)]
#: the end-to-end validation models' linear widths (BERT-base, GPT-2, ViT-B/16, Swin-T, ConvNeXt-T,
#: SmolLM2-135M, T5-small) and their row counts at 128 tokens (batch 1 and 8) or 197 patches
MODEL_WIDTHS = {96, 192, 384, 512, 576, 768, 1536, 2048, 2304, 3072}
#: their classifier and vocabulary widths (ImageNet heads, T5-small, SmolLM2, GPT-2)
MODEL_HEAD_WIDTHS = {1000, 1001, 32128, 49152, 50257}
MODEL_ROWS = {128, 1024, 197, 1576}
#: calibration/validate.py's held-out per-op batched GEMMs (batch, m, n, k)
HELD_OUT_BMM = [(12, 128, 128, 64), (48, 64, 64, 128), (8, 256, 64, 256)]
#: the end-to-end models' attention head dims and Swin-T's window tokens
MODEL_HEADS = {32, 64, 49}


def test_no_held_out_gemm_is_a_grid_point():
    grid = {(m, n, k) for m in GRID_M for n in GRID_N for k in GRID_NK}
    assert not grid & set(HELD_OUT)


def test_the_grid_avoids_the_validation_models_dims():
    assert not set(GRID_N) & (MODEL_WIDTHS | MODEL_HEAD_WIDTHS)
    assert not set(GRID_NK) & (MODEL_WIDTHS | MODEL_HEAD_WIDTHS)
    assert not set(GRID_M) & MODEL_ROWS


def test_the_widest_output_lies_between_the_mlp_widths_and_the_vocabularies():
    """Interpolation, not the grid's flat edge, prices a vocabulary projection: WIDE_N is wider than
    every hidden or MLP width and narrower than every vocabulary."""
    assert max(GRID_NK) < WIDE_N == max(GRID_N)
    assert max(MODEL_WIDTHS) < WIDE_N < min(w for w in MODEL_HEAD_WIDTHS if w > 2000)


def test_the_calibrated_batches_share_no_dim_with_the_validation():
    held_out = {d for shape in HELD_OUT_BMM for d in shape}
    for shape in BMM_SHAPES:
        assert not set(shape) & held_out, shape
        assert not set(shape[1:]) & (MODEL_WIDTHS | MODEL_ROWS | MODEL_HEADS), shape
