"""How one tensor is laid out over the device mesh: which mesh axes split which of its dims, and
whether it is a partial sum still owed a reduction.

Why its own value type: sharding propagation compares, projects and rewrites these specs for every
operand of every node, and the sharded graph records them on each node's :class:`~narrowpipe.ir.Placement`.
A dim may be split by several axes at once (context parallelism splits the sequence over ``cp`` and
sequence parallelism splits each part again over ``tp``), outermost first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Spec"]


@dataclass(frozen=True, slots=True)
class Spec:
    """``dims[i]`` are the mesh axes dim ``i`` is split over (empty: whole on every device);
    ``partial`` is the axis over which the local values still have to be summed (or maxed)."""

    dims: tuple[tuple[str, ...], ...]
    partial: str | None = None

    @classmethod
    def replicated(cls, rank: int) -> Spec:
        return cls(((),) * rank)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def is_replicated(self) -> bool:
        return self.partial is None and not any(self.dims)

    @property
    def axes(self) -> frozenset[str]:
        """Every axis used (on a dim or as the pending reduction)."""
        out = {a for d in self.dims for a in d}
        return frozenset(out | ({self.partial} if self.partial else set()))

    def dim_of(self, axis: str) -> int | None:
        for i, d in enumerate(self.dims):
            if axis in d:
                return i
        return None

    def with_dim(self, dim: int, axes: tuple[str, ...]) -> Spec:
        dims = list(self.dims)
        dims[dim] = axes
        return Spec(tuple(dims), self.partial)

    def add_axis(self, dim: int, axis: str) -> Spec:
        """``axis`` appended (innermost) to dim ``dim``."""
        return self.with_dim(dim, (*self.dims[dim], axis))

    def drop_axis(self, axis: str) -> Spec:
        return Spec(tuple(tuple(a for a in d if a != axis) for d in self.dims),
                    None if self.partial == axis else self.partial)

    def resolved(self) -> Spec:
        return Spec(self.dims)

    def local_shape(self, shape: tuple[int, ...], sizes: Mapping[str, int]) -> tuple[int, ...]:
        """The shape the busiest device holds: every split dim divided by its axes' sizes, rounded up
        where it does not divide (the routed rows of the experts: the largest share sets the time)."""
        out = []
        for n, axes in zip(shape, self.dims):
            for a in axes:
                n = -(-n // sizes[a])
            out.append(n)
        return tuple(out)

    def divides(self, shape: tuple[int, ...], sizes: Mapping[str, int]) -> bool:
        """Whether every split dim divides evenly (the only layouts the pass produces, but for the
        experts' routed rows, which split as the router sent them)."""
        for n, axes in zip(shape, self.dims):
            k = 1
            for a in axes:
                k *= sizes[a]
            if n % k:
                return False
        return True

    def __str__(self) -> str:
        body = ", ".join("+".join(d) if d else "-" for d in self.dims)
        return f"[{body}]" + (f" partial({self.partial})" if self.partial else "")
