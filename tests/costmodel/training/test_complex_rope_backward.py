"""Complex-valued rotary embeddings (Llama-4's ``view_as_complex`` / ``polar`` / ``view_as_real``)
through the derived backward, against FlopCounterMode over forward + ``backward()`` and hand counts.

The two views reinterpret the dtype (two fp32 are one complex64), so their backward is the inverse
view (torch's derivatives.yaml: ``view_as_real``'s gradient is ``view_as_complex(grad)`` and back),
a free reshape that changes the dtype again; it was a reshape in the gradient's own dtype, which
halves or doubles the element count and failed the view's shape check.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.training import build_training_graph  # noqa: E402
from narrowpipe.ir import DType, Op  # noqa: E402


class _Rope(torch.nn.Module):
    """A projection, then a rotation by a complex table built with ``polar`` from the input angles."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x, angles):                    # x [2, 12, 16], angles [12, 8]
        h = self.lin(x)
        freqs = torch.polar(torch.ones_like(angles), angles)
        hc = torch.view_as_complex(h.float().reshape(2, 12, 8, 2))
        return torch.view_as_real(hc * freqs).flatten(2)


def _rope_args():
    return torch.randn(2, 12, 16), torch.randn(12, 8)


def test_complex_views_backward_is_the_inverse_view_and_matches_flop_counter():
    model = _Rope()
    x, angles = _rope_args()
    graph = narrowpipe.from_torch(model, (x, angles))
    step = build_training_graph(graph, loss="sum")
    report = narrowpipe.analyze(step, strict=True)
    with FlopCounterMode(display=False) as counter:
        model(x, angles).sum().backward()
    # forward x @ W^T and the weight gradient dy^T x, 2 x 24 x 16 x 16 each (x takes no gradient)
    assert report.modeled_flops == counter.get_total_flops() == 2 * (2 * 24 * 16 * 16)
    grads = [n for n in step.nodes if n.op is Op.RESHAPE and n.source.op.endswith("backward")
             and "view_as" in n.source.op]
    by_source = {n.source.op.split(".")[1]: n for n in grads}
    real_grad, complex_grad = by_source["view_as_real"], by_source["view_as_complex"]
    assert (real_grad.outputs[0].dtype, tuple(real_grad.outputs[0].shape)) == (DType.COMPLEX64, (2, 12, 8))
    assert (complex_grad.outputs[0].dtype, tuple(complex_grad.outputs[0].shape)) == (DType.FP32, (2, 12, 8, 2))
    assert all(r.flops == 0 and r.bytes == 0 for r in report.ops if r.name in {n.name for n in grads})


def test_polar_costs_a_cosine_a_sine_and_two_multiplies_per_complex_element():
    """96 complex outputs: 2 x 96 FLOPs, 2 x 96 transcendentals, two fp32 [12, 8] read (768 B), one
    complex64 [12, 8] written (768 B)."""
    graph = narrowpipe.from_torch(_Rope(), _rope_args())
    (row,) = [r for r in narrowpipe.analyze(graph, strict=True).ops if r.op == "polar"]
    assert (row.flops, row.transcendentals, row.bytes_read, row.bytes_written) == (192, 192, 768, 768)


def test_llama4_text_training_step_matches_flop_counter():
    """A tiny Llama-4 text model (dense layers, eager attention, complex RoPE built with ``polar``):
    the step's matmul FLOPs equal FlopCounterMode's over forward + cross-entropy backward."""
    transformers = pytest.importorskip("transformers")
    vocab = 300
    config = transformers.Llama4TextConfig(
        hidden_size=64, intermediate_size=128, intermediate_size_mlp=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=vocab, moe_layers=[],
        attention_chunk_size=64)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.Llama4ForCausalLM(config)
    ids = torch.randint(0, vocab, (2, 12), generator=torch.Generator().manual_seed(1))
    graph = narrowpipe.from_torch(model, (), {"input_ids": ids, "use_cache": False})
    assert any(n.op is Op.POLAR for n in graph.nodes)
    report = narrowpipe.analyze(build_training_graph(graph, loss="cross_entropy"), strict=True)
    with FlopCounterMode(display=False) as counter:
        logits = model(input_ids=ids, use_cache=False).logits
        torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), ids.reshape(-1)).backward()
    assert report.unmodeled == []
    assert report.modeled_flops == counter.get_total_flops()
