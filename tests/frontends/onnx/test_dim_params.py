"""What an ONNX ``dim_param`` names: one opaque dim, unless an exporter wrote an expression.

ONNX gives the text no syntax (``batch-size`` is one dim; ``batch size`` and ``batch_size`` are two),
while exporters print sympy sizes into it. Every expression below is text a real exporter wrote:
torch 2.13's dynamo exporter (``batch_size*sequence_length``, ``(((sequence_length - 3)//2)) + 1``,
its ``Dim.AUTO`` names ``s27``, and user names kept verbatim: ``batch-size*(seq len + past.len)``),
onnxruntime's symbolic shape inference (``past_sequence_length + sequence_length``), optimum's
decoders (``past_sequence_length + 1``) and onnxruntime's Whisper decoder input
(``encode_sequence_length / 2``). Values are checked against Python arithmetic on the same sizes.
"""

from __future__ import annotations

import json
import warnings

import pytest
from onnx import TensorProto, helper

import narrowpipe
from narrowpipe.cli import main
from narrowpipe.frontends.onnx.dim_params import DimParams
from narrowpipe.ir import Sym


def _concat(d1: str, d2: str) -> object:
    """z = Concat(x[d1, 8], y[d2, 8], axis=0): z's dim 0 is d1 + d2."""
    g = helper.make_graph([helper.make_node("Concat", ["x", "y"], ["z"], axis=0, name="cat")], "cat",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [d1, 8]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [d2, 8])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _rows(g: narrowpipe.Graph, **onnx_sizes: int) -> int:
    """z's rows under sizes given by the ONNX names (what --set takes)."""
    bound = narrowpipe.analyze(g, dims=onnx_sizes).dims
    return g.outputs[0].type.shape[0].evaluate(bound)


@pytest.mark.parametrize("name", ["batch-size", "seq-len", "a.b", "N/A", "batch size", "x+y", "max", "None"])
def test_a_name_with_punctuation_is_one_dim_bound_by_its_onnx_name(name):
    """Concat(x[n], y[n]) has 2n rows: 6 at n=3. ``batch-size`` used to read as batch - size."""
    g = narrowpipe.load(_concat(name, name))
    (spec,) = g.dims.values()
    assert spec.source_name in (name, "")   # kept where the IR had to spell it otherwise
    assert g.inputs[0].shape[0] == g.inputs[1].shape[0] == Sym(spec.name)
    assert _rows(g, **{name: 3}) == 3 + 3


@pytest.mark.parametrize("d1, d2", [("batch size", "batch_size"), ("batch-size", "batch_size"), ("a.b", "a_b"),
                                    ("max", "max_"), ("N", "n")])
def test_names_that_spell_alike_stay_two_dims(d1, d2):
    """3 + 5 = 8 rows; merged into one name they counted 2*batch_size."""
    g = narrowpipe.load(_concat(d1, d2))
    assert len(g.dims) == 2
    assert g.dims[d2].source_name == ""          # the plain name keeps its spelling
    assert _rows(g, **{d1: 3, d2: 5}) == 3 + 5


SIZES = {"batch_size": 2, "sequence_length": 5, "past_sequence_length": 7, "s27": 5,
         "encode_sequence_length": 3000, "batch-size": 2, "seq len": 5, "past.len": 7}
