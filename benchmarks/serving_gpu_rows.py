"""Published GPU serving measurements with their full configurations, predicted by ``serve``.

Why these rows: each states the model, the GPU and how many, the tensor-parallel size, the formats,
the batch, the input and output lengths and the metric, so narrowpipe can be asked the same question
with nothing guessed but what is marked "assumption". Rows whose batch or lengths a source leaves
open (MLPerf Inference's offline and server scenarios, whose batch the submitter's engine picks;
vLLM's and SGLang's ShareGPT benchmarks, whose lengths vary per request) are left out.

Sources (each row names one):

* **TRTLLM-0.9**: TensorRT-LLM's ``docs/source/performance.md`` as of release 0.9.0 ("All data was
  generated using version 0.9.0"; https://github.com/NVIDIA/TensorRT-LLM/blob/v0.9.0/docs/source/performance.md):
  static batching with ``gptSessionBenchmark`` (the whole batch's context phase, then every
  generation step), so "throughput" is batch x output length over the run and "1st token latency" is
  a run with one output token at batch 1. Llama2-7b and Llama2-70b as configured there (fp16 model,
  ``quant_algo`` and ``kv_cache_quant_algo`` FP8 on H100 and H200, removed on A100). Every Llama-2
  row of the H100, H200 and A100 tables is here: none picked.
* **NV-H100-BLOG**: NVIDIA technical blog, "Achieving Top Inference Performance with the NVIDIA H100
  Tensor Core GPU and NVIDIA TensorRT-LLM" (Dec 2023,
  https://developer.nvidia.com/blog/achieving-top-inference-performance-with-the-nvidia-h100-tensor-core-gpu-and-nvidia-tensorrt-llm/):
  Llama 2 70B on one DGX H100 (8 GPUs), batch 1, 2,048 tokens in and 128 out, TensorRT-LLM 0.5.0:
  1.7 s per request. Assumptions: FP8 (the post's stated setting for its H100 results, "execute using
  accelerated FP8 operations"; the batch-1 footnote names only the software) and tensor parallel over
  all eight GPUs (the post serves one request at a time on the whole server). All-reduces by NCCL:
  TensorRT-LLM's custom all-reduce was an opt-in build flag then (``--use_custom_all_reduce``,
  ``store_true``, TRTLLM-05-AR in backends/catalog/SOURCES.toml), so ``peer_all_reduce=False``; the
  other sources' engines (TensorRT-LLM 0.9's ``trtllm-build``, vLLM) run their own by default.
* **OCI-405B**: Oracle Cloud Infrastructure blog, "Serving Llama 3.1 405B model with AMD MI300X GPUs"
  (https://blogs.oracle.com/cloud-infrastructure/serving-llama-31-405b-model-with-amd-mi300x-gpus):
  Llama 3.1 405B FP8 on one BM.GPU.MI300X.8 (all eight GPUs serve one instance), vLLM's
  ``benchmark_latency.py`` (one static batch end to end), 128 tokens in and 128 out, average latency
  at batch 1 to 256. Every row of its latency table is here. KV cache format not stated: vLLM's
  default (``auto``: the model's activation format, bf16) is assumed; FP8 as vLLM's W8A8 (FP8 weights
  and GEMM inputs, bf16 activations).

Model shapes: Llama 2 7B/70B from the TRTLLM-0.9 config files above; Llama 3.1 405B from the Llama 3
paper (Dubey et al. 2024, arXiv:2407.21783, table 3: 126 layers, model dim 16,384, FFN 53,248, 128
heads, 8 KV heads, 128k vocabulary).
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

from narrowpipe.backends import get_target
from narrowpipe.costmodel.serving import serve
from narrowpipe.ir import Graph
from narrowpipe.models.from_config import from_config

#: Hugging Face style configs of the served models (see the module doc for their sources).
LLAMA2_7B = dict(model_type="llama", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096,
                 tie_word_embeddings=False)
LLAMA2_70B = dict(LLAMA2_7B, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                  num_key_value_heads=8)
LLAMA31_405B = dict(LLAMA2_7B, hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
                    num_attention_heads=128, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072)
MODELS: dict[str, dict[str, Any]] = {"Llama 2 7B": LLAMA2_7B, "Llama 2 70B": LLAMA2_70B,
                                     "Llama 3.1 405B": LLAMA31_405B}

#: Formats as the sources state them. TensorRT-LLM's FP8: an fp16 model ("dtype": "float16") whose
#: weights, GEMM inputs and KV cache are FP8 (quant_algo and kv_cache_quant_algo FP8); fp16 on A100;
#: vLLM's FP8 W8A8 checkpoint of a bf16 model with its default KV cache (assumption: bf16, "auto").
FORMATS: dict[str, dict[str, str]] = {
    "fp8": dict(weights="fp8_e4m3", activations="fp16", gemm_inputs="fp8_e4m3", kv="fp8_e4m3"),
    "fp16": dict(weights="fp16", activations="fp16", kv="fp16"),
    "fp8, bf16 KV": dict(weights="fp8_e4m3", activations="bf16", gemm_inputs="fp8_e4m3", kv="bf16"),
}


def gemm_format(formats: str) -> str:
    """The format the row's GEMMs run in (whose peak the FLOP shares below divide by)."""
    f = FORMATS[formats]
    return f.get("gemm_inputs", f["activations"])
