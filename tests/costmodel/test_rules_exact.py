"""Exact numbers on tiny shapes, one test per op group, every expected value computed by hand."""

import pytest

import narrowpipe
from narrowpipe.errors import UnsupportedOpError
from narrowpipe.ir import DType, Graph, Op, TensorType, ValueKind

F32 = DType.FP32


def t(*shape: int, dtype: DType = F32) -> TensorType:
    return TensorType(dtype, tuple(shape))


def one_op(op: Op, inputs: list[TensorType], outputs: list[TensorType], attrs=None, kinds=None):
    g = Graph(op.value)
    vals = [g.add_input(f"in{i}", ty, (kinds or {}).get(i, ValueKind.INPUT)) for i, ty in enumerate(inputs)]
    node = g.add_node(op, vals, outputs, attrs)
    g.set_outputs(node.outputs)
    return narrowpipe.analyze(g)


def row(report):
    assert len(report.ops) == 1
    return report.ops[0]


# -- contraction ---------------------------------------------------------------------------------

def test_dot_counts_two_flops_per_multiply_add():
    r = one_op(Op.DOT, [t(2, 3, 4), t(4, 5)], [t(2, 3, 5)], {"lhs_contract": (2,), "rhs_contract": (0,)})
    assert r.flops == 2 * (2 * 3) * 5 * 4 == 240
    assert r.bytes == (24 + 20 + 30) * 4
    assert r.flops_by_group["contraction"] == 240


def test_batched_dot_with_broadcast_batch():
    r = one_op(Op.DOT, [t(1, 4, 3, 8), t(2, 4, 8, 5)], [t(2, 4, 3, 5)],
               {"lhs_contract": (3,), "rhs_contract": (2,), "lhs_batch": (0, 1), "rhs_batch": (0, 1)})
    assert r.flops == 2 * 2 * 4 * 3 * 5 * 8


def test_dot_bytes_follow_dtype():
    r = one_op(Op.DOT, [t(16, 16, dtype=DType.BF16), t(16, 16, dtype=DType.FP8_E4M3)], [t(16, 16, dtype=DType.BF16)],
               {"lhs_contract": (1,), "rhs_contract": (0,)})
    assert r.bytes == 256 * 2 + 256 * 1 + 256 * 2


# -- convolution --------------------------------------------------------------------------------

CONV = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}


def test_conv_counts_output_positions_times_kernel_times_channels():
    r = one_op(Op.CONV, [t(1, 2, 5, 5), t(4, 2, 3, 3)], [t(1, 4, 3, 3)], CONV)
    assert r.flops == 2 * 1 * 4 * 2 * (3 * 3) * (3 * 3) == 1296
    assert r.flops_by_group["convolution"] == 1296


def test_grouped_conv_uses_channels_per_group():
    r = one_op(Op.CONV, [t(1, 4, 5, 5), t(4, 2, 3, 3)], [t(1, 4, 3, 3)], {**CONV, "groups": 2})
    assert r.flops == 2 * 4 * 2 * 9 * 9


def test_transposed_conv_counts_input_positions():
    r = one_op(Op.CONV, [t(1, 2, 3, 3), t(2, 4, 3, 3)], [t(1, 4, 5, 5)], {**CONV, "transposed": True})
    assert r.flops == 2 * 1 * 2 * 4 * 9 * 9


# -- attention ----------------------------------------------------------------------------------

def test_attention_with_grouped_kv_heads():
    r = one_op(Op.ATTENTION, [t(1, 4, 8, 16), t(1, 2, 8, 16), t(1, 2, 8, 16)], [t(1, 4, 8, 16)], {"causal": True})
    assert r.flops == 2 * 4 * 8 * 8 * 16 * 2  # QK^T and PV, no causal discount
    assert r.transcendentals == 4 * 8 * 8


def test_attention_bsd_layout_with_head_counts():
    r = one_op(Op.ATTENTION, [t(2, 8, 64), t(2, 10, 32), t(2, 10, 32)], [t(2, 8, 64)],
               {"layout": "bsd", "num_heads": 4, "kv_num_heads": 2})
    assert r.flops == 2 * 2 * 4 * 8 * 10 * 16 * 2


# -- elementwise, reduction, normalization -------------------------------------------------------

def test_elementwise_counts_output_elements_and_broadcast_inputs_once():
    r = one_op(Op.ADD, [t(2, 3), t(3)], [t(2, 3)])
    assert (r.flops, r.bytes) == (6, (6 + 3 + 6) * 4)


def test_transcendentals_are_counted_apart():
    r = one_op(Op.EXP, [t(2, 3)], [t(2, 3)])
    assert (r.flops, r.transcendentals) == (0, 6)


