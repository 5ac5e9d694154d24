"""Which dataflow layout a run reports, and what a serving row says of a layout over many chips.

QA: a SambaNova run offered "spreading over 95 chips" beside its 16-socket tensor-parallel layout
(max_chips 16), and the layout picked was the fastest even where it needed more chips than the rack
has; a Groq serving row read "KV cache 328 kB per token per sequence (per device)" on 616 chips, where
328 kB is all 80 layers of Llama-3-70B (each chip holds its own layers' share).
"""

from __future__ import annotations

import dataclasses
import io

import pytest
from rich.console import Console

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.serving import serve
from narrowpipe.models.examples import load_example
from narrowpipe.render.serving import print_serving


def test_a_layout_over_more_chips_than_the_rack_is_no_alternative_to_one_that_fits():
    """Llama-3-8B (16.06 GB) on SN40L sockets cut to 0.6 GB of HBM (still more than their 520 MB of
    SRAM) and 1 GB of DDR: no streaming (the weights exceed the DDR), so the pipeline needs
    ceil(16.06 / 0.6) = 27 chips > 16; tensor parallel over the 16 holds 1.0 GB a socket in HBM + DDR
    and fits, streaming 0.4 GB a socket from a DDR slowed to 1 GB/s: 0.4 s a token, slower than the
    pipeline's 12.6 ms, which was picked."""
    small = dataclasses.replace(get_target("sambanova-sn40l"), memory_capacity=0.6e9,
                                external_memory_capacity=1e9, external_memory_bandwidth=1e9)
    r = narrowpipe.analyze(load_example("llama-3-8b"), small, dims={"batch": 1, "seq": 1})
    assert r.timing.fits and r.timing.devices == 16
    assert r.timing.plan["layout"] == "tensor_parallel"
    assert r.time_s > 0.4
    spread = [n for n in r.timing.notes if n.startswith("spreading over")]
    assert spread and all("does not fit (27 chips, 16 available)" in n for n in spread), r.timing.notes


def test_the_kv_cache_row_of_a_dataflow_layout_is_the_models_over_its_chips():
    r = serve(load_example("llama-3-8b"), "groq-lpu", mode="decode", batch=1, context=128, with_crossover=False)
    model = 32 * 2 * 8 * 128 * 2                                     # 32 layers x K,V x 8 heads x 128 x bf16
    assert r.kv_bytes_per_token == round(model / r.devices)          # per device, as on a TP layout
    out = io.StringIO()
    print_serving(r, Console(file=out, width=250))
    text = out.getvalue()
    assert "per token per sequence (per chip: the model's, averaged over the layout's chips)" in text
    assert f"the layout's over its {r.devices:,} chips" in text and f"takes {model:,} B per token" in text
    assert r.devices > 1
    assert any(n.startswith("largest batch that fits: the dataflow layout adds chips") for n in r.notes)


@pytest.mark.parametrize("chips", [1])
def test_one_chip_is_not_spread_over(chips):
    """gpt2 training on one SN40L: the pipeline alternative is 'holding everything on 1 chip'."""
    from narrowpipe.costmodel.training import build_training_graph
    step = build_training_graph(load_example("gpt2"))
    r = narrowpipe.analyze(step, "sambanova-sn40l", dims={"batch": 8, "seq": 1024})
    assert not any("over 1 chips" in n for n in r.timing.notes)
    assert any(n.startswith(f"holding everything on {chips} chip would take") for n in r.timing.notes)
