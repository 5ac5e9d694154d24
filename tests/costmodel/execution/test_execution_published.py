"""Dataflow chips' batch-1 decode against vendors' published tokens/s (benchmarks/published_decode.py).

The per-kernel latency in the Groq and Cerebras files is fitted to the 8B figure; the 70B figure,
with ten times the weights, 4 wafers or 620 chips, and 2.5x the kernels, is held out.
Before the latency existed the 70B prediction was 94x the published rate on Cerebras.
"""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.models.examples import load_example


def _tokens_per_s(example: str, target: str, context: int = 2048) -> float:
    """One batch-1 decode step with a KV cache of ``context`` tokens, as ``compare --mode decode``
    times it (the latency is fitted to this graph, not to the export's cache-less forward)."""
    from narrowpipe.costmodel.serving import serving_graph
    sg = serving_graph(load_example(example))
    return 1 / narrowpipe.analyze(sg.graph, target, dims=sg.bindings(1, 1, context)).time_s


@pytest.mark.parametrize("target,published,context", [("cerebras-wse3", 450, 2048),  # CER-INF: Llama 3.1 70B
                                                      ("groq-lpu", 300, 4096)])      # GROQ-INF: Llama 2 70B
def test_held_out_70b_decode_is_within_2x_of_published(target, published, context):
    assert 0.5 < _tokens_per_s("llama-3-70b", target, context) / published < 2.0


@pytest.mark.parametrize("target,published", [("cerebras-wse3", 1800), ("groq-lpu", 750)])
def test_fitted_8b_decode_matches_its_published_figure(target, published):
    assert _tokens_per_s("llama-3-8b", target) == pytest.approx(published, rel=0.05)


def test_70b_on_cerebras_spans_wafers_instead_of_streaming():
    r = narrowpipe.analyze(load_example("llama-3-70b"), "cerebras-wse3", batch=1, seq=1)
    assert r.timing.devices == 4 and not r.timing.plan["weight_streaming"]   # 141 GB / 44 GB per wafer


def test_sn40l_node_serves_8b_tensor_parallel_near_the_published_rate():
    """SN-BLOG: 1,042 tokens/s for Llama 3.1 8B on a 16-socket SN40L node (nothing fitted to it).
    One socket streaming from HBM gives 85; the node's 16 sockets, each reading 1/16 of the weights
    at 75% of its HBM bandwidth (SN-DAC) plus an all-reduce per block, give ~1,100."""
    r = narrowpipe.analyze(load_example("llama-3-8b"), "sambanova-sn40l", batch=1, seq=1)
    assert r.timing.devices == 16 and r.timing.plan["layout"] == "tensor_parallel"
    assert r.timing.plan["all_reduces"] == 64                       # two per layer, found from the graph
    assert 1 / r.time_s == pytest.approx(1042, rel=0.15)
    weights = 16.06e9                                               # bf16 Llama-3-8B incl. embeddings
    floor = weights / (16 * 1.6e12 * 0.75)                          # by hand: HBM of the node at 75%
    assert floor < r.time_s < floor + 64 * 2e-6 + 2e-4              # + one 2 us hop per all-reduce


@pytest.mark.parametrize("nbytes, measured_us", [(33554456, 33.65), (8388632, 8.87), (2097176, 2.62)])
def test_tpu_v4_reads_hbm_at_the_rate_its_measured_copies_ran(nbytes, measured_us):
    """SCALESIM-V4: XLA copy-done events on a TPU v4 (medians of 5, 6 and 6 copies of these sizes);
    the catalog's bandwidth curve is their rate, so the model's time for the bytes is the copy's."""
    from narrowpipe.backends import get_target
    from narrowpipe.costmodel.execution.common import memory_time
    assert memory_time(get_target("tpu-v4"), nbytes) == pytest.approx(measured_us * 1e-6, rel=0.03)


def test_tpu_v4_dequantizes_int8_weights_on_its_vpu_alus():
    """SB-TPU: 8 x 128 (sublane, lane) pairs of 2 ALUs per TensorCore, 2 TensorCores, at the 1.049 GHz
    the bf16 peak implies: int8 weights cost two VPU operations each (convert, scale) before the MXU."""
    from narrowpipe.backends import get_target
    from narrowpipe.costmodel.execution.common import dequant_time
    from narrowpipe.ir import DType
    alu_ops_per_s = 2 * 8 * 128 * 2 * 275e12 / (8 * 128 * 128 * 2)
    assert dequant_time(get_target("tpu-v4"), DType.BF16, 1e9, 1) == pytest.approx(2e9 / alu_ops_per_s, rel=0.01)
