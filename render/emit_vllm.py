"""A serving deployment as vLLM engine arguments: ``vllm serve MODEL --tensor-parallel-size ...``.

Why from ``serve`` and not ``plan``: vLLM's settings are a serving deployment's (layout, the batch
the engine may run, the context it must hold, the number formats), which is what ``narrowpipe
serve`` decides; a training plan has none of them. Flag names and choices are vLLM's own
(``vllm/engine/arg_utils.py``). How the deployment maps:

* ``--tensor-parallel-size`` / ``--pipeline-parallel-size``: the replica's layout.
* ``--enable-expert-parallel`` (and ``--data-parallel-size`` where the layout has data-parallel ranks):
  an expert-parallel layout (``EP8``, ``DP8 x EP8``), whose experts vLLM spreads over every tensor x
  data parallel rank (EP size = TP x DP, https://docs.vllm.ai/en/latest/serving/expert_parallel_deployment/).
  Each data-parallel rank schedules its own sequences, so ``--max-num-seqs`` is the batch's share per rank.
* ``--max-num-seqs``: the batch (the capacity plan's best batch under the latency targets).
* ``--max-model-len``: the longest sequence the deployment was sized for (prompt + output).
* ``--max-num-batched-tokens``: the prompt tokens one prefill step of the deployment runs (``serve``
  prefills its batch together: batch x prompt; a capacity plan one prompt at a time), at least the
  batch. vLLM's own default depends on the GPU it finds (8192 for ``vllm serve`` on GPUs of 70 GiB
  or more other than A100, 2048 on the rest: ``EngineArgs.get_batch_defaults``), chunks any longer
  prefill into steps of that many tokens, and profiles a step of that many tokens to size its KV
  cache: pinned to the plan's, both the steps and the activations the memory budget booked agree.
* a deployment that does not fit its devices is refused: a command that runs out of memory at start
  (or with a KV cache smaller than the batch needs) is no launch setting.
* ``--gpu-memory-utilization``: 1 minus the memory reserve narrowpipe's memory budget leaves free,
  so vLLM sizes its KV cache on the same budget.
* ``--dtype`` the activations' (or model's) format; ``--kv-cache-dtype`` the KV cache's
  (``auto``: the model's); ``--quantization fp8`` for fp8 weights, the one format vLLM quantizes
  on the fly. Integer and 4-bit weights come from pre-quantized checkpoints, whose method vLLM reads
  from the checkpoint: a note, never a guessed method.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..backends import Target, defaults, get_target
from ..costmodel.serving.capacity import CAPACITY_FORMAT, CapacityPlan
from ..costmodel.serving.report import SERVING_FORMAT, ServingReport
from ..errors import NarrowpipeError
from .emit import Launch

__all__ = ["vllm_launch", "vllm_from_report", "vllm_from_capacity", "parse_layout", "parse_expert_layout",
           "model_reference",
           "VLLM_REFERENCE", "KV_CACHE_DTYPES"]

VLLM_REFERENCE = ("vllm-project/vllm vllm/engine/arg_utils.py (commit 001999d2f360c2c5da23a916510c273b1a73d06c); "
                  "--quantization choices: vllm/model_executor/layers/quantization/__init__.py (commit "
                  "0034007debee2a009e030804f2cde7953aff78c6)")
#: ``--kv-cache-dtype`` choices, and the narrowpipe KV format each stands for.
KV_CACHE_DTYPES = {"fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
_FP8 = ("fp8_e4m3", "fp8")
_LAYOUT = re.compile(r"^(?:TP(?P<tp>\d+))?(?: x )?(?:PP(?P<pp>\d+))?(?: x )?(?:DP(?P<dp>\d+))?(?: x )?"
                     r"(?:EP(?P<ep>\d+))?$")


def parse_layout(label: str) -> tuple[int, int]:
    """``(tp, pp)`` of a serving layout label (``TP1``, ``TP4``, ``TP2 x PP2``, ``PP2``, ``DP4 x EP8``)."""
    tp, pp, _dp, _ep = parse_expert_layout(label)
    return tp, pp


def parse_expert_layout(label: str) -> tuple[int, int, int, int]:
    """``(tp, pp, dp, ep)`` of a serving layout label (:class:`~narrowpipe.costmodel.serving.Layout`'s
    ``label``: ``TP2 x PP2``, ``TP8 x EP8``, ``TP2 x DP4 x EP8``); ``dp`` and ``ep`` 1 where absent."""
    m = _LAYOUT.match(label.strip())
    if not label.strip() or m is None or not any(m.group(g) for g in ("tp", "pp", "dp", "ep")):
        raise NarrowpipeError(f"vLLM runs tensor x pipeline (x expert) parallel layouts; {label!r} is not one "
                              "(a dataflow chip lays the model out itself)")
    tp, pp, dp, ep = (int(m.group(g) or 1) for g in ("tp", "pp", "dp", "ep"))
    if (dp > 1 or ep > 1) and ep != tp * dp:
        raise NarrowpipeError(f"layout {label!r}: vLLM's expert parallelism spans tp x dp = {tp * dp} ranks, not {ep}")
    return tp, pp, dp, ep


def model_reference(model: str) -> tuple[str, str | None]:
    """What ``vllm serve`` is pointed at: a Hugging Face checkpoint folder (the folder of a
    ``config.json``) as the user named it; anything else becomes a placeholder, with the note saying so.
    A relative folder of one name is written ``./NAME``: ``vllm serve mixtral`` read like a model
    name (the config's ``model_type``), not the folder the user gave."""
    path = Path(model)
    folder = path.parent if path.name == "config.json" else path if path.is_dir() else None
    if folder is not None:
        text = str(folder)
        return (f"./{text}" if not folder.is_absolute() and len(folder.parts) == 1 else text), None
    return "MODEL", (f"MODEL: the Hugging Face id or checkpoint folder of {model} (vLLM loads checkpoints, not "
                     f"{'this file' if path.suffix else 'narrowpipe examples'})")


def vllm_launch(model: str, target: str | Target, layout: str, *, batch: int, max_model_len: int, model_dtype: str,
                formats: dict[str, str | None], source: dict[str, Any], prefill_tokens: int | None = None) -> Launch:
    """vLLM engine arguments for ``batch`` sequences of up to ``max_model_len`` tokens of ``model`` on
    ``layout`` devices of ``target``; ``formats`` are the deployment's weights/activations/kv/gemm_inputs formats
    (None: the model's own, ``model_dtype``); ``prefill_tokens`` the prompt tokens one prefill step of the
    deployment runs (None: it timed no prefill, and vLLM's default chunk stays, with a note)."""
    chip = get_target(target)
    if chip.family == "dataflow":
        raise NarrowpipeError(f"vLLM does not run on {chip.name} (a dataflow chip)")
    tp, pp, dp, ep = parse_expert_layout(layout)
    if batch < 1:
        raise NarrowpipeError("no batch meets the latency targets: nothing to launch (relax --tpot/--ttft)")
    notes: list[str] = []
    if not prefill_tokens:
        notes.append("this deployment was timed on decode steps only: --max-num-batched-tokens is left at vLLM's "
                     "default (8192 tokens per step on GPUs of 70 GiB or more other than A100, 2048 on others), "
                     "whose prefill steps and profiling activations the prediction does not include")
    ref, note = model_reference(model)
    notes += [note] if note else []
    weights, activations, kv = formats.get("weights"), formats.get("activations"), formats.get("kv")
    compute = activations if activations in _DTYPE else model_dtype
    per_rank = -(-batch // dp)      # each data-parallel rank schedules its own sequences
    flags: dict[str, Any] = {"--tensor-parallel-size": tp, "--pipeline-parallel-size": pp,
                             **({"--data-parallel-size": dp} if dp > 1 else {}), "--max-num-seqs": per_rank,
                             "--max-model-len": max_model_len,
                             **({"--max-num-batched-tokens": max(-(-prefill_tokens // dp), per_rank)}
                                if prefill_tokens else {}),
                             "--gpu-memory-utilization": round(1.0 - defaults.SERVING_MEMORY_RESERVE, 4)}
    if compute in _DTYPE:
        flags["--dtype"] = _DTYPE[compute]
    else:
        raise NarrowpipeError(f"vLLM's --dtype is bfloat16, float16 or float32; this deployment computes in {compute}")
    flags["--kv-cache-dtype"] = _kv_flag(kv, model_dtype)
    flags.update(_quantization(weights, activations, formats.get("gemm_inputs"), model_dtype, notes))
    if ep > 1:
        flags["--enable-expert-parallel"] = True
        notes.append(f"expert parallel {ep}: vLLM places the experts over all {ep} tensor x data parallel ranks"
                     + (f"; --max-num-seqs{' and --max-num-batched-tokens are' if prefill_tokens else ' is'} "
                        f"each of the {dp} data-parallel ranks' share (the batch is {batch})"
                        if dp > 1 else ""))
    args: list[str] = []
    for flag, value in flags.items():
        args += [flag] if value is True else [flag, str(value)]
    return Launch("vllm", source, flags, ["vllm", "serve", ref], args, notes=notes, reference=VLLM_REFERENCE)


def _kv_flag(kv: str | None, model_dtype: str) -> str:
    if kv is None or kv == model_dtype:
        return "auto"
    if kv in KV_CACHE_DTYPES:
        return KV_CACHE_DTYPES[kv]
    raise NarrowpipeError(f"vLLM's --kv-cache-dtype is auto, fp8, fp8_e4m3 or fp8_e5m2; this deployment's KV cache "
                          f"is {kv}: re-plan with --kv fp8_e4m3 or the model's own format")


def _quantization(weights: str | None, activations: str | None, gemm_inputs: str | None, model_dtype: str,
                  notes: list[str]) -> dict[str, Any]:
    """``--quantization`` for the deployment's formats. FP8 "W8A8" is fp8 weights with fp8 GEMM inputs
    (``--gemm-inputs``, or every activation in fp8): what vLLM's ``fp8`` method runs on GPUs with fp8
    tensor cores, so only fp8 weights with 16-bit GEMM inputs are weight-only."""
    fp8_inputs = activations in _FP8 or gemm_inputs in _FP8
    if weights is None or weights == model_dtype or weights in _DTYPE:
        if gemm_inputs in _FP8:
            notes.append(f"fp8 GEMM inputs with {weights or model_dtype} weights: vLLM runs fp8 GEMMs only with fp8 "
                         "weights (--quantization fp8 stores them in fp8 too), so none is emitted; re-plan with "
                         "--weights fp8_e4m3 to predict what it runs")
        elif activations not in (None, model_dtype) and activations not in _DTYPE:
            notes.append(f"{activations} activations with {weights or model_dtype} weights: vLLM quantizes "
                         "activations only together with the weights (--quantization fp8)")
        return {}
    if weights == "fp8_e4m3":
        if not fp8_inputs:
            notes.append("vLLM's --quantization fp8 also runs the activations in fp8 on GPUs with fp8 tensor cores "
                         "(Hopper, Ada, Blackwell); this deployment was predicted weight-only (16-bit activations)")
        return {"--quantization": "fp8"}
    notes.append(f"{weights} weights: vLLM loads them from a pre-quantized checkpoint (AWQ, GPTQ, compressed-tensors, "
                 "ModelOpt) and reads the method from its quantization_config; point MODEL at such a checkpoint "
                 "(no --quantization flag is emitted)")
    return {}


def vllm_from_report(report: ServingReport, model: str, model_dtype: str, chip: Target | None = None) -> Launch:
    """vLLM arguments for one ``serve`` deployment (``--mode`` without ``--tpot``); ``chip`` the served
    chip where its name is no catalog chip's (a user's file)."""
    longest = (report.context or 0) + 1 if report.mode == "decode" else (report.context or report.input_len or 0)
    if not report.fits:
        raise NarrowpipeError(f"{report.model} on {report.layout} {report.target} at batch {report.batch}: "
                              f"{report.memory.explain()}; vLLM would run out of memory at start (or hold fewer "
                              "sequences than the batch): no command is emitted (lower --batch, raise --tp, or use "
                              "--tpot for a deployment that fits)")
    source = {"kind": SERVING_FORMAT, "model": report.model, "target": report.target, "layout": report.layout,
              "mode": report.mode, "batch": report.batch,
              "summary": f"{report.model} on {report.layout} {report.target}, batch {report.batch}, "
                         f"{longest} tokens ({report.mode})"}
    prefill = report.batch * (report.input_len or 0) if report.mode != "decode" else None   # serve prefills together
    return vllm_launch(model, chip or report.target, report.layout, batch=report.batch, max_model_len=longest,
                       model_dtype=model_dtype, formats=report.formats, source=source, prefill_tokens=prefill)


def vllm_from_capacity(plan: CapacityPlan, model: str, model_dtype: str, formats: dict[str, str | None],
                       chips: dict[str, Target] | None = None) -> Launch:
    """vLLM arguments for the capacity plan's best-throughput layout at its batch (one replica; the
    plan says how many replicas the request rate needs); ``chips`` the served chips by name, for a
    user's file whose name is no catalog chip's."""
    best = plan.best_throughput
    if best is None:
        raise NarrowpipeError("no layout meets the latency targets: nothing to launch (relax --tpot/--ttft)")
    longest = plan.input_len + plan.output_len
    source = {"kind": CAPACITY_FORMAT, "model": plan.model, "target": best.target, "layout": best.layout,
              "batch": best.batch, "replicas": best.replicas,
              "summary": f"{plan.model} on {best.layout} {best.target}, batch {best.batch}, {best.replicas} "
                         f"replica(s) for {plan.rate:g} requests/s at TPOT {best.tpot_s * 1e3:.1f} ms"}
    launch = vllm_launch(model, (chips or {}).get(best.target) or best.target, best.layout, batch=best.batch,
                         max_model_len=longest, model_dtype=model_dtype, formats=formats, source=source,
                         prefill_tokens=plan.input_len)      # the capacity plan prefills one prompt at a time
    if best.replicas > 1:
        launch.notes.append(f"run {best.replicas} replicas of this engine behind a load balancer for the request rate")
    return launch
