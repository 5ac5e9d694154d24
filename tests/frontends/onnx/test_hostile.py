"""Hostile ONNX input never crashes or hangs: each case raises the right NarrowpipeError subclass,
naming the file, the node (where there is one) and the reason."""

from __future__ import annotations

import os
import random
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import narrowpipe
from narrowpipe.errors import FrontendError, ModelLoadError, NarrowpipeError, ShapeError, UnsupportedOpError

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"


def _model(nodes, inputs, outputs, inits=(), opset=17, **kw) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], **kw)


def _vi(name: str, shape, dtype=TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _save(tmp_path: Path, model: onnx.ModelProto | bytes, name: str = "m.onnx") -> str:
    path = tmp_path / name
    path.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    return str(path)


def _raises(path, cls: type[NarrowpipeError], *needles: str) -> NarrowpipeError:
    with pytest.raises(cls) as info:
        narrowpipe.analyze(narrowpipe.load(path))
    text = str(info.value)
    if isinstance(path, str):
        assert path in text, text
    for needle in needles:
        assert needle in text, text
    return info.value


# -- files that are not ONNX ------------------------------------------------------------------

def test_missing_file(tmp_path: Path) -> None:
    _raises(str(tmp_path / "nope.onnx"), ModelLoadError, "file not found")


def test_empty_file(tmp_path: Path) -> None:
    _raises(_save(tmp_path, b""), ModelLoadError, "empty")


def test_directory(tmp_path: Path) -> None:
    d = tmp_path / "dir.onnx"
    d.mkdir()
    _raises(str(d), ModelLoadError, "directory")


@pytest.mark.parametrize("cut", [1, 10, 100, 1000, -1])
def test_truncated_file(tmp_path: Path, cut: int) -> None:
    data = LIGHT.read_bytes()
    _raises(_save(tmp_path, data[:cut] if cut > 0 else data[:len(data) // 2]), ModelLoadError)


@pytest.mark.parametrize("seed", range(8))
def test_random_bytes(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4096)))
    with pytest.raises(NarrowpipeError) as info:
        narrowpipe.load(_save(tmp_path, data))
    assert "m.onnx" in str(info.value)


def test_protobuf_over_two_gib_is_refused_without_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.onnx"
    with open(path, "wb") as fh:
        fh.truncate(2**31 + 10)  # sparse: nothing is written, and nothing must be read
    _raises(str(path), ModelLoadError, "2 GiB", "external data")


# -- protobufs with missing or broken fields -------------------------------------------------------

def test_model_without_graph(tmp_path: Path) -> None:
    _raises(_save(tmp_path, onnx.ModelProto(ir_version=8)), ModelLoadError, "no graph")


def test_node_without_op_type(tmp_path: Path) -> None:
    m = _model([helper.make_node("", ["x"], ["y"], name="blank")], [_vi("x", [2])], [_vi("y", [2])])
    _raises(_save(tmp_path, m), FrontendError, "no op_type", "blank")


def test_input_without_type(tmp_path: Path) -> None:
    x = onnx.ValueInfoProto(name="x")
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [x], [_vi("y", [2])])
    _raises(_save(tmp_path, m), ShapeError, "'x'", "no tensor type")


def test_undefined_input(tmp_path: Path) -> None:
    m = _model([helper.make_node("Relu", ["ghost"], ["y"], name="r")], [_vi("x", [2])], [_vi("y", [2])])
    _raises(_save(tmp_path, m), FrontendError, "'ghost'", "not defined", "'r'")


def test_initializer_payload_disagrees_with_its_dims(tmp_path: Path) -> None:
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], [0.0] * 16)
    w.dims[0] = 1000  # declares 4000 floats, holds 16
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_vi("x", [2, 1000])], [_vi("y", [2, 4])], [w])
    _raises(_save(tmp_path, m), ShapeError, "'w'", "holds")


def test_initializer_without_data(tmp_path: Path) -> None:
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3, 3])
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_vi("x", [2, 3])], [_vi("y", [2, 3])], [w])
    _raises(_save(tmp_path, m), ShapeError, "'w'", "no data")


def test_unknown_element_type(tmp_path: Path) -> None:
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2], dtype=0)], [_vi("y", [2])])
    with pytest.raises(NarrowpipeError):
        narrowpipe.load(_save(tmp_path, m))


