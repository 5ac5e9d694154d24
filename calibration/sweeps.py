"""Microbenchmarks: matmul rate by dtype and size, memory bandwidth by transfer size, and the
per-op dispatch overhead, measured with torch on the CPU or a CUDA device.

Every record keeps what was run (kind, dtype, shape), the work it represents (FLOPs, bytes moved)
and the median seconds, so a fit can be redone or audited from the raw file alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from ..costmodel.interpreter import op_cost
from ..ir import DType, Op, TensorType
from .timer import calibration_quantile, quantile
from .timer import median_time as _median_time


def median_time(fn: Callable[[], object], *, device: str = "cpu", **kwargs: Any) -> float:
    """:func:`.timer.median_time` at calibration's quantile (:func:`.timer.calibration_quantile`),
    at least 9 repeats."""
    kwargs.setdefault("repeats", 9)
    return _median_time(fn, device=device, q=calibration_quantile(device), **kwargs)

__all__ = ["Measurement", "dispatch_overhead", "matmul_sweep", "bandwidth_sweep", "MATMUL_SQUARES",
           "QUICK_SQUARES"]

MATMUL_SQUARES = (32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
QUICK_SQUARES = (32, 64, 128, 256, 512, 1024)
ELEMENTS = tuple(2 ** e for e in range(8, 27))              # 1 KiB .. 256 MiB of fp32 per operand
QUICK_ELEMENTS = tuple(2 ** e for e in range(8, 23, 2))


@dataclass
class Measurement:
    kind: str            # "dispatch", "matmul", "add", "copy", "conv", "transcendental:<fn>", "vector_op:<op>",
    #                      "attention", "fill", "fresh_fill", "gemm_grid", "pad_rows", "module_call",
    #                      "depthwise" (flops: output taps, bytes: input + output elements)
    dtype: str
    shape: tuple[int, ...]
    flops: int
    bytes: int
    seconds: float

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        """From :meth:`to_dict`'s output read back from JSON."""
        return cls(str(d["kind"]), str(d["dtype"]), tuple(int(x) for x in d["shape"]),
                   int(d["flops"]), int(d["bytes"]), float(d["seconds"]))


def _torch_dtype(name: str):  # noqa: ANN202
    import torch
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def dispatch_overhead(device: str = "cpu") -> Measurement:
    """Time of an op on a one-element tensor: framework dispatch + launch, no real work."""
    import torch
    x = torch.ones(1, device=device)
    t = median_time(lambda: torch.add(x, x), device=device, warmup=20, repeats=200, min_seconds=0.05)
    one = _fp32(x)
    c = op_cost(Op.ADD, [one, one], [one])
    return Measurement("dispatch", "fp32", (1,), c.flops, c.bytes, t)


def _fp32(t) -> TensorType:  # noqa: ANN001
    return TensorType(DType.FP32, tuple(t.shape))


#: Bytes of weights cycled through so that each call reads weights the caches no longer hold, as a
#: forward pass does (its layers' weights are used once each); activations stay hot, as they are
#: when the previous op just wrote them.
COLD_BYTES = 96 * 2**20


_T = TypeVar("_T")


