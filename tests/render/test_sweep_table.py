"""The sweep table shows the chip count of each row where runs take several chips (a dataflow layout
grows with the batch), and an 80-column terminal gets every header and value whole."""

from __future__ import annotations

import pytest
from rich.console import Console

from narrowpipe.costmodel.sweep import sweep
from narrowpipe.models.examples import load_example
from narrowpipe.render.sweep import print_sweep


@pytest.fixture(scope="module")
def swept():
    # gpt2 at seq 1024 outgrows a Groq chip's 230 MB of SRAM as the batch's activations grow
    return sweep(load_example("gpt2"), ["h100", "groq-lpu", "cerebras-wse3"], {"batch": [1, 64], "seq": [1024]})


def _rows(text: str, target: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if f" {target} " in f" {line} " and "verdict" not in line]


def test_each_row_shows_the_chips_its_run_takes(swept) -> None:
    groq = [p["groq-lpu"].timing.devices for p in swept.points]
    assert groq[0] > 1 and groq[1] != groq[0]     # the count varies: what the table hid
    console = Console(record=True, width=200)
    print_sweep(swept, console)
    text = console.export_text()
    head = next(line for line in text.splitlines() if "narrowest" in line)
    chips_col = [c.strip() for c in head.split("┃")].index("chips")
    rows = [[c.strip() for c in line.split("│")] for line in text.splitlines() if "│ groq-lpu" in line]
    assert [int(r[chips_col]) for r in rows] == groq
    h100 = [[c.strip() for c in line.split("│")] for line in text.splitlines() if "│ h100-sxm" in line]
    assert [int(r[chips_col]) for r in h100] == [1, 1]


def test_an_80_column_terminal_cuts_no_header_or_value(swept) -> None:
    console = Console(record=True, width=80)
    print_sweep(swept, console)
    text = console.export_text()
    assert "…" not in text
    for head in ("batch", "target", "time", "tokens/s", "MFU", "narrowest", "chips", "fits"):
        assert head in text
    assert len(_rows(text, "groq-lpu")) == 2 and all(len(r) >= 8 for r in _rows(text, "groq-lpu"))
