"""Batch-1 decode on dataflow chips against the vendors' published tokens per second.

Why: bandwidth alone says a wafer holding Llama-3-8B in 21 PB/s of SRAM emits a token in about a
microsecond; Cerebras serves 1,800 tokens/s. What bounds batch-1 decode on a spatial chip is the
latency of each kernel in the chain (fill, synchronisation, fabric traversal), which no datasheet
gives. The catalog therefore carries a per-kernel latency (``launch_overhead_us``) for Groq and
Cerebras fitted to one published figure each, and this script shows the fit and checks it on a
held-out published figure of a model ten times larger (different chip count, kernel count and
weight bytes). SambaNova's SN40L has nothing fitted: a 16-socket node serves the model tensor
parallel from HBM at the 75% of bandwidth SambaNova reports for token generation (SN-DAC); its 8B row
is a check. Its 70B row is listed but not comparable: 457 tokens/s x 141 GB of 16-bit weights is
64 TB/s, 2.5x the node's 25.6 TB/s of HBM peak, so the service does more than plain decode (we
guess speculative decoding; the source does not say).

    python benchmarks/published_decode.py      # seconds; writes results/published_decode.{md,json}

The fit: with the latency at zero the model predicts T0 for one token; K kernels of the chain pay
the latency (a layout change, an elementwise chain or a KV-cache write rides its producer's stream
and pays none: costmodel/execution/dataflow_stream.py); the latency is (1 / published - T0) / K.
Each row times one decode step as ``compare --mode decode`` does: the serving graph with a KV cache
of the published context (Groq's Llama 2 figures at 2k and 4k; Cerebras and SambaNova state none,
assumption: 2k). Until December 2026 the fit used the export's forward of one token without a cache,
which left out the cache's writes and the layout changes around them. Approximations, stated: the
bundled Llama-3 graphs stand in for Llama 2 7B/70B (Groq's figures) and Llama 3.1 8B/70B
(Cerebras'); published figures are vendor API throughputs, which include sampling and host overheads.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import narrowpipe  # noqa: E402
from narrowpipe.backends import get_target  # noqa: E402
from narrowpipe.backends.defaults import SERVING_MEMORY_RESERVE  # noqa: E402
from narrowpipe.costmodel.analyze import resolve_bindings  # noqa: E402
from narrowpipe.costmodel.execution import TimingOptions  # noqa: E402
from narrowpipe.costmodel.execution.dataflow_stream import in_stream  # noqa: E402
from narrowpipe.costmodel.interpreter import interpret  # noqa: E402
from narrowpipe.costmodel.serving import serving_graph  # noqa: E402
from narrowpipe.costmodel.timing import fused_program  # noqa: E402
from narrowpipe.models.examples import load_example  # noqa: E402

from _common import RESULTS, env_header, environment, md_table, no_options, write_results  # noqa: E402

#: (target, bundled example, published tokens/s, published model, source key, role)
PUBLISHED = [
    ("cerebras-wse3", "llama-3-8b", 1800, "Llama 3.1 8B", "CER-INF", "fit"),
    ("cerebras-wse3", "llama-3-70b", 450, "Llama 3.1 70B", "CER-INF", "held out"),
    ("groq-lpu", "llama-3-8b", 750, "Llama 2 7B (2k context)", "GROQ-INF", "fit"),
    ("groq-lpu", "llama-3-70b", 300, "Llama 2 70B (4k context)", "GROQ-INF", "held out"),
    ("sambanova-sn40l", "llama-3-8b", 1042, "Llama 3.1 8B (16-bit)", "SN-BLOG", "held out"),
    ("sambanova-sn40l", "llama-3-70b", 457, "Llama 3.1 70B (16-bit)", "SN-BLOG", "not comparable"),
]


#: KV cache length of each published figure; assumption 2048 where the source states none.
CONTEXT = {("groq-lpu", "llama-3-8b"): 2048, ("groq-lpu", "llama-3-70b"): 4096}


def decode(example: str, target, context: int) -> tuple[narrowpipe.Report, int]:
    """One batch-1 decode step with a cache of ``context`` tokens, as ``compare --mode decode`` times
    it, and the kernels that pay the per-kernel latency on ``target``."""
    sg = serving_graph(load_example(example))
    dims = sg.bindings(1, 1, context)
    report = narrowpipe.analyze(sg.graph, target, dims=dims, memory_reserve=SERVING_MEMORY_RESERVE)
    table = interpret(sg.graph, resolve_bindings(sg.graph, dims))
    program = fused_program(table, target, TimingOptions())
    return report, sum(1 for k in program.kernels if not k.is_free and not in_stream(k))


def main() -> None:
    rows, data = [], []
    for name, example, published, model, source, role in PUBLISHED:
        target = get_target(name)
        context = CONTEXT.get((name, example), 2048)
        r, kernels = decode(example, target, context)
        r0, _ = decode(example, dataclasses.replace(target, launch_overhead=0.0), context)
        fitted = (1 / published - r0.time_s) / kernels
        predicted = 1 / r.time_s
        data.append({"target": name, "example": example, "published_tokens_per_s": published,
                     "published_model": model, "source": source, "role": role, "context": context,
                     "kernels": r.timing.kernels, "latency_kernels": kernels,
                     "chips": r.timing.devices, "time_without_latency_s": r0.time_s,
                     "latency_per_kernel_s": target.launch_overhead, "latency_fitted_here_s": fitted,
                     "predicted_tokens_per_s": predicted, "error": predicted / published - 1})
        rows.append([name, f"{example} for {model}", role, f"{context:,}", r.timing.devices,
                     f"{kernels} of {r.timing.kernels}",
                     f"{1 / r0.time_s:,.0f}", f"{target.launch_overhead * 1e6:.2g} us",
                     f"{fitted * 1e6:.3g} us", f"{predicted:,.0f}", f"{published:,}",
                     f"{predicted / published - 1:+.0%}", source])
    env = environment()
    md = ("# Batch-1 decode on dataflow chips vs published tokens/s\n\n" + env_header(env) + "\n"
          + md_table(["target", "model", "role", "context", "chips", "kernels paying latency",
                      "tokens/s at zero latency",
                      "catalog latency/kernel", "latency that fits", "predicted tokens/s",
                      "published tokens/s", "error", "source"], rows, "lllrrrrrrrrrl")
          + "\nThe catalog latency is the fitted one rounded to two digits; the held-out rows are the check. "
          "SN40L's 70B row is not comparable: its published rate needs 2.5x the node's HBM peak (see the "
          "script's docstring).\n")
    md_path, _ = write_results(RESULTS, "published_decode", md, {"env": env, "rows": data})
    print(md)
    print(f"[published_decode] wrote {md_path}")


if __name__ == "__main__":
    no_options(__doc__)
    main()
