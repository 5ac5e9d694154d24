"""Dataflow chips serving a KV cache: what streams, where the cache sits, and how far a batch goes.

A second QA pass found Cerebras decode of Llama-3-8B at batch 512 and 32k context (a 2.2 TB KV
cache) timed on one wafer streaming its weights at 108 ms, "fits" on 1 device, while the memory
line divided the cache over 51 wafers; with the cache on a wafer split from its attention, every
chip boundary carried a 4 GB cache tensor; Groq and Cerebras reported the batch search's 65,536
cap as the largest batch that fits; a TPU decode step labelled compute-bound sat under a line
saying decode stays memory-bound at any batch.
"""

from __future__ import annotations

import dataclasses

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.cli import main
from narrowpipe.costmodel.execution import TimingOptions
from narrowpipe.costmodel.execution.dataflow import DataflowModel, _boundary_bytes
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.serving import serving_graph
from narrowpipe.costmodel.timing import fused_program
from narrowpipe.models.examples import load_example


def llama31_8b():
    """Llama-3.1-8B: Llama-3-8B's layers with 131,072 positions (rope scaling, which the cost model
    does not see): the bundled Llama-3 export declares 8,192, and serving refuses a context past them."""
    g = load_example("llama-3-8b")
    g.dims["seq"] = dataclasses.replace(g.dims["seq"], max=131072)
    return g


@pytest.fixture(scope="module")
def sg():
    return serving_graph(llama31_8b())


def _program(sg, target, batch, context):
    table = interpret(sg.graph, sg.bindings(batch, 1, context))
    return table, fused_program(table, get_target(target), TimingOptions())


def test_weights_stream_only_while_the_kv_cache_fits_one_chip(sg):
    cs3 = get_target("cerebras-wse3")
    kv_per_token = sg.cache.bytes_per_token                     # 131,072 B: 32 layers x 8 heads x 128 x 2 x 2
    for batch, streams in ((8, True), (512, False)):      # 16 GB of weights need more than a wafer with either
        table, program = _program(sg, "cerebras-wse3", batch, 32768)
        layouts = DataflowModel().layouts(program, cs3, cs3.max_chips)
        assert any(lay.streaming for lay in layouts) == streams, batch
        assert (batch * 32768 * kv_per_token <= cs3.memory_capacity) == streams
    r = narrowpipe.serve(llama31_8b(), "cerebras-wse3", mode="decode", batch=512, context=32768)
    need = 512 * 32769 * kv_per_token / cs3.memory_capacity
    assert r.devices >= need and r.fits                        # the wafers the cache needs, timed on them
    # the budget is the layout's bytes over its wafers: the cache's average share, within a wafer
    assert r.memory.kv_cache == pytest.approx(512 * 32769 * kv_per_token / r.devices, rel=1e-9)
    assert r.memory.required <= cs3.memory_capacity * (1 + 1e-9)


def test_a_kv_cache_stays_on_the_chip_of_the_attention_that_reads_it(sg):
    table, program = _program(sg, "cerebras-wse3", 64, 32768)
    layout = DataflowModel().layouts(program, get_target("cerebras-wse3"), None)[0]
    assert layout.chips > 1 and not layout.streaming
    kv_tensor = 64 * 32768 * 8 * 128 * 2                      # one layer's K: 4.3 GB
    carried = _boundary_bytes(program.kernels, layout.cuts, layout.chips, table)
    assert max(carried) < kv_tensor / 100                      # the residual stream, not a cache
    r = narrowpipe.analyze(sg.graph, "cerebras-wse3", dims=sg.bindings(64, 1, 32768))
    assert r.timing.narrowest != "interconnect"