#: The metrics: output tokens/s per GPU of a static batch; its first token (a prefill) in ms; its end to end s.
TOKENS_PER_GPU, FIRST_TOKEN_MS, E2E_S = "out tok/s/GPU", "1st token ms", "e2e s"


class GpuRow(NamedTuple):
    """One published serving measurement and everything needed to ask narrowpipe the same question."""

    source: str
    model: str
    target: str
    system: str
    tp: int
    batch: int
    input_len: int
    output_len: int          # 1 for a first-token row
    formats: str
    metric: str
    published: float


def _trtllm(target: str, system: str, formats: str, rows: list[tuple[str, int, int, int, int, float]],
            first: list[tuple[str, int, int, float]]) -> list[GpuRow]:
    out = [GpuRow("TRTLLM-0.9", m, target, system, tp, b, i, o, formats, TOKENS_PER_GPU, v)
           for m, b, tp, i, o, v in rows]
    return out + [GpuRow("TRTLLM-0.9", m, target, system, tp, 1, i, 1, formats, FIRST_TOKEN_MS, v)
                  for m, tp, i, v in first]


L7, L70 = "Llama 2 7B", "Llama 2 70B"
ROWS: list[GpuRow] = [
    *_trtllm("h100-sxm", "dgx-h100", "fp8", [
        (L7, 896, 1, 128, 128, 19854), (L7, 120, 1, 128, 2048, 6944), (L7, 84, 1, 2048, 128, 2163),
        (L7, 56, 1, 2048, 2048, 2826), (L70, 1024, 2, 128, 128, 3214), (L70, 512, 4, 128, 2048, 2725),
        (L70, 96, 2, 2048, 128, 346), (L70, 64, 2, 2048, 2048, 1011)],
        [(L7, 1, 128, 6.3), (L7, 1, 2048, 30.8), (L70, 4, 128, 19.6), (L70, 8, 2048, 85.1)]),
    *_trtllm("h200", "hgx-h200", "fp8", [
        (L7, 896, 1, 128, 128, 20618), (L7, 120, 1, 128, 2048, 8348), (L7, 64, 1, 2048, 128, 2391),
        (L7, 56, 1, 2048, 2048, 3522), (L70, 1024, 1, 128, 128, 3989), (L70, 512, 2, 128, 2048, 3963),
        (L70, 64, 1, 2048, 128, 418), (L70, 64, 1, 2048, 2048, 1458)],
        [(L7, 1, 128, 5.7), (L7, 1, 2048, 30.2), (L70, 4, 128, 17.8), (L70, 4, 2048, 103.0)]),
    *_trtllm("a100-sxm-80gb", "dgx-a100", "fp16", [
        (L7, 256, 1, 128, 128, 5390), (L7, 32, 1, 128, 2048, 1484), (L7, 32, 1, 2048, 128, 533),
        (L7, 16, 1, 2048, 2048, 603), (L70, 1024, 4, 128, 128, 686), (L70, 512, 8, 128, 2048, 684),
        (L70, 96, 4, 2048, 128, 80), (L70, 64, 4, 2048, 2048, 289)],
        [(L7, 1, 128, 16.2), (L7, 1, 2048, 132.4), (L70, 4, 128, 45.6), (L70, 8, 2048, 249.2)]),
    GpuRow("NV-H100-BLOG", L70, "h100-sxm", "dgx-h100", 8, 1, 2048, 128, "fp8", E2E_S, 1.7),
    *[GpuRow("OCI-405B", "Llama 3.1 405B", "mi300x", "mi300x-8", 8, b, 128, 128, "fp8, bf16 KV", E2E_S, v)
      for b, v in [(1, 3.530), (2, 3.583), (4, 3.734), (8, 3.974), (16, 4.375), (32, 5.130), (64, 6.919),
                   (128, 10.340), (256, 17.750)]],
]


