"""A model whose external ``.data`` file is missing still analyses (weights are counted from their
declared dims, never read) but says so once, naming the file; with the file beside it, no warning.
Reference: onnx's own ``save_model(..., save_as_external_data=True)`` writes the pair."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import narrowpipe
from narrowpipe.errors import NarrowpipeWarning


def _save(tmp_path: Path) -> str:
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])], [w])
    path = str(tmp_path / "m.onnx")
    onnx.save_model(helper.make_model(g), path, save_as_external_data=True, location="m.onnx.data",
                    size_threshold=0)
    return path


def test_a_missing_data_file_is_a_warning_naming_it(tmp_path: Path) -> None:
    path = _save(tmp_path)
    os.remove(tmp_path / "m.onnx.data")
    with pytest.warns(NarrowpipeWarning, match=r"m\.onnx\.data.*missing") as record:
        r = narrowpipe.analyze(narrowpipe.load(path))
    assert len([w for w in record if issubclass(w.category, NarrowpipeWarning)]) == 1
    assert r.params == 64 * 64 and r.flops == 2 * 8 * 64 * 64


def test_a_present_data_file_gives_no_warning(tmp_path: Path) -> None:
    path = _save(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NarrowpipeWarning)
        narrowpipe.load(path)
