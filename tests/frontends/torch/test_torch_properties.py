"""Property tests: random shapes of the matrix ops against FlopCounterMode."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402


def _both(module, *args):
    with FlopCounterMode(display=False) as c, torch.no_grad():
        module(*args)
    g = narrowpipe.from_torch(module, args)
    return c.get_total_flops(), narrowpipe.analyze(g, strict=True).modeled_flops


class Conv(torch.nn.Module):
    def __init__(self, cin, cout, k, stride, pad, dil, groups, transposed):
        super().__init__()
        cls = torch.nn.ConvTranspose2d if transposed else torch.nn.Conv2d
        self.c = cls(cin * groups, cout * groups, k, stride=stride, padding=pad, dilation=dil, groups=groups)

    def forward(self, x):
        return self.c(x)


@settings(max_examples=25, deadline=None)
@given(cin=st.integers(1, 3), cout=st.integers(1, 3), k=st.integers(1, 3), stride=st.integers(1, 2),
       pad=st.integers(0, 1), dil=st.integers(1, 2), groups=st.integers(1, 2), transposed=st.booleans(),
       size=st.integers(6, 9))
def test_conv2d_matches(cin, cout, k, stride, pad, dil, groups, transposed, size):
    m = Conv(cin, cout, k, stride, pad, dil, groups, transposed).eval()
    expected, got = _both(m, torch.randn(1, cin * groups, size, size))
    assert got == expected


class MatMul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


shapes = st.sampled_from([((5,), (5, 4)), ((2, 3, 5), (5, 4)), ((3, 5), (2, 5, 4)),
                          ((1, 2, 3, 5), (4, 2, 5, 6)), ((2, 1, 3, 5), (3, 5, 2)), ((7, 5), (5, 3))])


@settings(max_examples=10, deadline=None)
@given(shape=shapes)
def test_matmul_broadcasting_matches(shape):
    a, b = shape
    expected, got = _both(MatMul(), torch.randn(*a), torch.randn(*b))
    assert got == expected


@pytest.mark.parametrize("a,b", [((5,), (5,)), ((3, 5), (5,)), ((2, 3, 5), (5,))])
def test_vector_products_count_what_flop_counter_mode_omits(a, b):
    """FlopCounterMode has no formula for aten.dot / aten.mv and counts 0; we count 2 per MAC."""
    expected, got = _both(MatMul(), torch.randn(*a), torch.randn(*b))
    assert expected == 0
    assert got == 2 * 5 * (a[0] * a[1] if len(a) == 3 else 3 if len(a) == 2 else 1)


class Attn(torch.nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


@settings(max_examples=10, deadline=None)
@given(b=st.integers(1, 2), hk=st.integers(1, 2), group=st.integers(1, 3), sq=st.integers(1, 6),
       sk=st.integers(1, 6), d=st.sampled_from([4, 8]))
def test_sdpa_matches_eager_formula(b, hk, group, sq, sk, d):
    q, k, v = torch.randn(b, hk * group, sq, d), torch.randn(b, hk, sk, d), torch.randn(b, hk, sk, d)
    g = narrowpipe.from_torch(Attn(), (q, k, v))
    # FlopCounterMode counts 0 for the CPU fused kernel; its formula (sdpa_flop_count) is this:
    assert narrowpipe.analyze(g).flops_by_group["attention"] == 2 * b * hk * group * sq * sk * d * 2
