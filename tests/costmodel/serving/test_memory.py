"""A batch that does not fit says which term overflows and by how much."""

import pytest

import narrowpipe
from narrowpipe.costmodel.serving.memory import memory_budget
from narrowpipe.costmodel.serving.serve import replica_for, serve

GB = 1e9


def test_the_term_crossing_capacity_overflows_by_the_excess():
    m = memory_budget(80 * GB, weights=16 * GB, activations=2 * GB, kv_cache=100 * GB, reserve_fraction=0.1)
    assert not m.fits
    term, by, room = m.overflow
    assert term == "kv_cache"
    assert by == pytest.approx((8 + 16 + 2 + 100 - 80) * GB)
    assert room == pytest.approx((80 - 8 - 16 - 2) * GB)
    assert "KV cache overflows by 46 GB" in m.explain()


def test_weights_alone_overflow():
    m = memory_budget(80 * GB, weights=140 * GB, activations=1 * GB, kv_cache=1 * GB, reserve_fraction=0.1)
    assert m.overflow[0] == "weights"
    assert m.overflow[1] == pytest.approx((8 + 140 + 2 - 80) * GB)


@pytest.fixture(scope="module")
def llama8b():
    g = narrowpipe.transformer(layers=32, hidden=4096, heads=32, vocab=128256, ffn=14336, kv_heads=8,
                               gated_mlp=True, seq=2048)
    return replica_for(g, "h100")


def test_batch_64_at_8k_context_on_one_h100(llama8b):
    """'Does batch 64 at 8k context fit on one H100?': 64 x 8193 tokens x 128 KiB = 68.7 GB of cache
    next to 16 GB of weights: no, the KV cache overflows."""
    r = serve(llama8b, mode="decode", batch=64, context=8192, with_crossover=False)
    assert r.memory.kv_cache == 64 * 8193 * 131072
    assert not r.fits and r.memory.overflow[0] == "kv_cache"
    assert "the KV cache overflows by" in r.memory.explain()
    # the largest batch that fits leaves less room than one more sequence needs
    best = llama8b.max_batch(8193)
    assert llama8b.memory(best, 8193).fits and not llama8b.memory(best + 1, 8193).fits
    free = 81559 * 2**20 * 0.9 - 16060522752 - llama8b.memory(best, 8193).activations   # nvidia-smi's total
    assert best == int(free // (8193 * 131072))
