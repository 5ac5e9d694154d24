"""A convolution's time on this CPU after another convolution against after an elementwise op.

    python benchmarks/cpu_conv_context.py        # ~30 s at one torch thread

``calibrate`` times its convolutions (``calibration.sweeps.conv_cases``) the way a network runs
them. In a network the op before a convolution is almost always elementwise (a batch norm, an
activation, a residual add) writing the convolution's input; the calibration's turns used to run
its convolutions one after another instead. This times each of calibrate's convolution shapes in
interleaved rounds both ways, the input the same tensor, thread-CPU clock, median: right after a
convolution of another of the shapes, and right after a ReLU wrote its input. Writes
benchmarks/results/cpu_conv_context.{md,json}.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from narrowpipe.calibration.sweeps import CONV_SHAPES

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import env_header, environment, md_table, publish, rounds_args  # noqa: E402


def main() -> int:
    args = rounds_args(__doc__, 15, "cpu_conv_context")
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(1, cin, px, px, generator=g) for cin, _, _, _, px in CONV_SHAPES]
    ws = [torch.randn(cout, cin, k, k, generator=g) for cin, cout, k, _, _ in CONV_SHAPES]
    bufs = [torch.empty_like(x) for x in xs]

    def conv(i: int, x: torch.Tensor) -> torch.Tensor:
        _, _, k, s, _ = CONV_SHAPES[i]
        return F.conv2d(x, ws[i], stride=s, padding=k // 2)

    def timed(i: int, x: torch.Tensor) -> float:
        t0 = time.thread_time()
        conv(i, x)
        return time.thread_time() - t0

    n = len(CONV_SHAPES)
    after_conv: list[list[float]] = [[] for _ in range(n)]
    after_elementwise: list[list[float]] = [[] for _ in range(n)]
    with torch.no_grad():
        for i in range(n):
            conv(i, xs[i])
        for r in range(args.rounds):
            for i in range(n):
                other = (i + 1 + r % (n - 1)) % n                 # another shape, rotated
                conv(other, xs[other])
                after_conv[i].append(timed(i, xs[i]))
                torch.clamp_min(xs[i], 0.0, out=bufs[i])
                after_elementwise[i].append(timed(i, bufs[i]))
    rows = []
    for i, (cin, cout, k, s, px) in enumerate(CONV_SHAPES):
        a, b = statistics.median(after_conv[i]), statistics.median(after_elementwise[i])
        rows.append({"shape": [cin, cout, k, s, px], "after_conv_s": a, "after_elementwise_s": b, "ratio": a / b})
    env = environment()
    out = Path(args.out)
    table = md_table(["conv", "after another conv", "after an elementwise op", "ratio"],
                     [(f"{cin}->{cout} k{k} s{s} {px}px", f"{r['after_conv_s'] * 1e6:.0f} us",
                       f"{r['after_elementwise_s'] * 1e6:.0f} us", f"{r['ratio']:.2f}")
                      for r in rows for cin, cout, k, s, px in [r["shape"]]], align="l")
    page = (f"# Convolutions after a convolution vs after an elementwise op ({env['date'][:10]})\n\n"
            f"{env_header(env).rstrip()}\n\ncalibrate's convolution shapes (Cin -> Cout, kernel, stride, input "
            f"side, batch 1), {args.rounds} interleaved rounds at one torch thread, thread-CPU clock, median.\n\n"
            + table)
    return publish(out, page, {"env": env, "rows": rows})


if __name__ == "__main__":
    sys.exit(main())