EXPRESSIONS = [   # (input dim_params of the model, a dim_param its outputs carry, the size by hand)
    (["sequence_length", "past_sequence_length"], "sequence_length + past_sequence_length", 5 + 7),
    (["batch_size", "sequence_length"], "batch_size*sequence_length", 2 * 5),
    (["sequence_length"], "(((sequence_length - 3)//2)) + 1", (5 - 3) // 2 + 1),
    (["s27"], "s27 + 1", 5 + 1),
    (["batch-size", "seq len", "past.len"], "batch-size*(seq len + past.len)", 2 * (5 + 7)),
    (["past_sequence_length"], "past_sequence_length + 1", 7 + 1),
    (["past_sequence_length", "sequence_length"], "past_sequence_length + sequence_length", 7 + 5),
    (["encode_sequence_length"], "encode_sequence_length / 2", 3000 // 2),
]


@pytest.mark.parametrize("inputs, text, size", EXPRESSIONS)
def test_exporters_expressions_are_read_as_arithmetic_over_the_inputs_dims(inputs, text, size):
    names = DimParams(inputs)
    dim = names.read(text)
    assert dim.symbols <= names.trusted
    assert dim.evaluate({names.read(n).expr: SIZES[n] for n in inputs}) == size


@pytest.mark.parametrize("text", ["unk__3", "Concatk_dim_0", "x_dynamic_axes_1", "total_sequence_length"])
def test_inference_and_legacy_names_are_plain_names(text):
    assert DimParams(["batch_size"]).read(text) == Sym(text)


def test_sympys_true_division_is_left_to_the_frontend_to_re_derive():
    """onnxruntime's ``floor(sequence_length/2 - 3/2) + 1`` is one untrusted name (an output dim the
    frontend computes itself), not a float-valued expression over ``sequence_length``."""
    names = DimParams(["sequence_length"])
    dim = names.read("floor(sequence_length/2 - 3/2) + 1")
    assert len(dim.symbols) == 1 and not dim.symbols <= names.trusted


def test_an_output_name_that_spells_like_an_input_dim_is_not_that_dim():
    """Input ``batch size`` is the IR's ``batch_size``; an output's own ``batch_size`` (a name the
    exporter invented) must not be read as that input dim."""
    names = DimParams(["batch size"])
    assert names.read("batch size") == Sym("batch_size")
    assert names.read("batch_size") != Sym("batch_size")
    assert not names.read("batch_size").symbols <= names.trusted


def test_the_graph_file_keeps_the_onnx_spelling(tmp_path):
    g = narrowpipe.load(_concat("batch size", "batch_size"))
    again = narrowpipe.load(g.save(tmp_path / "cat.json"))
    assert again.dims == g.dims
    assert _rows(again, **{"batch size": 3, "batch_size": 5}) == 8


def test_an_unknown_name_lists_the_dims_with_their_onnx_spelling():
    g = narrowpipe.load(_concat("batch-size", "batch-size"))
    with pytest.raises(narrowpipe.NarrowpipeError, match=r"unknown dim\(s\) batch; this graph's dims: "
                                                         r"batch_size \('batch-size'\)"):
        narrowpipe.analyze(g, dims={"batch": 4})


def test_cli_binds_a_dim_by_its_onnx_name(tmp_path):
    """``--set batch-size=4``: Concat reads two [4, 8] fp32 tensors and writes one [8, 8] (512 bytes)."""
    import onnx
    path = tmp_path / "cat.onnx"
    onnx.save(_concat("batch-size", "batch-size"), str(path))
    out = tmp_path / "r.json"
    assert main(["analyze", str(path), "--set", "batch-size=4", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["dims"] == {"batch_size": 4}
    assert report["totals"]["bytes"] == (2 * 4 * 8 + 8 * 8) * 4


@pytest.mark.slow
@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "legacy"])
def test_torch_exports_with_user_names_keep_them_as_dims(tmp_path, dynamo):
    """Both torch exporters write the user's dynamic-axis names verbatim; the dynamo exporter prints
    the output's size over them (``batch-size*(seq len + past.len)``). cat(past, x).reshape(-1, 8)
    has b*(s+p) rows: 2*(5+7) = 24."""
    torch = pytest.importorskip("torch")

    class M(torch.nn.Module):
        def forward(self, x, past):
            return torch.cat([past, x], dim=1).reshape(-1, 8)

    axes = {"x": {0: "batch-size", 1: "seq len"}, "past": {0: "batch-size", 1: "past.len"}}
    path = str(tmp_path / "m.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(M(), (torch.randn(2, 5, 8), torch.randn(2, 7, 8)), path, dynamo=dynamo,
                          input_names=["x", "past"], dynamic_axes=axes)
    g = narrowpipe.load(path)
    assert sorted(s.source_name for s in g.dims.values()) == ["batch-size", "past.len", "seq len"]
    bound = narrowpipe.analyze(g, dims={"batch-size": 2, "seq len": 5, "past.len": 7}).dims
    assert g.outputs[0].type.shape[0].evaluate(bound) == 2 * (5 + 7)