def test_reduction_counts_input_elements():
    r = one_op(Op.REDUCE_SUM, [t(2, 3)], [t(2)], {"axes": (1,)})
    assert (r.flops, r.bytes) == (6, (6 + 2) * 4)
    assert r.flops_by_group["reduction"] == 6


def test_layer_norm_per_element_and_per_row_costs():
    r = one_op(Op.LAYER_NORM, [t(2, 4), t(4), t(4)], [t(2, 4)], {"axis": 1})
    assert r.flops == 7 * 8
    assert r.transcendentals == 2  # one rsqrt per row
    assert r.bytes == (8 + 4 + 4 + 8) * 4


def test_softmax_has_one_exp_per_element():
    r = one_op(Op.SOFTMAX, [t(2, 4)], [t(2, 4)], {"axis": 1})
    assert (r.flops, r.transcendentals) == (32, 8)


# -- data movement, gather/scatter, collectives, other ------------------------------------------

def test_views_are_free_and_permutes_move_bytes():
    assert one_op(Op.RESHAPE, [t(2, 3)], [t(6)]).bytes == 0
    assert one_op(Op.PERMUTE, [t(2, 3)], [t(3, 2)], {"perm": (1, 0)}).bytes == 48
    assert one_op(Op.CONCAT, [t(2, 3), t(2, 3)], [t(4, 3)], {"axis": 0}).bytes == 96


def test_gather_reads_only_gathered_rows():
    r = one_op(Op.GATHER, [t(100, 8), t(5, dtype=DType.INT64)], [t(5, 8)], {"axis": 0}, {0: ValueKind.PARAM})
    assert r.flops == 0
    assert row(r).bytes_read == 40 + 5 * 8 * 4
    assert row(r).bytes_written == 5 * 8 * 4


def test_all_reduce_ring_bytes_per_device():
    r = one_op(Op.ALL_REDUCE, [t(1000)], [t(1000)], {"group_size": 4})
    assert r.comm_bytes == 2 * 3 * 4000 // 4
    assert r.flops == 750
    assert r.flops_by_group["collective"] == 750


def test_sort_and_topk_comparisons():
    assert one_op(Op.SORT, [t(4, 8)], [t(4, 8)], {"axis": 1}).flops == 32 * 3
    assert one_op(Op.TOPK, [t(10)], [t(3), t(3, dtype=DType.INT64)], {"k": 3}).flops == 10 * 2


# -- unmodeled, strict, control flow ------------------------------------------------------------

def test_unknown_op_is_listed_not_costed_as_zero_silently():
    r = one_op(Op.UNKNOWN, [t(4)], [t(4)], {"source_op": "aten.mystery.default"})
    assert r.unmodeled == [("aten.mystery.default", 1)]
    assert row(r).modeled is False


def test_strict_raises_naming_the_op():
    g = Graph()
    x = g.add_input("x", t(4))
    g.add_node(Op.UNKNOWN, [x], [t(4)], {"source_op": "aten.mystery.default"}, name="m0")
    with pytest.raises(UnsupportedOpError, match="mystery"):
        narrowpipe.analyze(g, strict=True)


def test_if_costs_its_costlier_branch_and_loop_its_body_times_trips():
    g = Graph()
    x = g.add_input("x", t(10))
    cheap, dear = Graph("cheap"), Graph("dear")
    cheap.set_outputs(cheap.add_node(Op.NEG, [x], [t(10)]).outputs)
    a = dear.add_node(Op.NEG, [x], [t(10)])
    dear.set_outputs(dear.add_node(Op.NEG, a.outputs, [t(10)]).outputs)
    c = g.add_input("c", t(dtype=DType.BOOL))
    g.add_node(Op.IF, [c], [t(10)], {"then_branch": cheap, "else_branch": dear})
    g.add_node(Op.LOOP, [], [t(10)], {"body": dear, "trip_count": "steps"})
    r = narrowpipe.analyze(g, steps=5)
    assert r.flops == 20 + 5 * 20


def test_a_loop_of_unknown_trips_is_noted_only_until_its_count_is_bound():
    """A body of 10 negations runs once (10 FLOPs, with a note saying how to bind the count); bound
    to 7 trips it is 70 FLOPs and the note asking for the binding is gone."""
    g = Graph()
    x = g.add_input("x", t(10))
    body = Graph("body")
    body.set_outputs(body.add_node(Op.NEG, [x], [t(10)]).outputs)
    g.add_node(Op.LOOP, [], [t(10)], {"body": body, "trip_count": None}, name="loop0")
    once = narrowpipe.analyze(g)
    assert once.flops == 10
    assert [n for n in once.notes if "trip count" in n] == [
        "loop 'loop0': trip count unknown, body counted once (bind it with --set loop0_trips=N)"]
    bound = narrowpipe.analyze(g, dims={"loop0_trips": 7})
    assert bound.flops == 7 * 10
    assert not [n for n in bound.notes if "trip count" in n]
