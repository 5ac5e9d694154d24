"""Training-step FLOPs of builder graphs against the formulas everyone sizes training with, computed
by hand from the configuration (not from narrowpipe's own forward count):

* ``6 * N * tokens`` for the matmuls (N: parameters in matmul weights; forward 2N, backward 4N per
  token; Kaplan et al. 2020, section 2.1) plus attention: forward ``4 * b * s^2 * heads * head_dim``
  per layer, and a fused backward 2.5x that (FlashAttention-2's backward, Dao 2023);
* ``8 * N * tokens`` for the layers with full recomputation (one more forward);
* Megatron-LM's ``96 B s l h^2 (1 + s/6h + V/16lh)`` per step with full recomputation and eager
  attention (Narayanan et al., SC'21, section 5.1; the output layer is not recomputed).
"""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.costmodel.training import (
    BACKWARD,
    FORWARD,
    OPTIMIZER,
    RECOMPUTE,
    build_training_graph,
    differentiable_outputs,
)
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind


def _llama_like(**kw):
    return narrowpipe.transformer(layers=3, hidden=128, heads=8, vocab=1000, ffn=352, kv_heads=2, gated_mlp=True,
                                  seq=64, batch=2, **kw)


def _hand_counts(layers=3, hidden=128, heads=8, vocab=1000, ffn=352, kv_heads=2, seq=64, batch=2):
    d = hidden // heads
    per_layer = hidden * heads * d + 2 * hidden * kv_heads * d + heads * d * hidden + 3 * hidden * ffn
    attention_fwd = 4 * batch * seq * seq * heads * d       # QK^T and PV, 2 FLOPs per multiply-add
    return layers * per_layer, vocab * hidden, attention_fwd * layers, batch * seq


def test_training_step_is_six_n_tokens_plus_attention():
    n_layers, n_head, attention_fwd, tokens = _hand_counts()
    report = narrowpipe.analyze(build_training_graph(_llama_like()))
    assert report.flops_by_group["contraction"] == 6 * (n_layers + n_head) * tokens
    assert report.flops_by_group["attention"] == attention_fwd + 5 * attention_fwd // 2


def test_full_recomputation_is_eight_n_tokens_for_the_layers():
    n_layers, n_head, attention_fwd, tokens = _hand_counts()
    report = narrowpipe.analyze(build_training_graph(_llama_like(), recompute="full"))
    assert report.flops_by_group["contraction"] == 8 * n_layers * tokens + 6 * n_head * tokens
    assert report.flops_by_group["attention"] == 2 * attention_fwd + 5 * attention_fwd // 2
    matmul = {p: sum(r.flops for r in report.ops if r.phase == p and r.group in ("contraction", "attention"))
              for p in (FORWARD, RECOMPUTE, BACKWARD)}
    assert matmul[RECOMPUTE] == 2 * n_layers * tokens + attention_fwd   # the layers' forward, once more


@pytest.mark.parametrize("batch,seq,layers,hidden,heads,vocab", [(4, 256, 2, 128, 4, 512), (1, 128, 3, 96, 3, 1000)])
def test_megatron_step_flops_with_full_recomputation(batch, seq, layers, hidden, heads, vocab):
    g = narrowpipe.transformer(layers=layers, hidden=hidden, heads=heads, vocab=vocab, seq=seq, batch=batch,
                               norm="layer", positions="learned", max_positions=seq, attn_bias=True, out_bias=True,
                               mlp_bias=True, tie_embeddings=True, attention="eager")
    report = narrowpipe.analyze(build_training_graph(g, recompute="full"))
    b, s, n_l, h, v = batch, seq, layers, hidden, vocab
    # 96 B s l h^2 (1 + s/6h + V/16lh), multiplied out so it stays an integer
    assert report.modeled_flops == 96 * b * s * n_l * h * h + 16 * b * s * s * n_l * h + 6 * b * s * h * v


def test_every_node_has_a_phase_and_the_report_splits_by_phase():
    step = build_training_graph(_llama_like(), optimizer="adamw", recompute="full")
    assert {n.attrs.get("phase") for n in step.nodes} == {FORWARD, RECOMPUTE, BACKWARD, OPTIMIZER}
    report = narrowpipe.analyze(step)
    assert list(report.flops_by_phase) == [FORWARD, RECOMPUTE, BACKWARD, OPTIMIZER]
    assert sum(report.flops_by_phase.values()) == report.flops
    assert report.to_dict()["flops_by_phase"] == report.flops_by_phase
    assert "flops_by_phase" not in narrowpipe.analyze(_llama_like()).to_dict()   # inference reports unchanged


