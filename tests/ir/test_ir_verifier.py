"""The verifier catches each class of broken promise, and accepts what the frontends produce."""

import pytest

from narrowpipe.errors import IRError, VerificationError
from narrowpipe.ir import DType, Graph, Op, Source, Sym, TensorType, Use, ValueKind, problems, verify

F32 = DType.FP32


def _t(*shape: object, dtype: DType = F32) -> TensorType:
    return TensorType(dtype, tuple(Sym(d) if isinstance(d, str) else d for d in shape))


def _dot(out_shape: tuple, lhs=(4, 8), rhs=(8, 16), **attrs) -> Graph:
    g = Graph("dot")
    x = g.add_input("x", _t(*lhs))
    w = g.add_input("w", _t(*rhs), ValueKind.PARAM)
    a = {"lhs_contract": (len(lhs) - 1,), "rhs_contract": (0,), **attrs}
    g.set_outputs(g.add_node(Op.DOT, [x, w], [_t(*out_shape)], a, source=Source("aten.mm", "mm_1")).outputs)
    return g


def test_a_dot_with_the_wrong_output_shape_is_named_with_its_source():
    with pytest.raises(VerificationError) as err:
        verify(_dot((4, 8)))
    text = str(err.value)
    assert "node 'dot' (dot) from mm_1 / aten.mm" in text
    assert "output shape [4, 8] is not batch+lhs free+rhs free [4, 16]" in text
    assert isinstance(err.value, IRError)


def test_a_dot_with_mismatched_contracting_dims_is_caught():
    assert any("contracting dims differ" in p for p in problems(_dot((4, 16), rhs=(9, 16))))


@pytest.mark.parametrize("major", [("k",), ("k", "m"), ("K", "mn"), "k,k", ("k", "mn", "k")])
def test_a_malformed_operand_layout_is_caught(major):
    assert any("operand_major" in p for p in problems(_dot((4, 16), operand_major=major)))


def test_every_stated_operand_layout_and_none_verify():
    for major in (("k", "mn"), ("mn", "k"), ("k", "k"), ("mn", "mn")):
        verify(_dot((4, 16), operand_major=major))
    verify(_dot((4, 16)))


def test_batched_dots_broadcast_their_batch_dims():
    g = _dot(("b", 3, 4, 16), lhs=("b", 3, 4, 8), rhs=(1, 3, 8, 16),
             lhs_contract=(3,), rhs_contract=(2,), lhs_batch=(0, 1), rhs_batch=(0, 1))
    assert problems(g) == []
    bad = _dot((2, 3, 4, 16), lhs=(2, 3, 4, 8), rhs=(5, 3, 8, 16),
               lhs_contract=(3,), rhs_contract=(2,), lhs_batch=(0, 1), rhs_batch=(0, 1))
    assert any("batch dims do not broadcast" in p for p in problems(bad))


def test_symbolic_dims_never_raise_a_false_alarm():
    # seq against 16 or against 2*seq cannot be decided without bindings: accepted
    assert problems(_dot(("seq", 16), lhs=("seq", 8))) == []
    assert problems(_dot(("2*seq", 16), lhs=("seq", 8))) == []
    assert problems(_dot(("n", 16), lhs=("n", "k"), rhs=("k", 16))) == []


def test_a_bad_broadcast_and_a_wrong_broadcast_result_are_caught():
    g = Graph("ew")
    a, b = g.add_input("a", _t(4, 3)), g.add_input("b", _t(5, 3))
    g.add_node(Op.ADD, [a, b], [_t(4, 3)])
    c = g.add_input("c", _t(3))
    g.add_node(Op.MUL, [a, c], [_t(4, 4)])
    found = problems(g)
    assert any("operands do not broadcast: [4, 3], [5, 3]" in p for p in found)
    assert any("output shape [4, 4] is not the broadcast [4, 3]" in p for p in found)


def test_comparisons_yield_bool_and_casts_yield_their_target():
    g = Graph("dt")
    a = g.add_input("a", _t(4))
    g.add_node(Op.LT, [a, a], [_t(4)])
    g.add_node(Op.CAST, [a], [_t(4, dtype=DType.FP16)], {"to": "bf16"})
    found = problems(g)
    assert any("a comparison yields bool, not fp32" in p for p in found)
    assert any("cast to bf16 yields fp16" in p for p in found)


def test_missing_required_attributes_are_caught():
    g = Graph("attrs")
    x, w = g.add_input("x", _t(1, 3, 8, 8)), g.add_input("w", _t(4, 3, 3, 3), ValueKind.PARAM)
    g.add_node(Op.CONV, [x, w], [_t(1, 4, 6, 6)], {"stride": (1, 1)})
    g.add_node(Op.DOT, [x, w], [_t(1)])
    found = problems(g)
    assert any("missing attribute 'padding'" in p for p in found)
    assert any("missing attribute 'lhs_contract'" in p for p in found)


def test_use_before_definition_and_out_of_order_nodes_are_caught():
    g = Graph("order")
    x = g.add_input("x", _t(4))
    first = g.add_node(Op.RELU, [x], [_t(4)])
    second = g.add_node(Op.NEG, [first.outputs[0]], [_t(4)])
    g.nodes.reverse()   # break the topological order behind the API's back
    assert any("used before it is defined" in p for p in problems(g))
    g.nodes.reverse()
    g.set_outputs(second.outputs)
    assert problems(g) == []


def test_stale_use_lists_and_dangling_uses_are_caught():
    g = Graph("uses")
    x = g.add_input("x", _t(4))
    node = g.add_node(Op.RELU, [x], [_t(4)])
    x.uses.clear()
    assert any("missing from the value's use-list" in p for p in problems(g))
    x.uses.append(Use(node, 0))
    ghost = Graph("elsewhere").add_node(Op.NEG, [x], [_t(4)])
    ghost.owner = None   # as if removed without the API
    assert any("dangling use by 'neg' input 0" in p for p in problems(g))


def test_attention_layouts_are_checked_by_rank():
    g = Graph("attn")
    q = g.add_input("q", _t("b", "s", 64))
    g.add_node(Op.ATTENTION, [q, q, q], [_t("b", "s", 64)], {"layout": "bsd"})
    g.add_node(Op.ATTENTION, [q, q, q], [_t("b", "s", 64)])
    found = problems(g)
    assert any("layout 'bsd' needs num_heads" in p for p in found)
    assert any("has rank 3, layout 'bhsd' needs 4" in p for p in found)


def test_the_shipped_examples_verify():
    from narrowpipe.models.examples import example_names, load_example
    for name in example_names():
        verify(load_example(name), after=f"loading example {name}")


def test_softmax_and_norms_keep_their_input_shape():
    g = Graph("norms")
    x = g.add_input("x", _t("b", 8, 16))
    g.add_node(Op.SOFTMAX, [x], [_t("b", 8, 16)], {"axis": 2})
    g.add_node(Op.LAYER_NORM, [x], [_t("b", 8, 8)], {"axis": 2})
    found = problems(g)
    assert len(found) == 1 and "output shape [b, 8, 8] differs from its input's [b, 8, 16]" in found[0]
