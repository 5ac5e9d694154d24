"""The exception types narrowpipe raises.

Every error a user can provoke with bad input derives from :class:`NarrowpipeError`, so callers can
catch one type and always get a message that names the file, the node and the reason instead of a
raw traceback from a library deep below.
"""

from __future__ import annotations

import operator
import os

__all__ = [
    "NarrowpipeError",
    "FrontendError",
    "ModelLoadError",
    "UnsupportedOpError",
    "ShapeError",
    "IRError",
    "VerificationError",
    "UnboundDimError",
    "TargetSpecError",
    "UnknownTargetError",
    "PassError",
    "TraceError",
    "NarrowpipeWarning",
    "PlanError",
    "as_integer",
]


class NarrowpipeError(Exception):
    """Base of every error narrowpipe raises on bad input or unsupported models."""


class FrontendError(NarrowpipeError):
    """A source program could not be lowered; the message names the file, node and op."""

    def __init__(self, reason: str, *, file: str | None = None, node: str | None = None,
                 op: str | None = None) -> None:
        self.reason = reason
        self.file = file
        self.node = node
        self.op = op
        where = []
        if file:
            where.append(f"file {file!r}")
        if node:
            where.append(f"node {node!r}")
        if op:
            where.append(f"op {op!r}")
        super().__init__(f"{', '.join(where)}: {reason}" if where else reason)


class ModelLoadError(FrontendError):
    """A model file is missing, truncated, corrupt or of an unknown format."""


class UnsupportedOpError(FrontendError):
    """An op has no canonical lowering or no cost rule (raised only when ``strict=True``)."""


class ShapeError(FrontendError):
    """Shapes are missing, negative, absurd or disagree with each other."""


class IRError(NarrowpipeError):
    """The IR was used inconsistently (wrong arity, unknown op, bad attribute)."""


class VerificationError(IRError):
    """The graph verifier found a broken invariant; the message lists every problem found."""


class UnboundDimError(NarrowpipeError):
    """A symbolic dim has no value; bind it with ``--set NAME=VALUE`` or ``analyze(g, dims={NAME: ...})``."""


class TargetSpecError(NarrowpipeError):
    """A target spec file is malformed; the message names the file and the field."""


class UnknownTargetError(NarrowpipeError):
    """No target with that name or alias exists in the catalog."""


class PassError(NarrowpipeError):
    """A pass or pipeline name or option is unknown or invalid."""


class TraceError(NarrowpipeError):
    """A trace file is missing, not JSON, has no events, or was recorded without shapes."""

    def __init__(self, file: str | os.PathLike[str], reason: str) -> None:
        self.file = str(file)
        self.reason = reason
        super().__init__(f"trace {self.file!r}: {reason}")


class NarrowpipeWarning(UserWarning):
    """Base of the warnings narrowpipe gives about the user's input (an unsourced number in a spec
    file, a dim outside its exported range): the CLI shows them last, in bold, where the eye lands."""


class PlanError(NarrowpipeError):
    """A parallel configuration is invalid or cannot run: sizes that do not divide, a device count
    the strategy does not use, a model that fits no strategy. The message names the field and why."""


def as_integer(what: str, value: object) -> int:
    """``value`` as an int, or a :class:`NarrowpipeError` naming ``what``: a count (a dim, a batch, a
    context length) given as 2.9 was truncated to 2 while the throughput divided by 2.9. Ints,
    numpy integers, integral floats (``8.0``) and digit strings pass; bools and fractions do not."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            pass
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
    raise NarrowpipeError(f"{what} must be an integer, got {value!r}")
