"""Microbenchmarks: matmul rate by dtype and size, memory bandwidth by transfer size, the per-op
dispatch overhead, functions, convolutions, norms and attention, measured with torch on the CPU or a
CUDA device. Each sweep returns its :class:`.measurement.Case` list; :mod:`.run` measures every
sweep's cases together in interleaved rounds (:mod:`.rounds`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..costmodel.interpreter import op_cost
from ..ir import DType, Op, TensorType
from .measurement import Case, Measurement, bound

__all__ = ["Measurement", "dispatch_cases", "matmul_cases", "bandwidth_cases", "conv_cases", "after_elementwise",
           "vector_op_cases",
           "attention_cases", "fresh_page_cases", "transcendental_cases", "ColdPool", "cold_copies", "call_next",
           "MATMUL_SQUARES", "QUICK_SQUARES", "FP16_SQUARES", "QUICK_FP16_SQUARES", "fp16_linear_cases"]

MATMUL_SQUARES = (32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
QUICK_SQUARES = (32, 64, 128, 256, 512, 1024)
#: Square fp16 GEMMs (CPU, :func:`fp16_linear_cases`): enough sizes for a rate, few and small enough
#: that a CPU without fp16 arithmetic, whose PyTorch fp16 GEMM is a reference loop (0.77 s at 2048^3
#: on one EPYC Zen 4 core), adds seconds to the run, not minutes.
FP16_SQUARES = (256, 512, 1024, 2048)
QUICK_FP16_SQUARES = (512, 1024)
ELEMENTS = tuple(2 ** e for e in range(8, 27))              # 1 KiB .. 256 MiB of fp32 per operand
QUICK_ELEMENTS = tuple(2 ** e for e in range(8, 23, 2))


def _torch_dtype(name: str):  # noqa: ANN202
    import torch
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def dispatch_cases(device: str = "cpu") -> list[Case]:
    """An op on a one-element tensor: framework dispatch + launch, no real work."""
    import torch
    x = torch.ones(1, device=device)
    one = _fp32(x)
    c = op_cost(Op.ADD, [one, one], [one])
    return [Case("dispatch", "fp32", (1,), c.flops, c.bytes, lambda: torch.add(x, x), min_seconds=0.002,
                 max_calls=200)]


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


class ColdPool:
    """Cold weights for every GEMM of a calibration from one buffer of ``COLD_BYTES`` per dtype: a
    GEMM's weights are views of it at successive page-aligned offsets (as many as
    :func:`cold_copies` would make, at most 64), cycled call after call. One buffer instead of copies
    per shape, so the interleaved rounds can hold every GEMM case at once (copies per shape of the
    ~200 GEMMs would take ~5 GB)."""

    _ALIGN = 4096

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self._buffers: dict[str, Any] = {}

    def weights(self, dtype: str, k: int, n: int) -> tuple[Callable[[], Any], int]:
        """The next (k, n) weights, call after call, and how many distinct ones it cycles through."""
        import torch
        dt = _torch_dtype(dtype)
        size = DType.parse(dtype).nbytes(k * n)
        step = -(-size // self._ALIGN) * self._ALIGN
        if step > COLD_BYTES:
            one = torch.randn(k, n, device=self.device).to(dt)
            return (lambda: one), 1
        item = DType.parse(dtype).nbytes(1)
        if dtype not in self._buffers:
            self._buffers[dtype] = torch.randn(COLD_BYTES // item, device=self.device).to(dt)
        flat = self._buffers[dtype]
        views = [flat[i * step // item:i * step // item + k * n].view(k, n)
                 for i in range(max(1, min(64, -(-COLD_BYTES // max(size, 1)), COLD_BYTES // step)))]
        state = {"i": 0}

        def next_view() -> Any:
            state["i"] = (state["i"] + 1) % len(views)
            return views[state["i"]]
        return next_view, len(views)


def gemm_case(kind: str, dtype: str, m: int, n: int, k: int, pool: ColdPool) -> Case:
    """``torch.mm`` of an (m, k) activation, hot, by (k, n) weights from ``pool``, cold (as cold as
    cycling through up to 64 copies of them leaves them)."""
    import torch
    a = torch.randn(m, k, device=pool.device).to(_torch_dtype(dtype))
    weights, copies = pool.weights(dtype, k, n)
    dt = DType.parse(dtype)
    c = op_cost(Op.DOT, [TensorType(dt, (m, k)), TensorType(dt, (k, n))], [TensorType(dt, (m, n))],
                {"lhs_contract": (1,), "rhs_contract": (0,)})
    # a turn's warm-up goes once through the weights, so its timed calls find them where a loop of
    # this GEMM alone leaves them (small weights cycle inside the L2, large ones miss it), not where
    # the previous case left them: with one warm-up call, 32x32x32 read 5 us here, 2 us in a loop
    return Case(kind, dtype, (m, n, k), c.flops, c.bytes, lambda: torch.mm(a, weights()), warmup=copies)


def matmul_cases(pool: ColdPool, dtypes: tuple[str, ...] = ("fp32", "bf16"),
                 squares: tuple[int, ...] = MATMUL_SQUARES, skinny: bool = True) -> list[Case]:
    """Square GEMMs (the compute curve) and skinny ones (decode-like), weights cold."""
    shapes: list[tuple[int, int, int]] = [(s, s, s) for s in squares]
    if skinny:
        shapes += [(m, 2048, 2048) for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)]
    return [gemm_case("matmul", dtype, m, n, k, pool) for dtype in dtypes for m, n, k in shapes]


def _linear(x: Any, weights: Callable[[], Any]) -> Any:
    """``nn.Linear``'s product with the next of ``weights`` (cold)."""
    import torch
    return torch.nn.functional.linear(x, weights())


