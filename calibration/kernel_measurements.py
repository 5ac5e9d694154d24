"""Per-kernel measurements (one GEMM or convolution each) as data: the file format, and the one-op
graph each row describes, so published kernel timings and a user's own can be predicted and fitted.

A kernel measurements file is CSV with a header row and these columns (``#`` lines are comments):

* ``source``: a key naming where the row comes from (``benchmarks/data/README.md`` lists ours);
* ``chip``: the catalog target (name or alias) it was measured on;
* ``kind``: ``gemm``, ``conv_fwd``, ``conv_bwd_data`` or ``conv_bwd_filter``, or a norm or
  elementwise kind of :mod:`.vector_measurements` (its shape words and ``algo`` structures there);
* ``dtype``: ``fp32``, ``tf32`` (fp32 operands on TF32/XF32 units), ``bf16`` or ``fp16``;
* ``shape``: ``key=value`` words. A GEMM: ``b m n k`` (``b`` batched GEMMs of ``m x k`` by
  ``k x n``). A convolution (NCHW, the forward problem also for its backward passes):
  ``n c h w k r s`` (``k`` output channels, ``r x s`` filter) plus ``ph pw sh sw`` (padding,
  stride) and optionally ``g`` (groups). A GEMM may add its operands' storage as column-major BLAS
  op flags, ``ta=N|T tb=N|T`` (both or neither: cuBLAS's and rocBLAS's ``transa``/``transb`` of
  ``C = op(A) op(B)``; ``ta=N``: A stored M-contiguous, ``T``: K-contiguous; ``tb=N``: B stored
  K-contiguous, ``T``: N-contiguous), which the graph carries as the DOT's ``operand_major``; the
  flags are not part of the shape the held-out split hashes, so both layouts of a problem fall in
  the same half;
* ``measured_us``: the measured time in microseconds;
* ``timing``: what the time includes: ``kernel`` (device time of the kernel alone, a profiler's
  kernel duration), ``stream`` (the average of back-to-back launches on one stream, launch gap
  included: what narrowpipe predicts), ``host`` (wall time per call, the framework's dispatch
  included) or ``call`` (device time of one call between events with the L2 flushed before it,
  Triton's ``do_bench``: the call's launches plus a per-call harness overhead fitted on the fit rows);
* ``algo``, ``ref``: optional: the algorithm the library reported, and where in the source the row is.

Two row properties are not columns: the algorithm a benchmark harness *forced* (``forced_algo``) and
the channel multiple it padded the problem to before timing (``channel_multiple``); they come from
the harness's rules (:mod:`.harness_algos`), not from the library.
"""

from __future__ import annotations

import csv
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import NarrowpipeError
from ..ir import OPERAND_MAJOR, DType, Graph, Op, TensorType, ValueKind
from .vector_measurements import SHAPE_KEYS as _VECTOR_KEYS
from .vector_measurements import VECTOR_KINDS, check_vector_row, vector_graph

__all__ = ["KernelMeasurement", "read_kernel_measurements", "kernel_graph", "conv_output_hw", "KINDS", "TIMINGS",
           "COLUMNS"]

KINDS = ("gemm", "conv_fwd", "conv_bwd_data", "conv_bwd_filter", *VECTOR_KINDS)
TIMINGS = ("kernel", "stream", "host", "call")
COLUMNS = ("source", "chip", "kind", "dtype", "shape", "measured_us", "timing")
_DTYPES = {"fp32": DType.FP32, "tf32": DType.FP32, "bf16": DType.BF16, "fp16": DType.FP16}
_GEMM_KEYS = ("b", "m", "n", "k")
_CONV_KEYS = ("n", "c", "h", "w", "k", "r", "s")


