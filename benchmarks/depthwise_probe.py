"""MobileNetV2's depthwise layers inside the network against the same layers alone (issue 12).

    python benchmarks/depthwise_probe.py [--batch 1] [--fresh] [--out benchmarks/results/depthwise_probe.md]

For each depthwise ``nn.Conv2d`` of Hugging Face's MobileNetV2 1.0 (random weights, torch at one
thread): its time and minor page faults inside eager forwards (forward hooks around the module,
which the TF-style ``F.pad`` precedes), the same call in a hot loop on a tensor of the same shape,
and the same call with the last-level cache flushed before each call (a 64 MiB fill). Without
``--fresh`` a 31 MiB buffer is freed first, as a long-lived process (the validation run) has done,
which raises glibc's mmap and trim thresholds; with it the process is left fresh and the oneDNN
reorder buffers of the large layers are mapped anew on every call.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
RESULTS = Path(__file__).resolve().parent / "results"


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def _time(fn, n: int = 15, before=None) -> float:
    for _ in range(3):
        fn()
    ts = []
    for _ in range(n):
        if before:
            before()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--fresh", action="store_true", help="leave glibc's thresholds as a new process has them")
    ap.add_argument("--out", default=str(RESULTS / "depthwise_probe.md"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    if not args.fresh:
        primer = torch.empty(31 * 2**20 // 4)
        del primer
    import transformers
    model = transformers.MobileNetV2ForImageClassification(transformers.MobileNetV2Config(num_labels=1001)).eval()
    x = torch.randn(args.batch, 3, 224, 224)
    seen: dict[torch.nn.Module, list[tuple[float, int, tuple[int, ...]]]] = {}
    start: dict[torch.nn.Module, tuple[float, int]] = {}

    def pre(mod, inp):
        start[mod] = (time.perf_counter(), _faults())

    def post(mod, inp, out):
        t0, f0 = start[mod]
        seen.setdefault(mod, []).append((time.perf_counter() - t0, _faults() - f0, tuple(inp[0].shape)))

    for mod in model.modules():
        if isinstance(mod, torch.nn.Conv2d) and mod.groups > 1:
            mod.register_forward_pre_hook(pre)
            mod.register_forward_hook(post)
    flush = torch.empty(64 * 2**20 // 4)
    rows, totals = [], [0.0, 0.0, 0.0]
    with torch.no_grad():
        for _ in range(3):
            model(x)
        seen.clear()
        for _ in range(7):
            model(x)
        for mod, calls in seen.items():
            shape = calls[0][2]
            xi = torch.randn(*shape)
            conv = lambda: F.conv2d(xi, mod.weight, stride=mod.stride, groups=mod.groups)  # noqa: B023,E731
            net = statistics.median(t for t, _, _ in calls)
            hot = _time(conv)
            cold = _time(conv, before=lambda: flush.fill_(1.0))
            faults = statistics.median(f for _, f, _ in calls)
            rows.append(f"| {'x'.join(map(str, shape))} s{mod.stride[0]} | {net * 1e6:.0f} | {faults:.0f} | "
                        f"{hot * 1e6:.0f} | {cold * 1e6:.0f} |")
            for i, v in enumerate((net, hot, cold)):
                totals[i] += v
    lines = [f"# MobileNetV2 depthwise layers in the network and alone (batch {args.batch}, "
             f"{'fresh process' if args.fresh else 'glibc thresholds raised'})", "",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; torch {torch.__version__}, one thread",
             "- command: `python benchmarks/depthwise_probe.py" + (" --fresh" if args.fresh else "")
             + f" --batch {args.batch}`", "",
             "| input (padded) | in network (us) | page faults per call | hot loop (us) | LLC flushed (us) |",
             "|---|--:|--:|--:|--:|", *rows,
             f"| total | {totals[0] * 1e3:.2f} ms | | {totals[1] * 1e3:.2f} ms | {totals[2] * 1e3:.2f} ms |", ""]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
