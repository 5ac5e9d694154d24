"""Costing one recorded call: lower it to IR, run the cost rules and the target's execution model,
and keep what the diagnosis compares measured time against.

Calls with equal signatures (name, shapes, dtypes, scalars) cost the same, so each distinct
signature is costed once however many times the trace repeats it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...backends import Target
from ...errors import TraceError
from ...frontends.trace.call import ImpossibleCall
from ...frontends.trace.collectives import collective_graph, collective_kind
from ...frontends.trace.lower import Call, lower_call
from ...frontends.trace.read import Event, parse_dtype
from ...ir import TRANSCENDENTAL_OPS, DType, Op, OpGroup
from ..execution import DeviceGroup, Program, model_for
from ..execution.collectives import Topology
from ..execution.common import TimingOptions, conv_options, matrix_rate, memory_time, transcendental_rate, vector_rate
from ..execution.gemm import kernel_gemms
from ..interpreter import interpret
from ..timing import time_program

__all__ = ["Costed", "Coster"]

_HEAVY = frozenset({Op.DOT, Op.GROUPED_DOT, Op.CONV, Op.ATTENTION, Op.ATTENTION_BACKWARD})


@dataclass(frozen=True)
class Costed:
    """One call's exact work and its times at the target's peaks: what measured time is held against."""

    op: str
    group: str
    dtype: str
    flops: int
    matmul_flops: int
    transcendentals: int
    bytes: int
    comm_bytes: int
    compute_s: float      # at the datasheet peak
    memory_s: float       # at the datasheet bandwidth
    link_s: float | None  # at the link bandwidth the execution models use (collectives)
    predicted_s: float
    #: The same bytes at the bandwidth the target reaches for each kernel's transfer size, as the
    #: execution model streams them (its bandwidth curve or efficiency, its cache-resident tier):
    #: a calibrated host's best add bandwidth is cache-resident, and a DRAM-sized stream reaches a
    #: twentieth of it, so judging it against the peak called a streaming add latency-bound.
    reach_memory_s: float = 0.0
    #: (M, N, K) of the call's largest GEMM (a matmul, or a convolution as an implicit GEMM), for
    #: advice that names the dims; None for other ops.
    gemm: tuple[int, int, int] | None = None


class Coster:
    """Costs recorded calls through the IR and the rules, once per distinct signature."""

    def __init__(self, target: Target, options: TimingOptions, default_dtype: DType, path: str = "") -> None:
        self.target, self.options, self.default_dtype, self.path = target, options, default_dtype, path
        self.cache: dict[str, Costed | None] = {}

    def op(self, ev: Event) -> Costed | None:
        key = ev.signature()
        if key not in self.cache:
            try:
                graph = lower_call(Call(ev.name, ev.inputs(), ev.concrete(), self.default_dtype), impossible=True)
            except ImpossibleCall as why:
                raise TraceError(self.path, f"op {ev.name!r} at ts {ev.ts:g} us: {why}") from None
            self.cache[key] = self._cost(graph) if graph is not None else None
        return self.cache[key]

    def comm(self, name: str, info: dict[str, Any]) -> Costed | None:
        _, op = collective_kind(f"{info.get('Collective name', '')} {name}")
        nin, nout = info.get("In msg nelems"), info.get("Out msg nelems")
        if op is None or not isinstance(nin, (int, float)):
            return None
        dtype = parse_dtype(str(info.get("dtype", ""))) or self.default_dtype
        group = int(info.get("Group size") or 1)
        graph = collective_graph(name, op, int(nin), int(nout if isinstance(nout, (int, float)) else nin), dtype, group)
        return self._cost(graph, group)

    def _cost(self, graph: Any, group: int = 1) -> Costed | None:
        table = interpret(graph, {})
        if table.unmodeled:
            return None
        t, opts = self.target, self.options
        program = Program.fused(table, opts)
        kernels = program.kernels
        flops = mm = trans = comm = 0
        compute_s = 0.0
        heavy = max(table.costs, key=lambda n: (n.op in _HEAVY, table.costs[n].flops))
        for node, cost in table.costs.items():
            flops, trans, comm = flops + cost.flops, trans + cost.transcendentals, comm + cost.comm_bytes
            if node.group is OpGroup.COLLECTIVE:
                continue
            x = node.inputs[0] if node.inputs else None
            dtype = x.type.dtype if x is not None else node.outputs[0].type.dtype
            if node.op in _HEAVY:
                mm += cost.flops
                compute_s += cost.flops / matrix_rate(t, dtype, conv_options(opts, t) if node.op is Op.CONV
                                                      else opts).flops_per_s
            elif cost.flops:
                compute_s += cost.flops / vector_rate(t, dtype if dtype.is_float else DType.FP32).flops_per_s
            if cost.transcendentals:     # at the function's own rate, as the execution model times it
                fn = node.op.value if node.op in TRANSCENDENTAL_OPS else "exp"
                compute_s += cost.transcendentals / transcendental_rate(t, fn)
        moving = [k.cost.bytes for k in kernels if not k.is_free]
        nbytes = sum(moving)
        family_bw = getattr(model_for(t), "bandwidth", None)
        reach_s = sum(memory_time(t, b, family_bw(t, b) if family_bw is not None else None) for b in moving)
        gemms = [g for k in kernels for g in kernel_gemms(table, k)]
        big = max(gemms, key=lambda g: g.flops) if gemms else None
        link_s = None
        if comm:
            bw = Topology.of(t).link(group).bandwidth
            link_s = comm / bw if bw else None
        predicted = time_program(program, DeviceGroup(t)).total_s
        x = heavy.inputs[0] if heavy.inputs and heavy.inputs[0] is not None else heavy.outputs[0]
        return Costed("+".join(dict.fromkeys(n.op.value for n in table.costs)), heavy.group.value,
                      x.type.dtype.value, flops, mm, trans, nbytes, comm, compute_s,
                      nbytes / t.memory_bandwidth, link_s, predicted, reach_s,
                      (big.m, big.n, big.k) if big is not None else None)
