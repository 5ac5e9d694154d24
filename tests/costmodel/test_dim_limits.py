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
