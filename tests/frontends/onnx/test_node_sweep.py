"""ONNX's own conformance models (built by the wheel's generator) and its real-network test
models all go through ``narrowpipe.load``; failures are always a NarrowpipeError with a reason."""

from __future__ import annotations

import glob
import os
from collections import Counter

import numpy as np
import onnx
import pytest

import narrowpipe
from narrowpipe.errors import NarrowpipeError

import onnx_node_sweep  # noqa: E402  (benchmarks/, put on the path by conftest)

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


@pytest.mark.slow
def test_every_node_test_model_loads_or_fails_cleanly() -> None:
    results = onnx_node_sweep.sweep()
    assert len(results) >= 1800
    ok = sum(r.ok for r in results)
    crashes = [f"{r.name}: {r.error}" for r in results if not r.ok and r.error.startswith("CRASH")]
    assert not crashes, "\n".join(crashes)
    # a lowering that promises types it does not compute is a bug, not an unsupported model
    unverified = [f"{r.name}: {r.error}" for r in results if r.error.startswith("VerificationError")]
    assert not unverified, "\n".join(unverified)
    for r in results:
        if not r.ok:
            kind, _, reason = r.error.partition(": ")
            assert kind.endswith("Error") and len(reason) > 20, r.error
    # 1,870 of 1,884 with onnx 1.23 (the rest in results/onnx_node_sweep.md); 0.97 let a 1.4-point
    # regression (declared sizes after run-time axes read as edited files) pass unseen
    assert ok / len(results) >= 0.99, f"{ok}/{len(results)} loaded"
    # op types with a cost rule: lowered to canonical ops that all have rules (not "unknown")
    op_types = {op for r in results for op in r.op_types}
    unmodeled = {op for r in results for op in r.unmodeled}
    unmodeled = {u.split("::", 1)[1] if u.startswith("ai.onnx::") else u for u in unmodeled}
    modeled = op_types - unmodeled
    assert len(op_types) >= 195
    assert len(modeled) / len(op_types) >= 0.95, sorted(op_types - modeled)


def _data_files() -> list[str]:
    return sorted(glob.glob(os.path.join(DATA, "light", "*.onnx")) +
                  glob.glob(os.path.join(DATA, "*", "*", "model.onnx")))


def _bindings(path: str, graph: narrowpipe.Graph) -> dict[str, int]:
    """Symbolic input dims bound to the sizes of the test's own input data (as --set would)."""
    from onnx import numpy_helper
    d = os.path.join(os.path.dirname(path), "test_data_set_0")
    model = onnx.load(path, load_external_data=False)
    names = [i.name for i in model.graph.input]
    out: dict[str, int] = {}
    for k, name in enumerate(names):
        pb = os.path.join(d, f"input_{k}.pb")
        if not os.path.exists(pb):
            continue
        data = open(pb, "rb").read()
        try:
            seq = onnx.SequenceProto.FromString(data)
            shape = (len(seq.tensor_values), *numpy_helper.to_array(seq.tensor_values[0]).shape) \
                if seq.tensor_values else None
        except Exception:
            seq, shape = None, None
        if shape is None:
            shape = numpy_helper.to_array(onnx.TensorProto.FromString(data)).shape
        v = next((v for v in graph.inputs if v.source_name == name), None)
        for dim, size in zip(v.type.shape if v is not None else (), shape):
            if not isinstance(dim, int) and dim.symbols == {dim.expr}:
                out.setdefault(dim.expr, max(int(size), 1))   # an empty test input: dims are >= 1
    return out


@pytest.mark.slow
def test_real_network_test_models_load_and_analyze() -> None:
    files = _data_files()
    assert len(files) > 100
    failures = []
    for path in files:
        try:
            graph = narrowpipe.load(path)
            narrowpipe.analyze(graph, dims=_bindings(path, graph))
        except NarrowpipeError as exc:
            failures.append(f"{os.path.relpath(path, DATA)}: {exc}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name,flops", [("light_resnet50", 8_178_368_512), ("light_vgg19", 39_264_124_928)])
def test_light_networks_have_the_known_flops(name: str, flops: int) -> None:
    """ResNet-50 at 224x224 is 4.09 GMACs of convolution and FC; VGG-19 is 19.6 GMACs."""
    report = narrowpipe.analyze(narrowpipe.load(os.path.join(DATA, "light", f"{name}.onnx")))
    assert report.modeled_flops == flops
    assert Counter(r.group for r in report.ops)["convolution"] > 10
    assert np.isfinite(report.flops)
