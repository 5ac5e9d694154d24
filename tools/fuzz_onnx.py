"""Fuzz the ONNX frontend: mutate real ONNX files and check that loading them never raises anything
but a ``NarrowpipeError`` (and never hangs or kills the process).

Two kinds of mutation, both reproducible from a seed:

* byte level: flip bits, truncate, splice in random bytes, zero or duplicate a run of bytes;
* field level: parse the model and break one thing an author or a broken tool could break (drop or
  rename an input, swap nodes into a cycle, make a dim negative or absurd, change an element type,
  an attribute, an op type, a domain or an opset version, shrink an initializer's payload, point
  it at external data, remove a graph output, nest garbage in a subgraph...).

    python tools/fuzz_onnx.py                        # 2,000 cases over ONNX's test models, seed 0
    python tools/fuzz_onnx.py --cases 20000 --seed 7 --seconds 600
    python tools/fuzz_onnx.py model.onnx other.onnx  # fuzz your own files

Each case runs ``narrowpipe.load`` then ``narrowpipe.analyze`` (with every symbolic dim bound to
2). A case that raises anything else, or takes longer than ``--case-timeout`` seconds, is printed
with its seed so it can be replayed with ``--replay SEED``.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import onnx
from onnx import AttributeProto, ModelProto, TensorProto

__all__ = ["default_corpus", "mutate_bytes", "mutate_fields", "run_case", "fuzz", "Finding"]


def default_corpus(limit: int | None = None) -> list[str]:
    """ONNX's own test models (light networks and the pytorch-converted/operator/simple sets)."""
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    files = sorted(glob.glob(os.path.join(data, "light", "*.onnx")))
    files += sorted(glob.glob(os.path.join(data, "*", "*", "model.onnx")))
    return files[:limit] if limit else files


# -- byte-level mutations ---------------------------------------------------------------------

def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    b = bytearray(data)
    kind = rng.randrange(6)
    if kind == 0:  # flip a few bits
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncate
        del b[rng.randrange(len(b)):]
    elif kind == 2:  # splice random bytes
        i = rng.randrange(len(b))
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
    elif kind == 3:  # zero a run
        i = rng.randrange(len(b))
        n = rng.randint(1, 64)
        b[i:i + n] = bytes(min(n, len(b) - i))
    elif kind == 4:  # duplicate a run
        i = rng.randrange(len(b))
        n = rng.randint(1, 256)
        b[i:i] = b[i:i + n]
    else:  # random bytes entirely
        b = bytearray(rng.randrange(256) for _ in range(rng.randint(1, 512)))
    return bytes(b)


# -- field-level mutations --------------------------------------------------------------------

def _pick(rng: random.Random, seq):  # noqa: ANN001, ANN202 - any repeated field
    return seq[rng.randrange(len(seq))] if len(seq) else None


def _all_graphs(model: ModelProto) -> list[onnx.GraphProto]:
    out, stack = [], [model.graph]
    while stack:
        g = stack.pop()
        out.append(g)
        for n in g.node:
            for a in n.attribute:
                if a.type == AttributeProto.GRAPH:
                    stack.append(a.g)
                stack.extend(a.graphs)
    return out


def _dims(model: ModelProto) -> list[onnx.TensorShapeProto.Dimension]:
    dims = []
    for g in _all_graphs(model):
        for vi in (*g.input, *g.output, *g.value_info):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                dims.extend(vi.type.tensor_type.shape.dim)
    return dims


_ABSURD = [-1, -7, 0, 1, 2**31, 2**40 + 1, 2**62, 3]


