"""A declared symbolic dim: its default, range, role, and the name its source format gave it.

Kept apart from :mod:`.graph` because the rule for the least size a dim may take is read in two
places that must agree, the graph-file loader and the cost model's binding (a ``graph.save`` that
``narrowpipe.load`` refused was the loader applying the role's floor without the dim's own range).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from ..errors import IRError
from .roles import DimRole, least_size

__all__ = ["DimSpec", "by_ir_name", "describe_dims"]

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class DimSpec:
    """A symbolic dim of the graph: its default value (e.g. the export's example size), range and role.

    ``source_name`` is the dim's name in the source format when the IR had to spell it otherwise (an
    ONNX ``dim_param`` ``batch size`` is the IR's ``batch_size``): the dim can be bound by either.
    """

    name: str
    default: int | None = None
    min: int | None = None
    max: int | None = None
    doc: str = ""
    role: DimRole = DimRole.OTHER
    source_name: str = ""

    @property
    def least(self) -> int:
        """The smallest size the dim may take: its role's (:func:`~.roles.least_size`: 1, or 0 for a
        KV length), or less where its own range says so for a dim of no role (a data-dependent
        count, as NonZero's or an empty tensor's split, may be 0).

        A batch or sequence dim keeps its role's floor whatever its range says: ``torch.export.Dim``
        defaults to ``min=0``, so nearly every export's range admits 0, and ``batch=0`` is an empty
        model (nothing to count, a division by zero in the systolic folds), never a question."""
        floor = least_size(self.role)
        if self.min is None or self.role is not DimRole.OTHER:
            return floor
        return min(floor, self.min)


def by_ir_name(specs: Mapping[str, DimSpec], sizes: Mapping[str, V]) -> dict[str, V]:
    """``sizes`` keyed by the IR's dim names: a key that is a dim's ``source_name`` (and no dim's IR
    name) stands for that dim, so ``--set "batch size=4"`` binds the ONNX file's ``batch size``.
    One dim given under both its names with different sizes is an error."""
    source = {s.source_name: s.name for s in specs.values() if s.source_name and s.source_name not in specs}
    out: dict[str, V] = {}
    given: dict[str, str] = {}
    for key, size in sizes.items():
        name = key if key in specs else source.get(key, key)
        if name in out and out[name] != size:
            raise IRError(f"dim {name!r} is given twice with different sizes (as {given[name]!r} and {key!r})")
        out[name], given[name] = size, key
    return out


def describe_dims(specs: Mapping[str, DimSpec], names: list[str]) -> str:
    """``names`` for a message, each with the source's spelling where it differs (``batch_size_1
    ('batch size')``)."""
    def one(n: str) -> str:
        spec = specs.get(n)
        return f"{n} ({spec.source_name!r})" if spec is not None and spec.source_name else n
    return ", ".join(map(one, names))
