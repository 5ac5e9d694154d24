"""Dim bindings a model cannot take: sizes below 1 and above the model's own limit are errors,
above the range it was exported for a warning that cannot be missed."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.cli import main
from narrowpipe.costmodel.limits import DimRangeWarning
from narrowpipe.errors import NarrowpipeError, ShapeError
from narrowpipe.models.examples import load_example


@pytest.mark.parametrize("value", ["0", "-3"])
def test_a_dim_must_be_at_least_one(value, capsys):
    assert main(["analyze", "gpt2", "--set", f"seq={value}"]) == 2
    assert "must be >= 1" in capsys.readouterr().err
    with pytest.raises(NarrowpipeError, match="must be >= 1"):
        narrowpipe.analyze(load_example("gpt2"), seq=int(value))


def test_seq_beyond_bert_position_table_is_an_error(capsys):
    """BERT slices its 512-entry position_ids to seq: at 1024 the program cannot run."""
    bert = load_example("bert-base")
    with pytest.raises(ShapeError, match="the largest seq it can run is 512"):
        narrowpipe.analyze(bert, seq=1024)
    with pytest.raises(ShapeError, match="512"):
        narrowpipe.compare(bert, ["h100"], seq=1024)
    assert narrowpipe.analyze(bert, seq=512).dims["seq"] == 512
    assert main(["analyze", "bert-base", "--set", "seq=1024"]) == 2
    assert "largest seq it can run is 512" in capsys.readouterr().err.replace("\n", " ")


def test_binding_above_the_exported_range_warns_loudly(capsys):
    """Past an export's upper bound (here BERT's batch max 4096) the graph still runs, so a warning:
    a Python warning in the API, a bold last line on stderr in the CLI, and a note in the report."""
    bert = load_example("bert-base")
    with pytest.warns(DimRangeWarning, match="batch=5000 is above the range"):
        r = narrowpipe.analyze(bert, batch=5000, seq=8)
    assert any("above the range" in n for n in r.notes)
    assert main(["analyze", "bert-base", "--set", "batch=5000,seq=8", "--top", "1"]) == 0
    err = capsys.readouterr().err
    assert err.lstrip().startswith("warning:") and "batch=5000" in err


def test_an_empty_kv_cache_may_be_bound_to_zero():
    """past_sequence_length=0 is the prefill step of a decoder-with-past export, not a typo."""
    from narrowpipe.ir import DimSpec, DType, Graph, Op, Sym, TensorType
    g = Graph("kv")
    g.declare_dim(DimSpec("past", 4, role=narrowpipe.DimRole.KV_LENGTH))
    g.declare_dim(DimSpec("seq", 4, role=narrowpipe.DimRole.SEQUENCE))
    k = g.add_input("k", TensorType(DType.FP32, (Sym("past") + Sym("seq"), 8)))
    y = g.add_node(Op.EXP, [k], [TensorType(DType.FP32, (Sym("past") + Sym("seq"), 8))])
    g.set_outputs(y.outputs)
    assert narrowpipe.analyze(g, past=0, seq=3).transcendentals == 24
    with pytest.raises(NarrowpipeError, match="seq must be >= 1"):
        narrowpipe.analyze(g, past=0, seq=0)


def _conv1d_graph(default_seq: int | None = 16):
    """Conv1d(4 -> 8, kernel 5, no padding) on [1, 4, seq]: its output length is ``seq - 4``."""
    from narrowpipe.ir import DimSpec, DType, Graph, Op, Sym, TensorType, ValueKind
    g = Graph("conv1d")
    g.declare_dim(DimSpec("seq", default_seq, 6, 1024, role=narrowpipe.DimRole.SEQUENCE))
    x = g.add_input("x", TensorType(DType.FP32, (1, 4, Sym("seq"))))
    w = g.add_input("w", TensorType(DType.FP32, (8, 4, 5)), ValueKind.PARAM)
    attrs = {"stride": (1,), "padding": (0,), "dilation": (1,), "groups": 1, "output_padding": (0,),
             "transposed": False}
    c = g.add_node(Op.CONV, [x, w], [TensorType(DType.FP32, (1, 8, Sym("seq") - 4))], attrs, name="c")
    g.set_outputs(c.outputs)
    return g


def test_a_dim_that_evaluates_negative_is_an_error_naming_node_and_expression():
    """Bound below the export's range, ``seq - 4`` went negative and so did FLOPs (-640): refused.
    Hand count at seq=16: 2 x 8 out channels x 12 positions x 4 in channels x 5 taps = 3840."""
    from narrowpipe.costmodel.interpreter import NegativeDimError
    g = _conv1d_graph()
    assert narrowpipe.analyze(g, seq=16).modeled_flops == 2 * 8 * 12 * 4 * 5
    # an empty tensor is legal, but not an empty conv output: torch refuses a kernel wider than the
    # padded input ("Kernel size can't be greater than actual input size"), so seq=4 is no 0-FLOP conv
    with pytest.raises(ShapeError, match="output spatial dim 0 would have size 0"):
        narrowpipe.analyze(g, seq=4)
    with pytest.raises(NegativeDimError) as info:
        narrowpipe.analyze(g, dims={"seq": 2})
    msg = str(info.value)
    assert "node 'c'" in msg and "'seq - 4'" in msg and "is -2 at seq=2" in msg
    assert isinstance(info.value, ShapeError) and info.value.size == -2


def test_a_negative_dim_is_named_on_the_plain_walk_too():
    """The per-node walk (graphs with control flow) and the binder used by planners name it as well."""
    from narrowpipe.costmodel.interpreter import NegativeDimError, ShapeBinder
    g = _conv1d_graph()
    binder = ShapeBinder({"seq": 3})
    assert binder.shape(g.inputs[0]) == (1, 4, 3)
    with pytest.raises(NegativeDimError, match=r"node 'c', op 'conv': output dim 'seq - 4' is -1 at seq=3"):
        binder.shape(g.nodes[0].outputs[0])
    with pytest.raises(NegativeDimError, match="is -1"):
        binder.bind(g.nodes[0].outputs[0].type.shape)


def test_a_negative_default_is_refused():
    """A default nobody overrides is a binding too: -3 gave -768 FLOPs."""
    g = _conv1d_graph(default_seq=-3)
    with pytest.raises(NarrowpipeError, match=r"dim seq's default must be an integer >= 1, got -3"):
        narrowpipe.analyze(g)
    assert narrowpipe.analyze(g, seq=6).modeled_flops == 2 * 8 * 2 * 4 * 5


def _exported_range_graph(seq_role: narrowpipe.DimRole) -> narrowpipe.Graph:
    """What torch.export writes for ``Dim("batch")``/``Dim("seq")``: a range from 0 (torch's
    default min), and a fixed-size slice of the sequence (the last token's logits)."""
    from narrowpipe.ir import DimSpec, DType, Graph, Op, Sym, TensorType
    g = Graph("exported")
    g.declare_dim(DimSpec("batch", 2, min=0, role=narrowpipe.DimRole.BATCH))
    g.declare_dim(DimSpec("seq", 16, min=0, max=8192, role=seq_role))
    x = g.add_input("x", TensorType(DType.FP32, (Sym("batch"), Sym("seq"), 8)))
    y = g.add_node(Op.SLICE, [x], [TensorType(DType.FP32, (Sym("batch"), 1, 8))],
                   attrs={"axis": 1, "start": 0, "stop": 1, "step": 1})
    g.set_outputs(y.outputs)
    return g


@pytest.mark.parametrize("target", ["tpu-v6e", "h100", None])
def test_an_export_range_from_zero_does_not_admit_an_empty_batch(target):
    """torch.export.Dim defaults to min=0; a batch or sequence of 0 is still an empty model (it used
    to divide by zero in the TPU's systolic folds and report 0 FLOPs on a GPU)."""
    g = _exported_range_graph(narrowpipe.DimRole.SEQUENCE)
    with pytest.raises(NarrowpipeError, match="dim batch must be >= 1, got 0"):
        narrowpipe.analyze(g, target, batch=0, seq=4)
    with pytest.raises(NarrowpipeError, match="dim seq must be >= 1, got 0"):
        narrowpipe.analyze(g, target, batch=1, seq=0)
    assert narrowpipe.analyze(g, batch=1, seq=4).dims == {"batch": 1, "seq": 4}


def test_a_fixed_slice_of_an_emptied_axis_names_the_dim_to_blame():
    """A dim of no role may be 0 where its range says so; a fixed-size slice of the axis it empties
    used to read '1 = 1 is more than this model supports'."""
    g = _exported_range_graph(narrowpipe.DimRole.OTHER)
    with pytest.raises(ShapeError, match=r"takes 1 entries of axis 1 of x, which holds seq = 0 .*bind seq so it "
                                         r"holds at least 1") as info:
        narrowpipe.analyze(g, batch=1, seq=0)
    assert "1 = 1" not in str(info.value)
