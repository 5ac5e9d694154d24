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


def test_a_crossing_term_before_others_names_its_own_excess_and_the_whole():
    """Llama-3-8B's bf16 weights (16.06 GB) on a TPU v5e (16 GiB, 10% reserved: 15.46 GB of room)
    with one sequence's 0.302 GB of cache: the weights alone are 0.60 GB over, the whole 0.90 GB
    (the message said "the weights overflows by 0.901 GB", the cache's share put on the weights)."""
    cap = 16 * 2**30
    m = memory_budget(cap, weights=16.06 * GB, activations=0, kv_cache=0.302 * GB, reserve_fraction=0.1)
    room = 0.9 * cap
    assert m.overflow == ("weights", pytest.approx(16.362 * GB - room), pytest.approx(room))
    own, whole = (16.06 * GB - room) / GB, (16.362 * GB - room) / GB
    assert f"does not fit by {whole:.3g} GB: the weights alone overflow by {own:.3g} GB" in m.explain()
    assert m.short() == f"weights +{own:.3g} GB, all +{whole:.3g} GB"
    last = memory_budget(80 * GB, weights=16 * GB, activations=0, kv_cache=100 * GB, reserve_fraction=0.1)
    assert last.short() == "KV cache +44 GB"                   # the last term crosses: one number


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


def test_a_batch_at_the_search_cap_is_a_lower_bound_in_the_json():
    """A small model's largest batch passes the search's cap: the table said ">= 65,536 (search
    cap)" while the JSON wrote max_batch 65536 as exact beside fits for a batch of 70,000."""
    from narrowpipe.costmodel.serving.replica import BATCH_SEARCH_LIMIT
    from narrowpipe.schema import validate

    g = narrowpipe.transformer(layers=1, hidden=64, heads=2, vocab=256, ffn=128, seq=16)
    # one sequence's KV cache at 32 tokens: 2 x 64 x 32 x 2 B = 8 kB; 80 GB holds millions
    small = serve(g, "h100", mode="decode", batch=70_000, context=31, with_crossover=False)
    assert small.fits and small.max_batch == BATCH_SEARCH_LIMIT
    doc = small.to_dict()
    assert doc["max_batch_is_lower_bound"] is True
    validate(doc)
    big = serve(g, narrowpipe.get_target("h100").scaled(memory_capacity=1e-4), mode="decode", batch=1, context=31,
                with_crossover=False)
    assert big.max_batch < BATCH_SEARCH_LIMIT and big.to_dict()["max_batch_is_lower_bound"] is False
