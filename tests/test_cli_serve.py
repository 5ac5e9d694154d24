"""The serving commands: a capacity plan under a latency target, one deployment, a sweep, --mode."""

import json
import re

import pytest

import narrowpipe
from narrowpipe.cli import main
from narrowpipe.cli_serve import parse_duration


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "small.json"
    narrowpipe.transformer(layers=4, hidden=1024, heads=16, vocab=32000, ffn=4096, kv_heads=4, gated_mlp=True,
                           seq=128, name="small").save(path)
    return str(path)


def test_durations_take_units_and_bare_milliseconds():
    assert parse_duration("30ms", "--tpot") == pytest.approx(0.030)
    assert parse_duration("0.5s", "--tpot") == 0.5 and parse_duration("30", "--tpot") == pytest.approx(0.030)
    with pytest.raises(narrowpipe.NarrowpipeError, match="--tpot"):
        parse_duration("fast", "--tpot")


def test_serve_plans_devices_for_a_rate_under_a_tpot_target(model, tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["serve", model, "--target", "h100", "--rate", "100", "--input", "512", "--output", "64",
                 "--tpot", "5ms", "--devices", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "answer:" in text and "throughput:" in text and "latency:" in text
    # the tables fit 80 columns; a "wrote PATH" line keeps its path whole (a terminal wraps it)
    assert max(len(line) for line in text.splitlines() if not line.startswith("wrote ")) <= 80
    plan = json.loads(out.read_text())
    assert plan["format"] == "narrowpipe.capacity" and [c["layout"] for c in plan["candidates"]] == ["TP1", "TP2"]
    best = next(c for c in plan["candidates"] if c["layout"] == plan["best_throughput"]["layout"])
    assert best["tpot_s"] <= 0.005 and best["total_devices"] == best["replicas"] * best["devices"]
    # the replicas carry the rate: each serves batch / (output x TPOT) requests/s
    assert best["replicas"] * best["batch"] / (64 * best["tpot_s"]) >= 100


def test_serve_point_question_says_what_overflows(model, capsys):
    assert main(["serve", model, "--target", "h100", "--mode", "decode", "--batch", "4096",
                 "--context", "32768"]) == 0
    text = capsys.readouterr().out
    assert "does not fit: the KV cache overflows" in " ".join(text.split())


def test_serve_sweep_and_compare_decode_mode(model, tmp_path, capsys):
    out = tmp_path / "sweep.json"
    assert main(["serve-sweep", model, "--target", "h100", "--batches", "1,64", "--context", "256",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "context 256: largest batch that fits" in " ".join(text.split())
    assert [p["batch"] for p in json.loads(out.read_text())["points"]] == [1, 64]
    assert main(["compare", model, "--targets", "h100", "--mode", "decode", "--context", "1000",
                 "--set", "batch=8"]) == 0
    assert "past=1000" in capsys.readouterr().out


def test_serve_takes_fp8_gemm_inputs_beside_16_bit_activations(model, tmp_path):
    """--gemm-inputs: FP8 W8A8 as the engines run it, named in the report's notes, and faster to
    prefill than FP8 weights read by bf16 GEMMs (the GEMMs run at the FP8 rate)."""
    def ttft(*extra):
        out = tmp_path / "r.json"
        assert main(["serve", model, "--target", "h100", "--mode", "prefill", "--batch", "8", "--input", "128",
                     "--weights", "fp8_e4m3", "--activations", "bf16", *extra, "--json", str(out)]) == 0
        return json.loads(out.read_text())
    w8a8, w8 = ttft("--gemm-inputs", "fp8_e4m3"), ttft()
    assert any("GEMM inputs in fp8_e4m3" in n for n in w8a8["notes"])
    assert w8a8["ttft_s"] < w8["ttft_s"]
    # serving report version 2 and later carry the GEMM input format beside the other three
    assert w8a8["version"] >= 2
    assert w8a8["formats"] == {"weights": "fp8_e4m3", "activations": "bf16", "kv": None, "gemm_inputs": "fp8_e4m3"}
    assert w8["formats"]["gemm_inputs"] is None
    from narrowpipe.schema import validate
    validate(w8a8)


def test_analyze_counts_the_graph_as_given_and_mode_prefill_says_its_head_runs_on_the_last_token(model, tmp_path):
    """Without --mode, analyze counts the graph as given (every position's logits, as the export's
    forward computes them); --mode prefill is a serving step whose head runs on each sequence's last
    token: 2 x (128 - 1) x 1024 x 32000 FLOPs fewer, and the report's notes say so."""
    def report(*extra):
        out = tmp_path / "a.json"
        assert main(["analyze", model, "--target", "h100", "--json", str(out), "-q", *extra]) == 0
        return json.loads(out.read_text())
    as_given, prefill = report(), report("--mode", "prefill", "--context", "128")
    assert as_given["dims"] == {"batch": 1, "seq": 128} and not any("--mode" in n for n in as_given["notes"])
    assert as_given["totals"]["flops"] - prefill["totals"]["flops"] == 2 * 127 * 1024 * 32000
    assert any(n.startswith("--mode prefill:") and "last token" in n for n in prefill["notes"])


@pytest.mark.parametrize("value, reason", [("fp7", "unknown GEMM input format 'fp7'"),
                                           ("int32", "'int32' .* is no quantized GEMM input"),
                                           ("bool", "'bool' .* is not a number format")])
def test_a_bad_gemm_inputs_format_is_refused_naming_the_flag(model, capsys, value, reason):
    assert main(["serve", model, "--target", "h100", "--mode", "prefill", "--input", "128",
                 "--gemm-inputs", value]) == 2
    captured = capsys.readouterr()
    err = " ".join((captured.out + captured.err).split())
    assert "--gemm-inputs" in err and re.search(reason, err)


@pytest.mark.parametrize("rate", ["nan", "inf", "-inf", "0"])
def test_a_rate_that_is_no_positive_finite_number_is_refused(model, capsys, rate):
    assert main(["serve", model, "--target", "h100", f"--rate={rate}", "--tpot", "30ms"]) == 2
    captured = capsys.readouterr()
    assert "--rate must be a positive finite number" in " ".join((captured.out + captured.err).split())


@pytest.mark.parametrize("argv, flag", [
    (["--ttft", "10ms"], "--ttft belongs to a capacity plan"),              # a target with nothing to meet
    (["--rate", "5"], "--rate belongs to a capacity plan"),
    (["--tpot", "30ms", "--tp", "2", "--batch", "4"], "--tp, --batch: a capacity plan"),
    (["--tpot", "30ms", "--mode", "decode"], "--mode: a capacity plan"),
    (["--mode", "generate", "--context", "100"], "--context is the KV cache length of --mode decode"),
    (["--mode", "prefill", "--context", "100"], "--mode prefill takes its lengths from --input"),
    (["--tpot", "30ms", "--devices", "0"], "--devices must be at least 1"),
    (["--devices", "2"], "--devices belongs to a capacity plan"),
    (["--pp", "1,2"], "one pipeline depth for one deployment"),
])
def test_a_flag_the_question_would_ignore_is_refused(model, capsys, argv, flag):
    assert main(["serve", model, "--target", "h100", *argv]) == 2
    captured = capsys.readouterr()
    assert flag in " ".join((captured.out + captured.err).split())


def _plan_cli(model, tmp_path, capsys, *targets):
    out = tmp_path / "plan.json"
    code = main(["serve", model, "--target", "h100", "--rate", "10", "--input", "128", "--output", "16",
                 "--devices", "2", *targets, "--json", str(out)])
    return code, " ".join(capsys.readouterr().out.split()), json.loads(out.read_text())


def test_when_only_ttft_is_out_of_reach_the_plan_names_ttft_and_exits_1(model, tmp_path, capsys):
    """TPOT 10 s is met by every layout; a 1 us first token by none: the message names TTFT and the
    layout with the lowest batch-1 TTFT (it named the lowest TPOT, and the command exited 0)."""
    code, text, plan = _plan_cli(model, tmp_path, capsys, "--tpot", "10s", "--ttft", "1us")
    assert code == 1 and plan["best_throughput"] is None
    best = min(plan["candidates"], key=lambda c: c["ttft_s"])
    assert f"no layout meets the targets; the lowest TTFT reachable is {best['ttft_s'] * 1e3:.3g} ms " \
           f"({best['target']} {best['layout']})" in text
    assert "lowest TPOT reachable" not in text


def test_when_only_tpot_is_out_of_reach_the_plan_names_tpot(model, tmp_path, capsys):
    code, text, plan = _plan_cli(model, tmp_path, capsys, "--tpot", "1us", "--ttft", "10s")
    assert code == 1
    assert "the lowest TPOT reachable is" in text and "lowest TTFT" not in text
    code, text, plan = _plan_cli(model, tmp_path, capsys, "--tpot", "1us", "--ttft", "1us")
    assert code == 1 and "the lowest TPOT reachable is" in text and "the lowest TTFT reachable is" in text


def test_a_generation_of_one_token_has_no_time_per_output_token(model, tmp_path, capsys):
    out = tmp_path / "one.json"
    assert main(["serve", model, "--target", "h100", "--mode", "generate", "--input", "16", "--output", "1",
                 "--json", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "time per output token n/a (no decode step" in text and "0 ns" not in text
    report = json.loads(out.read_text())
    assert report["tpot_s"] is None and report["e2e_s"] == pytest.approx(report["ttft_s"])


def test_compare_and_serve_give_one_deployment_one_fit(tmp_path):
    """Llama-3-8B decoding 64 sequences at 8,191 tokens on an H100: by hand, weights 8.03 B x 2 B =
    16.06 GB and the KV cache 64 x 8,192 x (32 layers x 2 x 8 heads x 128 x 2 B) = 68.72 GB: 84.78 GB,
    under the 85.52 GB of the card but over the 76.97 GB serving leaves after vLLM's 10%. ``serve``
    said no and ``compare --mode decode`` said 'fits: yes (84.8 GB)'; both hold it to the reserve now."""
    kv, weights, capacity = 64 * 8192 * 32 * 2 * 8 * 128 * 2, 8_030_261_248 * 2, 81559 * 2**20
    assert 0.9 * capacity < kv + weights < capacity
    serve_json, compare_json = tmp_path / "s.json", tmp_path / "c.json"
    assert main(["-q", "serve", "llama-3-8b", "--target", "h100", "--mode", "decode", "--batch", "64",
                 "--context", "8191", "--json", str(serve_json)]) == 0
    assert main(["-q", "compare", "llama-3-8b", "--targets", "h100", "--mode", "decode", "--context", "8191",
                 "--set", "batch=64", "--json", str(compare_json)]) == 0
    served = json.loads(serve_json.read_text())
    timing = json.loads(compare_json.read_text())["targets"][0]["timing"]
    assert served["memory"]["fits"] is False and timing["fits"] is False
    assert timing["memory_required"] == pytest.approx(kv + weights, rel=0.002)
    assert any("serving reserve" in n for n in timing["notes"])


def test_a_plan_over_several_targets_prices_each_and_warns_of_an_unserved_price(model, tmp_path, capsys):
    """--price h100=1 with --target h100,h200 priced nothing (the catalog's $6.88/h) before; now the
    H100 rows take $1/h, the H200's its catalog price, and a price for a chip not served is warned."""
    out = tmp_path / "p.json"
    argv = ["serve", model, "--target", "h100,h200", "--rate", "10", "--input", "512", "--output", "64",
            "--tpot", "4ms", "--devices", "1", "--price", "h100=1", "--json", str(out)]
    assert main(argv) == 0
    plan = json.loads(out.read_text())
    prices = {c["target"]: c["price_per_hour"] for c in plan["candidates"]}
    assert prices == {"h100-sxm": 1.0, "h200": narrowpipe.get_target("h200").price_per_hour}
    assert plan["cheapest"]["target"] == "h100-sxm" and plan["version"] == 2
    capsys.readouterr()
    main(["serve", model, "--target", "h100", "--rate", "10", "--input", "512", "--output", "64",
          "--tpot", "4ms", "--devices", "1", "--price", "h200=3"])
    assert re.search(r"--price for h200: not among the served targets", capsys.readouterr().err)


def test_a_plan_takes_a_system_file_as_its_target(model, tmp_path, capsys):
    """serve --target my-system.toml said "missing required field 'family'" (read as a chip file)."""
    from pathlib import Path
    system = tmp_path / "my-dgx.toml"
    text = (Path(narrowpipe.__file__).parent / "backends" / "systems" / "dgx-h100.toml").read_text()
    system.write_text(re.sub(r'(?m)^name = .*$', 'name = "my-dgx"', text, count=1))
    assert main(["serve", model, "--target", str(system), "--rate", "10", "--input", "512", "--output", "64",
                 "--tpot", "4ms", "--devices", "1"]) == 0
    assert "on h100-sxm" in capsys.readouterr().out


def test_a_deployment_that_does_not_fit_has_no_cost(tmp_path, capsys):
    """Llama-3-8B's 16 GB of bf16 weights alone overflow a 16 GB TPU v5e: serve printed '$1.06 per
    million tokens' for it, and serve-sweep's JSON carried a cost for points whose fits was false."""
    assert main(["serve", "llama-3-8b", "--target", "tpu-v5e", "--mode", "decode", "--batch", "8",
                 "--context", "2048", "--price", "tpu-v5e=1"]) == 0
    text = capsys.readouterr().out
    assert "does not fit" in text and "per million tokens" not in text
    out = tmp_path / "sw.json"
    assert main(["serve-sweep", "llama-3-8b", "--target", "tpu-v5e,h100", "--batches", "1", "--context", "512",
                 "--price", "tpu-v5e=1", "--json", str(out)]) == 0
    assert "$/M" in capsys.readouterr().out          # the sweep's table shows the price it was given
    points = {p["target"]: p for p in json.loads(out.read_text())["points"]}
    assert not points["tpu-v5e"]["fits"] and points["tpu-v5e"]["cost_per_million_tokens"] is None
    assert points["h100-sxm"]["fits"] and points["h100-sxm"]["cost_per_million_tokens"] > 0


def test_whatif_prints_the_price_it_was_given(model, capsys):
    assert main(["whatif", model, "--target", "h100", "--scale", "hbm_bandwidth=2", "--price", "h100=2"]) == 0
    assert re.search(r"cost .*\$[0-9.]+/run", capsys.readouterr().out)


@pytest.mark.parametrize("argv, message", [
    (["--mode", "decode", "--batch", "0"], "batch must be >= 1, got 0"),     # was run as batch 1, exit 0
    (["--mode", "decode", "--tp", "0"], "tp must be >= 1, got 0"),           # was run as TP1, exit 0
    (["--mode", "decode", "--batch", "-3"], "batch must be >= 1, got -3"),
    (["--tpot=-30ms", "--rate", "1"], "--tpot must be a positive duration, got '-30ms'"),
    (["--tpot", "0ms", "--rate", "1"], "--tpot must be a positive duration, got '0ms'"),
    (["--tpot", "30ms", "--ttft=-1s", "--rate", "1"], "--ttft must be a positive duration, got '-1s'"),
])
def test_a_zero_or_negative_count_or_duration_is_refused_not_defaulted(model, capsys, argv, message):
    assert main(["serve", model, "--target", "h100", *argv]) == 2
    captured = capsys.readouterr()
    assert message in " ".join((captured.out + captured.err).split())


def test_a_batch_of_zero_set_for_a_mode_is_refused(model, capsys):
    """`--set batch=0` was read as "no batch given" (``or 1``), then refused as disagreeing with itself."""
    assert main(["analyze", model, "--target", "h100", "--mode", "decode", "--context", "64",
                 "--set", "batch=0"]) == 2
    captured = capsys.readouterr()
    assert "--set batch=0: a serving step's batch must be at least 1" in " ".join((captured.out + captured.err).split())


def test_a_context_past_the_positions_is_refused_before_any_step_is_timed(capsys, monkeypatch):
    """serve-sweep timed every crossover (20-35 s on 70B) before refusing a context of 8,192 on a model
    of 8,192 positions; the check comes first now: no step is timed."""
    from narrowpipe.costmodel.serving import replica as replica_module
    timed = []
    monkeypatch.setattr(replica_module.Replica, "step", lambda self, *a: timed.append(a))
    assert main(["serve-sweep", "llama-3-8b", "--target", "h100", "--batches", "1", "--context", "2048,8192"]) == 2
    captured = capsys.readouterr()
    text = " ".join((captured.out + captured.err).split())
    assert "handles at most 8,192 positions; this question needs 8,193" in text
    assert timed == []


def test_serve_sweep_shows_what_overflows_whole_in_80_columns(model, capsys, monkeypatch):
    """The fits cell was cut to "no: KV +26… GB" in 80 columns; the figure goes below the table, whole.
    By hand, for the small model (4 layers x K,V x 4 KV heads x 64 x 2 B = 4,096 B a token) at batch
    8,192 and 4,096 tokens of context: 8,192 x 4,097 x 4,096 B = 137.5 GB of cache, against the 90% of
    an H100's 85.52 GB that vLLM leaves (76.97 GB) less the weights and activations."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["serve-sweep", model, "--target", "h100", "--batches", "1,8192", "--context", "4096"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and "no [1]" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("[1]"))
    assert "batch 8192, context 4096: KV cache +" in line
    over = float(re.search(r"KV cache \+([0-9.]+) GB", line).group(1))
    kv = 8192 * 4097 * 4096
    assert kv - 76.97e9 < over * 1e9 < kv - 76.97e9 + 2e9       # plus the weights and activations: under 2 GB
