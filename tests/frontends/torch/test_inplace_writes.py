"""In-place writes in exported programs: what the written value becomes in the IR and what the write
costs. ``torch.export`` keeps ``out[:, 1] = y`` as ``select`` + ``copy_`` with later readers naming
``out``; the write must reach ``out`` (a scatter into it, updated where it lies) and ``copy``'s
operand is its source, not its destination (it read the destination and dropped the source)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import narrowpipe  # noqa: E402
from narrowpipe.costmodel.interpreter import interpret  # noqa: E402
from narrowpipe.ir import IN_PLACE, Op  # noqa: E402


class _SelectWrite(torch.nn.Module):
    def forward(self, x):
        out = torch.zeros_like(x)
        out[:, 1] = x[:, 1] * 2
        return out + 1


class _CopyIntoBase(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        out.copy_(x * 2)
        return out + 1


def _graph(model, program=False):
    x = torch.randn(2, 4, 16)
    if program:
        return narrowpipe.from_torch(torch.export.export(model, (x,)).run_decompositions({}))
    return narrowpipe.from_torch(model, (x,))


def _producer_chain(graph):
    """The op of every node the output depends on."""
    seen, todo = set(), list(graph.outputs)
    while todo:
        v = todo.pop()
        node = v.producer
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(i for i in node.inputs if i is not None)
    return seen


def test_a_select_write_is_an_in_place_scatter_the_output_reads():
    """Hand count: the written row is [2, 16] fp32 = 128 B, read once and written once."""
    g = _graph(_SelectWrite())
    scatters = [n for n in g.nodes if n.op is Op.SCATTER]
    assert len(scatters) == 1 and scatters[0].attrs.get(IN_PLACE) == 0
    live = _producer_chain(g)
    assert scatters[0] in live and any(n.op is Op.MUL for n in live)
    cost = interpret(g, {}).costs[scatters[0]]
    assert (cost.flops, cost.bytes_read, cost.bytes_written) == (0, 128, 128)


def test_the_functional_copy_of_a_decomposed_program_reads_its_source():
    """After functionalization the write is ``copy(view, src)`` + ``select_scatter``: the scatter's
    update must be the multiplied rows, not the zeros the view holds."""
    g = _graph(_SelectWrite(), program=True)
    (scatter,) = [n for n in g.nodes if n.op is Op.SCATTER]
    update = scatter.inputs[1]
    assert update is not None and update.producer is not None and update.producer.op is Op.MUL


def test_copy_into_a_whole_tensor_copies_the_source():
    """``out.copy_(x * 2)``: one copy of [2, 4, 16] fp32 (512 B each way) from the product."""
    g = _graph(_CopyIntoBase())
    (copy,) = [n for n in g.nodes if n.op is Op.COPY]
    assert copy.inputs[0] is not None and copy.inputs[0].producer is not None
    assert copy.inputs[0].producer.op is Op.MUL and copy in _producer_chain(g)
    cost = interpret(g, {}).costs[copy]
    assert (cost.bytes_read, cost.bytes_written) == (512, 512)


@pytest.mark.parametrize("inplace, peak", [(False, 65536), (True, 40960)])
def test_an_in_place_op_updates_its_operand_without_a_buffer_of_its_own(inplace, peak):
    """Hand count, fp32: x [8, 256] 8 KiB, h [8, 1024] 32 KiB, y [8, 256] 8 KiB. ``relu(h)`` needs a
    second 32 KiB buffer while h is live (64 KiB); ``relu_`` writes h, so x + h = 40 KiB is the most
    live (both variants were 64 KiB)."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 1024, bias=False), torch.nn.ReLU(inplace=inplace),
                            torch.nn.Linear(1024, 256, bias=False))
    g = narrowpipe.from_torch(m, (torch.randn(8, 256),))
    assert narrowpipe.analyze(g).peak_activation_bytes == peak
    assert interpret(g, {}).peak_activation_bytes == peak
    (relu,) = [n for n in g.nodes if n.op is Op.RELU]
    assert (IN_PLACE in relu.attrs) is inplace


def test_is_all_true_is_a_reduction_over_every_element():
    """``torch._assert_async``-style checks (LLaVA's ``(mask == x).all()``) export ``aten._is_all_true``:
    a min over the whole bool tensor, [2, 4, 16] = 128 B read, 1 B written, one compare per element;
    it was listed unmodeled."""
    class _AllTrue(torch.nn.Module):
        def forward(self, x):
            return torch.ops.aten._is_all_true(x > 0)

    g = narrowpipe.from_torch(_AllTrue(), (torch.randn(2, 4, 16),))
    (node,) = [n for n in g.nodes if n.source.op.startswith("aten._is_all_true")]
    cost = interpret(g, {}).costs[node]
    assert node.op is Op.REDUCE_MIN and (cost.flops, cost.bytes_read, cost.bytes_written) == (128, 128, 1)
    assert narrowpipe.analyze(g).unmodeled == []


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_is_views_of_its_inputs(indexing):
    """BEiT's relative position index: ``torch.meshgrid`` returns expanded views (no FLOPs, no bytes),
    shaped as torch shapes them; it was listed unmodeled."""
    class _Grid(torch.nn.Module):
        def forward(self, a, b):
            gx, gy = torch.meshgrid(a, b, indexing=indexing)
            return gx + gy

    a, b = torch.randn(3), torch.randn(5)
    g = narrowpipe.from_torch(_Grid(), (a, b))
    report = narrowpipe.analyze(g)
    assert report.unmodeled == []
    grid = [n for n in g.nodes if n.source.op.startswith("aten.meshgrid")]
    costs = interpret(g, {}).costs
    assert {n.op for n in grid} == {Op.RESHAPE, Op.EXPAND} and sum(costs[n].bytes for n in grid) == 0
    expected = tuple(torch.meshgrid(a, b, indexing=indexing)[0].shape)
    assert tuple(g.outputs[0].shape) == expected


def test_weight_norm_is_norm_divide_multiply():
    """``nn.utils.weight_norm`` (wav2vec2, HuBERT) exports ``aten._weight_norm``: v [8, 4, 3] fp32,
    dim=2. Hand count: the 2-norm over dims 0 and 1 reads v (384 B), writes [1, 1, 3] (12 B), 2
    FLOPs per element (192); g / norm reads 24 B, writes 12 B, 3 FLOPs; v * scale reads 384 + 12 B,
    writes 384 B, 96 FLOPs. It was listed unmodeled."""
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 8, 3, bias=False), dim=2)

    class _Norm(torch.nn.Module):
        def forward(self, x):
            return conv(x)

    g = narrowpipe.from_torch(_Norm(), (torch.randn(2, 4, 10),))
    assert narrowpipe.analyze(g).unmodeled == []
    rows = [n for n in g.nodes if n.source.op.startswith("aten._weight_norm")]
    costs = interpret(g, {}).costs
    assert [(n.op, costs[n].flops, costs[n].bytes_read, costs[n].bytes_written) for n in rows] == [
        (Op.REDUCE_NORM, 192, 384, 12), (Op.DIV, 3, 24, 12), (Op.MUL, 96, 396, 384)]
