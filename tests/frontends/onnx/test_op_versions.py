"""A node whose op the imported opset does not define is refused, naming the file, node, op and
both versions (Gelu came in opset 20); an unknown op in the ONNX domain is said to be one, not given
value_info advice that cannot help. Reference: ``onnx.checker`` refuses the same files and accepts
the valid neighbours."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import narrowpipe
from narrowpipe.errors import FrontendError, NarrowpipeError


def _file(tmp_path: Path, op: str, opset: int, domain: str = "", typed: bool = False) -> str:
    node = helper.make_node(op, ["x"], ["y"], name="n1", domain=domain)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8] if typed else None)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])], [out])
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    path = tmp_path / f"{op}_{opset}.onnx"
    onnx.save(helper.make_model(g, opset_imports=imports), str(path))
    return str(path)


def _checker_refuses(path: str) -> bool:
    try:
        onnx.checker.check_model(onnx.load(path), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        return True
    return False


@pytest.mark.parametrize("op,opset,since", [("Gelu", 17, 20), ("LayerNormalization", 11, 17)])
def test_an_op_newer_than_the_opset_is_refused_with_both_versions(tmp_path: Path, op: str, opset: int,
                                                                  since: int) -> None:
    path = _file(tmp_path, op, opset, typed=True)
    assert _checker_refuses(path)
    with pytest.raises(FrontendError) as info:
        narrowpipe.load(path)
    text = str(info.value)
    for needle in (path, "'n1'", f"ai.onnx::{op}", f"opset {since}", f"opset {opset}"):
        assert needle in text, text


def test_the_same_op_at_its_opset_loads(tmp_path: Path) -> None:
    path = _file(tmp_path, "Gelu", 20, typed=True)
    assert not _checker_refuses(path)
    assert narrowpipe.analyze(narrowpipe.load(path)).ops


def test_an_unknown_onnx_domain_op_is_named_as_such(tmp_path: Path) -> None:
    path = _file(tmp_path, "NotAnOp", 17)
    assert _checker_refuses(path)
    with pytest.raises(FrontendError, match=r"NotAnOp is not an ai\.onnx operator \(opset 17\)") as info:
        narrowpipe.load(path)
    assert "value_info" not in str(info.value)


def test_a_custom_domain_op_keeps_the_value_info_advice(tmp_path: Path) -> None:
    """A custom domain has no schemas here: only its output type can say what it gives."""
    with pytest.raises(NarrowpipeError, match="value_info"):
        narrowpipe.load(_file(tmp_path, "FancyOp", 17, domain="com.acme"))
