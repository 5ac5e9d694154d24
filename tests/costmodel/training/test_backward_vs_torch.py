"""The derived backward against PyTorch's own count: ``FlopCounterMode`` over the forward and
``loss.backward()`` of real ``transformers`` models (random weights, tiny configs, eager attention, the
configuration whose every matmul the CPU counter sees), exported with ``torch.export`` and lowered by
narrowpipe's torch frontend, then differentiated op by op by ``build_training_graph``.

Compared exactly: contraction + attention FLOPs (what FlopCounterMode counts) of the whole step, and
of the forward phase alone. The counter's own numbers carry the facts under test: the rotary and mask
arithmetic gets no gradient (integer and buffer inputs), BERT's pooler gets none when the loss does
not read it, GPT-2's tied embedding gets both gradients.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.training import BACKWARD, FORWARD, build_training_graph  # noqa: E402

VOCAB, BATCH, SEQ = 500, 2, 12


def _llama():
    return transformers.LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                    num_attention_heads=8, num_key_value_heads=2, vocab_size=VOCAB)


def _gpt2():
    return transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64,
                                   bos_token_id=0, eos_token_id=0)


def _bert():
    return transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                   intermediate_size=128, vocab_size=VOCAB)


MODELS = {"llama-gqa": (_llama, transformers.LlamaForCausalLM), "gpt2": (_gpt2, transformers.GPT2LMHeadModel),
          "bert": (_bert, transformers.BertModel)}


def _model(name, attn="eager"):
    make, cls = MODELS[name]
    config = make()
    config._attn_implementation = attn
    torch.manual_seed(0)
    return cls(config)


def _kwargs(name):
    return {} if name == "bert" else {"use_cache": False}


def _torch_step_flops(model, name, ids):
    """FlopCounterMode over forward + loss.backward(): cross entropy on an LM's logits, the sum of
    BERT's last hidden states (its pooler output unused, so the pooler gets no gradient)."""
    with FlopCounterMode(display=False) as counter:
        out = model(input_ids=ids, **_kwargs(name))
        if name == "bert":
            loss = out.last_hidden_state.sum()
        else:
            loss = torch.nn.functional.cross_entropy(out.logits.reshape(-1, VOCAB), ids.reshape(-1))
        loss.backward()
    return counter.get_total_flops()


def _torch_forward_flops(model, name, ids):
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(input_ids=ids, **_kwargs(name))
    return counter.get_total_flops()


def _matmul_flops_by_phase(report):
    out: dict[str, int] = {}
    for row in report.ops:
        if row.group in ("contraction", "convolution", "attention"):
            out[row.phase] = out.get(row.phase, 0) + row.flops
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_training_step_matmul_flops_equal_flop_counter_over_loss_backward(name):
    model = _model(name)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    graph = narrowpipe.from_torch(model, (), {"input_ids": ids, **_kwargs(name)})
    step = build_training_graph(graph, loss="sum" if name == "bert" else "cross_entropy")
    report = narrowpipe.analyze(step, strict=True)
    assert report.modeled_flops == _torch_step_flops(model, name, ids)
    by_phase = _matmul_flops_by_phase(report)
    assert by_phase[FORWARD] == _torch_forward_flops(model, name, ids)
    assert by_phase[BACKWARD] == report.modeled_flops - by_phase[FORWARD]
    assert report.unmodeled == [] and step.meta["training"]["no_backward_rule"] == []
    if name == "gpt2":   # c_attn's q/k/v split: one concat of the three gradients per layer, as split_backward
        backward_ops = [n.op.value for n in step.nodes if n.attrs.get("phase") == BACKWARD]
        assert backward_ops.count("concat") == 2 and "pad" not in backward_ops


def test_frozen_parameters_match_autograd_without_their_gradients():
    """Freeze Llama's embedding and first norm: torch skips the embedding's gradient and layer 0's
    q/k/v input gradients; so does the derived backward."""
    model = _model("llama-gqa")
    frozen = ("model.embed_tokens.weight", "model.layers.0.input_layernorm.weight")
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    graph = narrowpipe.from_torch(model, (), {"input_ids": ids, "use_cache": False})
    for name, p in model.named_parameters():
        p.requires_grad_(name not in frozen)
    step = build_training_graph(graph, loss="cross_entropy", frozen=frozen)   # state-dict names
    assert step.meta["training"]["frozen"] == 2
    assert narrowpipe.analyze(step).modeled_flops == _torch_step_flops(model, "llama-gqa", ids)


