"""Weights shared by several nodes count once: in params, weight bytes and the dataflow layout's
footprint, from an in-memory export and from a ``.pt2`` file alike (``torch.export.load`` returns a
separate tensor per name over the one shared storage)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import narrowpipe  # noqa: E402
from narrowpipe.backends import get_target  # noqa: E402
from narrowpipe.costmodel.execution import TimingOptions  # noqa: E402
from narrowpipe.costmodel.execution.dataflow import _footprints  # noqa: E402
from narrowpipe.costmodel.interpreter import interpret  # noqa: E402
from narrowpipe.costmodel.sizes import values_bytes, weight_bytes  # noqa: E402
from narrowpipe.costmodel.timing import fused_program  # noqa: E402
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind  # noqa: E402


@pytest.fixture(scope="module")
def gpt2_program():
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    assert model.lm_head.weight is model.transformer.wte.weight  # tied
    ids = torch.zeros(1, 8, dtype=torch.long)
    ep = torch.export.export(model, (), {"input_ids": ids, "use_cache": False}, strict=False)
    return model, ep


def _expected(model):
    return sum(p.numel() for p in model.parameters()), sum(p.numel() * p.element_size() for p in model.parameters())


def test_tied_gpt2_params_in_memory(gpt2_program):
    model, ep = gpt2_program
    r = narrowpipe.analyze(narrowpipe.from_torch(ep))
    assert r.params == _expected(model)[0]


def test_tied_gpt2_params_after_pt2_save_and_load(gpt2_program, tmp_path):
    model, ep = gpt2_program
    path = tmp_path / "gpt2.pt2"
    torch.export.save(ep, str(path))
    g = narrowpipe.load(path)
    params, nbytes = _expected(model)
    assert narrowpipe.analyze(g).params == params
    assert sum(1 for w in g.weights if w.kind is ValueKind.PARAM) == len(list(model.parameters()))
    assert weight_bytes(interpret(g, {})) == nbytes + sum(b.numel() * b.element_size() for b in model.buffers())


def test_untied_copies_with_equal_values_stay_two_weights(tmp_path):
    """Two parameters with the same contents but their own storage are two weights."""
    class TwoHeads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(4, 4, bias=False)
            self.b = torch.nn.Linear(4, 4, bias=False)
            self.b.weight.data.copy_(self.a.weight.data)

        def forward(self, x):
            return self.a(x) + self.b(x)

    ep = torch.export.export(TwoHeads(), (torch.randn(2, 4),))
    path = tmp_path / "two.pt2"
    torch.export.save(ep, str(path))
    assert narrowpipe.analyze(narrowpipe.load(path)).params == 32


def test_dataflow_footprint_counts_a_shared_weight_once():
    """Embedding and LM head on one table: the layout places the table once."""
    g = Graph("tied")
    ids = g.add_input("x", TensorType(DType.BF16, (8, 64)))
    w = g.add_input("w", TensorType(DType.BF16, (64, 64)), ValueKind.PARAM)
    a = g.add_node(Op.DOT, [ids, w], [TensorType(DType.BF16, (8, 64))], {"lhs_contract": (1,), "rhs_contract": (0,)})
    e = g.add_node(Op.EXP, [a.outputs[0]], [TensorType(DType.BF16, (8, 64))])
    b = g.add_node(Op.DOT, [e.outputs[0], w], [TensorType(DType.BF16, (8, 64))],
                   {"lhs_contract": (1,), "rhs_contract": (0,)})
    g.set_outputs(b.outputs)
    table = interpret(g, {})
    program = fused_program(table, get_target("groq-lpu"), TimingOptions())
    outputs = sum(values_bytes(table, k.outputs) for k in program.kernels)
    assert sum(_footprints(program.kernels, table)) == weight_bytes(table) + outputs