def test_adam_step_touches_every_parameter_once_with_fp32_states():
    """Per parameter element, torch's foreach AdamW: cast the bf16 gradient, decay, m (scale, scale,
    add), v (scale, square, scale, add), sqrt, bias correction, + eps, divide, step, apply, cast back:
    15 elementwise FLOPs and one square root; fp32 master, m and v are 12 bytes; each parameter's
    update is one fused kernel on a fusing target."""
    g = _llama_like()
    step = build_training_graph(g, optimizer="adamw")
    report = narrowpipe.analyze(step)
    n = g.param_count()
    opt = [r for r in report.ops if r.phase == OPTIMIZER]
    assert sum(r.flops for r in opt) == 15 * n and sum(r.transcendentals for r in opt) == n
    states = [v for v in step.inputs if v.name.endswith((".exp_avg", ".exp_avg_sq", ".master"))]
    assert sum(w.type.nbytes() for w in states) == 12 * n
    timed = narrowpipe.analyze(step, "h100")
    kernels = {r.kernel for r in timed.ops if r.phase == OPTIMIZER}
    assert len(kernels) == len([w for w in g.weights if w.kind.value == "param"])   # one fused update each


def test_frozen_parameters_get_no_gradient_and_no_state():
    """Freezing the embedding drops its scatter-add; freezing the first norm's weight too drops the
    gradient of layer 0's q/k/v inputs (nothing before them needs one), as autograd would."""
    g = _llama_like()
    n_layers, n_head, _, tokens = _hand_counts()
    step = build_training_graph(g, frozen=["model.embed_tokens.*"])
    assert step.meta["training"]["frozen"] == 1
    assert not any(v.name.startswith("model.embed_tokens.weight.") for v in step.inputs)
    assert not any(n.op.value == "scatter" for n in step.nodes)
    assert narrowpipe.analyze(step).flops_by_group["contraction"] == 6 * (n_layers + n_head) * tokens
    step = build_training_graph(g, frozen=["model.embed_tokens.*", "model.layers.0.input_layernorm.*"])
    d_qkv = 2 * tokens * 128 * (128 + 2 * 2 * 16)   # q: 8 heads, k and v: 2 heads, head_dim 16
    assert narrowpipe.analyze(step).flops_by_group["contraction"] == 6 * (n_layers + n_head) * tokens - d_qkv


def test_an_op_without_a_backward_rule_is_listed_not_dropped():
    from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind
    g = Graph("fft")
    w = g.add_input("w", TensorType(DType.FP32, (8, 16)), ValueKind.PARAM)
    y = g.add_node(Op.FFT, [w], [TensorType(DType.FP32, (8, 16))], {"axis": 1}).outputs[0]
    g.set_outputs([g.add_node(Op.TANH, [y], [TensorType(DType.FP32, (8, 16))]).outputs[0]])
    step = build_training_graph(g)
    assert step.meta["training"]["no_backward_rule"] == ["fft"]
    report = narrowpipe.analyze(step)
    assert [(u.op, u.count) for u in report.unmodeled] == [("fft backward", 1)]
    with pytest.raises(narrowpipe.UnsupportedOpError):
        narrowpipe.analyze(step, strict=True)


def test_bad_options_are_named():
    g = _llama_like()
    for kw, word in ((dict(optimizer="lion"), "optimizer"), (dict(recompute="some"), "recompute"),
                     (dict(loss="mse"), "loss"), (dict(outputs=["nope"]), "nope")):
        with pytest.raises(narrowpipe.NarrowpipeError, match=word):
            build_training_graph(g, **kw)
    with pytest.raises(narrowpipe.NarrowpipeError, match="already a training step"):
        build_training_graph(build_training_graph(g))


def test_training_graphs_time_on_every_target():
    step = build_training_graph(narrowpipe.transformer(layers=2, hidden=64, heads=4, vocab=100, seq=32),
                                recompute="selective")
    for name, _family in narrowpipe.targets():
        report = narrowpipe.analyze(step, name)
        assert report.time_s and report.time_s > 0
        phases = report.time_by_phase
        assert set(phases) == {FORWARD, BACKWARD, OPTIMIZER} and all(t > 0 for t in phases.values())
        assert sum(phases.values()) == pytest.approx(report.time_s, rel=1e-9)


def _where_graph(*, tensor_fill: bool = False, mask: bool = True):
    """w[4,16] (a parameter) -> masked_fill(w, m, -1e4) -> tanh, as the torch frontend lowers it:
    ``where(x, mask)`` with the fill a scalar attribute, or ``where(x, mask, value)`` for a tensor
    fill; ``mask=False``: a mask-less ``where(x)`` with scalars (how ``threshold`` lowers)."""
    from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind
    f32 = TensorType(DType.FP32, (4, 16))
    g = Graph("masked_fill")
    w = g.add_input("w", f32, ValueKind.PARAM)
    ins = [w]
    attrs: dict = {"scalar": -1e4}
    if mask:
        ins.append(g.add_input("m", TensorType(DType.BOOL, (4, 16))))
    if tensor_fill:
        ins.append(g.add_input("v", TensorType(DType.FP32, ()), ValueKind.PARAM))
        attrs = {}
    y = g.add_node(Op.WHERE, ins, [f32], attrs, name="masked_fill").outputs[0]
    g.set_outputs(g.add_node(Op.TANH, [y], [f32]).outputs)
    return g


def _backward_rows(step, op):
    return [(r.flops, r.bytes_read, r.bytes_written) for r in narrowpipe.analyze(step).ops
            if r.phase == "backward" and r.op == op]