@dataclass(frozen=True)
class KernelMeasurement:
    source: str
    chip: str
    kind: str
    dtype: str
    shape: Mapping[str, int]
    seconds: float
    timing: str
    algo: str = ""
    ref: str = ""
    forced_algo: str = ""       # the convolution algorithm the harness forced (not the library's pick)
    channel_multiple: int = 1   # the harness timed C and K padded up to this multiple
    layout: str = ""            # a GEMM's BLAS op flags ta + tb ("NN", "TN", ...); "": not stated

    @property
    def shape_text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.shape.items())

    @property
    def allow_tf32(self) -> bool:
        return self.dtype == "tf32"

    @property
    def flops(self) -> int:
        """2 per multiply-add of the forward problem (each backward pass does as many); 0 for the
        norms and elementwise kinds (memory-bound: their work is counted by the cost rules)."""
        s = self.shape
        if self.kind in VECTOR_KINDS:
            return 0
        if self.kind == "gemm":
            return 2 * s["b"] * s["m"] * s["n"] * s["k"]
        p, q = conv_output_hw(s)
        return 2 * s["n"] * s["k"] * (s["c"] // s.get("g", 1)) * s["r"] * s["s"] * p * q

    def held_out(self, modulus: int = 2) -> bool:
        """The fixed split: a row is held out when a hash of its kind and shape (not its chip, time
        or source) is odd, so the same problem is held out on every chip."""
        digest = hashlib.sha1(f"{self.kind} {self.shape_text}".encode()).hexdigest()
        return int(digest, 16) % modulus == 1


def conv_output_hw(s: Mapping[str, int]) -> tuple[int, int]:
    p = (s["h"] + 2 * s.get("ph", 0) - s["r"]) // s.get("sh", 1) + 1
    q = (s["w"] + 2 * s.get("pw", 0) - s["s"]) // s.get("sw", 1) + 1
    return p, q


def _parse_shape(text: str, kind: str, where: str) -> tuple[dict[str, int], str]:
    """The shape's integer words, and a GEMM's BLAS op flags ``ta + tb`` (\"\" when not stated)."""
    out: dict[str, int] = {}
    flags: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if not sep:
            raise NarrowpipeError(f"{where}: shape word {word!r} is not key=value")
        if key in out or key in flags:     # two values for one dimension: which was measured?
            raise NarrowpipeError(f"{where}: shape word {key!r} is given twice")
        if key in ("ta", "tb"):            # the operands' storage, as column-major BLAS op flags
            if kind != "gemm" or value not in ("N", "T"):
                raise NarrowpipeError(f"{where}: {word!r}: operand flags are N or T, on gemm rows only")
            flags[key] = value
            continue
        try:
            out[key] = int(value)
        except ValueError:
            raise NarrowpipeError(f"{where}: shape {key}={value!r} is not an integer") from None
        if out[key] < (0 if key in ("ph", "pw", "causal") else 1):
            raise NarrowpipeError(f"{where}: shape {key}={value} is out of range")
    needed = _GEMM_KEYS if kind == "gemm" else _VECTOR_KEYS.get(kind, _CONV_KEYS)
    missing = [k for k in needed if k not in out]
    if missing:
        raise NarrowpipeError(f"{where}: a {kind} shape needs {', '.join(missing)}")
    if kind.startswith("conv") and min(conv_output_hw(out)) < 1:
        raise NarrowpipeError(f"{where}: the filter does not fit the padded input")
    if len(flags) == 1:
        raise NarrowpipeError(f"{where}: a GEMM states both operand flags (ta and tb) or neither")
    return out, "".join(flags[k] for k in ("ta", "tb") if k in flags)


def read_kernel_measurements(path: str | Path) -> list[KernelMeasurement]:
    """Rows of a kernel measurements file; a bad row is an error naming the file, line and reason."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise NarrowpipeError(f"{p}: cannot read the kernel measurements file ({exc.strerror})") from None
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.DictReader(lines)
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise NarrowpipeError(f"{p}: not a kernel measurements file (no column {', '.join(missing)})")
    rows = []
    for i, r in enumerate(reader, start=2):
        where = f"{p}, data line {i}"
        short = [c for c in COLUMNS if r.get(c) is None]      # csv fills a short row's last fields with None
        if short:
            raise NarrowpipeError(f"{where}: missing {', '.join(short)} (the row has fewer fields than the header)")
        kind, dtype, timing = r["kind"].strip(), r["dtype"].strip(), r["timing"].strip()
        if kind not in KINDS:
            raise NarrowpipeError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
        if dtype not in _DTYPES:
            raise NarrowpipeError(f"{where}: dtype {dtype!r} is not one of {', '.join(_DTYPES)}")
        if timing not in TIMINGS:
            raise NarrowpipeError(f"{where}: timing {timing!r} is not one of {', '.join(TIMINGS)}")
        try:
            us = float(r["measured_us"])
        except ValueError:
            raise NarrowpipeError(f"{where}: measured_us {r['measured_us']!r} is not a number") from None
        if not (us > 0 and math.isfinite(us)):
            raise NarrowpipeError(f"{where}: measured_us must be a positive, finite number, got {us}")
        (shape, layout), algo = _parse_shape(r["shape"], kind, where), (r.get("algo") or "").strip()
        if kind in VECTOR_KINDS:
            check_vector_row(kind, shape, algo, where)
        rows.append(KernelMeasurement(r["source"].strip(), r["chip"].strip(), kind, dtype, shape, us * 1e-6, timing,
                                      algo, (r.get("ref") or "").strip(), layout=layout))
    return rows


def kernel_graph(m: KernelMeasurement) -> Graph:
    """The one-op graph of a measured kernel (a DOT or a CONV in the role of its pass)."""
    dt = _DTYPES[m.dtype]
    if m.kind in VECTOR_KINDS:
        return vector_graph(m, dt)
    s = m.shape
    g = Graph(f"{m.kind} {m.shape_text}")
    if m.kind == "gemm":
        b, mm, n, k = (s[x] for x in _GEMM_KEYS)
        # BLAS op flags -> which dim of each logical operand is unit-stride (ir.ops: operand_major)
        major = {OPERAND_MAJOR: ("k" if m.layout[0] == "T" else "mn", "mn" if m.layout[1] == "T" else "k")} \
            if m.layout else {}
        if b == 1:
            a = g.add_input("a", TensorType(dt, (mm, k)))
            w = g.add_input("w", TensorType(dt, (k, n)), ValueKind.PARAM)
            out = g.add_node(Op.DOT, [a, w], [TensorType(dt, (mm, n))],
                             {"lhs_contract": (1,), "rhs_contract": (0,), **major})
        else:
            a = g.add_input("a", TensorType(dt, (b, mm, k)))
            w = g.add_input("w", TensorType(dt, (b, k, n)))
            batched = {"lhs_contract": (2,), "rhs_contract": (1,), "lhs_batch": (0,), "rhs_batch": (0,), **major}
            out = g.add_node(Op.DOT, [a, w], [TensorType(dt, (b, mm, n))], batched)
        g.set_outputs(out.outputs)
        return g
    n, c, h, w_, k, r, s_ = (s[x] for x in _CONV_KEYS)
    c, k = (-(-v // m.channel_multiple) * m.channel_multiple for v in (c, k))   # what the harness ran
    groups = s.get("g", 1)
    p, q = conv_output_hw(s)
    attrs = {"stride": (s.get("sh", 1), s.get("sw", 1)), "padding": (s.get("ph", 0), s.get("pw", 0)),
             "dilation": (1, 1), "groups": groups, "output_padding": (0, 0),
             **({"forced_algo": m.forced_algo} if m.forced_algo else {})}
    x_t, w_t, y_t = (TensorType(dt, (n, c, h, w_)), TensorType(dt, (k, c // groups, r, s_)),
                     TensorType(dt, (n, k, p, q)))
    if m.kind == "conv_fwd":
        x, wv = g.add_input("x", x_t), g.add_input("w", w_t, ValueKind.PARAM)
        node = g.add_node(Op.CONV, [x, wv], [y_t], {**attrs, "transposed": False})
    elif m.kind == "conv_bwd_data":
        dy, wv = g.add_input("grad_out", y_t), g.add_input("w", w_t, ValueKind.PARAM)
        node = g.add_node(Op.CONV, [dy, wv], [x_t], {**attrs, "transposed": True, "role": "grad_input"})
    else:
        x, dy = g.add_input("x", x_t), g.add_input("grad_out", y_t)
        node = g.add_node(Op.CONV, [x, dy], [w_t], {**attrs, "transposed": False, "role": "grad_weight"})
    g.set_outputs(node.outputs)
    return g