class GpuPrediction(NamedTuple):
    row: GpuRow
    predicted: float          # in the row's metric
    time_error: float         # predicted time / published time - 1 (throughput: published / predicted - 1)
    ttft_s: float
    tpot_s: float | None
    prefill_share: float      # of the predicted time
    decode_bound: str
    fits: bool
    report: Any


#: Sources whose engine all-reduced with NCCL alone (see the module doc).
NCCL_ONLY = frozenset({"NV-H100-BLOG"})


@cache
def model_graph(name: str) -> Graph:
    """The model builder's decode graph of ``name`` (serving rebuilds prefill and decode from it)."""
    return from_config(MODELS[name], seq=1, past=16, name=name)


def predict(row: GpuRow) -> GpuPrediction:
    """Ask ``serve`` the row's question on the row's target, layout and formats; nothing fitted."""
    common = dict(tp=row.tp, system=row.system, with_crossover=False, peer_all_reduce=row.source not in NCCL_ONLY,
                  **FORMATS[row.formats])
    g = model_graph(row.model)
    if row.metric == FIRST_TOKEN_MS:
        r = serve(g, row.target, mode="prefill", batch=1, input_len=row.input_len, **common)
        pred = r.ttft_s * 1e3
        return GpuPrediction(row, pred, pred / row.published - 1, r.ttft_s, None, 1.0, "", r.memory.fits, r)
    r = serve(g, row.target, mode="generate", batch=row.batch, input_len=row.input_len, output_len=row.output_len,
              **common)
    if row.metric == TOKENS_PER_GPU:
        pred = r.output_tokens_per_s / row.tp
        err = row.published / pred - 1
    else:
        pred = r.e2e_s
        err = pred / row.published - 1
    return GpuPrediction(row, pred, err, r.ttft_s, r.tpot_s, r.ttft_s / r.e2e_s, r.decode.bound, r.memory.fits, r)


def predictions() -> list[GpuPrediction]:
    return [predict(r) for r in ROWS]


def table_rows(preds: list[GpuPrediction]) -> tuple[list[list[str]], list[dict[str, Any]]]:
    rows, data = [], []
    for p in preds:
        r = p.row
        fmt = "{:,.0f}" if r.metric == TOKENS_PER_GPU else ("{:.1f}" if r.metric == FIRST_TOKEN_MS else "{:.2f}")
        rows.append([r.source, r.model, f"{r.tp} x {r.target}", r.formats, str(r.batch),
                     f"{r.input_len} / {r.output_len}", r.metric, fmt.format(p.predicted), fmt.format(r.published),
                     f"{p.time_error:+.1%}", f"{p.ttft_s * 1e3:,.1f}",
                     f"{p.tpot_s * 1e3:.2f}" if p.tpot_s is not None else "", f"{p.prefill_share:.0%}",
                     p.decode_bound, "" if p.fits else "no"])
        data.append(dict(r._asdict()) | {"predicted": p.predicted, "time_error": p.time_error, "ttft_s": p.ttft_s,
                                         "tpot_s": p.tpot_s, "prefill_share": p.prefill_share,
                                         "decode_bound": p.decode_bound, "fits": p.fits})
    return rows, data


HEADER = ["source", "model", "GPUs", "formats", "batch", "in / out", "metric", "predicted", "published",
          "time error", "TTFT ms", "TPOT ms", "prefill share", "decode bound", "fits?"]
ALIGN = "llllrrlrrrrrrll"


