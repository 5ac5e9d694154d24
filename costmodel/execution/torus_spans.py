"""Which axes of a torus a group of ranks spans, and whether each closes into a ring.

A group fills whole axes of the torus in order: 16 ranks on a 4x4x4 torus span two whole axes; 8
span one whole axis and part of the next, a line there (no wraparound link closes it). Split from
:mod:`.collectives`, which times the collectives on the spans.
"""

from __future__ import annotations

from math import ceil, prod

__all__ = ["torus_spans", "named_wraps"]


def axis_wraps(dims: tuple[int, ...], wrap: bool | tuple[bool, ...]) -> tuple[bool, ...]:
    """One wraparound flag per torus axis (a single flag applies to every axis)."""
    return tuple(wrap) if isinstance(wrap, tuple) else tuple(wrap for _ in dims)


def named_wraps(axes: tuple[int, ...], dims: tuple[int, ...], wrap: bool | tuple[bool, ...]) -> tuple[bool, ...]:
    """Wraparound of named axes: an axis whose length is one of the torus's dims (each dim matched
    once, a wrapping one first) is that whole axis and wraps where the torus closes it; another
    length is part of an axis, a line."""
    left = sorted(zip(dims, axis_wraps(dims, wrap)), key=lambda a: not a[1])
    flags = []
    for k in axes:
        match = next((a for a in left if a[0] == k), None)
        if match is not None:
            left.remove(match)
        flags.append(match is not None and match[1])
    return tuple(flags)


def torus_spans(group: int, dims: tuple[int, ...], stride: int = 1,
                 wrap: bool | tuple[bool, ...] = True) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """The axes a group of ``group`` devices spans, filling whole axes first (how slices are laid
    out on the torus): 16 devices on 16x16 use one axis, 64 on 4x4x4 all three; a remainder runs
    along part of the next axis. Members ``stride`` ranks apart skip the axes the inner groups fill
    (a data-parallel group at stride 16 on 16x16 runs along the second axis). With each axis its
    wraparound: only a group reaching all of a torus axis closes its ring through the wraparound
    link; along part of one (2 of a 16-ring) the members form a line (the mesh rule, SB-TPU), and an
    axis the torus does not close (``wrap`` per axis) is a line even whole."""
    rest: list[tuple[int, int, bool]] = []    # (members along the axis, the axis's length, it wraps)
    for k, closed in zip(dims, axis_wraps(dims, wrap)):
        if stride >= k and stride % k == 0:
            stride //= k
        elif stride > 1:
            whole = max(1, k // stride)        # every stride-th chip: the whole axis
            rest.append((whole, whole, closed))
            stride = 1
        else:
            rest.append((k, k, closed))
    axes: list[int] = []
    wraps: list[bool] = []
    for k, whole, closed in rest or [(group, 0, False)]:
        have = prod(axes) if axes else 1
        if have >= group:
            break
        take = min(k, ceil(group / have))
        axes.append(take)
        wraps.append(closed and take == whole)
    if not axes:
        return (group,), (False,)
    return tuple(axes), tuple(wraps)
