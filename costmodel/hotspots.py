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
    not. Kernels are the same when their module paths differ only in indices and their predicted
    times agree to three digits (same shapes; the last layer's down_proj, which also absorbs the
    final residual add, stays in); the label stars the indices that vary. Kernels without a module
    scope stay one per entry."""
    groups: dict[tuple[str, str, float], list[tuple[Kernel, KernelTime]]] = {}
    for k, t in zip(kernels, times):
        if t.time_s > 0:
            scope = k.anchor.source.scope
            key = (_INDEX.sub("#", scope) if scope else f"@{k.name}", k.kind, float(f"{t.time_s:.3g}"))
            groups.setdefault(key, []).append((k, t))
    out = []
    for (_, kind, _), members in groups.items():
        time_s = sum(t.time_s for _, t in members)
        heaviest = members[0][0]
        scope = _varying_starred([k.anchor.source.scope for k, _ in members])
        out.append(Bottleneck(heaviest.name, kind, members[0][1].bound, time_s, time_s / total if total else 0.0,
                              scope, len(members)))
    return sorted(out, key=lambda b: -b.time_s)[:n]


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
