"""The precision label says what the weights are stored as where they are narrower than the MMAs
(QA: ``--weights fp8_e4m3`` still printed "(gpu, bf16)", and "bf16 as fp16" on a V100)."""

from __future__ import annotations

from rich.console import Console

import narrowpipe
from narrowpipe.costmodel.compare import compare
from narrowpipe.costmodel.precision import with_precision
from narrowpipe.models.examples import load_example
from narrowpipe.render.comparison import print_comparison


def test_weight_only_formats_name_their_weights_beside_the_compute_precision():
    llama = load_example("llama-3-8b")
    fp8 = with_precision(llama, weights="fp8_e4m3")
    assert narrowpipe.analyze(fp8, "h100", batch=1, seq=128).timing.precision == "bf16, fp8_e4m3 weights"
    assert narrowpipe.analyze(fp8, "v100", batch=1, seq=128).timing.precision == "bf16 as fp16, fp8_e4m3 weights"
    int4 = with_precision(llama, weights="int4")
    assert narrowpipe.analyze(int4, "h100", batch=1, seq=128).timing.precision == "bf16, int4 weights"
    # no narrower weights: the label is the compute precision alone, as before
    assert narrowpipe.analyze(llama, "h100", batch=1, seq=128).timing.precision == "bf16"
    both = with_precision(llama, weights="fp8_e4m3", activations="fp8_e4m3")
    assert narrowpipe.analyze(both, "h100", batch=1, seq=128).timing.precision == "fp8_e4m3"
    console = Console(record=True, width=300)
    print_comparison(compare(fp8, ["h100"], dims={"batch": 1, "seq": 128}), console)
    assert "(gpu, bf16, fp8_e4m3 weights)" in console.export_text()