def test_fused_attention_backward_counts_as_torchs_sdpa_backward():
    """SDPA exports one fused attention op; its backward is one ATTENTION_BACKWARD counted as
    FlopCounterMode counts ``_scaled_dot_product_efficient_attention_backward`` (run here on meta
    tensors: the CPU counter has no formula for the CPU flash kernel), 2.5x the forward's."""
    b, h, s, d = 2, 4, 16, 8
    q, k, v = (torch.randn(b, h, s, d, device="meta", requires_grad=True) for _ in range(3))
    with FlopCounterMode(display=False) as fwd:
        out, lse, seed, offset = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True,
                                                                                         is_causal=True)
    with FlopCounterMode(display=False) as bwd:
        torch.ops.aten._scaled_dot_product_efficient_attention_backward(
            torch.ones_like(out), q, k, v, None, out, lse, seed, offset, 0.0, [True, True, True, False],
            is_causal=True)
    g = narrowpipe.transformer(layers=1, hidden=h * d, heads=h, vocab=50, seq=s, batch=b)
    step = build_training_graph(g)
    attn = {row.phase: row.flops for row in narrowpipe.analyze(step).ops if row.group == "attention"}
    assert attn[FORWARD] == fwd.get_total_flops()
    assert attn[BACKWARD] == bwd.get_total_flops() == 5 * attn[FORWARD] // 2


def test_sdpa_export_trains_with_the_eager_matmul_count_plus_fused_attention():
    """The same Llama exported with SDPA: the projections' FLOPs equal the CPU counter's (which
    counts no fused attention), and the attention group is forward + 2.5x forward."""
    model = _model("llama-gqa", attn="sdpa")
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    graph = narrowpipe.from_torch(model, (), {"input_ids": ids, "use_cache": False})
    report = narrowpipe.analyze(build_training_graph(graph, loss="cross_entropy"), strict=True)
    eager = _model("llama-gqa")
    attention_fwd = sum(2 * 2 * BATCH * 8 * SEQ * SEQ * 8 for _ in range(2))   # QK^T and PV, 2 layers
    assert report.flops_by_group["contraction"] == _torch_step_flops(eager, "llama-gqa", ids) - 3 * attention_fwd
    assert report.flops_by_group["attention"] == attention_fwd + 5 * attention_fwd // 2


def test_convolutional_net_matches_flop_counter_over_backward():
    """Strided, grouped and transposed convolutions, batch norm in training mode, pooling, a linear
    head: FlopCounterMode's ``convolution_backward`` and ``mm`` counts, exactly (the first conv's
    input is data, so it gets no input gradient), but for the grouped conv's weight gradient, which
    torch 2.13's counter takes as ungrouped (groups x the work: pytorch/pytorch PR 183405)."""
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1, groups=2), nn.ReLU(), nn.ConvTranspose2d(16, 8, 2, stride=2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    x = torch.randn(2, 3, 32, 32)
    graph = narrowpipe.from_torch(model, (x,))
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    report = narrowpipe.analyze(build_training_graph(graph), strict=True)
    # the groups=2 conv at 8x8: its weight gradient is its forward's 2 N Cout (Cin/g) k^2 HW
    grouped_wgrad = 2 * 2 * 16 * (8 // 2) * 3 * 3 * 8 * 8
    assert report.modeled_flops == counter.get_total_flops() - (2 - 1) * grouped_wgrad


def test_a_depthwise_weight_gradient_is_the_forward_work_not_channels_squared():
    """A depthwise Conv1d (Mamba's): dW[c, 0, j] = sum over b, l of dY[b, c, l] x[b, c, l + j], the
    forward's N C L_out k multiply-adds; torch 2.13's counter reads C^2 (128x here)."""
    conv = torch.nn.Conv1d(128, 128, 4, groups=128, padding=3)
    graph = narrowpipe.from_torch(conv, (torch.randn(2, 128, 16),))
    rows = narrowpipe.analyze(build_training_graph(graph), strict=True).ops
    forward = 2 * 2 * 128 * 19 * 4                             # output length 16 + 2 x 3 - 4 + 1 = 19
    (wgrad,) = [r for r in rows if r.name.endswith("grad_weight")]
    assert wgrad.flops == forward == 38_912


def test_a_channel_bias_gradient_sums_over_batch_and_space():
    """``conv + bias`` adds ``[C]`` along axis 1: its gradient is summed over N, H and W (torch's
    ``grad.sum((0, 2, 3))``); it was summed over N, C, H to ``[1, 1, 1, W]`` and reshaped to ``[C]``."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1))
    graph = narrowpipe.from_torch(model, (torch.randn(2, 3, 16, 16),))
    step = build_training_graph(graph)
    (bias,) = [p for p in step.weights if p.source_name == "0.bias"]
    sums = [n for n in step.nodes if n.op is narrowpipe.ir.Op.REDUCE_SUM]
    assert [n.attrs["axes"] for n in sums] == [(0, 2, 3)]
    assert tuple(sums[0].outputs[0].shape) == (1, 8, 1, 1)
    assert tuple(bias.shape) == (8,)