def test_masked_fill_backward_is_one_select_over_x():
    """derivatives.yaml: masked_fill's self gradient is grad.masked_fill(mask, 0): one select over
    x's 64 elements, reading the mask (64 bool bytes) and dy (64 x 4) and writing dx (64 x 4)."""
    step = build_training_graph(_where_graph())
    assert step.meta["training"]["no_backward_rule"] == [] and narrowpipe.analyze(step).unmodeled == []
    assert _backward_rows(step, "where") == [(64, 64 + 256, 256)]


def test_masked_fill_with_a_tensor_value_gives_both_gradients():
    """masked_fill.Tensor: value's gradient is masked_fill_backward = where(mask, grad, 0).sum(): a
    second select, then a sum of its 64 elements to the 0-d value."""
    step = build_training_graph(_where_graph(tensor_fill=True))
    assert step.meta["training"]["no_backward_rule"] == [] and narrowpipe.analyze(step).unmodeled == []
    assert _backward_rows(step, "where") == [(64, 320, 256)] * 2
    assert [r.flops for r in narrowpipe.analyze(step).ops if r.phase == "backward" and r.op == "reduce_sum"] == [64]


def test_an_op_whose_rule_leaves_a_gradient_unmodeled_is_listed():
    """WHERE has a rule, but not for the mask-less form: its gradient is an UNKNOWN node, and the
    step must say so rather than list nothing (the op having a rule is not the gradient having one)."""
    step = build_training_graph(_where_graph(mask=False))
    assert step.meta["training"]["no_backward_rule"] == ["where"]
    assert any("no backward rule for where" in n for n in step.meta["training"]["notes"])
    assert [(u.op, u.count) for u in narrowpipe.analyze(step).unmodeled] == [("where backward", 1)]


def _mixed_outputs() -> Graph:
    """A block as the planner cuts one: it hands on an int64 shape, a parameter-free float value
    and, last, the parameter-fed activation."""
    g = Graph("mixed")
    x = g.add_input("x", TensorType(DType.FP32, (4, 8)))
    w = g.add_input("w", TensorType(DType.FP32, (8, 16)), ValueKind.PARAM)
    shape = g.add_node(Op.SHAPE_OF, [x], [TensorType(DType.INT64, (2,))], name="shape").outputs[0]
    free = g.add_node(Op.TANH, [x], [TensorType(DType.FP32, (4, 8))], name="free").outputs[0]
    y = g.add_node(Op.DOT, [x, w], [TensorType(DType.FP32, (4, 16))],
                   {"lhs_contract": (1,), "rhs_contract": (0,)}, name="mm").outputs[0]
    g.set_outputs([shape, free, y])
    return g


def test_only_parameter_fed_float_outputs_are_differentiated():
    """Integer and parameter-free outputs get no gradient (as in torch's autograd), so a block's
    step seeds only the activation: its backward is the matmul's weight gradient, 2 * 4 * 8 * 16
    FLOPs by hand (x is an input, so no input gradient)."""
    g = _mixed_outputs()
    assert differentiable_outputs(g) == [2]
    step = build_training_graph(g, outputs=differentiable_outputs(g))
    backward = narrowpipe.analyze(step).flops_by_phase[BACKWARD]
    assert backward == 2 * 4 * 8 * 16


def test_an_integer_output_asked_for_is_refused_naming_node_and_reason():
    g = _mixed_outputs()
    named = r"graph 'mixed'.*'shape_1' \(int64\[2\], made by node 'shape'.*carry no gradient"
    with pytest.raises(narrowpipe.NarrowpipeError, match=named):
        build_training_graph(g)                 # the default output is the first: the int64 shape


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_mfu_counts_three_forwards_and_hardware_flops_count_what_runs(recompute):
    """MFU is PaLM's (appendix B): 6N per token plus three times the forward's attention, however much
    the step recomputes; the hardware-FLOPs utilization counts every matmul-like FLOP executed (the
    recompute phase and FlashAttention's 2.5x backward). Before, ``analyze`` called the second MFU."""
    n_layers, n_head, attention_fwd, tokens = _hand_counts()
    report = narrowpipe.analyze(build_training_graph(_llama_like(), recompute=recompute), target="h100")
    t = report.timing
    model = 6 * (n_layers + n_head) * tokens + 3 * attention_fwd
    executed = model + attention_fwd // 2 + (2 * n_layers * tokens + attention_fwd if recompute == "full" else 0)
    capacity = t.time_s * t.peak_flops * t.devices
    assert t.mfu == pytest.approx(model / capacity, rel=1e-12)
    assert t.hfu == pytest.approx(executed / capacity, rel=1e-12)


def test_mfu_of_a_forward_is_its_matmul_flops():
    """Without a training step there is nothing recomputed: MFU and HFU are one figure."""
    n_layers, n_head, attention_fwd, tokens = _hand_counts()
    t = narrowpipe.analyze(_llama_like(), target="h100").timing
    assert t.mfu == t.hfu == pytest.approx((2 * (n_layers + n_head) * tokens + attention_fwd)
                                           / (t.time_s * t.peak_flops * t.devices), rel=1e-12)
