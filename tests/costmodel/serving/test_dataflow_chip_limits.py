"""Serving on dataflow chips stays inside the chips there are, and every chip fits.

A QA pass found Llama-3-70B decode on Groq at 4k context on 620 full chips reported with "largest
batch that fits >= 65,536 (search cap)" (it would need ~380,000 chips: Groq had no largest system);
Cerebras at batch 65,536 and 8k context timed on a 3,933-wafer layout beside a memory line over the
2,048 wafers of its largest cluster; ``--system groq-node`` (8 chips) accepted a 72-chip layout and
changed nothing; the memory line divided the weights evenly over the chips (0.223 of 0.23 GB) while
the layout put 1.05 GB on one chip (the layout now caps each chip at its capacity; the memory line
is the layout's average chip, which fits exactly when every chip does).
"""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.cli import main
from narrowpipe.costmodel.serving.serve import replica_for
from narrowpipe.models.examples import load_example

KV_70B = 80 * 2 * 8 * 128 * 2          # bytes per token: 80 layers, K and V, 8 KV heads of 128, bf16
WEIGHTS_70B = 141.1e9


def test_groq_largest_batch_is_bounded_by_its_largest_system():
    groq = get_target("groq-lpu")
    assert groq.max_chips == 10440 and "GROQ-ISCA22" in groq.sources["max_chips"]
    r = narrowpipe.serve(load_example("llama-3-70b"), "groq-lpu", mode="decode", batch=1, context=4096)
    # by hand: (10,440 x 230 MB - 141 GB of weights) / (4,097 tokens x 327,680 B) ~ 1,684 sequences
    by_hand = (groq.max_chips * groq.memory_capacity - WEIGHTS_70B) / (4097 * KV_70B)
    assert 0.95 * by_hand < r.max_batch <= by_hand < 1 << 16
    assert r.memory.fits and r.memory.required <= groq.memory_capacity


def test_a_layout_over_the_largest_system_does_not_fit(capsys, monkeypatch):
    r = narrowpipe.serve(load_example("llama-3-70b"), "cerebras-wse3", mode="decode", batch=65536, context=8000)
    assert r.devices > 2048 and not r.fits
    assert any("more than the largest cerebras-wse3 system (2,048 chips): it does not fit" in n for n in r.notes)


def test_a_system_with_fewer_chips_than_the_layout_does_not_fit(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    r = narrowpipe.serve(load_example("llama-3-8b"), "groq-lpu", mode="decode", batch=1, context=2048,
                         system="groq-node")
    assert not r.fits and r.max_batch == 0
    assert any("more than the 8 chips of groq-node: it does not fit" in n for n in r.notes)
    assert main(["serve", "llama-3-8b", "--target", "groq-lpu", "--mode", "decode", "--batch", "1",
                 "--context", "2048", "--system", "groq-node"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "does not fit" in out and "largest batch that fits 0" in out


@pytest.mark.parametrize("batch", [1, 8, 64])
def test_the_memory_line_is_the_average_chip_and_every_chip_fits(batch):
    """The memory line is the layout's bytes over its chips, as the KV/dev column is (the fullest
    chip's, once shown, held weights at one batch and KV at another: KV/dev fell as the batch grew).
    The fit it gives is every chip's: the layout puts no more than a chip's capacity on any chip (a
    QA pass once found 1.05 GB on one 0.23 GB chip beside an even 0.223 GB a chip)."""
    replica = replica_for(load_example("llama-3-8b"), "groq-lpu")
    step = replica.step(batch, 1, 2048)
    total, weights, fullest, _ = step.chip_bytes
    mem = replica.memory(batch, 2049)
    chips = replica.kv_devices(batch, 2049)
    assert chips == step.devices
    assert mem.kv_cache == pytest.approx(batch * 2049 * 131_072 / chips, rel=1e-9)
    assert mem.weights == pytest.approx(weights / chips, rel=0.001)
    assert mem.fits and fullest <= get_target("groq-lpu").memory_capacity * (1 + 1e-9)
    assert mem.required == pytest.approx(total / chips, rel=0.001)  # the layout's bytes, averaged