# -- shapes that disagree, negative and absurd dims --------------------------------------------------

def test_matmul_inner_dims_disagree(tmp_path: Path) -> None:
    m = _model([helper.make_node("MatMul", ["a", "b"], ["c"], name="mm")], [_vi("a", [2, 3]), _vi("b", [4, 5])],
               [_vi("c", None)])
    _raises(_save(tmp_path, m), ShapeError, "'mm'", "MatMul")


def test_broadcast_disagrees(tmp_path: Path) -> None:
    m = _model([helper.make_node("Add", ["a", "b"], ["c"], name="add")], [_vi("a", [2, 3]), _vi("b", [4, 5])],
               [_vi("c", None)])
    _raises(_save(tmp_path, m), ShapeError, "'add'")


def test_declared_output_shape_disagrees(tmp_path: Path) -> None:
    m = _model([helper.make_node("Relu", ["a"], ["c"], name="relu")], [_vi("a", [2, 3])], [_vi("c", [7, 7])])
    _raises(_save(tmp_path, m), ShapeError, "'relu'")


def test_reshape_to_a_wrong_size(tmp_path: Path) -> None:
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [5, 5])
    m = _model([helper.make_node("Reshape", ["a", "s"], ["c"], name="rs")], [_vi("a", [2, 3])], [_vi("c", None)],
               [shape])
    _raises(_save(tmp_path, m), ShapeError, "'rs'")


@pytest.mark.parametrize("dim", [-1, -100, 2**41, 2**62])
def test_negative_or_absurd_declared_dims(tmp_path: Path, dim: int) -> None:
    x = _vi("x", [2, 3])
    x.type.tensor_type.shape.dim[1].dim_value = dim
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [x], [_vi("y", None)])
    _raises(_save(tmp_path, m), ShapeError, "'x'", str(dim))


def test_absurd_initializer_dims(tmp_path: Path) -> None:
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**30, 2**30], data_location=TensorProto.EXTERNAL)
    w.external_data.add(key="location", value="w.bin")
    m = _model([helper.make_node("Relu", ["w"], ["y"])], [], [_vi("y", None)], [w])
    _raises(_save(tmp_path, m), ShapeError, "'w'")


def test_cycle(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="second")]
    m = _model(nodes, [_vi("x", [2])], [_vi("b", [2])])
    _raises(_save(tmp_path, m), FrontendError, "cycle")


def test_self_loop(tmp_path: Path) -> None:
    m = _model([helper.make_node("Add", ["x", "y"], ["y"], name="selfish")], [_vi("x", [2])], [_vi("y", [2])])
    _raises(_save(tmp_path, m), FrontendError, "selfish")


def test_unsorted_nodes_are_sorted(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["a"], ["b"], name="second"), helper.make_node("Neg", ["x"], ["a"], name="first")]
    m = _model(nodes, [_vi("x", [2])], [_vi("b", [2])])
    graph = narrowpipe.load(_save(tmp_path, m))
    assert [n.source.name for n in graph.nodes] == ["first", "second"]


# -- opsets and domains ----------------------------------------------------------------------

def _vendor_op_model(declared: bool) -> onnx.ModelProto:
    """x -> MatMul -> com.example.vendor::Frob -> Relu; ``declared``: Frob's output is in value_info."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], [0.0] * 12)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Frob", ["h"], ["h2"], domain="com.example.vendor", name="f"),
             helper.make_node("Relu", ["h2"], ["y"], name="relu")]
    info = [_vi("h2", ["batch", 3])] if declared else []
    g = helper.make_graph(nodes, "g", [_vi("x", ["batch", 4])], [_vi("y", None)], [w], value_info=info)
    imports = [helper.make_opsetid("", 17), helper.make_opsetid("com.example.vendor", 3)]
    return helper.make_model(g, opset_imports=imports)


def test_unknown_domain_op_is_unmodeled_like_an_unknown_default_op(tmp_path: Path) -> None:
    """A vendor op is listed as unmodeled and the rest analysed (it used to abort the whole load),
    its output typed from value_info; the matmul and relu count as by hand (2*2*4*3 + 2*3)."""
    path = _save(tmp_path, _vendor_op_model(declared=True))
    report = narrowpipe.analyze(narrowpipe.load(path), dims={"batch": 2})
    assert [u.op for u in report.unmodeled] == ["com.example.vendor::Frob"]
    assert report.flops == 2 * 2 * 4 * 3 + 2 * 3
    with pytest.raises(UnsupportedOpError, match="Frob"):
        narrowpipe.load(path, strict=True)


def test_unknown_domain_op_with_untyped_output_is_named(tmp_path: Path) -> None:
    """Without a declared type its output's shape is unknowable, and the Relu needs it: a clear error."""
    _raises(_save(tmp_path, _vendor_op_model(declared=False)), ShapeError, "'f'", "'h2'", "value_info")


