"""fp32 GEMMs on this CPU with aligned and unaligned output rows, side by side.

    python benchmarks/cpu_unaligned_gemm.py          # ~1 minute at one torch thread

Times ``torch.nn.functional.linear`` (as a model's linear layers call it: weights [N, K]) in 7
interleaved rounds, thread-CPU clock, median, at shapes that differ only in one dim by a few
elements: N a multiple of 8 (32-byte output rows) or not, and odd M or K for contrast, plus GPT-2's
50,257-wide LM head against the padded 50,304 (nanoGPT's choice). It is the evidence behind
``costmodel/execution/unaligned_rows.py``; ``calibrate`` measures the loss itself on every host
(``matmul_unaligned_curve``). Writes benchmarks/results/cpu_unaligned_gemm.{md,json}.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

from narrowpipe.costmodel.execution.unaligned_rows import rows_aligned

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import env_header, environment, md_table, publish, rounds_args  # noqa: E402

#: (M, N, K); each group differs in one dim by a few elements
SHAPES = ((128, 16000, 768), (128, 16001, 768), (128, 16002, 768), (128, 16004, 768), (128, 16008, 768),
          (128, 16016, 768), (129, 16000, 768), (128, 16000, 769), (16, 16000, 768), (16, 16001, 768),
          (128, 3072, 768), (128, 3073, 768), (1024, 3072, 768), (1024, 3073, 768),
          (128, 50304, 768), (128, 50257, 768))


def main() -> int:
    args = rounds_args(__doc__, 7, "cpu_unaligned_gemm")
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    cases = [(s, torch.randn(s[0], s[2], generator=g), torch.randn(s[1], s[2], generator=g)) for s in SHAPES]
    samples: dict[tuple[int, int, int], list[float]] = {s: [] for s in SHAPES}
    with torch.no_grad():
        for _, a, w in cases:
            torch.nn.functional.linear(a, w)
        for r in range(args.rounds):
            for j in range(len(cases)):
                s, a, w = cases[(j + r) % len(cases)]
                t0 = time.thread_time()
                torch.nn.functional.linear(a, w)
                samples[s].append(time.thread_time() - t0)
    rows = []
    for m, n, k in SHAPES:
        sec = statistics.median(samples[(m, n, k)])
        rows.append({"shape": [m, n, k], "seconds": sec, "gflops": 2 * m * n * k / sec / 1e9,
                     "rows_aligned": rows_aligned(n, 4), "output_bytes": m * n * 4})
    env = environment()
    out = Path(args.out)
    table = md_table(["M x N x K", "output rows", "output", "time", "GFLOP/s"],
                     [("x".join(map(str, r["shape"])), "aligned" if r["rows_aligned"] else "unaligned",
                       f"{r['output_bytes'] / 2**20:.1f} MiB", f"{r['seconds'] * 1e3:.2f} ms", f"{r['gflops']:.1f}")
                      for r in rows], align="ll")
    page = (f"# fp32 GEMMs with aligned and unaligned output rows ({env['date'][:10]})\n\n"
            f"{env_header(env).rstrip()}\n\n`torch.nn.functional.linear` at one thread, {args.rounds} interleaved "
            "rounds, thread-CPU clock, median. Output rows are aligned when N x 4 bytes is a multiple of 32.\n\n"
            + table)
    return publish(out, page, {"env": env, "rows": rows})


if __name__ == "__main__":
    sys.exit(main())
