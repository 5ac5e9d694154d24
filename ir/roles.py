"""What a symbolic dim means to a planner: batch, sequence, KV-cache length, or something else.

The cost model used to find the batch by matching the names ``batch`` and ``seq``, which breaks on
any model whose exporter spelled them differently (``N``, ``batch_size``, ``sequence_length``).
Frontends and model builders know where a dim sits (dim 0 of ``input_ids`` is the batch), so they
tag it once on :class:`~narrowpipe.ir.DimSpec`, and serving and planning bind roles, never names.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from math import prod
from typing import Protocol

from ..errors import IRError, UnboundDimError
from .dims import Dim, Sym

__all__ = ["DimRole", "names_with_role", "role_size", "least_size", "plain_name", "as_role"]


class DimRole(enum.Enum):
    BATCH = "batch"            # independent samples: sequences, images
    SEQUENCE = "sequence"      # tokens processed in this pass (the prompt in prefill, 1 in decode)
    KV_LENGTH = "kv_length"    # tokens already held in the KV cache (past length) that attention reads
    OTHER = "other"            # anything else: image size, number of boxes, a loop count

    @classmethod
    def parse(cls, text: str | DimRole | None) -> DimRole:
        """A role from its JSON text; absent is OTHER, so files from before roles load. Unknown text
        is an error: read as OTHER, a misspelt ``"batch"`` would silently drop out of every
        batch size a planner computes."""
        if isinstance(text, DimRole):
            return text
        if text is None or text == "":
            return cls.OTHER
        try:
            return cls(text)
        except ValueError:
            raise IRError(f"unknown dim role {text!r}; roles: {', '.join(r.value for r in cls)}") from None


def as_role(role: DimRole | str) -> DimRole:
    """A role asked for by the API: a :class:`DimRole` or its name (``"batch"``, ``"BATCH"``,
    ``"kv_length"``). A string compared with ``is`` against the enum matched nothing, so
    ``graph.role_size("batch")`` answered 1 and ``dims_with_role("batch")`` []: a wrong answer, silently."""
    if isinstance(role, DimRole):
        return role
    if isinstance(role, str) and role.strip():
        return DimRole.parse(role.strip().lower())
    raise IRError(f"a dim role is a DimRole or its name ({', '.join(r.value for r in DimRole)}), got {role!r}")


def least_size(role: DimRole) -> int:
    """The smallest size a dim of ``role`` may take. A tensor dim of 0 is an empty model with nothing
    to count (``--set seq=0`` is a typo, not a question), so 1; but a KV cache may be empty
    (``past_sequence_length=0`` is the prefill step of a decoder-with-past export)."""
    return 0 if role is DimRole.KV_LENGTH else 1


class _HasRole(Protocol):
    """What the helpers read of a :class:`~narrowpipe.ir.DimSpec` (kept apart so graph.py imports this)."""

    @property
    def name(self) -> str: ...
    @property
    def default(self) -> int | None: ...
    @property
    def role(self) -> DimRole: ...


def names_with_role(specs: Iterable[_HasRole], role: DimRole | str) -> list[str]:
    """The names of the dims tagged ``role``, in declaration order."""
    role = as_role(role)
    return [s.name for s in specs if s.role is role]


def role_size(specs: Iterable[_HasRole], role: DimRole | str, bindings: Mapping[str, int] | None = None) -> int:
    """The bound size of a role: the product of its dims (bindings first, then defaults); 1 if none."""
    role = as_role(role)
    values = []
    for s in specs:
        if s.role is not role:
            continue
        v = (bindings or {}).get(s.name, s.default)
        if v is None:
            raise UnboundDimError(f"dim {s.name} ({role.value}) has no value; bind it with dims={{{s.name!r}: N}}")
        values.append(int(v))
    return prod(values)


def plain_name(d: Dim) -> str | None:
    """The name when ``d`` is one bare symbol (``seq``, not ``seq + 1`` or ``2*seq``), else None: only
    a bare dim on an input can carry a role (``past + 1`` is derived from ``past``)."""
    if isinstance(d, Sym) and len(d.terms) == 1:
        (mono, coef), = d.terms.items()
        if coef == 1 and len(mono) == 1 and mono[0][1] == 1 and isinstance(mono[0][0], str):
            return str(mono[0][0])
    return None