def fp16_linear_cases(pool: ColdPool, squares: tuple[int, ...] = FP16_SQUARES) -> list[Case]:
    """Square fp16 GEMMs as ``nn.Linear`` runs them (``x @ W.T``, weights cold), for the CPU's fp16
    rate. Without AVX512-FP16 or AMX-FP16, PyTorch's fp16 GEMM is a reference loop whose speed
    depends on the weights' layout; on one EPYC Zen 4 core (torch 2.13, thread clock) at 256, 512,
    1024 and 2048: ``F.linear`` 14, 18, 22, 22 GFLOP/s, ``torch.mm`` with (K, N) weights 3.1, 2.7 and
    1.0 to 1024 (bf16: ~190 both ways). Models' projections are linears (the bulk of a transformer's FLOPs), so the
    rate is the linear layout's."""
    import torch
    cases = []
    for s in squares:
        a = torch.randn(s, s, device=pool.device).to(torch.float16)
        weights, copies = pool.weights("fp16", s, s)           # (N, K): a Linear's weight
        t = TensorType(DType.FP16, (s, s))
        c = op_cost(Op.DOT, [t, t], [t], {"lhs_contract": (1,), "rhs_contract": (1,)})
        cases.append(Case("matmul", "fp16", (s, s, s), c.flops, c.bytes, bound(_linear, a, weights), warmup=copies))
    return cases


def bandwidth_cases(device: str = "cpu", elements: tuple[int, ...] = ELEMENTS) -> list[Case]:
    """Eager elementwise add (reads two operands, writes a new output) and in-place copy, each size
    reading the first elements of the same two buffers."""
    import torch
    top = max(elements)
    a_all, b_all, out_all = torch.randn(top, device=device), torch.randn(top, device=device), \
        torch.empty(top, device=device)
    cases = []
    for n in elements:
        a, b, out = a_all[:n], b_all[:n], out_all[:n]
        vec = TensorType(DType.FP32, (n,))
        c = op_cost(Op.ADD, [vec, vec], [vec])
        cases.append(Case("add", "fp32", (n,), c.flops, c.bytes, bound(torch.add, a, b)))
        c = op_cost(Op.COPY, [vec], [vec])
        cases.append(Case("copy", "fp32", (n,), c.flops, c.bytes, bound(out.copy_, a)))
    return cases


#: (Cin, Cout, kernel, stride, pixels): ResNet-like direct convolutions, several per kernel size.
CONV_SHAPES = ((128, 512, 1, 1, 28), (320, 80, 1, 1, 20), (48, 192, 1, 1, 64),
               (96, 96, 3, 1, 40), (160, 160, 3, 2, 28), (48, 48, 3, 1, 80),
               (3, 64, 7, 2, 160), (3, 32, 7, 2, 192))


def call_next(make: Callable[[], Any], *args: Any) -> Any:
    """The next of ``make``'s modules (:func:`cold_copies`) on ``args``."""
    return make()(*args)


