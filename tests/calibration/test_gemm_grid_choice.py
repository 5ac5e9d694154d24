"""The CPU GEMM grid ``calibrate`` measures shares no dim with the validation's GEMMs, so the
validation checks interpolation between measured shapes, as an unseen model's GEMMs would get."""

from narrowpipe.calibration.gemm_grid_sweep import GRID_M, GRID_NK

#: calibration/validate.py's held-out per-op GEMMs (m, n, k)
HELD_OUT = [(100, 100, 100), (300, 500, 700), (1000, 200, 1000), (777, 777, 777), (1, 4096, 1024),
            (4, 1024, 4096), (64, 3072, 768), (512, 768, 3072), (1536, 1024, 256)]
#: the end-to-end validation models' linear widths (BERT-base, GPT-2, ViT-B/16, Swin-T, ConvNeXt-T,
#: SmolLM2-135M, T5-small) and their row counts at 128 tokens (batch 1 and 8) or 197 patches
MODEL_WIDTHS = {96, 192, 384, 512, 576, 768, 1536, 2048, 2304, 3072}
MODEL_ROWS = {128, 1024, 197, 1576}


def test_no_held_out_gemm_is_a_grid_point():
    grid = {(m, n, k) for m in GRID_M for n in GRID_NK for k in GRID_NK}
    assert not grid & set(HELD_OUT)


def test_the_grid_avoids_the_validation_models_dims():
    assert not set(GRID_NK) & MODEL_WIDTHS
    assert not set(GRID_M) & MODEL_ROWS
