"""The host stall a kernel pays in an eager run is set by the distinct bytes touched since its op's
previous kernel (that one's included), not by the kernel right before it: a small op whose last call
lies several kernels back pays for all of them; the first kernel of an op looks back into the
previous forward. Footprints and times checked by hand."""

from __future__ import annotations

import dataclasses
import math

import pytest

import narrowpipe
from narrowpipe.backends import get_target
from narrowpipe.costmodel.execution.host_stalls import bytes_since_own_call
from narrowpipe.costmodel.interpreter import interpret
from narrowpipe.costmodel.kernels import fuse
from narrowpipe.ir import DType, Graph, Op, TensorType

MIB = 2**20
F32 = DType.FP32


def _chain() -> Graph:
    """relu(a) -> x; add(x, b) -> y; relu(y) -> z; each tensor 1 MiB (262144 floats)."""
    g = Graph("chain")
    t = TensorType(F32, (512, 512))
    a, b = g.add_input("a", t), g.add_input("b", t)
    x = g.add_node(Op.RELU, [a], [t]).outputs[0]
    y = g.add_node(Op.ADD, [x, b], [t]).outputs[0]
    g.set_outputs(g.add_node(Op.RELU, [y], [t]).outputs)
    return g


def _cpu(**fields: object):
    epyc = get_target("epyc-9755")
    fields = {"eager_op_overhead": 1e-6, **fields}
    return dataclasses.replace(epyc, sources={**epyc.sources, **{k: "assumption: test" for k in fields}}, **fields)


def test_the_footprint_since_the_ops_last_kernel_counts_each_tensor_once():
    g = _chain()
    table = interpret(g, {})
    kernels = fuse(table, "none")
    assert [k.anchor.op for k in kernels] == [Op.RELU, Op.ADD, Op.RELU]
    since = bytes_since_own_call(kernels, table, [True] * 3)
    # the second relu: the first relu's a, x and the add's x (again), b, y: 4 MiB
    assert since[2] == 4 * MIB
    # the first relu looks back to the second relu of the previous forward, right before it: y, z
    assert since[0] == 2 * MIB
    # the add runs once per forward: the whole forward's five tensors
    assert since[1] == 5 * MIB
    # a kernel that is not launched touches nothing and leaves the windows alone
    assert bytes_since_own_call(kernels, table, [True, False, True])[2] == 2 * MIB


def test_a_kernel_pays_the_stall_of_the_footprint_since_its_op_ran():
    # stall 50 us x the curve: ~0 up to 1 MiB, 0.5 at 4 MiB, 1 at 16 MiB; the own loops pay ~0 (1e-4)
    cpu = _cpu(eager_evicted_call_overhead=50e-6,
               eager_evicted_call_curve=((MIB, 1e-4), (4 * MIB, 0.5), (16 * MIB, 1.0)),
               eager_evicted_call_self_curve=((MIB, 1e-4), (16 * MIB, 1e-4)))
    plain = [r.time_s for r in narrowpipe.analyze(_chain(), _cpu()).ops]
    stalled = [r.time_s for r in narrowpipe.analyze(_chain(), cpu).ops]
    assert stalled[0] == plain[0]                            # the first kernel follows the caller
    # the add follows a relu that moved 2 MiB, but 5 MiB were touched since the last add (log-linear
    # between 4 and 16 MiB: log(5/4) / log(4) of the way)
    assert stalled[1] - plain[1] == pytest.approx(50e-6 * (0.5 + 0.5 * math.log(5 / 4) / math.log(4) - 1e-4))
    assert stalled[2] - plain[2] == pytest.approx(50e-6 * (0.5 - 1e-4))   # 4 MiB since the first relu