def groups(preds: list[GpuPrediction]) -> list[list[str]]:
    """Per source, GPU and metric: how many rows, the time errors' range and median."""
    keyed: dict[tuple[str, str, str], list[float]] = {}
    for p in preds:
        keyed.setdefault((p.row.source, p.row.target, p.row.metric), []).append(p.time_error)
    out = []
    for (source, target, metric), errs in keyed.items():
        errs = sorted(errs)
        mid = errs[len(errs) // 2] if len(errs) % 2 else (errs[len(errs) // 2 - 1] + errs[len(errs) // 2]) / 2
        out.append([source, target, metric, str(len(errs)), f"{errs[0]:+.1%}", f"{errs[-1]:+.1%}", f"{mid:+.1%}",
                    str(sum(abs(e) <= 0.2 for e in errs))])
    return out


GROUP_HEADER = ["source", "GPU", "metric", "rows", "lowest", "highest", "median", "within 20%"]


def model_flops(p: GpuPrediction) -> float:
    """FLOPs of the whole run as the execution model counted them (prefill plus every decode step)."""
    r = p.report
    steps = max((p.row.output_len - 1), 0) if p.row.metric != FIRST_TOKEN_MS else 0
    return r.prefill.flops + (r.decode.flops * steps if r.decode is not None else 0.0)


def oci_margin(preds: list[GpuPrediction]) -> str:
    """The time one more sequence adds between OCI's batch 32 and 256, published and predicted, and
    the FLOP rate each implies as a share of the eight GPUs' FP8 peak."""
    oci = {p.row.batch: p for p in preds if p.row.source == "OCI-405B"}
    if 32 not in oci or 256 not in oci:
        return ""
    lo, hi = oci[32], oci[256]
    pub = (hi.row.published - lo.row.published) / (256 - 32)
    pred = (hi.predicted - lo.predicted) / (256 - 32)
    per_seq = (model_flops(hi) - model_flops(lo)) / (256 - 32)
    peak = get_target(hi.row.target).matrix_flops[gemm_format(hi.row.formats)] * hi.row.tp
    return (f"Each sequence beyond batch 32 adds {pub * 1e3:.0f} ms to the published run and {pred * 1e3:.0f} ms to "
            f"the predicted one: its FLOPs at {per_seq / pub / peak:.0%} of the eight GPUs' FP8 peak published, "
            f"{per_seq / pred / peak:.0%} predicted.")


def analysis(preds: list[GpuPrediction]) -> str:
    """What the errors say, with every figure computed from the predictions above."""
    def span(ps: list[GpuPrediction]) -> str:
        errs = sorted(p.time_error for p in ps)
        return f"{errs[0]:+.1%} to {errs[-1]:+.1%} ({len(errs)} rows)" if errs else "none"
    thr = [p for p in preds if p.row.metric == TOKENS_PER_GPU]
    fp16 = [p for p in thr if p.row.formats == "fp16"]
    fp8 = [p for p in thr if p.row.formats != "fp16"]
    fp8_decode = [p for p in fp8 if p.prefill_share < 0.1 and p.decode_bound == "memory"]
    fp8_rest = [p for p in fp8 if p not in fp8_decode]
    firsts = [p for p in preds if p.row.metric == FIRST_TOKEN_MS and p.row.input_len == 2048]
    shorts = [p for p in preds if p.row.metric == FIRST_TOKEN_MS and p.row.input_len == 128]
    small = [p for p in preds if p.row.source != "TRTLLM-0.9" and p.row.batch == 1]
    big = [p for p in preds if p.row.source == "OCI-405B" and p.row.batch >= 64]
    oci_small = [p for p in preds if p.row.source == "OCI-405B" and p.row.batch <= 32]
    short_ms = sorted(p.row.published - p.predicted for p in shorts)
    lines = ["\n### What the GPU rows say\n",
             f"* **16-bit is close, FP8 is predicted too fast.** A100 fp16 throughput rows: {span(fp16)}. H100/H200 "
             f"FP8 throughput rows: {span(fp8)}; of these, the ones whose time is mostly decode steps (prefill "
             f"under 10%) bound by HBM: {span(fp8_decode)}, the rest (large prefills, decode near or past the "
             f"ridge): {span(fp8_rest)}.",
             f"* **Prefill is predicted too fast on every GPU, most in FP8.** Batch-1 prefills of 2,048 tokens: "
             f"{span(firsts)}. The FLOP rate these imply, as a share of the GPUs' dense peak in the row's format "
             f"(model FLOPs over the published time; the prediction's in brackets):"]
    gaps = []
    for p in firsts:
        fmt = gemm_format(p.row.formats)
        peak = get_target(p.row.target).matrix_flops[fmt] * p.row.tp
        flops = model_flops(p)
        published, predicted = flops / (p.row.published * 1e-3) / peak, flops / p.ttft_s / peak
        gaps.append(predicted - published)
        lines.append(f"  * {p.row.model} on {p.row.tp} x {p.row.target} ({fmt}): {published:.0%} ({predicted:.0%})")
    lines += [
        f"  * The model's prefills run {min(gaps) * 100:.0f}-{max(gaps) * 100:.0f} points of the peak above the "
        "published ones, in FP8 and fp16 alike: the GPU execution model's GEMM efficiency at these shapes (or time a "
        "TensorRT-LLM prefill spends outside its GEMMs, which the source does not break down) is where these "
        "rows point. Not the FP8 plateau: published large FP8 GEMMs on GH100 reach 1,550 TFLOP/s (DeepGEMM "
        "README, H800, block-scaled) to 1,599-1,630 (a cuBLASLt 8192^3 report on 16 H100s, "
        "gitea.d-robotics.cc/han.zhao/test_gpu_scripts, 2026-05-24), 78-82% of the 1,979 dense peak, around "
        "the catalog's 0.8033 (1,590); the fp16 rows on the A100 miss by as many points.",
        f"* **Short prefills miss in every format.** The 128-token first-token rows: {span(shorts)}, short by "
        f"{short_ms[0]:.1f}-{short_ms[-1]:.1f} ms, the A100's fp16 rows as much as the FP8 ones, so not the FP8 "
        "rate alone: gptSessionBenchmark's one-token run also pays its session's host work (inputs, sampling), "
        "which the source does not break down.",
        "* **FP8 as the engines run it.** TensorRT-LLM's FP8 checkpoints keep the model in fp16 "
        "(``\"dtype\": \"float16\"`` beside ``\"quant_algo\": \"FP8\"`` in the configs above) and quantize only "
        "what a GEMM reads (Q/DQ around the GEMMs, TensorRT-LLM docs/source/precision.md); vLLM's FP8 W8A8 "
        "likewise. The rows are asked that way (``gemm_inputs=\"fp8_e4m3\"``, costmodel/serving/formats.py): "
        "FP8 weights, GEMM inputs and KV cache; norms, residuals, attention, GEMM outputs and the "
        "tensor-parallel all-reduces in 16 bits. Asked as FP8 end to end instead (every activation 8-bit, "
        "the results of commit fdef0b8), the FP8 rows were up to 15 points faster (H100/H200 throughput "
        "-30.6% to +4.4%, the H100 TP8 prefill -41.7%).",
        f"* **Batch 1 at TP8**: {span(small)}. The predicted decode step is latency: per-kernel launch overhead "
        "and two all-reduces per layer. The blog's TensorRT-LLM 0.5 all-reduced with NCCL (its custom all-reduce "
        "was an opt-in build flag, TRTLLM-05-AR), so that row is asked with NCCL alone: NCCL's LL ring, 16 us per "
        "16 KB all-reduce over 8 H100s (NCCL's tuner constants; nccl-tests and torch loops measure 15-25 us, "
        "collective_validate.md). The published 12.9 ms per token leaves ~35 us for each of its 161 collectives "
        "beside the model's other kernels, so the row reads fast; it read +8% while small all-reduces were "
        "priced as 14 Simple-protocol ring steps (43 us), which NCCL does not run at 16 KB. The rest of that "
        "2023 stack's per-collective cost (host-side work of each NCCL call, the engine's own synchronization) "
        "is not broken down by the source and not modelled; priced with the one-shot kernel today's engines run "
        "(one 4.6 us step) the row reads 1.08 s.",
        f"* **OCI 405B is predicted fast at every batch**: {span(oci_small)} from batch 1 to 32. Its 252 "
        "all-reduces a token (16 KB at batch 1) are priced as vLLM's own one-shot kernel on the MI300X mesh "
        "(``peer_all_reduce_latency`` 3.9 us, collective_validate.md), 1.3 ms a token; as 14 RCCL Simple-protocol "
        "ring steps (43 us each, 10.8 ms a token) they read -8.8% to +10.9%, an error that hid the rest. "
        "Which all-reduce the blog's vLLM ran is not stated: AMD's ROCm build of vLLM ran its custom all-reduce "
        "on MI300X from 2024-05-30 (ROCm/vllm pull request #27), upstream vLLM from 2025 (vllm-project/vllm "
        "pull requests #14125 and #16010); the blog (2024-10-10) names neither.",
        f"* **OCI 405B at batch 64-256 is not explained**: {span(big)}. {oci_margin(preds)} The source gives no "
        "breakdown (vLLM version, FP8 GEMM path, KV format), so no mechanism is claimed.",
        "* **Memory**: rows marked 'no' under 'fits?' ran as published but exceed narrowpipe's budget by its 10% "
        "runtime reserve (vLLM's default); TensorRT-LLM 0.9's static engines reserve no such fraction.",
        "* **Left out**: MLPerf Inference Llama-2-70B offline/server (the batch is the submitter's engine's "
        "choice, not published); vLLM's and SGLang's ShareGPT benchmarks (lengths vary per request); "
        "TensorRT-LLM >= 0.10 tables (in-flight batching at an unstated batch).\n"]
    return "\n".join(lines)
