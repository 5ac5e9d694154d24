"""Predicted vs measured on a real GPU: matmuls, copies, attention and three models, eager PyTorch.

On a machine with an NVIDIA (or ROCm) GPU this script measures, with CUDA events (warm-up, then the
median of repeats, each repeat timing a batch of back-to-back calls):

* matmul at shapes from tiny (launch-bound) through decode GEMV (M = 1..16) to 8192^3, in bf16, fp16,
  fp32 with TF32 off and on, and fp8 (``torch._scaled_mm``) where the GPU has it;
* device copy bandwidth, ``x.copy_(y)`` from 1 MB to 4 GB;
* ``F.scaled_dot_product_attention``, prefill (causal) and decode shapes;
* the forward pass of GPT-2 small, a Llama-3.2-1B-dimension model and ResNet-50 (transformers
  configs, random weights, nothing downloaded), bf16 and fp32, batch 1 and 8;

and prints, for each case, narrowpipe's prediction for the matching catalog target
(``narrowpipe.analyze(graph, target, fusion="none")``: eager PyTorch launches one kernel per op) with
the error. Results go to ``benchmarks/results/gpu_validate_<device>_<date>.{json,md}``.

    python benchmarks/gpu_validate.py                       # the GPU in this machine, < 8 min on an H100
    python benchmarks/gpu_validate.py --target h100-pcie    # override the detected catalog target
    python benchmarks/gpu_validate.py --dry-run             # CPU, tiny sizes: checks the script's logic

Needs torch and narrowpipe (``pip install -e .`` from the repository root); the model section also
needs transformers and is skipped, with a note, without it. A time budget (``--budget-s``, default
420 s) skips what would not fit; every section prints its elapsed time.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

try:
    import narrowpipe  # noqa: E402
    from narrowpipe.ir import DType, Graph, Op, TensorType  # noqa: E402
except ImportError:  # pragma: no cover - run from a checkout without installing
    sys.exit("gpu_validate.py needs narrowpipe: run `pip install -e .` in the repository root first")

HERE = Path(__file__).resolve().parent
FORMAT = "narrowpipe.gpu_validate"

#: torch.cuda.get_device_name() -> catalog target. First match wins; anything else needs --target.
GPU_TARGETS: tuple[tuple[str, str], ...] = (
    (r"\bH200\b", "h200"),
    (r"\bH100\b.*\bPCIe\b", "h100-pcie"),
    (r"\bH100\b(?!.*\bNVL\b)", "h100-sxm"),          # "NVIDIA H100 80GB HBM3" is the SXM5 part
    (r"\bGB200\b", "gb200"),
    (r"\bB200\b", "b200"),
    (r"\bA100\b.*SXM.*80\s?GB|\bA100-SXM4-80GB\b", "a100-sxm-80gb"),
    (r"MI300X", "mi300x"),
    (r"MI355X", "mi355x"),
)
_TORCH_TO_IR = {torch.float32: DType.FP32, torch.bfloat16: DType.BF16, torch.float16: DType.FP16,
                torch.uint8: DType.UINT8}
if hasattr(torch, "float8_e4m3fn"):
    _TORCH_TO_IR[torch.float8_e4m3fn] = DType.FP8_E4M3


@dataclass(frozen=True)
class Plan:
    """What to run: full sizes for a GPU, tiny ones for --dry-run."""

    matmul_dtypes: tuple[str, ...]
    matmul_shapes: tuple[tuple[int, int, int], ...]          # (M, N, K)
    copy_bytes: tuple[int, ...]
    attention: tuple[tuple[str, int, int, int, int, int, bool], ...]   # name, B, H, Sq, Skv, D, causal
    model_dtypes: tuple[str, ...]
    batches: tuple[int, ...]
    seq: int
    image: int
    tiny_models: bool
    warmup: int
    repeats: int
    case_budget_s: float        # time spent measuring one case, at most (at least 3 repeats)


FULL = Plan(
    matmul_dtypes=("bf16", "fp16", "fp32", "tf32", "fp8"),
    matmul_shapes=((64, 64, 64), (256, 256, 256), (1, 4096, 4096), (4, 4096, 4096), (16, 4096, 4096),
                   (16, 14336, 4096), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
                   (4095, 4095, 4095), (4096, 14336, 4096), (8192, 8192, 8192)),
    copy_bytes=tuple(1 << p for p in range(20, 33, 2)),      # 1 MB .. 4 GB
    attention=(("prefill causal", 1, 32, 2048, 2048, 128, True), ("prefill causal", 8, 16, 1024, 1024, 64, True),
               ("prefill causal", 1, 32, 8192, 8192, 128, True), ("decode", 8, 32, 1, 4096, 128, False),
               ("decode", 64, 32, 1, 2048, 128, False)),
    model_dtypes=("bf16", "fp32"), batches=(1, 8), seq=512, image=224, tiny_models=False,
    warmup=3, repeats=20, case_budget_s=1.0)
DRY = Plan(
    matmul_dtypes=("fp32", "bf16", "tf32", "fp8"), matmul_shapes=((1, 64, 64), (16, 64, 64), (128, 128, 128)),
    copy_bytes=(1 << 16, 1 << 20), attention=(("prefill causal", 1, 2, 32, 32, 16, True),
                                              ("decode", 2, 2, 1, 32, 16, False)),
    model_dtypes=("fp32", "bf16"), batches=(1, 2), seq=16, image=32, tiny_models=True,
    warmup=1, repeats=3, case_budget_s=0.05)


class Runner:
    """Measures and predicts cases, keeping rows, the time budget and per-section elapsed times."""

    def __init__(self, device: torch.device, target: Any, plan: Plan, budget_s: float) -> None:
        self.device, self.target, self.plan = device, target, plan
        self.deadline = time.perf_counter() + budget_s
        self.rows: list[dict[str, Any]] = []
        self.elapsed: dict[str, float] = {}

    # -- timing ------------------------------------------------------------------------------
    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def measure(self, fn: Callable[[], Any]) -> float:
        """Median seconds per call: warm-up, then repeats of a batch of back-to-back calls."""
        for _ in range(self.plan.warmup):
            fn()
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        est = max(time.perf_counter() - t0, 1e-7)
        inner = max(1, min(100, math.ceil(2e-3 / est)))        # a timed batch lasts >= ~2 ms
        repeats = max(3, min(self.plan.repeats, int(self.plan.case_budget_s / (est * inner))))
        times = []
        for _ in range(repeats):
            if self.device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(inner):
                    fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3 / inner)
            else:
                t0 = time.perf_counter()
                for _ in range(inner):
                    fn()
                times.append((time.perf_counter() - t0) / inner)
        return statistics.median(times)

    # -- prediction --------------------------------------------------------------------------
    def predict(self, graph: Graph, allow_tf32: bool = False, fp32_conv: str = "default",
                **dims: int) -> tuple[float, str]:
        r = narrowpipe.analyze(graph, self.target, fusion="none", allow_tf32=allow_tf32, fp32_conv=fp32_conv,
                               dims=dims)
        assert r.timing is not None
        mix = r.timing.bound_mix
        bound = max(mix, key=mix.get) if mix else ""  # type: ignore[arg-type]
        return r.timing.time_s, bound

    # -- bookkeeping -------------------------------------------------------------------------
    def out_of_time(self) -> bool:
        return time.perf_counter() > self.deadline

    def add(self, section: str, case: str, measured: float | None, predicted: float | None, bound: str = "",
            *, work: float = 0.0, unit: str = "", note: str = "", **extra: Any) -> dict[str, Any]:
        err = 100.0 * (predicted - measured) / measured if measured and predicted is not None else None
        rate = work / measured if measured and work else None
        row = {"section": section, "case": case, "measured_s": measured, "predicted_s": predicted,
               "error_pct": err, "predicted_bound": bound, "achieved": rate, "achieved_unit": unit,
               "note": note, **extra}
        self.rows.append(row)
        shown = (f"{_fmt_s(measured)} vs {_fmt_s(predicted)} ({err:+.0f}%)" if err is not None else note)
        print(f"  {section:9s} {case:48s} {shown}", flush=True)
        return row

    def case(self, section: str, case: str, run: Callable[[], dict[str, Any] | None]) -> None:
        """One case, isolated: out of time, out of memory or unsupported is a row with a note."""
        if self.out_of_time():
            self.add(section, case, None, None, note="skipped: time budget")
            return
        try:
            run()
        except Exception as exc:  # noqa: BLE001 - a benchmark records a failing case and goes on
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            self.add(section, case, None, None, note=_error(exc))


def _error(exc: BaseException) -> str:
    first = (str(exc).splitlines() or [""])[0]
    return f"error: {type(exc).__name__}: {first[:160]}"


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.3g} ms" if x >= 1e-3 else f"{x * 1e6:.3g} us"


def one_op(name: str, op: Op, inputs: list[tuple[DType, tuple[int, ...]]], out: tuple[DType, tuple[int, ...]],
           attrs: dict[str, Any] | None = None) -> Graph:
    """A one-node narrowpipe graph for a single measured op."""
    g = Graph(name)
    ins = [g.add_input(f"x{i}", TensorType(dt, shape)) for i, (dt, shape) in enumerate(inputs)]
    node = g.add_node(op, ins, [TensorType(*out)], attrs)
    g.set_outputs(node.outputs)
    return g


# -- sections --------------------------------------------------------------------------------------

def matmul_section(r: Runner) -> None:
    dev = r.device
    fp8_ok = dev.type == "cuda" and hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn") \
        and torch.cuda.get_device_capability(dev) >= (8, 9)
    for name in r.plan.matmul_dtypes:
        for m, n, k in r.plan.matmul_shapes:
            case = f"{name} {m}x{n}x{k}"
            if name == "fp8" and not fp8_ok:
                r.add("matmul", case, None, None, note="skipped: no fp8 matmul on this device")
                continue
            if name == "tf32" and dev.type != "cuda":
                r.add("matmul", case, None, None, note="skipped: TF32 is a CUDA setting")
                continue
            if name == "fp8" and (m % 16 or n % 16 or k % 16):
                r.add("matmul", case, None, None, note="skipped: _scaled_mm needs dims divisible by 16")
                continue
            r.case("matmul", case, lambda name=name, m=m, n=n, k=k, case=case: _matmul_case(r, name, m, n, k, case))


def _matmul_case(r: Runner, name: str, m: int, n: int, k: int, case: str) -> None:
    dev = r.device
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(name, torch.float32)
    a = torch.randn(m, k, device=dev, dtype=tdt)
    b = torch.randn(k, n, device=dev, dtype=tdt)
    tf32 = name == "tf32"
    if name == "fp8":
        a8 = a.to(torch.float8_e4m3fn)
        b8 = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()      # column-major, as cuBLASLt wants
        one = torch.ones((), device=dev, dtype=torch.float32)

        def fn() -> Any:
            return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        in_dt, out_dt = DType.FP8_E4M3, DType.BF16
    else:
        def fn() -> Any:
            return torch.mm(a, b)
        in_dt = out_dt = _TORCH_TO_IR[tdt]
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        if dev.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = tf32
        measured = r.measure(fn)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    g = one_op(case, Op.DOT, [(in_dt, (m, k)), (in_dt, (k, n))], (out_dt, (m, n)),
               {"lhs_contract": (1,), "rhs_contract": (0,), "lhs_batch": (), "rhs_batch": ()})
    predicted, bound = r.predict(g, allow_tf32=tf32)
    r.add("matmul", case, measured, predicted, bound, work=2.0 * m * n * k, unit="FLOP/s",
          dtype=name, shape=[m, n, k], allow_tf32=tf32)


def copy_section(r: Runner) -> None:
    for size in r.plan.copy_bytes:
        case = f"copy {_fmt_bytes(size)}"
        if r.device.type == "cuda" and torch.cuda.mem_get_info(r.device)[0] < 2.2 * size:
            r.add("copy", case, None, None, note="skipped: not enough free device memory")
            continue
        r.case("copy", case, lambda size=size, case=case: _copy_case(r, size, case))


def _copy_case(r: Runner, size: int, case: str) -> None:
    x = torch.empty(size, dtype=torch.uint8, device=r.device)
    y = torch.ones(size, dtype=torch.uint8, device=r.device)
    measured = r.measure(lambda x=x, y=y: x.copy_(y))
    del x, y
    g = one_op(case, Op.COPY, [(DType.UINT8, (size,))], (DType.UINT8, (size,)))
    predicted, bound = r.predict(g)
    r.add("copy", case, measured, predicted, bound, work=2.0 * size, unit="B/s", bytes=size)


def _fmt_bytes(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def attention_section(r: Runner) -> None:
    dtype = torch.bfloat16 if r.device.type == "cuda" else torch.float32
    for name, b, h, sq, skv, d, causal in r.plan.attention:
        case = f"{name} B={b} H={h} Sq={sq} Skv={skv} D={d}"
        r.case("attention", case, lambda b=b, h=h, sq=sq, skv=skv, d=d, causal=causal, case=case:
               _attention_case(r, dtype, b, h, sq, skv, d, causal, case))


def _attention_case(r: Runner, dtype: torch.dtype, b: int, h: int, sq: int, skv: int, d: int, causal: bool,
                    case: str) -> None:
    q = torch.randn(b, h, sq, d, device=r.device, dtype=dtype)
    k = torch.randn(b, h, skv, d, device=r.device, dtype=dtype)
    v = torch.randn(b, h, skv, d, device=r.device, dtype=dtype)
    measured = r.measure(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    dt = _TORCH_TO_IR[dtype]
    g = one_op(case, Op.ATTENTION, [(dt, (b, h, sq, d)), (dt, (b, h, skv, d)), (dt, (b, h, skv, d))],
               (dt, (b, h, sq, d)), {"layout": "bhsd", "causal": causal})
    predicted, bound = r.predict(g)
    r.add("attention", case, measured, predicted, bound, work=4.0 * b * h * sq * skv * d, unit="FLOP/s",
          dtype=str(dt), causal=causal)


def _model_specs(tiny: bool) -> list[tuple[str, str, Callable[[], Any]]]:
    import transformers as tf
    if tiny:
        return [("gpt2", "GPT2LMHeadModel", lambda: tf.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000,
                                                                  n_positions=64)),
                ("llama-3.2-1b", "LlamaForCausalLM", lambda: tf.LlamaConfig(
                    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=1000, tie_word_embeddings=True)),
                ("resnet50", "ResNetForImageClassification", lambda: tf.ResNetConfig(
                    depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 64, 128], embedding_size=16, num_labels=10))]
    return [("gpt2", "GPT2LMHeadModel", tf.GPT2Config),                      # GPT-2 small, 124M
            ("llama-3.2-1b", "LlamaForCausalLM", lambda: tf.LlamaConfig(
                hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
                tie_word_embeddings=True, rms_norm_eps=1e-5)),
            ("resnet50", "ResNetForImageClassification", lambda: tf.ResNetConfig(num_labels=1000))]


def models_section(r: Runner) -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        r.add("models", "all models", None, None, note="skipped: transformers is not installed")
        return
    for name, cls_name, make in _model_specs(r.plan.tiny_models):
        for dname in r.plan.model_dtypes:
            label = f"{name} {dname}"
            if r.out_of_time():
                for b in r.plan.batches:
                    r.add("models", f"{label} batch {b}", None, None, note="skipped: time budget")
                continue
            try:
                _model_cases(r, name, cls_name, make, dname)
            except Exception as exc:  # noqa: BLE001 - record and go on to the next model
                if r.device.type == "cuda":
                    torch.cuda.empty_cache()
                r.add("models", label, None, None, note=_error(exc))


def _model_cases(r: Runner, name: str, cls_name: str, make: Callable[[], Any], dname: str) -> None:
    import transformers as tf
    from torch.export import Dim
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dname]
    cls = getattr(tf, cls_name)
    config = make()
    vision = "ResNet" in cls_name
    if not vision:
        config._attn_implementation = "sdpa"
    t0 = time.perf_counter()
    with torch.device("meta"):
        meta_model = cls(config).to(dtype).eval()
    batch = Dim("batch", min=1, max=4096)
    if vision:
        x = torch.empty(2, 3, r.plan.image, r.plan.image, device="meta", dtype=dtype)
        graph = narrowpipe.from_torch(meta_model, (), {"pixel_values": x}, dynamic_shapes={"pixel_values": {0: batch}},
                                      name=name)
    else:
        ids = torch.zeros(2, 16, dtype=torch.long, device="meta")
        dyn = {"input_ids": {0: batch, 1: Dim("seq", min=2, max=4096)}, "use_cache": None}
        graph = narrowpipe.from_torch(meta_model, (), {"input_ids": ids, "use_cache": False}, dynamic_shapes=dyn,
                                      name=name)
    export_s = time.perf_counter() - t0
    with r.device:
        model = cls(config).to(dtype).eval()
    try:
        for b in r.plan.batches:
            case = f"{name} {dname} batch {b}" + ("" if vision else f" seq {r.plan.seq}")
            if r.out_of_time():
                r.add("models", case, None, None, note="skipped: time budget")
                continue
            if vision:
                inputs: dict[str, Any] = {"pixel_values": torch.randn(b, 3, r.plan.image, r.plan.image,
                                                                      device=r.device, dtype=dtype)}
                dims = {"batch": b}
            else:
                inputs = {"input_ids": torch.randint(0, config.vocab_size, (b, r.plan.seq), device=r.device),
                          "use_cache": False}
                dims = {"batch": b, "seq": r.plan.seq}
            with torch.inference_mode():
                measured = r.measure(lambda inputs=inputs, model=model: model(**inputs))
            # what eager PyTorch does by default: TF32 off for matmuls, on for cuDNN convolutions; the
            # prediction is told both settings this run had
            cuda = r.device.type == "cuda"
            tf32 = cuda and bool(torch.backends.cuda.matmul.allow_tf32)
            conv_tf32 = cuda and bool(torch.backends.cudnn.allow_tf32)
            predicted, bound = r.predict(graph, allow_tf32=tf32, fp32_conv="high" if conv_tf32 else "highest",
                                         **dims)
            report = narrowpipe.analyze(graph, dims=dims)
            r.add("models", case, measured, predicted, bound, work=float(report.flops), unit="FLOP/s",
                  dtype=dname, batch=b, params=report.params, allow_tf32=tf32, conv_tf32=conv_tf32,
                  export_s=round(export_s, 2))
    finally:
        del model
        if r.device.type == "cuda":
            torch.cuda.empty_cache()


SECTIONS: dict[str, Callable[[Runner], None]] = {"matmul": matmul_section, "copy": copy_section,
                                                 "attention": attention_section, "models": models_section}


# -- device, target, environment, output ------------------------------------------------------------

def target_for(device_name: str) -> str | None:
    for pattern, target in GPU_TARGETS:
        if re.search(pattern, device_name):
            return target
    return None


def environment(device: torch.device, target: str, dry_run: bool) -> dict[str, Any]:
    env: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda"
        else f"CPU ({platform.processor() or platform.machine()})",
        "target": target, "dry_run": dry_run, "torch": torch.__version__, "narrowpipe": narrowpipe.__version__,
        "python": platform.python_version(), "platform": platform.platform(), "nproc": os.cpu_count(),
        "command": "python " + " ".join([sys.argv[0], *sys.argv[1:]]),
        "allow_tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "allow_tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(capability=list(torch.cuda.get_device_capability(device)),
                   memory_gb=round(props.total_memory / 1e9, 1), sm_count=props.multi_processor_count,
                   cuda=torch.version.cuda, hip=getattr(torch.version, "hip", None),
                   cudnn=torch.backends.cudnn.version())
    try:
        import transformers
        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    return env


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for section in dict.fromkeys(r["section"] for r in rows):
        errs = [abs(r["error_pct"]) for r in rows if r["section"] == section and r["error_pct"] is not None]
        out[section] = {"cases": sum(1 for r in rows if r["section"] == section), "measured": len(errs),
                        "median_abs_error_pct": statistics.median(errs) if errs else None,
                        "max_abs_error_pct": max(errs) if errs else None}
    return out


def markdown(env: dict[str, Any], rows: list[dict[str, Any]], summary: dict[str, Any],
             elapsed: dict[str, float]) -> str:
    lines = [f"# gpu_validate: {env['device']} vs narrowpipe target `{env['target']}`", "",
             *(f"- {k}: {v}" for k, v in env.items()), "",
             "Predicted with `narrowpipe.analyze(graph, target, fusion=\"none\")`; error = (predicted - measured) / "
             f"measured. Measured: median of {'CUDA-event' if 'capability' in env else 'time.perf_counter'} timings "
             "after warm-up, each over a batch of back-to-back calls.", "",
             "| section | cases | measured | median abs error | max abs error | elapsed |", "|---|--:|--:|--:|--:|--:|"]
    for s, v in summary.items():
        med, mx = v["median_abs_error_pct"], v["max_abs_error_pct"]
        lines.append(f"| {s} | {v['cases']} | {v['measured']} | {'-' if med is None else f'{med:.0f}%'} | "
                     f"{'-' if mx is None else f'{mx:.0f}%'} | {elapsed.get(s, 0):.1f} s |")
    lines += ["", "| section | case | measured | predicted | error | achieved | predicted bound | note |",
              "|---|---|--:|--:|--:|--:|---|---|"]
    for r in rows:
        err = "-" if r["error_pct"] is None else f"{r['error_pct']:+.1f}%"
        ach = "-" if r["achieved"] is None else f"{r['achieved'] / 1e12:.3g} T{r['achieved_unit']}"
        lines.append(f"| {r['section']} | {r['case']} | {_fmt_s(r['measured_s'])} | {_fmt_s(r['predicted_s'])} | "
                     f"{err} | {ach} | {r['predicted_bound']} | {r['note']} |")
    return "\n".join(lines) + "\n"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", help="catalog target (name, alias or .toml); default: detected from the GPU")
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda, or cpu with --dry-run")
    p.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU: checks the script, not the GPU")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    p.add_argument("--budget-s", type=float, default=420.0, help="stop starting new cases after this (default 420)")
    p.add_argument("--out", help="results directory (default benchmarks/results; benchmarks/out with --dry-run)")
    args = p.parse_args(argv)
    t_start = time.perf_counter()
    device = torch.device(args.device or ("cpu" if args.dry_run else "cuda"))
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device visible to torch; use --dry-run (CPU, tiny sizes) to check the script")
    if args.target:
        spec = args.target
    elif device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        spec = target_for(name) or sys.exit(f"no catalog target for {name!r}; pass --target NAME or a .toml file "
                                            f"(catalog: {', '.join(n for n, _ in narrowpipe.targets())})")
    else:
        spec = "epyc-9755"   # the CPU is not this chip: a dry run checks the pipeline, not the numbers
    try:
        target = narrowpipe.get_target(spec)
    except narrowpipe.NarrowpipeError as exc:
        sys.exit(f"--target: {exc}")
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        sys.exit(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    env = environment(device, target.name, args.dry_run)
    print(f"gpu_validate: {env['device']} -> target {target.name}{' (dry run)' if args.dry_run else ''}", flush=True)
    runner = Runner(device, target, DRY if args.dry_run else FULL, args.budget_s)
    for s in sections:
        t0 = time.perf_counter()
        print(f"[{s}]", flush=True)
        SECTIONS[s](runner)
        runner.elapsed[s] = time.perf_counter() - t0
        print(f"[{s}] {runner.elapsed[s]:.1f} s (total {time.perf_counter() - t_start:.1f} s)", flush=True)
    runner.elapsed["total"] = time.perf_counter() - t_start
    summary = summarize(runner.rows)
    data = {"format": FORMAT, "version": 1, "env": env, "elapsed_s": runner.elapsed, "summary": summary,
            "rows": runner.rows}
    out_dir = Path(args.out) if args.out else HERE / ("out" if args.dry_run else "results")
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"gpu_validate_{_slug(env['device'] if device.type == 'cuda' else 'cpu')}" \
           f"{'-dryrun' if args.dry_run else ''}_{env['date'][:10]}"
    (out_dir / f"{stem}.json").write_text(json.dumps(data, indent=2) + "\n")
    (out_dir / f"{stem}.md").write_text(markdown(env, runner.rows, summary, runner.elapsed))
    print(f"\n{'section':10s} {'case':48s} {'measured':>10s} {'predicted':>10s} {'error':>8s}")
    for row in runner.rows:
        err = "-" if row["error_pct"] is None else f"{row['error_pct']:+.0f}%"
        print(f"{row['section']:10s} {row['case']:48s} {_fmt_s(row['measured_s']):>10s} "
              f"{_fmt_s(row['predicted_s']):>10s} {err:>8s} {row['note']}")
    print(f"wrote {out_dir / stem}.json and .md in {runner.elapsed['total']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