def conv_cases(device: str = "cpu", turns: int = 1) -> list[Case]:
    """Convolutions measured as a network runs them: one call per turn with no warm-up, weights
    cold, and on the CPU each right after an elementwise op wrote its input (the batch norm or
    activation that precedes a convolution in a network), timing the convolution alone. oneDNN's
    speed for one shape depends on what ran before it, and the calibration's turns used to run the
    convolutions one after another, which a network never does: fitted that way, ResNet-50's
    convolutions came out 11-29% slower than they ran in the network (2026-12-06, EPYC VM; +21% on
    the Xeon VM), and after this change 13-15%, the network 3-4% (``benchmarks/results/
    cpu_validate.md``). On single layers the effect depends on the shape and on the process's
    history: ``benchmarks/cpu_conv_context.py`` found 5 of 8 calibrated shapes 3-33% slower right
    after another convolution, 2 alike and one (48 -> 192, 1x1 at 64 px) 40% faster."""
    import torch
    cases = []
    f32 = DType.FP32
    for cin, cout, k, s, px in CONV_SHAPES:
        # cold_copies calls the factory before the loop moves on.
        convs = cold_copies(lambda: torch.nn.Conv2d(cin, cout, k, stride=s, padding=k // 2, bias=False)  # noqa: B023
                            .to(device).eval().requires_grad_(False), 4 * cin * cout * k * k)
        x = torch.randn(1, cin, px, px, device=device)
        out = (px + 2 * (k // 2) - k) // s + 1
        c = op_cost(Op.CONV, [TensorType(f32, (1, cin, px, px)), TensorType(f32, (cout, cin, k, k))],
                    [TensorType(f32, (1, cout, out, out))],
                    {"stride": (s, s), "padding": (k // 2, k // 2), "dilation": (1, 1), "groups": 1})
        on_cpu = device == "cpu"
        call = after_elementwise(convs, x) if on_cpu else bound(call_next, convs, x)
        cases.append(Case("conv", "fp32", (cin, cout, k, s, px), c.flops, c.bytes, call, warmup=0, max_calls=1,
                          turns=turns, self_timed=on_cpu))
    return cases


def after_elementwise(make: Callable[[], Any], x: Any) -> Callable[[], float]:
    """A self-timed call: a ReLU (``clamp_min``) writes ``x``'s values into the input buffer (as
    the op before a convolution in a network does), then the next of ``make``'s modules runs on it,
    timed alone (:func:`.timer.timed_call`, thread clock at one torch thread)."""
    import torch

    from .timer import _one_torch_thread, timed_call
    buffer = torch.empty_like(x)
    thread_clock = _one_torch_thread()

    def call() -> float:
        torch.clamp_min(x, 0.0, out=buffer)
        module = make()
        return timed_call(lambda: module(buffer), thread_clock)
    return call


def vector_op_cases(device: str = "cpu") -> list[Case]:
    """Norms, softmax, pooling and a depthwise convolution on cache-resident activations: input
    elements per second. Each turn runs on a new copy of the activation: one buffer's placement
    (which cache sets and pages it got) set a whole calibration's rate (a batch norm's turns read
    33 +- 1 us in one process, 49 +- 2 us in the next), and a network sees many placements."""
    import torch
    import torch.nn.functional as F
    x2 = torch.randn(512, 768, device=device)
    x3 = torch.randn(48, 128, 128, device=device)
    x4 = torch.randn(1, 64, 56, 56, device=device)
    xp = torch.randn(1, 64, 112, 112, device=device)
    w, b = torch.ones(768, device=device), torch.zeros(768, device=device)
    rm, rv = torch.zeros(64, device=device), torch.ones(64, device=device)
    wd = torch.randn(64, 1, 3, 3, device=device)      # a MobileNet-style 3x3 depthwise layer
    # name (a canonical op) -> (the call on the activation, the activation, the other tensors it reads)
    calls: dict[str, tuple[Callable[[Any], Any], Any, tuple[Any, ...]]] = {
        "layer_norm": (lambda x: F.layer_norm(x, (768,), w, b), x2, (w, b)),
        "softmax": (lambda x: torch.softmax(x, -1), x3, ()),
        "log_softmax": (lambda x: torch.log_softmax(x, -1), x3, ()),
        "batch_norm": (lambda x: F.batch_norm(x, rm, rv, training=False), x4, (rm, rv)),
        "group_norm": (lambda x: F.group_norm(x, 8), x4, ()),
        "pool": (lambda x: F.max_pool2d(x, 3, 2, 1), xp, ()),
        "reduce_mean": (lambda x: x.mean(-1), x3, ()),
        "reduce_sum": (lambda x: x.sum(-1), x3, ()),
        "cumsum": (lambda x: x.cumsum(-1), x3, ()),
        "conv_depthwise": (lambda x: F.conv2d(x, wd, padding=1, groups=64), x4, (wd,)),
    }
    cases = []
    for name, (fn, act, others) in calls.items():
        n = act.numel()   # the rate counts input elements per second
        attrs = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 64} \
            if name == "conv_depthwise" else {}
        op = Op.CONV if name == "conv_depthwise" else Op(name)
        with torch.no_grad():
            c = op_cost(op, [_fp32(r) for r in (act, *others)], [_fp32(fn(act))], attrs)
        cases.append(Case(f"vector_op:{name}", "fp32", (n,), n, c.bytes, bound(fn, act), setup=_copies(fn, act)))
    return cases


def _copies(fn: Callable[[Any], Any], act: Any) -> Callable[[], Callable[[], object]]:
    """A set-up that gives each turn ``fn`` on a new copy of ``act`` (made before the last copy is
    freed, so it takes another buffer)."""
    held: list[Any] = [act]

    def setup() -> Callable[[], object]:
        copy = act.clone()
        held[0] = copy
        return bound(fn, copy)
    return setup


#: (batch, heads, tokens, head dim) of the fused-attention measurements: encoder and decoder
#: prompts, ViT's 197 patches, Swin's 7x7 windows, longer sequences.
ATTENTION_SHAPES = ((1, 12, 128, 64), (8, 12, 128, 64), (1, 12, 197, 64), (64, 3, 49, 32), (1, 12, 512, 64),
                    (1, 8, 1024, 64))


def attention_cases(device: str = "cpu") -> list[Case]:
    """``scaled_dot_product_attention`` (not causal) at each shape: the eager fused kernel, softmax
    included, by key length."""
    import torch
    import torch.nn.functional as F
    cases = []
    for b, h, s, d in ATTENTION_SHAPES:
        q, k, v = (torch.randn(b, h, s, d, device=device) for _ in range(3))
        qt = TensorType(DType.FP32, (b, h, s, d))
        c = op_cost(Op.ATTENTION, [qt, qt, qt], [qt])
        cases.append(Case("attention", "fp32", (b, h, s, d), c.flops, c.bytes,
                          bound(F.scaled_dot_product_attention, q, k, v)))
    return cases


#: Buffer sizes (bytes) for the fresh-page measurement: above any glibc mmap threshold (<= 32 MiB).
FRESH_BYTES = (64 * 2**20, 128 * 2**20)


def fresh_page_cases(device: str = "cpu", sizes: tuple[int, ...] = FRESH_BYTES) -> list[Case]:
    """Filling a buffer just mapped from the OS (an anonymous ``mmap`` seen as a tensor: every page
    faults in and is zeroed on first touch) and filling one already mapped, at each size: the
    difference over the bytes is the fresh-page rate (:mod:`narrowpipe.costmodel.execution.fresh_pages`).
    The mapping is explicit because ``torch.empty`` of the same size may be served from a hole an
    earlier sweep's frees left in the heap, already mapped. Nothing where the OS has no anonymous
    private mappings (not a Unix)."""
    import mmap
    if not hasattr(mmap, "MAP_ANONYMOUS"):
        return []

    import torch
    cases = []
    for nbytes in sizes:
        n = nbytes // 4
        mapped = torch.empty(n, device=device)
        cases.append(Case("fill", "fp32", (n,), 0, nbytes, bound(mapped.fill_, 1.0)))
        cases.append(Case("fresh_fill", "fp32", (n,), 0, nbytes, bound(_fill_fresh, nbytes)))
    return cases


def _fill_fresh(nbytes: int) -> None:
    import mmap

    import torch
    with mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as m:   # as malloc maps
        t = torch.frombuffer(m, dtype=torch.float32)
        t.fill_(1.0)
        del t


#: torch function for each transcendental the cost model knows a rate for.
TRANSCENDENTAL_FNS = ("exp", "log", "tanh", "sigmoid", "erf", "gelu", "silu", "sqrt", "rsqrt", "sin", "cos")


def transcendental_cases(device: str = "cpu", n: int = 1 << 18) -> list[Case]:
    """Each function on ``n`` cache-resident elements: evaluations per second."""
    import torch
    fns: dict[str, Callable[..., Any]] = {"gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}
    x = torch.rand(n, device=device) + 0.5
    cases = []
    for name in TRANSCENDENTAL_FNS:
        fn = fns.get(name) or getattr(torch, name)
        c = op_cost(Op(name), [_fp32(x)], [_fp32(x)])
        cases.append(Case(f"transcendental:{name}", "fp32", (n,), c.transcendentals, c.bytes, bound(fn, x)))
    return cases

