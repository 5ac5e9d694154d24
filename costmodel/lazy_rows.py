"""A report's per-node rows, built on first use.

Why: re-binding the dims of a lowered graph (``analyze(graph, batch=16)`` after ``batch=8``) costs
each class of equal nodes once, so its totals take a few hundred sums; building one row object per
node for a hundred thousand nodes would take most of the time, yet a caller asking for the totals,
a timing or a sweep point never reads them. The rows are built the first time any of them is read
(iteration, indexing, ``len``, JSON) and kept; they are the same rows either way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

from .report import OpRow

__all__ = ["LazyRows"]


class LazyRows(Sequence[OpRow]):
    """A read-only sequence of :class:`OpRow` made by ``build()`` on first access."""

    __slots__ = ("_build", "_rows")

    def __init__(self, build: Callable[[], list[OpRow]]) -> None:
        self._build: Callable[[], list[OpRow]] | None = build
        self._rows: list[OpRow] | None = None

    @property
    def built(self) -> bool:
        """Whether the rows exist yet (for tests and benchmarks: nothing else needs to know)."""
        return self._rows is not None

    def _list(self) -> list[OpRow]:
        if self._rows is None:
            assert self._build is not None
            self._rows, self._build = self._build(), None   # drop the builder: it holds the cost table
        return self._rows

    @overload
    def __getitem__(self, i: int) -> OpRow: ...
    @overload
    def __getitem__(self, i: slice) -> list[OpRow]: ...
    def __getitem__(self, i: int | slice) -> OpRow | list[OpRow]:
        return self._list()[i]

    def __len__(self) -> int:
        return len(self._list())

    def __iter__(self) -> Iterator[OpRow]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (LazyRows, list, tuple)):
            return self._list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking container, like list

    def __repr__(self) -> str:
        return repr(self._list()) if self.built else "LazyRows(<not built>)"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles (a sweep's worker pool) as the plain list of rows: the builder holds the graph."""
        return (list, (self._list(),))
