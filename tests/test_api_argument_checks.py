"""Wrong arguments to the Python API are narrowpipe errors saying what is wrong, never a raw
TypeError/ValueError or a silently wrong answer: prices resolved and checked as compare does them,
fusion modes, durations, counts given as strings, and dim roles given by name."""

from __future__ import annotations

import json
import math
import warnings

import pytest

import narrowpipe
from narrowpipe import DimRole
from narrowpipe.cli import main
from narrowpipe.errors import NarrowpipeError, NarrowpipeWarning
from narrowpipe.models.examples import load_example


@pytest.fixture(scope="module")
def model() -> narrowpipe.Graph:
    return narrowpipe.transformer(layers=2, hidden=256, heads=4, vocab=1000, ffn=512, kv_heads=2, gated_mlp=True,
                                  seq=128)


def _capacity(model, **kw):
    return narrowpipe.plan_capacity(model, ["h100", "h200"], rate=10, input_len=10, output_len=10, tpot=0.03, **kw)


def test_a_capacity_price_keyed_by_an_alias_prices_its_target(model) -> None:
    """{"h100": 2.0} named the H100 as compare and the CLI resolve it; it was ignored (catalog $6.88/h)."""
    by_alias = _capacity(model, price={"h100": 2.0})
    by_name = _capacity(model, price={"h100-sxm": 2.0})
    h100 = [c for c in by_alias.candidates if c.target == "h100-sxm"]
    assert h100 and all(c.price_per_hour == 2.0 for c in h100)
    for c in h100:    # USD per million tokens at full batch: $/h x devices / 3600 s / tokens/s x 1e6
        if c.tokens_per_s:
            assert c.cost_per_million_tokens == pytest.approx(2.0 * c.devices / 3600 / c.tokens_per_s * 1e6)
    assert json.loads(by_alias.to_json()) == json.loads(by_name.to_json())
    assert {c.price_per_hour for c in by_alias.candidates if c.target == "h200"} == \
        {narrowpipe.get_target("h200").price_per_hour}


@pytest.mark.parametrize("price, why", [
    ({"zzz": 2.0}, "unknown target 'zzz'"),
    ({"h100-sxm": -2.0}, "prices must be positive"),
    ({"h100-sxm": 0.0}, "prices must be positive"),
    ({"h100-sxm": math.nan}, "prices must be positive"),
    (math.nan, "price must be a positive number"),
    (-8.0, "price must be a positive number"),
])
def test_a_bad_capacity_price_is_refused(model, price, why) -> None:
    with pytest.raises(NarrowpipeError, match=why):
        _capacity(model, price=price)


def test_a_capacity_price_for_a_target_not_planned_is_warned_about(model) -> None:
    with pytest.warns(NarrowpipeWarning, match="mi300x.*prices nothing"):
        _capacity(model, price={"h100": 2.0, "mi300x": 1.0})


@pytest.mark.parametrize("price", [-2.0, 0, math.nan, math.inf, "2", True])
def test_analyze_and_serve_refuse_a_price_that_is_not_a_positive_number(model, price) -> None:
    with pytest.raises(NarrowpipeError, match="price must be a positive number"):
        narrowpipe.analyze(model, "h100", price=price, batch=1)
    with pytest.raises(NarrowpipeError, match="price must be a positive number"):
        narrowpipe.serve(model, "h100", mode="decode", batch=1, context=10, price=price)


def test_an_unknown_fusion_mode_is_a_narrowpipe_error(model) -> None:
    for call in (lambda: narrowpipe.analyze(model, "h100", fusion="bogus", batch=1),
                 lambda: narrowpipe.compare(model, ["h100", "tpu-v6e"], fusion="bogus", batch=1)):
        with pytest.raises(NarrowpipeError, match="fusion 'bogus' is not one of full, no-epilogue, none"):
            call()


def test_a_capacity_tpot_may_be_written_as_the_cli_writes_it(model) -> None:
    """"30ms" is 0.03 s (as --tpot 30ms); a string without its unit is refused, not guessed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        as_text = narrowpipe.plan_capacity(model, "h100", rate=10, input_len=10, output_len=10, tpot="30ms")
        as_number = narrowpipe.plan_capacity(model, "h100", rate=10, input_len=10, output_len=10, tpot=0.03)
    assert as_text.tpot_target_s == as_number.tpot_target_s == pytest.approx(0.03)
    for tpot, why in (("30", "has no unit"), ("fast", "expects a duration"), (None, "must be positive"),
                      (-1, "positive finite duration"), ([30], "must be seconds")):
        with pytest.raises(NarrowpipeError, match=why):
            narrowpipe.plan_capacity(model, "h100", rate=10, input_len=10, output_len=10, tpot=tpot)


def test_a_device_count_given_as_text_is_read_or_refused(model) -> None:
    p = narrowpipe.plan(model, "dgx-h100", "8", global_batch=8)
    assert p.devices == 8 == p.parallel.devices
    with pytest.raises(NarrowpipeError, match="devices must be an integer, got 'eight'"):
        narrowpipe.plan(model, "dgx-h100", "eight", global_batch=8)
    with pytest.raises(NarrowpipeError, match="global_batch must be an integer, got 8.5"):
        narrowpipe.plan(model, "dgx-h100", 8, global_batch=8.5)


def test_a_dim_role_may_be_named_and_a_wrong_name_is_refused(model) -> None:
    """role_size("batch") answered 1 and dims_with_role("batch") [] whatever the graph held."""
    assert model.dims_with_role("batch") == model.dims_with_role(DimRole.BATCH) == ["batch"]
    assert model.role_size("batch", {"batch": 4}) == 4
    assert model.role_size("SEQUENCE", {"seq": 96}) == 96
    for role in ("bach", "", 3, None):
        with pytest.raises(NarrowpipeError, match="role"):
            model.role_size(role)  # type: ignore[arg-type]
        with pytest.raises(NarrowpipeError, match="role"):
            model.dims_with_role(role)  # type: ignore[arg-type]


def test_serve_decode_json_writes_no_prompt_or_output_length(tmp_path, capsys) -> None:
    """A decode step reads only the KV cache's length; the CLI wrote its --input/--output defaults
    (2048/256) where the API and serve-sweep write null. Prefill writes no output length."""
    out = tmp_path / "d.json"
    assert main(["serve", "gpt2", "--target", "h100", "--mode", "decode", "--input", "512", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert (d["input_len"], d["output_len"], d["context"]) == (None, None, 512)
    api = narrowpipe.serve(load_example("gpt2"), "h100", mode="decode", context=512)
    assert d["tpot_s"] == pytest.approx(api.tpot_s) and api.input_len is None and api.output_len is None
    assert main(["serve", "gpt2", "--target", "h100", "--mode", "prefill", "--input", "512", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert (d["input_len"], d["output_len"]) == (512, None)