def test_the_batch_search_cap_is_not_reported_as_memory(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    groq = get_target("groq-lpu")                                     # as if it had no largest system:
    sources = {k: v for k, v in groq.sources.items() if k != "max_chips"}
    groq = dataclasses.replace(groq, max_chips=None, sources=sources)
    r = narrowpipe.serve(llama31_8b(), groq, mode="decode", batch=8, context=2048)
    assert r.max_batch == 1 << 16
    assert main(["serve", "llama-3-8b", "--target", "groq-lpu", "--mode", "decode", "--batch", "8",
                 "--context", "2048"]) == 0
    assert "(search cap)" not in " ".join(capsys.readouterr().out.split())   # Groq's 10,440 chips bound it
    # Cerebras clusters stop at 2,048 wafers: the cache bounds the batch there
    r = narrowpipe.serve(llama31_8b(), "cerebras-wse3", mode="decode", batch=8, context=32768)
    per_wafer = get_target("cerebras-wse3").memory_capacity
    assert 0 < r.max_batch < 1 << 16
    assert r.max_batch * 32769 * 131_072 <= 2048 * per_wafer


def test_the_crossover_line_does_not_contradict_the_step(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "250")
    path = tmp_path / "llama-3.1-8b.json"
    llama31_8b().save(path)
    assert main(["serve", str(path), "--target", "tpu-v6e", "--mode", "decode", "--batch", "8",
                 "--context", "32768"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "by the roofline, KV reads keep decode memory-bound at any batch" in text
    assert "in the execution model the step's compute terms pass its memory terms at batch" in text
    assert "decode stays memory-bound at any batch" not in text


def test_serve_sweep_shows_each_dataflow_rows_devices(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["serve-sweep", "llama-3-8b", "--target", "groq-lpu", "--batches", "1,64", "--context", "1024"]) == 0
    out = capsys.readouterr().out
    assert "the layout of each row (devices)" in out and "KV/dev" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(("1 ", "64 "))]
    devices = [int(r[2]) for r in rows]
    assert len(devices) == 2 and devices[0] < devices[1]


def test_a_step_labelled_compute_bound_before_the_crossover_says_why(capsys, monkeypatch):
    """TPU v6e decode at batch 64: MXU-padded attention kernels hold most of the time (the label),
    the summed memory terms still lead (the crossover): the card says both, not one of them."""
    monkeypatch.setenv("COLUMNS", "250")
    r = narrowpipe.serve(load_example("llama-3-8b"), "tpu-v6e", mode="decode", batch=64, context=2048)
    assert r.bound == "compute" and r.decode.memory_s > r.decode.compute_s
    assert r.crossover.modelled is not None and r.crossover.modelled > 64
    assert main(["serve", "llama-3-8b", "--target", "tpu-v6e", "--mode", "decode", "--batch", "64",
                 "--context", "2048"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "at batch 64 compute-bound kernels already hold most of the step (the TPOT label)" in text


@pytest.mark.parametrize("batch", [1, 8, 64])
def test_kv_per_device_on_groq_is_the_models_cache_over_its_chips(batch):
    """QA: "KV/dev" on Groq was the fullest chip's share, which fell as the batch grew (8.34 MB at
    batch 1, 441 kB at batch 8 of a 2.15 GB cache on 80 chips), and the JSON's kv_bytes_per_token was the
    whole model's where a TP layout's is one device's. By hand: Llama-3-8B's cache is 32 layers x K,V x
    8 heads x 128 x 2 B = 131,072 B a token; at 2,048 tokens of context a decode step holds 2,049 a
    sequence, 268.6 MB; over the layout's chips: 268.6 MB / 71 = 3.78 MB at batch 1, 2.15 GB / 80 =
    26.9 MB at batch 8. Weights: 16.06 GB over the same chips."""
    r = narrowpipe.serve(load_example("llama-3-8b"), "groq-lpu", mode="decode", batch=batch, context=2048,
                         with_crossover=False)
    chips = r.devices
    model_kv = batch * 2049 * 32 * 2 * 8 * 128 * 2
    assert r.memory.kv_cache == pytest.approx(model_kv / chips, rel=1e-9)
    assert r.kv_bytes_per_token == round(131_072 / chips)
    assert r.kv_bytes_per_sequence == round(2049 * 131_072 / chips)
    weights = 8_030_261_248 * 2                               # Llama-3-8B's parameters in bf16
    assert r.memory.weights * chips == pytest.approx(weights, rel=0.001)
    assert r.memory.fits and r.memory.required <= get_target("groq-lpu").memory_capacity * (1 + 1e-9)
    if batch == 8:
        assert chips == 80 and r.memory.kv_cache == pytest.approx(26.9e6, rel=0.002)