def test_undeclared_domain_is_named(tmp_path: Path) -> None:
    m = _model([helper.make_node("Frob", ["x"], ["y"], domain="com.example.vendor", name="f")],
               [_vi("x", [2])], [_vi("y", [2])])
    _raises(_save(tmp_path, m), ModelLoadError, "com.example.vendor", "'f'", "does not import")


def test_opset_newer_than_onnx_knows(tmp_path: Path) -> None:
    newest = onnx.defs.onnx_opset_version()
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])], opset=newest + 5)
    _raises(_save(tmp_path, m), ModelLoadError, f"version {newest + 5}", f"1 to {newest}")


def test_ir_version_newer_than_onnx_knows(tmp_path: Path) -> None:
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])])
    m.ir_version = onnx.IR_VERSION + 3
    _raises(_save(tmp_path, m), ModelLoadError, "IR version")


def test_unused_unknown_domain_import_is_harmless(tmp_path: Path) -> None:
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])])
    m.opset_import.append(helper.make_opsetid("org.pytorch.aten", 1))
    assert narrowpipe.analyze(narrowpipe.load(_save(tmp_path, m))).flops == 2


def test_unknown_op_is_unmodeled_or_strict_error(tmp_path: Path) -> None:
    m = _model([helper.make_node("Gradient", ["x"], ["y"], domain="ai.onnx.preview.training", xs=["x"], y="x")],
               [_vi("x", [2])], [_vi("y", [2])])
    m.opset_import.append(helper.make_opsetid("ai.onnx.preview.training", 1))
    path = _save(tmp_path, m)
    report = narrowpipe.analyze(narrowpipe.load(path))
    assert [u.op for u in report.unmodeled] == ["ai.onnx.preview.training::Gradient"]
    with pytest.raises(UnsupportedOpError, match="Gradient"):
        narrowpipe.load(path, strict=True)


# -- big models with external data ------------------------------------------------------------

def test_two_gib_model_with_external_data_is_never_read(tmp_path: Path) -> None:
    """A 2.4 GB weight in a sparse external file: loads instantly, counted from its declared dims."""
    rows, cols = 20_000, 30_000  # 600M floats = 2.4 GB
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[cols, rows], data_location=TensorProto.EXTERNAL)
    for k, v in (("location", "weights.bin"), ("offset", "0"), ("length", str(4 * rows * cols))):
        w.external_data.add(key=k, value=v)
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_vi("x", ["batch", cols])],
               [_vi("y", ["batch", rows])], [w])
    path = _save(tmp_path, m)
    with open(tmp_path / "weights.bin", "wb") as fh:
        fh.truncate(4 * rows * cols)
    os.chmod(tmp_path / "weights.bin", 0)  # unreadable: reading it would fail the test
    graph = narrowpipe.load(path)
    report = narrowpipe.analyze(graph, batch=3)
    assert report.params == rows * cols
    assert report.weight_bytes == 4 * rows * cols
    assert report.modeled_flops == 2 * 3 * rows * cols
    assert graph.meta["external_data"] is True


def test_in_memory_model_with_large_inline_weights_is_not_copied_into_inference() -> None:
    w = helper.make_tensor("w", TensorProto.FLOAT, [256, 256], [0.5] * 65536)
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_vi("x", [4, 256])], [_vi("y", None)], [w])
    before = m.SerializeToString()
    report = narrowpipe.analyze(narrowpipe.load(m))
    assert report.params == 65536
    assert m.SerializeToString() == before  # the caller's model is left as it was
