"""A torch graph holding ops FlopCounterMode counts as 0 (SDPA on CPU, addbmm, dot, mv, transformers'
grouped experts) gets a report note naming them with their FLOPs; the note's total is exactly the
difference between ``modeled_flops`` and FlopCounterMode run on the same module (the reference),
and the counts themselves do not change. A graph of plain matmuls gets no note."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402


def _fcm(module, args, kwargs=None) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        module(*args, **(kwargs or {}))
    return counter.get_total_flops()


def _gap_note(report) -> tuple[str, int]:
    notes = [n for n in report.notes if "FlopCounterMode counts 0" in n]
    assert len(notes) == 1, report.notes
    return notes[0], int(re.search(r"by up to ([\d,]+) FLOPs", notes[0]).group(1).replace(",", ""))


class Mixed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, q, b1, b2, v, m):
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        return self.proj(a), torch.addbmm(q[0, 0], b1, b2), torch.dot(v, v), torch.mv(m, v)


ARGS = (torch.randn(1, 2, 8, 8), torch.randn(3, 8, 4), torch.randn(3, 4, 8), torch.randn(8), torch.randn(8, 8))


def test_note_names_each_uncounted_op_and_accounts_for_the_whole_difference():
    report = narrowpipe.analyze(narrowpipe.from_torch(Mixed(), ARGS))
    note, extra = _gap_note(report)
    for op in ("aten.scaled_dot_product_attention", "aten.addbmm", "aten.dot", "aten.mv"):
        assert op in note
    assert "aten.linear" not in note and "aten.mm" not in note
    assert report.matmul_flops - _fcm(Mixed(), ARGS) == extra
    # hand counts: SDPA 4 B H S^2 D, addbmm 2 x 3 x 8 x 4 x 8, dot 2 x 8, mv 2 x 8 x 8
    assert extra == 4 * 1 * 2 * 8 * 8 * 8 + 2 * 3 * 8 * 4 * 8 + 2 * 8 + 2 * 8 * 8


def test_plain_matmuls_get_no_note():
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(2, 8)
    report = narrowpipe.analyze(narrowpipe.from_torch(mlp, (x,)))
    assert not [n for n in report.notes if "FlopCounterMode" in n]
    assert report.matmul_flops == _fcm(mlp, (x,)) == 2 * 2 * (8 * 16 + 16 * 4)
    assert report.modeled_flops == report.matmul_flops == report.to_dict()["totals"]["matmul_flops"]  # old name
    assert report.flops == report.matmul_flops + 2 * (16 + 4) + 2 * 16   # + bias adds and ReLU, not counted by FCM


def test_transformers_grouped_experts_are_the_whole_gap_to_flop_counter_mode():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.MixtralConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
                                     num_key_value_heads=2, vocab_size=64, num_local_experts=4, num_experts_per_tok=2,
                                     attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(cfg).eval()   # fp32: transformers.grouped_mm_fallback
    kwargs = {"input_ids": torch.randint(0, 64, (1, 8)), "use_cache": False}
    report = narrowpipe.analyze(narrowpipe.from_torch(model, (), kwargs))
    note, extra = _gap_note(report)
    assert "transformers.grouped_mm_fallback (2 nodes" in note
    assert extra == 2 * 8 * 2 * (32 * 2 * 48 + 48 * 32)      # tokens x top-2 rows through gate_up and down
    assert report.matmul_flops - _fcm(model, (), kwargs) == extra