def _mutate_node(node: onnx.NodeProto, graph: onnx.GraphProto, rng: random.Random) -> None:
    k = rng.randrange(9)
    if k == 0 and node.input:
        node.input[rng.randrange(len(node.input))] = rng.choice(
            ["", "no_such_value", node.output[0] if node.output else "x"])
    elif k == 1 and node.input:
        del node.input[rng.randrange(len(node.input))]
    elif k == 2:
        node.input.append(rng.choice(["", "no_such_value", *[i.name for i in graph.input]]))
    elif k == 3:
        node.op_type = rng.choice(["", "NoSuchOp", "Conv", "MatMul", "Reshape", "If", "Loop", "Attention",
                                   "Einsum", "Resize", "Split", "Gather", node.op_type.lower()])
    elif k == 4:
        node.domain = rng.choice(["com.example.unknown", "com.microsoft", "ai.onnx.ml", "ai.onnx"])
    elif k == 5 and node.attribute:
        a = _pick(rng, node.attribute)
        if a.type == AttributeProto.INT:
            a.i = rng.choice(_ABSURD)
        elif a.type == AttributeProto.INTS:
            a.ClearField("ints")
            a.ints.extend(rng.choice(_ABSURD) for _ in range(rng.randint(0, 6)))
        elif a.type == AttributeProto.FLOAT:
            a.f = rng.choice([float("nan"), float("inf"), -1.0, 1e30])
        elif a.type == AttributeProto.STRING:
            a.s = rng.choice([b"", b"\xff\xfe", b"NOTSET", b"SAME_UPPER", b"garbage"])
        else:
            a.type = rng.choice([AttributeProto.INT, AttributeProto.FLOATS, AttributeProto.STRING])
    elif k == 6 and node.attribute:
        del node.attribute[rng.randrange(len(node.attribute))]
    elif k == 7:
        node.attribute.add().CopyFrom(onnx.helper.make_attribute(rng.choice(["axis", "perm", "kernel_shape", "to",
                                                                              "equation", "group"]),
                                                                 rng.choice([7, [1, 0, -3], "ij->", 2**40])))
    elif node.output:
        node.output[0] = rng.choice(["", node.input[0] if node.input else "loop", "dup"])


def mutate_fields(model: ModelProto, rng: random.Random) -> ModelProto:
    """A copy of ``model`` with one structural fault."""
    m = ModelProto()
    m.CopyFrom(model)
    graphs = _all_graphs(m)
    g = rng.choice(graphs)
    k = rng.randrange(14)
    if k <= 3 and g.node:
        _mutate_node(_pick(rng, g.node), g, rng)
    elif k == 4 and len(g.node) > 1:  # reorder: a use before its definition, or a cycle
        i, j = sorted(rng.sample(range(len(g.node)), 2))
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(g.node[i])
        b.CopyFrom(g.node[j])
        g.node[i].CopyFrom(b)
        g.node[j].CopyFrom(a)
        if rng.random() < 0.5 and g.node[i].input and g.node[j].output:
            g.node[i].input[0] = g.node[j].output[0]  # a cycle
    elif k == 5 and _dims(m):
        d = rng.choice(_dims(m))
        if rng.random() < 0.7:
            d.dim_value = rng.choice(_ABSURD)
        else:
            d.dim_param = rng.choice(["", "batch", "N/A", "max", "2*x + (", "unk__0", "a" * 300])
    elif k == 6:
        vis = [vi for gg in graphs for vi in (*gg.input, *gg.output, *gg.value_info)]
        if vis:
            vi = rng.choice(vis)
            if rng.random() < 0.5:
                vi.type.tensor_type.elem_type = rng.choice([0, 8, 13, 99, 28, 2])
            else:
                vi.type.Clear()
    elif k == 7 and g.initializer:
        t = _pick(rng, g.initializer)
        choice = rng.randrange(5)
        if choice == 0 and t.dims:
            t.dims[rng.randrange(len(t.dims))] = rng.choice(_ABSURD)
        elif choice == 1:
            t.data_type = rng.choice([0, 8, 99, 16, 21])
        elif choice == 2 and t.raw_data:
            t.raw_data = t.raw_data[: rng.randrange(len(t.raw_data))]
        elif choice == 3:
            t.data_location = TensorProto.EXTERNAL
            e = t.external_data.add()
            e.key, e.value = "location", rng.choice(["../../etc/passwd", "missing.bin", "/dev/zero"])
        else:
            t.name = ""
    elif k == 8:
        o = m.opset_import[0] if m.opset_import else m.opset_import.add()
        o.version = rng.choice([0, 1, 6, 99, 10**6])
        if rng.random() < 0.3:
            o.domain = "com.example.unknown"
    elif k == 9:
        m.ir_version = rng.choice([0, 1, 99, -1 & 0x7FFFFFFF])
    elif k == 10 and g.output:
        if rng.random() < 0.5:
            del g.output[rng.randrange(len(g.output))]
        else:
            g.output[0].name = "no_such_value"
    elif k == 11 and g.input:
        del g.input[rng.randrange(len(g.input))]
    elif k == 12 and g.node:  # duplicate a node (its outputs get defined twice)
        g.node.append(_pick(rng, g.node))
    else:  # nest garbage: a subgraph attribute with random content
        if g.node:
            n = _pick(rng, g.node)
            sub = onnx.helper.make_graph([onnx.helper.make_node("Relu", ["zz"], ["yy"])], "garbage", [], [])
            n.attribute.add().CopyFrom(onnx.helper.make_attribute("then_branch", sub))
    return m


