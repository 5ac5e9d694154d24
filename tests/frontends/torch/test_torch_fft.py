"""``torch.fft`` transforms over one or several axes (``fft``, ``fft2``, ``fftn``, inverse and real
variants, FNet's token mixing) are FFT ops whose FLOPs are 5 N log2 N per transform of length N,
summed over the transformed axes, counted by hand here."""

from __future__ import annotations

from math import log2

import pytest

torch = pytest.importorskip("torch")

import narrowpipe  # noqa: E402
from narrowpipe.ir import Op  # noqa: E402


class Fn(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _fft_flops(shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    total = 1
    for d in shape:
        total *= d
    return sum(int(5 * shape[a] * log2(shape[a])) * (total // shape[a]) for a in axes)


X = (2, 8, 16)
CASES = {
    "fftn over (1, 2)": (lambda x: torch.fft.fftn(x, dim=(1, 2)).real, (1, 2)),
    "fftn over all axes": (lambda x: torch.fft.fftn(x).real, (0, 1, 2)),
    "fft2": (lambda x: torch.fft.fft2(x).real, (1, 2)),
    "ifftn over (0, 2)": (lambda x: torch.fft.ifftn(x, dim=(0, 2)).real, (0, 2)),
    "fft over dim 1": (lambda x: torch.fft.fft(x, dim=1).real, (1,)),
    "rfft (last axis)": (lambda x: torch.fft.rfft(x).real, (2,)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fft_flops_are_5_n_log2_n_per_transformed_axis(case):
    fn, axes = CASES[case]
    report = narrowpipe.analyze(narrowpipe.from_torch(Fn(fn), (torch.randn(*X),)), strict=True)
    assert not report.unmodeled
    fft = [row for row in report.ops if row.op == Op.FFT.value]
    assert len(fft) == 1, [row.op for row in report.ops]
    assert fft[0].flops == _fft_flops(X, axes)


def test_fftn_over_two_axes_equals_one_transform_of_their_product():
    """The per-axis sum is 5 N log2 N with N = 8 x 16 per batch element: 2 x 5 x 128 x 7."""
    assert _fft_flops(X, (1, 2)) == 2 * 5 * 128 * 7 == 8960


def test_fnet_token_mixing_is_modeled():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.FNetConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, intermediate_size=64,
                                  max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.FNetModel(cfg).eval()
    b, s = 2, 12
    report = narrowpipe.analyze(narrowpipe.from_torch(model, (), {"input_ids": torch.randint(0, 128, (b, s))}))
    assert not report.unmodeled, report.unmodeled
    fft = [row.flops for row in report.ops if row.op == Op.FFT.value]
    assert fft == [_fft_flops((b, s, 32), (1, 2))] * 2
