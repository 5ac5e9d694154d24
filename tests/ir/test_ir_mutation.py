"""Use-lists stay consistent under every mutation, clones are deep and independent, and every
mutation bumps the version so cached analyses are recomputed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from narrowpipe.errors import IRError
from narrowpipe.ir import (
    AnalysisManager,
    DType,
    Graph,
    Op,
    TensorType,
    Use,
    Value,
    format_graph,
    graph_to_dict,
    node_subgraphs,
    problems,
    register_analysis,
)

T = TensorType(DType.FP32, (4,))
_OPS = (Op.ADD, Op.MUL, Op.RELU, Op.NEG)


def _uses_from_scratch(graph: Graph, out: dict[Value, set[Use]] | None = None) -> dict[Value, set[Use]]:
    """Every (node, input) reading each value, nested bodies included (what ``uses`` must hold)."""
    out = {} if out is None else out
    for node in graph.nodes:
        for i, v in enumerate(node.inputs):
            if v is not None:
                out.setdefault(v, set()).add(Use(node, i))
        for body in node_subgraphs(node):
            _uses_from_scratch(body, out)
    return out


def _assert_consistent(graph: Graph) -> None:
    assert problems(graph) == []
    truth = _uses_from_scratch(graph)
    for v in graph.values():
        assert set(v.uses) == truth.get(v, set()), v.name
        assert len(v.uses) == len(set(v.uses)), v.name


def _random_graph(data: st.DataObject, n: int) -> Graph:
    g = Graph("rand")
    pool = [g.add_input(f"x{i}", T) for i in range(2)]
    for _ in range(n):
        op = data.draw(st.sampled_from(_OPS))
        arity = 1 if op in (Op.RELU, Op.NEG) else 2
        ins = [data.draw(st.sampled_from(pool)) for _ in range(arity)]
        pool.append(g.add_node(op, ins, [T]).outputs[0])
    g.set_outputs([pool[-1]])
    return g


@settings(max_examples=60, deadline=None, database=None)
@given(st.data(), st.integers(1, 12), st.integers(0, 15))
def test_use_lists_stay_consistent_under_random_mutations(data, n, steps):
    g = _random_graph(data, n)
    _assert_consistent(g)
    for _ in range(steps):
        kind = data.draw(st.sampled_from(["replace", "remove", "set_input", "clone"]))
        before = g.version
        if kind == "replace":
            old = data.draw(st.sampled_from([v for v in g.values()]))
            # only values defined earlier may stand in, so the order stays topological
            cut = 0 if old.producer is None else g.nodes.index(old.producer)
            defined = list(g.inputs) + [o for nd in g.nodes[:cut] for o in nd.outputs]
            new = data.draw(st.sampled_from(defined))
            g.replace_all_uses(old, new)
            if new is old:
                continue   # a no-op: nothing changed, nothing to invalidate
        elif kind == "remove":
            dead = [nd for nd in g.nodes if not nd.outputs[0].uses and nd.outputs[0] not in g.outputs]
            if not dead:
                continue
            g.remove(data.draw(st.sampled_from(dead)))
        elif kind == "set_input":
            if not g.nodes:
                continue
            node = data.draw(st.sampled_from(g.nodes))
            pos = g.nodes.index(node)
            earlier = list(g.inputs) + [o for nd in g.nodes[:pos] for o in nd.outputs]
            i = data.draw(st.integers(0, len(node.inputs) - 1))
            g.set_input(node, i, data.draw(st.sampled_from(earlier)))
        else:
            copy = g.clone()
            _assert_consistent(copy)
            assert format_graph(copy) == format_graph(g)
            g = copy
            continue
        _assert_consistent(g)
        assert g.version > before or kind == "set_input"


def _chain() -> tuple[Graph, Value, list]:
    g = Graph("chain")
    x = g.add_input("x", T)
    a = g.add_node(Op.RELU, [x], [T])
    b = g.add_node(Op.NEG, [a.outputs[0]], [T])
    c = g.add_node(Op.ADD, [b.outputs[0], x], [T])
    g.set_outputs(c.outputs)
    return g, x, [a, b, c]


def test_remove_refuses_a_node_whose_outputs_are_still_used():
    g, _, (a, b, c) = _chain()
    with pytest.raises(IRError, match="still used by neg"):
        g.remove(a)
    with pytest.raises(IRError, match="graph outputs"):
        g.remove(c)
    g.replace_all_uses(b.outputs[0], a.outputs[0])
    g.remove(b)
    assert [n.op for n in g.nodes] == [Op.RELU, Op.ADD]
    assert c.inputs[0] is a.outputs[0]
    _assert_consistent(g)


def test_replace_all_uses_reaches_graph_outputs_and_nested_bodies():
    g, x, (a, b, c) = _chain()
    body = Graph("body")
    inner = body.add_node(Op.NEG, [b.outputs[0]], [T])
    body.set_outputs(inner.outputs)
    cond = g.add_input("cond", TensorType(DType.BOOL, ()))
    branch = g.add_node(Op.IF, [cond], [T], {"then_branch": body, "else_branch": body})
    g.set_outputs([c.outputs[0], b.outputs[0], branch.outputs[0]])
    g.replace_all_uses(b.outputs[0], a.outputs[0])
    assert inner.inputs[0] is a.outputs[0]
    assert g.outputs[1] is a.outputs[0]
    assert b.outputs[0].uses == []
    _assert_consistent(g)


def test_clone_is_deep_and_independent_with_the_same_names():
    g, _, _ = _chain()
    body = Graph("body")
    body.set_outputs(body.add_node(Op.NEG, [g.nodes[1].outputs[0]], [T]).outputs)
    cond = g.add_input("cond", TensorType(DType.BOOL, ()))
    g.add_node(Op.IF, [cond], [T], {"then_branch": body, "shape": [1, 2]})
    g.meta["note"] = {"a": [1]}
    copy = g.clone()
    assert graph_to_dict(copy) == graph_to_dict(g)
    originals = {id(o) for o in [*g.values(), *g.nodes]}
    assert not originals & {id(o) for o in [*copy.values(), *copy.nodes]}
    new_body = copy.nodes[-1].attrs["then_branch"]
    assert new_body is not body and new_body.nodes[0].inputs[0] is copy.nodes[1].outputs[0]
    copy.meta["note"]["a"].append(2)
    copy.nodes[-1].attrs["shape"].append(3)
    assert g.meta["note"] == {"a": [1]} and g.nodes[-1].attrs["shape"] == [1, 2]
    _assert_consistent(copy)


_RUNS: list[str] = []


@register_analysis("test.mutation-node-names")
def _names(graph: Graph, am: AnalysisManager) -> list[str]:
    _RUNS.append(graph.name)
    return [n.name for n in graph.nodes]


@pytest.mark.parametrize("mutate", ["add_node", "set_input", "set_attr", "replace_all_uses", "remove",
                                    "set_outputs"])
def test_every_kind_of_mutation_invalidates_cached_analyses(mutate):
    g, x, (a, b, c) = _chain()
    am = AnalysisManager()
    am.get("test.mutation-node-names", g)
    am.get("test.mutation-node-names", g)
    assert am.computed.count("test.mutation-node-names") == 1
    if mutate == "add_node":
        g.add_node(Op.RELU, [x], [T])
    elif mutate == "set_input":
        g.set_input(c, 1, a.outputs[0])
    elif mutate == "set_attr":
        g.set_attr(a, "note", 1)
    elif mutate == "replace_all_uses":
        g.replace_all_uses(b.outputs[0], a.outputs[0])
    elif mutate == "remove":
        g.replace_all_uses(b.outputs[0], a.outputs[0])
        am.get("test.mutation-node-names", g)
        g.remove(b)
    else:
        g.set_outputs([a.outputs[0]])
    am.get("test.mutation-node-names", g)
    assert am.computed.count("test.mutation-node-names") == (3 if mutate == "remove" else 2)


def test_node_inputs_cannot_be_changed_behind_the_graphs_back():
    g, x, (a, _, _) = _chain()
    with pytest.raises((AttributeError, TypeError)):
        a.inputs[0] = x   # type: ignore[index]
