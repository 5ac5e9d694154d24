"""The experts' backward: a grouped GEMM's two gradients are grouped GEMMs of the forward's FLOPs,
checked against PyTorch's FlopCounterMode over ``loss.backward()`` of a tiny Mixtral (its
``batched_mm`` experts, one bmm per routed row, the form the counter sees) and by hand."""

from __future__ import annotations

import pytest

import narrowpipe
from narrowpipe.costmodel.experts import ExpertBalance
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.training import BACKWARD, FORWARD, build_training_graph
from narrowpipe.ir import Op, verify

H, F, E, K = 64, 96, 8, 2


def _moe(layers: int = 1):
    return narrowpipe.transformer(layers, H, 4, 300, ffn=F, kv_heads=2, gated_mlp=True, experts=E, top_k=K)


def test_every_expert_gemm_gets_two_grouped_gradients_of_its_own_flops():
    """Per layer: up [E, 2F, H] and down [E, H, F]; each gets dx and dW, each 2 S K N, so the experts
    train at 3x their forward. By hand at batch 2, seq 12: S = 2 x 12 x top-2 = 48 routed rows,
    forward 2 x 48 x H x 2F + 2 x 48 x F x H = 1,769,472; backward twice that."""
    step = build_training_graph(_moe(), optimizer="adamw")
    verify(step)
    assert step.meta["training"]["no_backward_rule"] == []
    table = interpret(step, {"batch": 2, "seq": 12})
    by_phase: dict[str, int] = {}
    roles = []
    for node, cost in table.costs.items():
        if node.op is Op.GROUPED_DOT:
            by_phase[node.attrs["phase"]] = by_phase.get(node.attrs["phase"], 0) + cost.flops
            roles.append(node.attrs.get("role", "forward"))
    s = 2 * 12 * K
    forward = 2 * s * H * 2 * F + 2 * s * F * H
    assert by_phase == {FORWARD: forward, BACKWARD: 2 * forward}
    assert sorted(roles) == sorted(["forward"] * 2 + ["grad_lhs"] * 2 + ["grad_weight"] * 2)
    grads = [n for n in step.nodes if n.attrs.get("role") == "grad_weight"]
    assert {tuple(n.outputs[0].shape) for n in grads} == {(E, 2 * F, H), (E, H, F)}   # each its weight's shape


def test_a_skewed_router_moves_no_backward_flops_but_the_report_says_how_it_split():
    step = build_training_graph(_moe(), optimizer="adamw")
    even = narrowpipe.analyze(step, "h100", dims={"batch": 4, "seq": 64})
    hot = narrowpipe.analyze(step, "h100", dims={"batch": 4, "seq": 64}, expert_balance=ExpertBalance("hot", 0.5))
    assert even.flops == hot.flops
    # one line per routing: the two forward GEMMs and their four gradients share the 512 rows' split
    notes = [n for n in hot.notes if n.startswith("experts (")]
    assert len(notes) == 1 and notes[0].startswith("experts (6 grouped GEMM(s)): 512 routed rows")
    assert "hottest expert 256 rows" in notes[0]


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def test_mixtral_step_matmul_flops_equal_flop_counter_over_loss_backward():
    """transformers' default grouped experts, exported and differentiated by narrowpipe, against the
    counter over the batched_mm experts' forward and ``loss.backward()`` (same weights, same routing
    count: every routed row through one expert, three times)."""
    from torch.utils.flop_counter import FlopCounterMode

    config = transformers.MixtralConfig(hidden_size=H, intermediate_size=F, num_hidden_layers=1, num_attention_heads=4,
                                        num_key_value_heads=2, vocab_size=300, num_local_experts=E,
                                        num_experts_per_tok=K)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(config)
    ids = torch.randint(0, 300, (2, 12), generator=torch.Generator().manual_seed(1))
    graph = narrowpipe.from_torch(model, (), {"input_ids": ids, "use_cache": False})
    step = build_training_graph(graph, loss="cross_entropy")
    report = narrowpipe.analyze(step, strict=True)
    assert report.unmodeled == [] and step.meta["training"]["no_backward_rule"] == []
    model.config._experts_implementation = "batched_mm"
    with FlopCounterMode(display=False) as counter:
        out = model(input_ids=ids, use_cache=False)
        torch.nn.functional.cross_entropy(out.logits.reshape(-1, 300), ids.reshape(-1)).backward()
    assert report.modeled_flops == counter.get_total_flops()