def cold_copies(make: Callable[[], _T], nbytes: int) -> Callable[[], _T]:
    """A function returning, call after call, one of enough copies of ``make()`` to defeat caches."""
    copies = [make() for _ in range(max(1, min(64, -(-COLD_BYTES // max(nbytes, 1)))))]
    state = {"i": 0}

    def next_copy() -> _T:
        state["i"] = (state["i"] + 1) % len(copies)
        return copies[state["i"]]
    return next_copy


def matmul_sweep(device: str = "cpu", dtypes: tuple[str, ...] = ("fp32", "bf16"),
                 squares: tuple[int, ...] = MATMUL_SQUARES, skinny: bool = True) -> Iterator[Measurement]:
    """Square GEMMs (the compute curve) and skinny ones (decode-like), weights cold."""
    import torch
    shapes: list[tuple[int, int, int]] = [(s, s, s) for s in squares]
    if skinny:
        shapes += [(m, 2048, 2048) for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)]
    for dtype in dtypes:
        dt = _torch_dtype(dtype)
        for m, n, k in shapes:
            a = torch.randn(m, k, device=device).to(dt)
            # Both lambdas run before the loop moves on (cold_copies calls its factory at once).
            weights = cold_copies(lambda: torch.randn(k, n, device=device).to(dt),  # noqa: B023
                                  DType.parse(dtype).nbytes(k * n))
            t = median_time(lambda: torch.mm(a, weights()), device=device)  # noqa: B023
            dt_ir = DType.parse(dtype)
            c = op_cost(Op.DOT, [TensorType(dt_ir, (m, k)), TensorType(dt_ir, (k, n))], [TensorType(dt_ir, (m, n))],
                        {"lhs_contract": (1,), "rhs_contract": (0,)})
            yield Measurement("matmul", dtype, (m, n, k), c.flops, c.bytes, t)


def bandwidth_sweep(device: str = "cpu", elements: tuple[int, ...] = ELEMENTS) -> Iterator[Measurement]:
    """Eager elementwise add (reads two operands, writes a new output) and in-place copy."""
    import torch
    for n in elements:
        a = torch.randn(n, device=device)
        b = torch.randn(n, device=device)
        # The timed lambdas run before the loop moves on; a lambda, not a partial, keeps the one
        # Python call per op that the dispatch measurement and the other sweeps also include.
        t = median_time(lambda: torch.add(a, b), device=device)  # noqa: B023
        vec = TensorType(DType.FP32, (n,))
        c = op_cost(Op.ADD, [vec, vec], [vec])
        yield Measurement("add", "fp32", (n,), c.flops, c.bytes, t)
        out = torch.empty(n, device=device)
        t = median_time(lambda: out.copy_(a), device=device)  # noqa: B023
        c = op_cost(Op.COPY, [vec], [vec])
        yield Measurement("copy", "fp32", (n,), c.flops, c.bytes, t)


#: (Cin, Cout, kernel, stride, pixels): ResNet-like direct convolutions, several per kernel size.
CONV_SHAPES = ((128, 512, 1, 1, 28), (320, 80, 1, 1, 20), (48, 192, 1, 1, 64),
               (96, 96, 3, 1, 40), (160, 160, 3, 2, 28), (48, 48, 3, 1, 80),
               (3, 64, 7, 2, 160), (3, 32, 7, 2, 192))


def conv_sweep(device: str = "cpu", rounds: int = 8) -> Iterator[Measurement]:
    """Convolutions measured as a network runs them: round-robin, one call per turn with no warm-up
    (oneDNN's speed for one shape depends on what ran before it: a hot loop of one shape ran 10-50%
    faster here than the same convolutions in turn), weights cold; calibration's quantile over all rounds."""
    import statistics

    import torch
    cases = []
    for cin, cout, k, s, px in CONV_SHAPES:
        # cold_copies calls the factory before the loop moves on.
        convs = cold_copies(lambda: torch.nn.Conv2d(cin, cout, k, stride=s, padding=k // 2, bias=False)  # noqa: B023
                            .to(device).eval(), 4 * cin * cout * k * k)
        x = torch.randn(1, cin, px, px, device=device)
        out = (px + 2 * (k // 2) - k) // s + 1
        cases.append(((cin, cout, k, s, px), convs, x, out))
    samples: dict[int, list[float]] = {i: [] for i in range(len(cases))}
    with torch.no_grad():
        for _ in range(rounds):
            for i, (_, convs, x, _) in enumerate(cases):
                samples[i].append(median_time(lambda: convs()(x), device=device, repeats=1,  # noqa: B023
                                              min_seconds=0.0, warmup=0))
    for i, ((cin, cout, k, s, px), _, _, out) in enumerate(cases):
        q = calibration_quantile(device)
        t = quantile(samples[i], q) if len(samples[i]) > 3 else statistics.median(samples[i])
        f32 = DType.FP32
        c = op_cost(Op.CONV, [TensorType(f32, (1, cin, px, px)), TensorType(f32, (cout, cin, k, k))],
                    [TensorType(f32, (1, cout, out, out))],
                    {"stride": (s, s), "padding": (k // 2, k // 2), "dilation": (1, 1), "groups": 1})
        yield Measurement("conv", "fp32", (cin, cout, k, s, px), c.flops, c.bytes, t)


def vector_op_sweep(device: str = "cpu") -> Iterator[Measurement]:
    """Norms, softmax, pooling and a depthwise convolution on cache-resident activations: input
    elements per second."""
    import torch
    import torch.nn.functional as F
    x2 = torch.randn(512, 768, device=device)
    x3 = torch.randn(48, 128, 128, device=device)
    x4 = torch.randn(1, 64, 56, 56, device=device)
    xp = torch.randn(1, 64, 112, 112, device=device)
    w, b = torch.ones(768, device=device), torch.zeros(768, device=device)
    rm, rv = torch.zeros(64, device=device), torch.ones(64, device=device)
    wd = torch.randn(64, 1, 3, 3, device=device)      # a MobileNet-style 3x3 depthwise layer
    # name (a canonical op) -> (the call, the tensors it reads)
    cases = {
        "layer_norm": (lambda: F.layer_norm(x2, (768,), w, b), (x2, w, b)),
        "softmax": (lambda: torch.softmax(x3, -1), (x3,)),
        "log_softmax": (lambda: torch.log_softmax(x3, -1), (x3,)),
        "batch_norm": (lambda: F.batch_norm(x4, rm, rv, training=False), (x4, rm, rv)),
        "group_norm": (lambda: F.group_norm(x4, 8), (x4,)),
        "pool": (lambda: F.max_pool2d(xp, 3, 2, 1), (xp,)),
        "reduce_mean": (lambda: x3.mean(-1), (x3,)),
        "reduce_sum": (lambda: x3.sum(-1), (x3,)),
        "cumsum": (lambda: x3.cumsum(-1), (x3,)),
        "conv_depthwise": (lambda: F.conv2d(x4, wd, padding=1, groups=64), (x4, wd)),
    }
    with torch.no_grad():
        for name, (fn, reads) in cases.items():
            t = median_time(fn, device=device)
            n = reads[0].numel()   # the rate counts input elements per second
            attrs = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 64} \
                if name == "conv_depthwise" else {}
            op = Op.CONV if name == "conv_depthwise" else Op(name)
            c = op_cost(op, [_fp32(r) for r in reads], [_fp32(fn())], attrs)
            yield Measurement(f"vector_op:{name}", "fp32", (n,), n, c.bytes, t)


#: (batch, heads, tokens, head dim) of the fused-attention measurements: encoder and decoder
#: prompts, ViT's 197 patches, Swin's 7x7 windows, longer sequences.
ATTENTION_SHAPES = ((1, 12, 128, 64), (8, 12, 128, 64), (1, 12, 197, 64), (64, 3, 49, 32), (1, 12, 512, 64),
                    (1, 8, 1024, 64))


def attention_sweep(device: str = "cpu") -> Iterator[Measurement]:
    """``scaled_dot_product_attention`` (not causal) at each shape: the eager fused kernel, softmax
    included, by key length."""
    import torch
    import torch.nn.functional as F
    with torch.no_grad():
        for b, h, s, d in ATTENTION_SHAPES:
            q, k, v = (torch.randn(b, h, s, d, device=device) for _ in range(3))
            t = median_time(lambda: F.scaled_dot_product_attention(q, k, v), device=device)  # noqa: B023
            qt = TensorType(DType.FP32, (b, h, s, d))
            c = op_cost(Op.ATTENTION, [qt, qt, qt], [qt])
            yield Measurement("attention", "fp32", (b, h, s, d), c.flops, c.bytes, t)


#: Buffer sizes (bytes) for the fresh-page measurement: above any glibc mmap threshold (<= 32 MiB).
FRESH_BYTES = (64 * 2**20, 128 * 2**20)


def fresh_page_sweep(device: str = "cpu", sizes: tuple[int, ...] = FRESH_BYTES) -> Iterator[Measurement]:
    """Filling a buffer just mapped from the OS (an anonymous ``mmap`` seen as a tensor: every page
    faults in and is zeroed on first touch) and filling one already mapped, at each size: the
    difference over the bytes is the fresh-page rate (:mod:`narrowpipe.costmodel.execution.fresh_pages`).
    The mapping is explicit because ``torch.empty`` of the same size may be served from a hole an
    earlier sweep's frees left in the heap, already mapped. Nothing where the OS has no anonymous
    private mappings (not a Unix)."""
    import mmap
    if not hasattr(mmap, "MAP_ANONYMOUS"):
        return

    import torch
    for nbytes in sizes:
        n = nbytes // 4
        mapped = torch.empty(n, device=device)
        # timed before the loop moves on
        t = median_time(lambda: mapped.fill_(1.0), device=device)  # noqa: B023
        yield Measurement("fill", "fp32", (n,), 0, nbytes, t)
        t = median_time(lambda: _fill_fresh(nbytes), device=device)  # noqa: B023
        yield Measurement("fresh_fill", "fp32", (n,), 0, nbytes, t)


def _fill_fresh(nbytes: int) -> None:
    import mmap

    import torch
    with mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as m:   # as malloc maps
        t = torch.frombuffer(m, dtype=torch.float32)
        t.fill_(1.0)
        del t


#: torch function for each transcendental the cost model knows a rate for.
TRANSCENDENTAL_FNS = ("exp", "log", "tanh", "sigmoid", "erf", "gelu", "silu", "sqrt", "rsqrt", "sin", "cos")


def transcendental_sweep(device: str = "cpu", n: int = 1 << 18) -> Iterator[Measurement]:
    """Each function on ``n`` cache-resident elements: evaluations per second."""
    import torch
    fns: dict[str, Callable[..., Any]] = {"gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}
    x = torch.rand(n, device=device) + 0.5
    for name in TRANSCENDENTAL_FNS:
        fn = fns.get(name) or getattr(torch, name)
        # timed before the loop moves on
        t = median_time(lambda: fn(x), device=device)  # noqa: B023
        c = op_cost(Op(name), [_fp32(x)], [_fp32(x)])
        yield Measurement(f"transcendental:{name}", "fp32", (n,), c.transcendentals, c.bytes, t)


def run_all(device: str, quick: bool, progress: Callable[[str], None] | None = None) -> list[Measurement]:
    """The full sweep (or a quick one for tests), reporting each finished case to ``progress``."""
    squares = QUICK_SQUARES if quick else MATMUL_SQUARES
    elements = QUICK_ELEMENTS if quick else ELEMENTS
    sweeps: list[Iterable[Measurement]] = [
        [dispatch_overhead(device)], matmul_sweep(device, squares=squares, skinny=not quick),
        bandwidth_sweep(device, elements), transcendental_sweep(device), conv_sweep(device),
        vector_op_sweep(device)]
    if device == "cpu":
        from .depthwise_sweep import depthwise_sweep
        from .gemm_grid_sweep import gemm_grid_sweep
        from .pad_sweep import pad_row_sweep
        sweeps += [attention_sweep(device), fresh_page_sweep(device), pad_row_sweep(device), depthwise_sweep(device)]
        sweeps += [] if quick else [gemm_grid_sweep(device)]
    out: list[Measurement] = []
    for sweep in sweeps:
        for m in sweep:
            out.append(m)
            if progress:
                progress(f"{m.kind} {m.dtype} {'x'.join(map(str, m.shape))}")
    return out
