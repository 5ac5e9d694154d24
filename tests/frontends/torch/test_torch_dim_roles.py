"""The torch frontend tags dims with roles: from the user's Dim names, else from where they sit."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch.export import Dim  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.ir import DimRole  # noqa: E402


def _roles(graph) -> dict[str, DimRole]:
    return {name: spec.role for name, spec in graph.dims.items()}


@pytest.fixture(scope="module")
def gpt2():
    cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=64)
    with torch.device("meta"):
        return transformers.GPT2LMHeadModel(cfg).eval()


def test_dims_of_input_ids_are_batch_and_sequence_by_position(gpt2):
    ids = torch.zeros(2, 8, dtype=torch.long, device="meta")
    g = narrowpipe.from_torch(gpt2, (), {"input_ids": ids, "use_cache": False},
                              dynamic_shapes={"input_ids": {0: Dim("x0"), 1: Dim("x1", max=64)}, "use_cache": None})
    assert _roles(g) == {"x0": DimRole.BATCH, "x1": DimRole.SEQUENCE}
    assert g.role_size(DimRole.BATCH) * g.role_size(DimRole.SEQUENCE) == 16   # the export's example sizes


def test_user_dim_names_give_the_role(gpt2):
    ids = torch.zeros(2, 8, dtype=torch.long, device="meta")
    mask = torch.ones(2, 8, dtype=torch.long, device="meta")
    g = narrowpipe.from_torch(gpt2, (), {"input_ids": ids, "attention_mask": mask, "use_cache": False},
                              dynamic_shapes={"input_ids": {0: Dim("batch_size"), 1: Dim("seq_len", max=64)},
                                              "attention_mask": {0: Dim("batch_size"), 1: Dim("seq_len", max=64)},
                                              "use_cache": None})
    assert g.dims_with_role(DimRole.BATCH) == ["batch_size"]
    assert g.dims_with_role(DimRole.SEQUENCE) == ["seq_len"]


def test_decode_with_a_kv_cache_tags_the_past_length():
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1, vocab_size=64, max_position_embeddings=128)
    with torch.device("meta"):
        lm = transformers.LlamaForCausalLM(cfg).eval()

    class Decode(torch.nn.Module):
        """A Llama step reading a one-layer KV cache given as two plain tensors."""

        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, attention_mask, past_key, past_value):
            cache = transformers.DynamicCache(config=self.lm.config)
            cache.update(past_key, past_value, 0)
            return self.lm(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache,
                           use_cache=True).logits

    ids = torch.zeros(2, 3, dtype=torch.long, device="meta")
    mask = torch.ones(2, 8, dtype=torch.long, device="meta")
    kv = torch.zeros(2, 1, 5, 16, device="meta")
    b, p = Dim("b"), Dim("p", max=64)
    g = narrowpipe.from_torch(Decode(), (ids, mask, kv, kv), dynamic_shapes={
        "input_ids": {0: b, 1: Dim("s", max=64)}, "attention_mask": {0: b, 1: Dim("t", min=4, max=128)},
        "past_key": {0: b, 2: p}, "past_value": {0: b, 2: p}})
    # the mask spans past and new tokens: neither role, so role sizes never double-count
    assert _roles(g) == {"b": DimRole.BATCH, "s": DimRole.SEQUENCE, "t": DimRole.OTHER, "p": DimRole.KV_LENGTH}
    assert g.role_size(DimRole.KV_LENGTH, {"p": 100}) == 100


def test_sympy_products_become_the_canonical_form(gpt2):
    ids = torch.zeros(2, 8, dtype=torch.long, device="meta")
    g = narrowpipe.from_torch(gpt2, (), {"input_ids": ids, "use_cache": False},
                              dynamic_shapes={"input_ids": {0: Dim("batch"), 1: Dim("seq", max=64)}, "use_cache": None})
    texts = {str(d) for v in g.values() for d in v.shape if not isinstance(d, int)}
    assert "seq*batch" not in texts and "seq * batch" not in texts
    assert texts <= {"batch", "seq", "batch*seq"}
