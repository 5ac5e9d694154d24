"""A ``.pt2`` of a transformers 5 mixture of experts calls ``torch.ops.transformers.grouped_mm_fallback``,
which exists only once ``transformers.integrations.moe`` is imported: the loader imports it (only when
the archive calls the op) and loads the file in a fresh process, as the CLI does; without transformers
the error is one sentence naming the namespace and the package, not torch's node dump. Each load runs
in a subprocess, since this test process has imported the op library while exporting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import narrowpipe  # noqa: E402

H, F, E, K, VOCAB, LAYERS, S = 64, 96, 4, 2, 128, 1, 8


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    config = transformers.MixtralConfig(hidden_size=H, intermediate_size=F, num_hidden_layers=LAYERS,
                                        num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                                        num_local_experts=E, num_experts_per_tok=K)
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(config).eval()   # fp32: the grouped_mm_fallback custom op
    ids = torch.randint(0, VOCAB, (1, S))
    ep = narrowpipe.export(model, (), {"input_ids": ids, "use_cache": False})
    assert any("grouped_mm_fallback" in str(n.target) for n in ep.graph.nodes)
    return narrowpipe.save_pt2(ep, tmp_path_factory.mktemp("moe") / "mixtral.pt2")


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    root = Path(narrowpipe.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)


def test_fresh_process_loads_a_saved_moe_archive_and_counts_its_experts(archive):
    """Expert FLOPs by hand: S tokens x top-K rows, gate+up (H -> 2F) and down (F -> H) per row."""
    code = ("import sys, json, narrowpipe\n"
            "assert 'transformers.integrations.moe' not in sys.modules\n"
            "r = narrowpipe.analyze(narrowpipe.load(sys.argv[1]))\n"
            "g = [row.flops for row in r.ops if row.op == 'grouped_dot']\n"
            "print(json.dumps(g))\n")
    out = _run(code, str(archive))
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [2 * S * K * H * 2 * F, 2 * S * K * F * H] * LAYERS


def test_cli_analyze_reads_the_archive(archive):
    out = _run("import sys; from narrowpipe.cli import main; sys.exit(main(['analyze', sys.argv[1]]))", str(archive))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "SerializeError" not in out.stdout + out.stderr


def test_without_transformers_the_error_names_the_namespace_and_the_package(archive):
    code = ("import sys; sys.modules['transformers'] = None\n"
            "import narrowpipe\n"
            "from narrowpipe.errors import ModelLoadError\n"
            "try:\n    narrowpipe.load(sys.argv[1])\n"
            "except ModelLoadError as exc:\n    print('ERR', exc)\n")
    out = _run(code, str(archive))
    assert out.returncode == 0, out.stderr[-2000:]
    message = out.stdout.strip()
    assert message.startswith("ERR") and len(message) < 600, message
    assert "torch.ops.transformers.grouped_mm_fallback" in message and "pip install transformers" in message
    assert "Node(" not in message and str(archive) in message


def test_an_archive_without_custom_ops_imports_no_op_library(tmp_path):
    path = narrowpipe.save_pt2(narrowpipe.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),)), tmp_path / "l.pt2")
    code = ("import sys, narrowpipe\nnarrowpipe.load(sys.argv[1])\n"
            "print('transformers.integrations.moe' in sys.modules)\n")
    out = _run(code, str(path))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
