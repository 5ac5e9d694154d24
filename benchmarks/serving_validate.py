"""Serving predictions against published decode latencies: no fitting, each error reported.

    python benchmarks/serving_validate.py      # seconds; writes results/serving_validate.{md,json}

1. **Pope et al. 2022** (Efficiently Scaling Transformer Inference, arXiv:2211.05102): PaLM decode
   steps on TPU v4 slices, 2D weight-stationary layout with multi-query attention sharded over the
   batch, 2048-token context, 64 generated tokens. Section 4.4: PaLM 540B on 64 chips at batch 64,
   28.5 ms per step with int8 weights, 36.9 ms with bf16; table 2 (540B, 64 chips): batch 64 int8
   1.82 s and batch 512 bf16 6.0 s for 64 tokens (MFU 14% and 33%); table 3 (62B): batch 32 int8 on
   16 chips 0.73 s, batch 512 bf16 on 8 chips 5.1 s (MFU 8% and 37%). PaLM's shapes from the PaLM
   paper (Chowdhery et al. 2022, arXiv:2204.02311, table 1): 540B 118 layers, d_model 18432, 48
   heads of 256; 62B 64 layers, d_model 8192, 32 heads of 256; multi-query attention (one K/V
   head), d_ff 4 d_model with SwiGLU, parallel blocks, shared 256k embedding, no biases. Pope et al.
   section 4 pad 540B's heads to 64 "to partition more effectively on 64+ chips" (+18B parameters):
   the model served has 64 heads (MFU counts 540B's own FLOPs). Axes: x = 0.5 sqrt(n) on the
   leading torus axis, yz on the others (appendix A.2.1: x = 4, yz = 16 on 64 chips; x = 2 on 8
   and 16). Slices: ``tpu-v4-4x4x4`` (a full cube: torus), ``tpu-v4-2x2x4`` and ``tpu-v4-2x2x2``
   (meshes: no wraparound below a cube). Predicted by :mod:`narrowpipe.costmodel.serving.ws2d`.
2. **GPU serving rows with full configurations** (TensorRT-LLM 0.9's static-batching tables for
   Llama 2 7B/70B on H100, H200 and A100; NVIDIA's batch-1 Llama 2 70B on a DGX H100; OCI's vLLM
   Llama 3.1 405B on eight MI300X): :mod:`serving_gpu_rows` has each row, its source and how it is
   asked of ``serve``.
3. **The dataflow rows of** ``benchmarks/published_decode.py`` (same published figures, same
   catalog latencies) beside the export's forward of one token without a cache, and the serving
   step with an empty cache: the effect of the graph and of the cache on those predictions.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serving_gpu_rows as gpu  # noqa: E402
from first_token_pair import first_token_md  # noqa: E402
from pope_breakdown import analysis, layer_table, paper_estimate, serial_check  # noqa: E402
from pope_pair import hypotheses, pair_md, read_pair  # noqa: E402
from pope_schedule import attribution, schedule_section  # noqa: E402
from published_decode import PUBLISHED  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.backends import get_system, get_target  # noqa: E402
from narrowpipe.costmodel.execution.collectives import Topology  # noqa: E402
from narrowpipe.costmodel.serving import serve  # noqa: E402
from narrowpipe.costmodel.serving.ws2d import Ws2dStep, ws2d_decode, ws2d_prefill  # noqa: E402
from narrowpipe.ir import DType  # noqa: E402
from narrowpipe.models.examples import load_example  # noqa: E402
from narrowpipe.models.spec import TransformerSpec  # noqa: E402

from _common import RESULTS, env_header, environment, md_table, no_options, write_results  # noqa: E402

PALM_540B = TransformerSpec(layers=118, hidden=18432, heads=48, vocab=256000, ffn=73728, kv_heads=1,
                            head_dim=256, gated_mlp=True, activation="silu", parallel_block=True,
                            tie_embeddings=True, norm="layer", dtype=DType.BF16)
#: As Pope et al. serve it: heads padded from 48 to 64 (section 4).
PALM_540B_SERVED = replace(PALM_540B, heads=64)
PALM_62B = replace(PALM_540B, layers=64, hidden=8192, heads=32, ffn=32768)
#: TPU v4 bf16 peak per chip (GCP-V4), the denominator of the paper's MFU.
V4_PEAK = 275e12


class PopeRow(NamedTuple):
    """One published decode configuration: the model as served, the model MFU counts, the slice."""

    label: str
    served: TransformerSpec
    counted: TransformerSpec
    chips: int
    system: str
    axes: tuple[int, int]                 # (x, yz)
    batch: int
    weights: str
    published_ms: float                   # per decode step, or the whole prefill
    published_mfu: float | None
    where: str
    seq: int = 1                          # prompt tokens of a prefill; 1: a decode step


POPE = [
    PopeRow("PaLM 540B int8", PALM_540B_SERVED, PALM_540B, 64, "tpu-v4-4x4x4", (4, 16), 64, "int8", 28.5, 0.14,
            "sec. 4.4; table 2: 1.82 s / 64"),
    PopeRow("PaLM 540B bf16", PALM_540B_SERVED, PALM_540B, 64, "tpu-v4-4x4x4", (4, 16), 64, "bf16", 36.9, None,
            "sec. 4.4"),
    PopeRow("PaLM 540B bf16", PALM_540B_SERVED, PALM_540B, 64, "tpu-v4-4x4x4", (4, 16), 512, "bf16", 6000 / 64,
            0.33, "table 2: 6.0 s / 64"),
    PopeRow("PaLM 62B int8", PALM_62B, PALM_62B, 16, "tpu-v4-2x2x4", (2, 8), 32, "int8", 730 / 64, 0.08,
            "table 3: 0.73 s / 64"),
    PopeRow("PaLM 62B bf16", PALM_62B, PALM_62B, 8, "tpu-v4-2x2x2", (2, 4), 512, "bf16", 5100 / 64, 0.37,
            "table 3: 5.1 s / 64"),
    # the low-latency prefills: 2048 tokens at batch 1, 2D weight-stationary, attention over heads
    PopeRow("PaLM 540B int8 prefill", PALM_540B_SERVED, PALM_540B, 64, "tpu-v4-4x4x4", (4, 16), 1, "int8", 290,
            0.43, "table 2: 0.29 s", 2048),
    PopeRow("PaLM 62B int8 prefill", PALM_62B, PALM_62B, 16, "tpu-v4-2x2x4", (2, 8), 1, "int8", 160, 0.36,
            "table 3: 0.16 s", 2048),
]
CONTEXT = 2048
#: Context of each published dataflow figure (published_decode's models: Groq's Llama 2 at 2k and 4k;
#: Cerebras states none, 2k assumed).
DATAFLOW_CONTEXT = {("groq-lpu", "llama-3-8b"): 2048, ("groq-lpu", "llama-3-70b"): 4096}


def params(spec: TransformerSpec) -> float:
    """Parameters of a PaLM-style model (fused projections, shared embedding, no biases)."""
    e, hd = spec.hidden, spec.heads * spec.head_dim
    per_layer = e * (2 * hd + 2 * spec.kv_heads * spec.head_dim + 3 * spec.ffn) + e
    return spec.layers * per_layer + spec.vocab * e


def step_flops(spec: TransformerSpec, batch: int, context: int, seq: int = 1) -> float:
    """Model FLOPs of one decode step (``seq`` 1) or prefill, as MFU counts them: 2 per parameter
    per token, plus attention (q.K and p.V, every head: over the context for a decode step, over the
    causal half of the prompt for a prefill)."""
    attention = 4 * spec.layers * spec.heads * spec.head_dim
    if seq > 1:
        return batch * seq * (2 * params(spec) + attention * seq / 2)
    return batch * (2 * params(spec) + attention * context)


def pope_steps() -> list[tuple[PopeRow, Ws2dStep]]:
    target = get_target("tpu-v4")
    out = []
    for r in POPE:
        topo, w = Topology.of_system(get_system(r.system)), DType.parse(r.weights)
        out.append((r, ws2d_prefill(r.served, target, topo, r.chips, batch=r.batch, seq=r.seq, weights=w, axes=r.axes)
                    if r.seq > 1 else
                    ws2d_decode(r.served, target, topo, r.chips, batch=r.batch, context=CONTEXT, weights=w,
                                axes=r.axes)))
    return out


def pope_rows(steps: list[tuple[PopeRow, Ws2dStep]]) -> tuple[list[list[str]], list[dict[str, object]], str]:
    rows, data, breakdown = [], [], ""
    for r, s in steps:
        ms = s.time_s * 1e3
        err = ms / r.published_ms - 1
        flops = step_flops(r.counted, r.batch, CONTEXT, r.seq)
        mfu_pred = flops / (s.time_s * r.chips * V4_PEAK)
        mfu_pub = flops / (r.published_ms * 1e-3 * r.chips * V4_PEAK)
        table_mfu = f" ({r.published_mfu:.0%})" if r.published_mfu else ""
        label = r.label if r.seq == 1 else f"{r.label} ({r.seq} tokens)"
        rows.append([label, f"{r.chips} ({r.system[7:]})", f"{r.axes[0]} x {r.axes[1]}", str(r.batch),
                     f"{s.compute_s * 1e3:.1f}", f"{s.collectives_s * 1e3:.1f}", f"{ms:.1f}",
                     f"{r.published_ms:.1f}", f"{err:+.1%}", f"{mfu_pred:.1%}", f"{mfu_pub:.1%}{table_mfu}", r.where])
        data.append({"model": r.label, "seq": r.seq, "chips": r.chips, "system": r.system, "axes": list(r.axes),
                     "batch": r.batch,
                     "context": CONTEXT, "weights": r.weights, "predicted_ms": ms, "published_ms": r.published_ms,
                     "error": err, "mfu_predicted": mfu_pred, "mfu_from_published_time": mfu_pub,
                     "mfu_published": r.published_mfu, "source": f"Pope et al. 2022, {r.where}", **s.to_dict()})
        breakdown += (f"\n{r.label}, batch {r.batch}, {r.chips} chips (us per layer): "
                      + ", ".join(f"{k} {v * 1e6:.1f}" for k, v in s.per_layer.items())
                      + "; per step (us): " + ", ".join(f"{k} {v * 1e6:.1f}" for k, v in s.per_step.items()) + "\n")
    return rows, data, breakdown


def dataflow_rows() -> tuple[list[list[str]], list[dict[str, object]]]:
    rows, data = [], []
    for name, example, published, model, source, role in PUBLISHED:
        graph = load_example(example)
        ctx = DATAFLOW_CONTEXT.get((name, example), 2048)
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
    steps = pope_steps()
    p_rows, p_data, breakdown = pope_rows(steps)
    serial_md, serial = serial_check(PALM_540B_SERVED, CONTEXT)
    pair = read_pair(steps[0], steps[1])
    tables = "".join(layer_table(r, s) for r, s in steps[:2])
    for (r, s), d in zip(steps, p_data):
        if r.seq == 1:
            d["paper_estimate_ms"] = paper_estimate(r, s, CONTEXT)
    schedule = attribution(POPE, PALM_540B_SERVED, CONTEXT)
    d_rows, d_data = dataflow_rows()
    g_preds = gpu.predictions()
    g_rows, g_data = gpu.table_rows(g_preds)
    env = environment()
    md = ("# Serving predictions vs published decode latencies\n\n" + env_header(env) + "\n"
          "## PaLM decode on TPU v4 (Pope et al. 2022, arXiv:2211.05102)\n\n"
          "2D weight-stationary layout (x on one torus axis, y and z on the others), multi-query attention "
          "sharded over the batch, 2048-token context, on the schedule of the paper's released code (POPE-CODE: "
          "one-axis gathers and scatters, K/V apart, the x collectives looped inside the matmuls, the per-step "
          "embedding, final norm, logits and sampling); kernels timed by the TPU execution model, collectives on "
          "the slice's torus or mesh; a looped matmul's chunks overlap the permutes beside them, nothing else "
          "overlaps; no fitting. Collectives ms: the collectives' time not hidden under a chunk. MFU: the model "
          "FLOPs of a step (2 per parameter and token plus attention) over the time and the chips' bf16 peak.\n\n"
          + md_table(["model", "chips (slice)", "x x yz", "batch", "kernels ms", "collectives ms", "predicted ms",
                      "published ms", "error", "MFU predicted", "MFU published (table)", "source"],
                     p_rows, "llllrrrrrrrl")
          + breakdown
          + serial_md
          + tables
          + analysis(steps, CONTEXT, serial)
          + pair_md(pair, steps)
          + schedule_section(schedule)
          + "\n## GPU serving with full configurations (TensorRT-LLM, NVIDIA, OCI/vLLM)\n\n"
            "Each row asked of `serve` on the row's GPU, tensor-parallel size (collectives on the node's "
            "measured NVLink/Infinity Fabric figures), formats, batch and lengths; no fitting. Time error: "
            "predicted time over published time, minus one (for throughput rows, published over predicted "
            "throughput); negative means the model is too fast. Sources and shapes: `benchmarks/serving_gpu_rows.py`."
            "\n\n"
          + md_table(gpu.GROUP_HEADER, gpu.groups(g_preds), "lllrrrrr") + "\n"
          + md_table(gpu.HEADER, g_rows, gpu.ALIGN)
          + gpu.analysis(g_preds)
          + first_token_md(g_preds, gpu.model_graph, gpu.FORMATS)
          + "\n## Dataflow decode with a KV cache (the rows of published_decode.py)\n\n"
          + md_table(["model", "target", "role", "context", "export, no cache: tokens/s", "export kernels",
                      "serving kernels", "serving, empty cache", "serving, cache at context", "published tokens/s",
                      "error", "source"], d_rows, "lllrrrrrrrrl")
          + "\nThe latency per kernel of these targets was fitted to the 'fit' rows as decode steps with a cache "
            "at the published context (published_decode.py, as `compare --mode decode` times them). The serving "
            "graph is the model builder's rebuild (canonical norms and activations); only kernels that "
            "synchronise pay the latency, so the export and the rebuild agree within a few percent; the step "
            "from 'empty cache' to 'cache at context' is the cache's reads.\n")
    data = {"env": env, "pope": p_data, "pope_serial_block": serial, "pope_pair": pair.to_dict(),
            "pope_overlap_hypotheses": hypotheses(steps), "pope_implementation_schedule": schedule, "gpu": g_data,
            "dataflow": d_data}
    md_path, _ = write_results(RESULTS, "serving_validate", md, data)
    print(md)
    print(f"[serving_validate] wrote {md_path}")


if __name__ == "__main__":
    no_options(__doc__)
    main()
