"""The kernel measurements file: parsing, errors that name the line, and one-op graphs whose FLOPs
are the problem's (hand formula and torch's FlopCounterMode)."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.calibration.kernel_measurements import kernel_graph, read_kernel_measurements
from narrowpipe.errors import NarrowpipeError

HEADER = "source,chip,kind,dtype,shape,measured_us,timing,algo,ref\n"


def _write(tmp_path, body: str):
    p = tmp_path / "k.csv"
    p.write_text("# a comment line\n" + HEADER + body)
    return p


def test_rows_parse_with_their_shape_and_seconds(tmp_path):
    body = ("X,h100,gemm,bf16,b=2 m=64 n=128 k=32 ta=N tb=T,12.5,kernel,,r1\n"
            "X,t4,conv_fwd,fp16,n=1 c=3 h=8 w=8 k=4 r=3 s=3 ph=1 pw=1,3,stream,,\n")
    rows = read_kernel_measurements(_write(tmp_path, body))
    assert rows[0].shape == {"b": 2, "m": 64, "n": 128, "k": 32} and rows[0].seconds == pytest.approx(12.5e-6)
    assert rows[0].flops == 2 * 2 * 64 * 128 * 32
    assert rows[1].flops == 2 * 1 * 4 * 3 * 9 * 8 * 8            # padding 1 keeps 8x8 outputs


@pytest.mark.parametrize("line, reason", [
    ("X,h100,lstm,bf16,b=1 m=1 n=1 k=1,1,kernel,,", "kind 'lstm'"),   # attention is a kind since the vector rows
    ("X,h100,gemm,int3,b=1 m=1 n=1 k=1,1,kernel,,", "dtype 'int3'"),
    ("X,h100,gemm,bf16,b=1 m=1 n=1,1,kernel,,", "needs k"),
    ("X,h100,gemm,bf16,b=1 m=1 n=1 k=1,-2,kernel,,", "positive"),
    ("X,h100,gemm,bf16,b=1 m=1 n=1 k=1,1,wall,,", "timing 'wall'"),
    ("X,h100,conv_fwd,fp32,n=1 c=1 h=2 w=2 k=1 r=3 s=3,1,stream,,", "does not fit"),
    ("X,t4,gemm,fp32,b=1 m=8 n=4 k=2 ta=T,1,stream,,", "both operand flags"),
    ("X,t4,gemm,fp32,b=1 m=8 n=4 k=2 ta=C tb=N,1,stream,,", "'ta=C'"),
    ("X,t4,conv_fwd,fp32,n=1 c=1 h=4 w=4 k=1 r=1 s=1 ta=N tb=N,1,stream,,", "gemm rows only"),
    ("X,h100,gemm,bf16,b=1 m=8 n=8 k=8 m=16,1,kernel,,", "'m' is given twice"),   # which m was timed?
])
def test_bad_rows_name_the_file_line_and_reason(tmp_path, line, reason):
    with pytest.raises(NarrowpipeError) as e:
        read_kernel_measurements(_write(tmp_path, line + "\n"))
    assert "data line 2" in str(e.value) and reason in str(e.value) and "k.csv" in str(e.value)


def test_a_file_without_the_columns_is_not_a_kernel_measurements_file(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(NarrowpipeError, match="not a kernel measurements file"):
        read_kernel_measurements(p)


@pytest.mark.parametrize("kind", ["conv_fwd", "conv_bwd_data", "conv_bwd_filter"])
def test_conv_graphs_count_the_forward_problems_flops(tmp_path, kind):
    """Each pass of a convolution does as many multiply-adds as the forward problem."""
    rows = read_kernel_measurements(_write(tmp_path, f"X,v100,{kind},fp32,n=2 c=3 h=15 w=11 k=8 r=5 s=3 ph=1 pw=0 "
                                                     "sh=2 sw=1,9,stream,,\n"))
    r = narrowpipe.analyze(kernel_graph(rows[0]))
    p, q = (15 + 2 - 5) // 2 + 1, (11 - 3) + 1
    assert r.flops_by_group["convolution"] == rows[0].flops == 2 * 2 * 8 * 3 * 5 * 3 * p * q


def test_conv_forward_flops_agree_with_flop_counter_mode(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode
    rows = read_kernel_measurements(_write(tmp_path, "X,v100,conv_fwd,fp32,n=2 c=16 h=14 w=14 k=32 r=3 s=3 ph=1 pw=1 "
                                                     "sh=2 sw=2,9,stream,,\n"))
    conv = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
    with FlopCounterMode(display=False) as fc:
        conv(torch.randn(2, 16, 14, 14))
    assert narrowpipe.analyze(kernel_graph(rows[0])).flops == fc.get_total_flops() == rows[0].flops


def test_the_held_out_split_depends_on_the_problem_not_the_chip(tmp_path):
    body = "".join(f"X,{chip},gemm,bf16,b=1 m={m} n=256 k=256,1,kernel,,\n" for m in (256, 512, 1024, 2048)
                   for chip in ("h100", "b200"))
    rows = read_kernel_measurements(_write(tmp_path, body))
    by_shape = {}
    for r in rows:
        by_shape.setdefault(r.shape_text, set()).add(r.held_out())
    assert all(len(v) == 1 for v in by_shape.values())


@pytest.mark.parametrize("flags, layout, major", [
    ("ta=N tb=N", "NN", ("mn", "k")),     # column-major BLAS: A is m x k with lda = m; B k x n, ldb = k
    ("ta=T tb=N", "TN", ("k", "k")),
    ("ta=N tb=T", "NT", ("mn", "mn")),
    ("ta=T tb=T", "TT", ("k", "mn")),
])
def test_gemm_operand_flags_become_the_dots_operand_major(tmp_path, flags, layout, major):
    row = read_kernel_measurements(_write(tmp_path, f"X,t4,gemm,fp32,b=1 m=8 n=4 k=2 {flags},1,stream,,\n"))[0]
    assert row.layout == layout and row.shape == {"b": 1, "m": 8, "n": 4, "k": 2}
    (dot,) = kernel_graph(row).nodes
    assert dot.attrs["operand_major"] == major


def test_a_gemm_without_flags_states_no_layout_and_the_split_ignores_the_flags(tmp_path):
    body = "X,t4,gemm,fp32,b=1 m=8 n=4 k=2,1,stream,,\nX,t4,gemm,fp32,b=1 m=8 n=4 k=2 ta=T tb=N,1,stream,,\n"
    plain, flagged = read_kernel_measurements(_write(tmp_path, body))
    assert plain.layout == "" and "operand_major" not in kernel_graph(plain).nodes[0].attrs
    assert plain.shape_text == flagged.shape_text and plain.held_out() == flagged.held_out()
