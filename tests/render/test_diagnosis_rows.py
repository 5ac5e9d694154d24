"""Diagnose tells apart one op name at several shapes (QA: five indistinguishable "aten::linear"
rows) and says its largest bucket as one phrase, on a recorded CPU trace of a tiny GPT-2."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from narrowpipe.costmodel.diagnose import diagnose
from narrowpipe.render.diagnosis import offenders_table

TRACE = Path(__file__).resolve().parents[1] / "golden" / "traces" / "gpt2-tiny-cpu.json.gz"


def test_repeated_op_names_carry_their_shapes_where_the_shapes_column_is_dropped():
    d = diagnose(TRACE, "epyc-9755")
    top = d.top(5)
    addmm = [o for o in top if o.name == "aten::addmm"]
    assert len(addmm) >= 2 and len({o.shapes for o in addmm}) == len(addmm)
    console = Console(record=True, width=400)
    console.print(offenders_table(d, 5, frozenset({"shapes", "FLOP/s", "B/s", "model"})))
    text = console.export_text()
    # the weights' dims, as the trace recorded them: fp32[128, 512] -> 128x512
    for o in addmm:
        weight = o.shapes.split("fp32[")[-1].rstrip("]").replace(", ", "x")
        assert weight in text
    advice = [a for a in d.advice if a.startswith("aten::addmm")]
    assert len(advice) == len(set(advice)) >= 2 and all("[fp32[" in a for a in advice)


def test_the_largest_bucket_is_one_phrase_with_every_bucket_in_brackets():
    d = diagnose(TRACE, "epyc-9755")
    first = d.reasons[0]
    assert first.startswith(f"largest bucket: {d.label} ") and "(every bucket: " in first and " of launch" not in first
