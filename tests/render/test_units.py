"""Units for people: each formatter rounds to its digits before it picks the unit (QA: "1e+03 us"
for 999.77 us, "2.69e+03 s", "2.25e+04 tokens/J"), and no number prints in scientific notation."""

from __future__ import annotations

import pytest

from narrowpipe.render.units import count, dollars, flops, nbytes, percent, seconds, si


@pytest.mark.parametrize(("x", "text"), [
    (999.77e-6, "1 ms"),        # rounds to 1000 us: the next unit
    (999.4e-6, "999 us"),
    (0.9996e-3, "1 ms"),
    (1.0, "1 s"),
    (59.99, "60 s"),            # seconds up to 1000 s: a minute is not the next SI step
    (999.4, "999 s"),
    (999.6, "16.7 min"),        # 999.6 s rounds to 1000 s: 999.6 / 60 = 16.66 min
    (2690.0, "44.8 min"),       # QA: compare llama-3-70b on xeon-6980p, batch 256, seq 8192
    (5999.0, "1.67 h"),         # 99.98 min rounds to 100 min: 5999 / 3600 = 1.666 h
    (3600.0 * 1500, "1,500 h"),
    (0.0, "0 ns"),
    (4e-10, "0.4 ns"),
    (None, "-"),
])
def test_seconds_round_before_they_pick_the_unit(x, text):
    assert seconds(x) == text


@pytest.mark.parametrize(("x", "unit", "text"), [
    (22460.0, "", "22.5 k"),    # QA: a table read 2.25e+04 tokens/J
    (999.77, "B", "1 kB"),
    (999.0, "B", "999 B"),
    (999.6e9, "FLOP", "1 TFLOP"),
    (1e21, "B", "1,000 EB"),    # past the largest prefix: separators, not 1e+03
    (-2500.0, "B", "-2.5 kB"),
    (0.5, "B", "0.5 B"),
])
def test_si_rounds_before_it_picks_the_prefix(x, unit, text):
    assert si(x, unit) == text


def test_the_other_formatters():
    assert flops(1.0995e12) == "1.1 TFLOP" and nbytes(141.1e9) == "141 GB"
    assert count(1234567) == "1,234,567" and percent(1, 3) == "33.3%"


@pytest.mark.parametrize(("x", "text"), [
    (3.07e-6, "$0.00000307"), (0.0072, "$0.00720"), (0.00209253, "$0.00209"), (6.88, "$6.88"),
    (99.95, "$100"), (1234.5, "$1,230"), (0.0, "$0"),
])
def test_dollars_keep_three_digits_without_scientific_notation(x, text):
    assert dollars(x) == text


def test_a_trillion_parameter_model_reads_in_t_not_scientific_notation():
    """The params row printed "(1.23e+03 B)" above 999.5 billion parameters."""
    from rich.console import Console

    import narrowpipe
    from narrowpipe.render.tables import report_summary

    g = narrowpipe.transformer(layers=64, hidden=36864, heads=96, vocab=32000, ffn=147456, seq=8)
    r = narrowpipe.analyze(g)
    # by hand: 64 x (4 x 36864^2 + 2 x 36864 x 147456) + 32000 x 36864 x 2 (untied embedding and head)
    # = 1.04606e12, plus biases and norms
    assert 1.0460e12 < r.params < 1.0462e12
    console = Console(width=200, record=True)
    console.print(report_summary(r))
    text = console.export_text()
    assert f"({r.params / 1e12:.3g} T)" in text and "e+" not in text


def test_a_serving_rate_below_one_token_per_second_per_device_is_not_zero():
    """A 615-chip Groq deployment of Llama-3-70B decodes 199 tok/s: 0.324 per chip, printed "0 tok/s"."""
    from narrowpipe.render.serving import _rate

    assert _rate(199 / 615) == "0.324 tok/s"
    assert _rate(12.345) == "12.3 tok/s" and _rate(4544.2) == "4,544 tok/s" and _rate(0) == "-"
