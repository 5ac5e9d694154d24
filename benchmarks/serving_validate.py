"""Serving predictions against published decode latencies: no fitting, each error reported.

    python benchmarks/serving_validate.py      # seconds; writes results/serving_validate.{md,json}

1. **Pope et al. 2022** (Efficiently Scaling Transformer Inference, arXiv:2211.05102): PaLM 540B
   generating on 64 TPU v4 chips (a 4x4x4 slice), batch 64, 2048-token context, 2D weight-stationary
   layout with multi-query attention sharded over the batch: 28.5 ms per decode step with int8
   weights, 36.9 ms with bf16 weights. PaLM's shape from the PaLM paper (Chowdhery et al. 2022,
   arXiv:2204.02311, table 1 and section 2): 118 layers, d_model 18432, 48 heads of 256, multi-query
   attention (one K/V head), d_ff 73728 with SwiGLU, parallel attention + MLP blocks, shared
   input/output embedding, 256k vocabulary, no biases. Predicted by
   :mod:`narrowpipe.costmodel.serving.ws2d` on the ``tpu-v4-4x4x4`` system with the catalog's TPU v4
   figures, axes x = 4 (one torus axis) and yz = 16 (the other two).
2. **The dataflow rows of** ``benchmarks/published_decode.py`` (same published figures, same
   catalog latencies) timed again as serving decode steps that read a KV cache at the published
   context, where ``published_decode`` timed one token without a cache: the effect of the cache on
   those predictions.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from published_decode import PUBLISHED  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.backends import get_system, get_target  # noqa: E402
from narrowpipe.costmodel.execution.collectives import Topology  # noqa: E402
from narrowpipe.costmodel.serving import serve  # noqa: E402
from narrowpipe.costmodel.serving.ws2d import ws2d_decode  # noqa: E402
from narrowpipe.ir import DType  # noqa: E402
from narrowpipe.models.examples import load_example  # noqa: E402
from narrowpipe.models.spec import TransformerSpec  # noqa: E402

from _common import RESULTS, env_header, environment, md_table, write_results  # noqa: E402

PALM_540B = TransformerSpec(layers=118, hidden=18432, heads=48, vocab=256000, ffn=73728, kv_heads=1,
                            head_dim=256, gated_mlp=True, activation="silu", parallel_block=True,
                            tie_embeddings=True, norm="layer", dtype=DType.BF16)
#: (weights, published ms per decode step)
POPE = [("int8", 28.5), ("bf16", 36.9)]
#: Context of each published dataflow figure (published_decode's models: Groq's Llama 2 at 2k and 4k;
#: Cerebras states none, 2k assumed).
CONTEXT = {("groq-lpu", "llama-3-8b"): 2048, ("groq-lpu", "llama-3-70b"): 4096}


def pope_rows() -> tuple[list[list[str]], list[dict[str, object]], str]:
    target = get_target("tpu-v4")
    topo = Topology.of_system(get_system("tpu-v4-4x4x4"))
    rows, data, breakdown = [], [], ""
    for weights, published_ms in POPE:
        s = ws2d_decode(PALM_540B, target, topo, 64, batch=64, context=2048, weights=DType.parse(weights),
                        axes=(4, 16))
        err = s.time_s * 1e3 / published_ms - 1
        rows.append([f"PaLM 540B, {weights} weights", "64 x tpu-v4 (4x4x4)", "64", "2048",
                     f"{s.compute_s * 1e3:.1f}", f"{s.collectives_s * 1e3:.1f}", f"{s.time_s * 1e3:.1f}",
                     f"{published_ms}", f"{err:+.0%}"])
        data.append({"model": "PaLM 540B", "weights": weights, "chips": 64, "batch": 64, "context": 2048,
                     "predicted_ms": s.time_s * 1e3, "published_ms": published_ms, "error": err, **s.to_dict()})
        breakdown += f"\nPer layer, {weights} weights (us): " + ", ".join(
            f"{k} {v * 1e6:.1f}" for k, v in s.per_layer.items()) + "\n"
    return rows, data, breakdown


def dataflow_rows() -> tuple[list[list[str]], list[dict[str, object]]]:
    rows, data = [], []
    for name, example, published, model, source, role in PUBLISHED:
        graph = load_example(example)
        ctx = CONTEXT.get((name, example), 2048)
        export = narrowpipe.analyze(graph, name, batch=1, seq=1)     # published_decode's reading
        empty = serve(graph, name, mode="decode", batch=1, context=0, with_crossover=False)
        r = serve(graph, name, mode="decode", batch=1, context=ctx, with_crossover=False)
        tps, tps0 = r.output_tokens_per_s or 0.0, empty.output_tokens_per_s or 0.0
        rows.append([f"{example} for {model}", name, role, str(ctx), f"{1 / export.time_s:,.0f}",
                     f"{export.timing.kernels}", f"{r.decode.kernels}", f"{tps0:,.0f}", f"{tps:,.0f}",
                     f"{published:,}", f"{tps / published - 1:+.0%}", source])
        data.append({"target": name, "example": example, "published_tokens_per_s": published, "context": ctx,
                     "role": role, "export_no_cache_tokens_per_s": 1 / export.time_s,
                     "export_kernels": export.timing.kernels, "serving_kernels": r.decode.kernels,
                     "empty_cache_tokens_per_s": tps0, "with_cache_tokens_per_s": tps,
                     "error": tps / published - 1, "chips": r.devices, "source": source})
    return rows, data


def main() -> None:
    p_rows, p_data, breakdown = pope_rows()
    d_rows, d_data = dataflow_rows()
    env = environment()
    md = ("# Serving predictions vs published decode latencies\n\n" + env_header(env) + "\n"
          "## PaLM 540B on 64 TPU v4 (Pope et al. 2022, arXiv:2211.05102)\n\n"
          "2D weight-stationary layout (x = 4, yz = 16), multi-query attention sharded over the batch; "
          "kernels timed by the TPU execution model, collectives on the 4x4x4 torus; nothing overlapped.\n\n"
          + md_table(["model", "system", "batch", "context", "kernels ms", "collectives ms", "predicted ms",
                      "published ms", "error"], p_rows, "lllrrrrrr")
          + breakdown
          + "\n## Dataflow decode with a KV cache (the rows of published_decode.py)\n\n"
          + md_table(["model", "target", "role", "context", "export, no cache: tokens/s", "export kernels",
                      "serving kernels", "serving, empty cache", "serving, cache at context", "published tokens/s",
                      "error", "source"], d_rows, "lllrrrrrrrrl")
          + "\nThe latency per kernel of these targets was fitted to the 'fit' rows on the export without a cache "
            "(published_decode.py). The serving graph is the model builder's rebuild (canonical norms and "
            "activations: fewer kernels than the export's decompositions, so faster on chips whose time is "
            "per-kernel latency); the step from 'empty cache' to 'cache at context' is the cache's reads.\n")
    md_path, _ = write_results(RESULTS, "serving_validate", md, {"env": env, "pope": p_data, "dataflow": d_data})
    print(md)
    print(f"[serving_validate] wrote {md_path}")


if __name__ == "__main__":
    main()