# -- running ------------------------------------------------------------------------------------

@dataclass
class Finding:
    seed: int
    source: str
    kind: str          # "crash" or "slow"
    detail: str


def run_case(data: bytes, directory: str, *, timeout: float = 30.0) -> tuple[str, float, str]:
    """Load and analyze one candidate file: ("ok" | error class | "CRASH"), seconds, detail."""
    import narrowpipe
    from narrowpipe.errors import NarrowpipeError
    path = os.path.join(directory, "case.onnx")
    with open(path, "wb") as fh:
        fh.write(data)
    t = time.perf_counter()
    try:
        graph = narrowpipe.load(path)
        dims = {name: 2 for name in graph.symbols() | set(graph.dims)}
        narrowpipe.analyze(graph, **dims)
        outcome, detail = "ok", ""
    except NarrowpipeError as exc:
        outcome, detail = type(exc).__name__, str(exc)[:200]
    except Exception as exc:  # what the fuzzer looks for
        outcome, detail = "CRASH", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-4)}"
    return outcome, time.perf_counter() - t, detail


def fuzz(files: list[str], cases: int, seed: int, seconds: float | None = None, *,
         case_timeout: float = 30.0, log: Callable[[str], None] | None = None) -> tuple[Counter, list[Finding]]:
    """``cases`` mutations (half byte-level, half field-level), stopping early after ``seconds``."""
    originals = {f: open(f, "rb").read() for f in files}
    parsed: dict[str, ModelProto] = {}
    outcomes: Counter = Counter()
    findings: list[Finding] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        for i in range(cases):
            if seconds is not None and time.perf_counter() - start > seconds:
                break
            case_seed = seed * 1_000_003 + i
            rng = random.Random(case_seed)
            src = rng.choice(files)
            if rng.random() < 0.5:
                data = mutate_bytes(originals[src], rng)
            else:
                if src not in parsed:
                    parsed[src] = onnx.load_model_from_string(originals[src])
                data = mutate_fields(parsed[src], rng).SerializeToString()
            outcome, took, detail = run_case(data, d, timeout=case_timeout)
            outcomes[outcome] += 1
            if outcome == "CRASH":
                findings.append(Finding(case_seed, src, "crash", detail))
            elif took > case_timeout:
                findings.append(Finding(case_seed, src, "slow", f"{took:.1f} s"))
            if log and findings and findings[-1].seed == case_seed:
                log(f"seed {case_seed} ({os.path.basename(src)}): {findings[-1].kind}: {findings[-1].detail}")
    return outcomes, findings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="ONNX files to mutate (default: ONNX's own test models)")
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=None, help="stop after this long")
    ap.add_argument("--case-timeout", type=float, default=30.0, help="report cases slower than this")
    ap.add_argument("--replay", type=int, default=None, help="rerun one case seed and print its outcome")
    args = ap.parse_args(argv)
    files = args.files or default_corpus()
    if args.replay is not None:
        rng = random.Random(args.replay)
        src = rng.choice(files)
        raw = open(src, "rb").read()
        data = mutate_bytes(raw, rng) if rng.random() < 0.5 else \
            mutate_fields(onnx.load_model_from_string(raw), rng).SerializeToString()
        with tempfile.TemporaryDirectory() as d:
            print(src, *run_case(data, d))
        return 0
    t = time.perf_counter()
    outcomes, findings = fuzz(files, args.cases, args.seed, args.seconds, case_timeout=args.case_timeout, log=print)
    total = sum(outcomes.values())
    print(f"{total} cases in {time.perf_counter() - t:.1f} s over {len(files)} files: {dict(outcomes)}")
    print(f"{len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
