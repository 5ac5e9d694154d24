import json

import pytest

from narrowpipe.cli import main, parse_sets
from narrowpipe.errors import NarrowpipeError


def test_analyze_example_prints_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["analyze", "gpt2", "--set", "seq=128", "--json", str(out), "--top", "5"]) == 0
    text = capsys.readouterr().out
    assert "by op type" in text and "dot" in text and "seq=128" in text
    data = json.loads(out.read_text())
    assert data["format"] == "narrowpipe.report" and data["dims"]["seq"] == 128
    assert len(data["ops"]) > 100 and all("flops" in op for op in data["ops"])


def test_bad_inputs_exit_2_with_a_message(tmp_path, capsys):
    assert main(["analyze", "no-such-model"]) == 2
    assert "no bundled example" in capsys.readouterr().err
    bad = tmp_path / "x.onnx"
    bad.write_bytes(b"\x00\x01garbage")
    assert main(["analyze", str(bad)]) == 2
    assert "x.onnx" in capsys.readouterr().err
    assert main(["analyze", "gpt2", "--set", "colour=3"]) == 2
    assert "unknown dim" in capsys.readouterr().err


def test_an_error_naming_a_long_path_stays_on_one_line_in_a_narrow_terminal(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "40")
    deep = tmp_path / ("a-folder-with-a-long-name-" * 3) / "model.onnx"
    assert main(["analyze", str(deep)]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(deep) in lines[0]


def test_unmodeled_ops_are_shown_with_counts(tmp_path, capsys):
    from narrowpipe.ir import DType, Graph, Op, TensorType, save_json
    g = Graph("m")
    x = g.add_input("x", TensorType(DType.FP32, (4,)))
    y = g.add_node(Op.UNKNOWN, [x], [TensorType(DType.FP32, (4,))], {"source_op": "aten.mystery.default"})
    g.add_node(Op.UNKNOWN, y.outputs, [TensorType(DType.FP32, (4,))], {"source_op": "aten.mystery.default"})
    path = tmp_path / "m.json"
    save_json(g, path)
    assert main(["analyze", str(path)]) == 0
    text = capsys.readouterr().out
    assert "UNMODELED" in text and "aten.mystery.default" in text


def test_parse_sets():
    assert parse_sets(["batch=8", "seq=2048,kv=4"]) == {"batch": 8, "seq": 2048, "kv": 4}
    with pytest.raises(NarrowpipeError):
        parse_sets(["batch"])


def test_analyze_drops_columns_rather_than_folding_them_in_a_narrow_terminal(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["analyze", "llama-3-8b", "--target", "h100", "--set", "seq=16"]) == 0
    narrow = capsys.readouterr().out
    assert "narrow terminal: no source" in narrow and "linear_224" in narrow      # names stay whole
    assert max(len(line) for line in narrow.splitlines()) <= 80
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["analyze", "llama-3-8b", "--target", "h100", "--set", "seq=16"]) == 0
    wide = capsys.readouterr().out
    assert "narrow terminal" not in wide and "┃ source" in wide and "lm_head" in wide


def test_expert_balance_flag_changes_moe_bytes_and_says_so(tmp_path, capsys):
    """Mixtral 8x7B's config at batch 8 decode: zipf:2 routing reaches 5 experts per layer, not 8."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                                  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                                  "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2}))
    reports = {}
    for balance in ("balanced", "zipf:2"):
        out = tmp_path / f"{balance}.json"
        assert main(["analyze", str(config), "--set", "batch=8", "--set", "seq=1", "--expert-balance", balance,
                     "--json", str(out)]) == 0
        reports[balance] = json.loads(out.read_text())
    assert "5 of 8 experts read" in capsys.readouterr().out
    expert = 3 * 4096 * 14336 * 2
    assert reports["balanced"]["totals"]["bytes"] - reports["zipf:2"]["totals"]["bytes"] == 32 * 3 * expert
    assert main(["analyze", str(config), "--expert-balance", "zipf"]) == 2
    assert "expert balance 'zipf'" in capsys.readouterr().err
