"""Typing node by node (``frontends/onnx/lazy_types.py``) gives exactly what whole-model inference
gives, and the frontend falls back to whole-model inference wherever it could not.

Reference: the whole-model path (``frontend.TYPING = "full"``, what the frontend did before) on
the same model, compared as whole graphs (every node, value name, type and attribute); FLOPs are
also checked against a hand count of the matmuls.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.errors import NarrowpipeError
from narrowpipe.frontends.onnx import frontend, node_infer, shapes
from narrowpipe.frontends.onnx.lazy_types import NeedsInference
from narrowpipe.ir import DType, Sym
from narrowpipe.ir.serialize import graph_to_dict

F, I64 = TensorProto.FLOAT, TensorProto.INT64


@contextmanager
def _typing(value: str) -> Iterator[None]:
    old = frontend.TYPING
    frontend.TYPING = value
    try:
        yield
    finally:
        frontend.TYPING = old


def _lower(model: Any, typing: str) -> dict[str, Any] | tuple[str, str]:
    """The graph as a dict (without inference's diagnostic notes), or the error it raised."""
    with _typing(typing):
        try:
            d = graph_to_dict(narrowpipe.load(model))
        except NarrowpipeError as exc:
            return type(exc).__name__, str(exc)
    d["meta"].pop("shape_inference_notes", None)
    return d


@pytest.fixture
def inference_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times the frontend ran ONNX's whole-model inference."""
    calls: list[int] = []
    real = shapes.run_inference

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(frontend, "run_inference", spy)
    yield calls


def _blocks(n: int, hidden: int = 16, out_shape: list[Any] | None = None) -> onnx.ModelProto:
    """``n`` blocks of matmul, bias, relu, head split/merge, softmax, residual and layer norm over
    a symbolic batch, with distinct weights per block (the benchmark's graph, smaller)."""
    inits = [numpy_helper.from_array(np.full(hidden, 0.1, np.float32), "bias"),
             numpy_helper.from_array(np.array([0, 0, 2, hidden // 2], np.int64), "heads"),
             numpy_helper.from_array(np.array([0, 0, hidden], np.int64), "merge")]
    nodes = []
    x = "x"
    rng = np.random.default_rng(0)
    for i in range(n):
        p = f"b{i}"
        inits += [numpy_helper.from_array(rng.standard_normal((hidden, hidden)).astype(np.float32), f"{p}.w"),
                  numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), f"{p}.g")]
        nodes += [
            helper.make_node("MatMul", [x, f"{p}.w"], [f"{p}.h"], name=f"{p}/mm"),
            helper.make_node("Add", [f"{p}.h", "bias"], [f"{p}.hb"], name=f"{p}/bias"),
            helper.make_node("Relu", [f"{p}.hb"], [f"{p}.a"], name=f"{p}/relu"),
            helper.make_node("Reshape", [f"{p}.a", "heads"], [f"{p}.r"], name=f"{p}/split"),
            helper.make_node("Transpose", [f"{p}.r"], [f"{p}.t"], perm=[0, 2, 1, 3], name=f"{p}/to_bhsd"),
            helper.make_node("Softmax", [f"{p}.t"], [f"{p}.s"], axis=-1, name=f"{p}/softmax"),
            helper.make_node("Transpose", [f"{p}.s"], [f"{p}.u"], perm=[0, 2, 1, 3], name=f"{p}/to_bshd"),
            helper.make_node("Reshape", [f"{p}.u", "merge"], [f"{p}.m"], name=f"{p}/merge"),
            helper.make_node("Add", [f"{p}.m", x], [f"{p}.res"], name=f"{p}/residual"),
            helper.make_node("LayerNormalization", [f"{p}.res", f"{p}.g"], [f"{p}.y"], axis=-1, name=f"{p}/ln"),
        ]
        x = f"{p}.y"
    graph = helper.make_graph(nodes, "blocks", [helper.make_tensor_value_info("x", F, ["batch", 8, hidden])],
                              [helper.make_tensor_value_info(x, F, out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_repeated_blocks_are_typed_without_whole_model_inference(inference_calls: list[int]) -> None:
    model = _blocks(30)
    lazy = _lower(model, "auto")
    assert not inference_calls
    assert lazy == _lower(model, "full")
    assert inference_calls
    report = narrowpipe.analyze(narrowpipe.load(model), batch=3)
    assert report.flops_by_group["contraction"] == 30 * 2 * 3 * 8 * 16 * 16   # 2*M*K*N per matmul, by hand


def test_declared_output_types_are_checked_like_inference_merges_them(inference_calls: list[int]) -> None:
    agrees = _blocks(3, out_shape=["batch", 8, "hidden_out"])   # a name of its own: takes the computed 16
    assert _lower(agrees, "auto") == _lower(agrees, "full")
    assert len(inference_calls) == 1   # only the "full" lowering
    differs = _blocks(3, out_shape=["batch", 8, 99])
    with _typing("lazy"), pytest.raises(NarrowpipeError, match=NeedsInference.__name__):
        narrowpipe.load(differs)
    assert _lower(differs, "auto") == _lower(differs, "full")


def test_models_with_declared_intermediate_types_use_whole_model_inference(inference_calls: list[int]) -> None:
    model = _blocks(2)
    model.graph.value_info.append(helper.make_tensor_value_info("b0.h", F, ["batch", 8, 16]))
    assert _lower(model, "auto") == _lower(model, "full")
    assert len(inference_calls) == 2


def test_a_dim_nothing_determines_falls_back_to_whole_model_inference(inference_calls: list[int]) -> None:
    """NonZero's output size depends on the data: the dim is named after its value, as the
    whole-model path names it."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Relu", ["x"], ["r"])]
    graph = helper.make_graph(nodes, "nz", [helper.make_tensor_value_info("x", F, [4, 5])],
                              [helper.make_tensor_value_info("nz", I64, None),
                               helper.make_tensor_value_info("r", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with _typing("lazy"), pytest.raises(NarrowpipeError, match=NeedsInference.__name__):
        narrowpipe.load(model)
    assert _lower(model, "auto") == _lower(model, "full")
    assert inference_calls


def test_node_inference_returns_the_symbolic_dims_it_was_given() -> None:
    """Symbolic dims go to ONNX as opaque names and come back as the same dims, calls included
    (``min(128, seq)`` used to come back as a new symbol named ``min_128__seq_``)."""
    seq = Sym("seq")
    odd = Sym("min(128, seq)")
    node = helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0, 2])
    out = node_infer.node_inference(node, 17, [helper.make_opsetid("", 17)], [(DType.FP32, (odd, seq, 4))], [None], 8)
    assert out == [(DType.FP32, (seq, odd, 4))]


DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


@pytest.mark.slow
def test_every_onnx_test_model_lowers_node_by_node_as_whole_model_inference_does() -> None:
    """ONNX's node conformance models and its real-network models: wherever node-by-node typing
    completes, the graph is the whole-model path's; wherever the frontend chooses it (auto), too."""
    import onnx_node_sweep  # benchmarks/, put on the path by conftest

    models: list[Any] = [m for _name, m, _inputs in onnx_node_sweep.collect_cases()]
    models += sorted(glob.glob(os.path.join(DATA, "light", "*.onnx")))
    typed_lazily = 0
    for model in models:
        full = _lower(model, "full")
        lazy = _lower(model, "lazy")
        if isinstance(lazy, dict):
            typed_lazily += 1
            assert lazy == full, getattr(model, "graph", model)
        assert _lower(model, "auto") == full
    assert typed_lazily > 0.7 * len(models)


def test_legacy_transformers_export_lowers_node_by_node(exported: Any, inference_calls: list[int]) -> None:
    path, _reference = exported("gpt2", "legacy")
    assert _lower(path, "auto") == _lower(path, "full")
    assert len(inference_calls) == 1
