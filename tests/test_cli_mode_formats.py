"""``--weights``/``--activations`` reach the graph ``--mode`` serves, and mean what ``serve``'s do.

``compare --mode decode --weights int8`` on a cache-less graph used to rebuild it from its
architecture after the retyping, so the flag was silently dropped (Llama-3.1-8B: 7.06 ms and 16.2 GB
on H100, the bf16 figures); and ``compare --weights`` retyped the embedding and ``lm_head`` (8.03 GB)
where ``serve --weights`` keeps them in 16 bits (9.08 GB). The figures here are counted by hand from
the architecture and the H100 catalog numbers, as in ``test_decode_hand_check``.
"""

import json

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.cli import main

L, E, H, HKV, D, F, V = 32, 4096, 32, 8, 128, 14336, 128256
CONTEXT = 1024


def _linear_params() -> int:
    """q, k, v, o, gate, up and down of every layer: what an int8 checkpoint (AWQ/GPTQ/ModelOpt) quantizes."""
    return L * (E * E + 2 * E * HKV * D + E * E + 3 * E * F)


#: int8 linear layers; embedding, lm_head (untied) and the 2L+1 norms' scales in bf16
WEIGHT_BYTES = _linear_params() + 2 * (2 * V * E + (2 * L + 1) * E)


def _hand_decode_s(kernels: int) -> float:
    """One memory-bound decode step: the weights a step streams (of the embedding only the one row
    gathered), the cache of ``CONTEXT`` tokens plus the new one, at the achievable bandwidth; then a
    launch per kernel and the GEMM latency floor per GEMM (7 per layer and the head)."""
    h100 = get_target("h100")
    read = _linear_params() + 2 * (V * E + E + (2 * L + 1) * E) + L * 2 * HKV * D * 2 * (CONTEXT + 1)
    return read / (h100.memory_bandwidth * h100.memory_efficiency) + kernels * h100.launch_overhead \
        + (7 * L + 1) * h100.gemm_latency


@pytest.fixture(scope="module")
def builder_json(tmp_path_factory):
    """The QA's graph: the model builder's Llama-3.1-8B without a cache (serving rebuilds it)."""
    path = tmp_path_factory.mktemp("m") / "llama31-8b.json"
    narrowpipe.transformer(L, E, H, V, ffn=F, kv_heads=HKV, gated_mlp=True, seq=8192).save(path)
    return str(path)


def _compare(model: str, tmp_path, *args: str) -> dict:
    out = tmp_path / "cmp.json"
    assert main(["compare", model, "--targets", "h100", "--set", "batch=1", *args, "--json", str(out)]) == 0
    return json.loads(out.read_text())["targets"][0]


@pytest.mark.parametrize("model", ["builder", "llama-3-8b"], ids=["builder-json", "torch-export"])
def test_decode_mode_keeps_the_int8_weights_of_a_rebuilt_graph(model, builder_json, tmp_path):
    r = _compare(builder_json if model == "builder" else model, tmp_path,
                 "--mode", "decode", "--context", str(CONTEXT), "--weights", "int8")
    assert r["totals"]["weight_bytes"] == pytest.approx(WEIGHT_BYTES, rel=1e-6)      # 9.08 GB, not 16.06
    t = r["timing"]
    assert t["time_s"] == pytest.approx(_hand_decode_s(t["kernels"]), rel=0.03)         # ~4.6 ms, not 7.06
    assert t["time_s"] < 0.0055


def test_weights_mean_the_same_deployment_in_compare_and_serve(builder_json, tmp_path, capsys):
    plain = _compare(builder_json, tmp_path, "--set", "seq=1", "--weights", "int8")
    assert plain["totals"]["weight_bytes"] == pytest.approx(WEIGHT_BYTES, rel=1e-6)
    out = tmp_path / "serve.json"
    assert main(["serve", builder_json, "--target", "h100", "--mode", "decode", "--batch", "1",
                 "--context", str(CONTEXT), "--weights", "int8", "--json", str(out)]) == 0
    served = json.loads(out.read_text())
    assert served["memory"]["weights"] == pytest.approx(WEIGHT_BYTES, rel=1e-6)
    decode = _compare(builder_json, tmp_path, "--mode", "decode", "--context", str(CONTEXT), "--weights", "int8")
    assert decode["timing"]["time_s"] == pytest.approx(served["tpot_s"], rel=0.01)


def test_prefill_mode_keeps_fp8_activations_and_weights(builder_json, tmp_path):
    """A 1024-token prefill in fp8 runs its GEMMs at H100's fp8 rate (twice bf16's), so it is well
    under the bf16 prefill (compute-bound, ~23 ms) and the report says fp8."""
    args = ("--mode", "prefill", "--context", str(CONTEXT))
    bf16 = _compare(builder_json, tmp_path, *args)
    fp8 = _compare(builder_json, tmp_path, *args, "--weights", "fp8_e4m3", "--activations", "fp8_e4m3")
    assert bf16["timing"]["dtype"] == "bf16" and fp8["timing"]["dtype"] == "fp8_e4m3"
    assert fp8["totals"]["weight_bytes"] == pytest.approx(WEIGHT_BYTES, rel=1e-6)    # fp8: a byte, as int8
    assert fp8["timing"]["time_s"] < 0.65 * bf16["timing"]["time_s"]
