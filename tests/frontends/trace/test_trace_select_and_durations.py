"""Sort and top-k write their indices as well as their values, and a damaged duration is refused.

QA: ``diagnose`` counted half of ``torch.sort``'s traffic on fp32 64 x 4096 (2 MiB a call where the
torch frontend's ``analyze`` counts 4 MiB: the int64 indices were missing; top-k likewise); a
negative ``dur`` (an edited trace) was clamped to 0, so the op's children came loose from it and a
linear's matmul FLOPs were counted twice (20,971,520 instead of 16,777,216).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from narrowpipe.costmodel.diagnose import diagnose
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.errors import NarrowpipeError
from narrowpipe.frontends.trace.lower import Call, lower_call
from narrowpipe.frontends.trace.read import TensorArg, TraceError, load_trace
from narrowpipe.ir import DType, Op

F32 = DType.FP32


def _lowered(name: str, inputs: list, concrete: list[str]):
    g = lower_call(Call(name, inputs, concrete))
    assert g is not None
    return g, interpret(g, {}).total()


def test_sort_writes_values_and_int64_indices():
    g, c = _lowered("aten::sort", [TensorArg((64, 4096), F32), None, None], ["", "-1", "False"])
    assert [n.op for n in g.nodes] == [Op.SORT]
    assert [(o.type.shape, o.type.dtype) for o in g.outputs] == [((64, 4096), F32), ((64, 4096), DType.INT64)]
    # 262,144 elements: read 4 B each (1 MiB), write 4 B values (1 MiB) and 8 B indices (2 MiB)
    assert c.bytes == 262_144 * (4 + 4 + 8) == 4_194_304
    assert c.flops == 262_144 * 12                    # n log2 n comparisons, log2 4096 = 12


def test_sort_stable_overload_reads_its_dim_after_the_stable_flag():
    # aten::sort.stable(self, *, stable, dim, descending): dim 0 of 64 rows is 6 comparisons each
    g, c = _lowered("aten::sort", [TensorArg((64, 4096), F32), None, None, None], ["", "True", "0", "False"])
    assert g.nodes[0].attrs["axis"] == 0 and c.flops == 262_144 * 6 and c.bytes == 4_194_304


def test_topk_writes_values_and_int64_indices():
    g, c = _lowered("aten::topk", [TensorArg((64, 4096), F32), None, None, None, None],
                    ["", "8", "-1", "True", "True"])
    assert [o.type.shape for o in g.outputs] == [(64, 8), (64, 8)]
    # read 1 MiB; write 64 x 8 values (4 B) and indices (8 B): 1,048,576 + 2,048 + 4,096
    assert c.bytes == 1_054_720


def test_sort_and_topk_bytes_equal_the_torch_frontends():
    torch = pytest.importorskip("torch")
    from narrowpipe.frontends import from_torch

    class Sort(torch.nn.Module):
        def forward(self, x):
            return torch.sort(x, dim=-1)

    class TopK(torch.nn.Module):
        def forward(self, x):
            return torch.topk(x, 8, dim=-1)

    x = torch.randn(64, 4096)
    for module, name, inputs, concrete in (
            (Sort(), "aten::sort", [TensorArg((64, 4096), F32), None, None], ["", "-1", "False"]),
            (TopK(), "aten::topk", [TensorArg((64, 4096), F32), None, None, None, None],
             ["", "8", "-1", "True", "True"])):
        exported = interpret(from_torch(module, (x,)), {}).total()
        _, traced = _lowered(name, inputs, concrete)
        assert (traced.flops, traced.bytes) == (exported.flops, exported.bytes)


def test_max_pool_with_indices_writes_its_int64_indices_as_the_torch_frontend_does():
    torch = pytest.importorskip("torch")
    from narrowpipe.frontends import from_torch

    class Pool(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.max_pool2d(x, 2, 2, return_indices=True)

    # [2, 8, 16, 16] -> [2, 8, 8, 8]: read 4 B x 4,096; write 1,024 values of 4 B and indices of 8 B
    g, c = _lowered("aten::max_pool2d_with_indices", [TensorArg((2, 8, 16, 16), F32), None, None, None, None, None],
                    ["", "[2, 2]", "[2, 2]", "[0, 0]", "[1, 1]", "False"])
    assert [o.type.dtype for o in g.outputs] == [F32, DType.INT64]
    assert c.bytes == 4096 * 4 + 1024 * (4 + 8)
    exported = interpret(from_torch(Pool(), (torch.randn(2, 8, 16, 16),)), {}).total()
    assert (c.flops, c.bytes) == (exported.flops, exported.bytes)


def _linear_trace(path: Path, linear_dur: float) -> Path:
    """aten::linear (0..100 us) over aten::t and aten::mm on fp32 [64, 128] x [128, 256]."""
    def op(name: str, ts: float, dur: float, dims: list) -> dict:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                "args": {"Input Dims": dims, "Input type": ["float"] * len(dims), "Concrete Inputs": [""] * len(dims)}}
    events = [op("aten::linear", 0.0, linear_dur, [[1, 64, 128], [256, 128]]),     # no bias
              op("aten::t", 2.0, 3.0, [[256, 128]]),
              op("aten::mm", 10.0, 80.0, [[64, 128], [128, 256]])]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_a_negative_duration_is_a_trace_error_naming_file_and_event(tmp_path):
    path = _linear_trace(tmp_path / "neg.json", -100.0)
    with pytest.raises(TraceError, match=r"event 'aten::linear' at ts 0\.000 us has a negative duration "
                                         r"\(-100 us\)") as err:
        load_trace(path)
    assert isinstance(err.value, NarrowpipeError) and err.value.file == str(path)
    with pytest.raises(TraceError, match="negative duration"):
        diagnose(path, "epyc-9755")


def test_the_same_trace_with_its_duration_counts_the_matmul_once(tmp_path):
    d = diagnose(_linear_trace(tmp_path / "ok.json", 100.0), "epyc-9755")
    assert d.flops == 2 * 64 * 128 * 256 == 4_194_304     # the linear, its mm not again
    assert [o.name for o in d.ops] == ["aten::linear"]
