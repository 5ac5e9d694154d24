"""Hotspots: the kernels where a run's time goes, with repeated layers counted together."""

from __future__ import annotations

import re

from .execution import KernelTime
from .kernels import Kernel
from .report import Bottleneck

__all__ = ["hotspots"]

_INDEX = re.compile(r"(?<=[./])\d+(?=[./]|$)")


def hotspots(kernels: list[Kernel], times: list[KernelTime], total: float, n: int = 3) -> list[Bottleneck]:
    """The ``n`` heaviest kernels, counting together the same kernel of every repeated block: in a
    32-layer model "every layer's down_proj: 21%" is what a reader can act on, "layer 7's: 0.7%" is
    not. Kernels are the same when their module paths differ only in indices and they compute the
    same thing: the same kind and the same anchor op on the same operand shapes and dtypes. Not the
    same predicted time: identical layers differ in time where a layout puts a chip-to-chip hop
    after some of them (a dataflow pipeline), which split llama's 32 down_projs into 22 + 10. Not
    every node of the kernel either: the last layer's down_proj also absorbs the final residual
    add and cast, an epilogue that does not make it another layer. The label stars the indices that
    vary. Kernels without a module scope stay one per entry."""
    groups: dict[tuple[object, ...], list[tuple[Kernel, KernelTime]]] = {}
    for k, t in zip(kernels, times):
        if t.time_s > 0:
            scope = k.anchor.source.scope
            key = (_INDEX.sub("#", scope) if scope else f"@{k.name}", k.kind, *_signature(k))
            groups.setdefault(key, []).append((k, t))
    out = []
    for members in groups.values():
        time_s = sum(t.time_s for _, t in members)
        heaviest = members[0][0]
        kind = heaviest.kind
        scope = _varying_starred([k.anchor.source.scope for k, _ in members])
        out.append(Bottleneck(heaviest.name, kind, members[0][1].bound, time_s, time_s / total if total else 0.0,
                              scope, len(members)))
    return sorted(out, key=lambda b: -b.time_s)[:n]


def _signature(kernel: Kernel) -> tuple[object, ...]:
    """What the kernel computes at its core: its anchor's op, operand and result types (shapes,
    symbolic or not, and dtypes) and its plain attributes (strides, contracting dims)."""
    node = kernel.anchor
    attrs = tuple(sorted((k, repr(v)) for k, v in node.attrs.items() if _plain(v)))
    return (node.op, tuple(str(v.type) if v is not None else "-" for v in node.inputs),
            tuple(str(v.type) for v in node.outputs), attrs)


def _plain(v: object) -> bool:
    """Numbers, strings and tuples of them: attributes that say what is computed, never a value
    or a nested graph (whose names differ from layer to layer)."""
    if isinstance(v, tuple):
        return all(_plain(x) for x in v)
    return isinstance(v, (int, float, str, bool, type(None)))


def _varying_starred(scopes: list[str]) -> str:
    """``model.layers.0.mlp``, ``model.layers.1.mlp`` -> ``model.layers.*.mlp``."""
    split = [_INDEX.split(s) for s in scopes]
    indices = [_INDEX.findall(s) for s in scopes]
    head = split[0]
    out = [head[0]]
    for i, part in enumerate(head[1:]):
        values = {ix[i] for ix in indices}
        out.append(("*" if len(values) > 1 else indices[0][i]) + part)
    return "".join(out)
