"""Recognise ``out=`` calls in a recorded trace, so the output buffer is not costed as an input read.

The profiler records ``torch.add(x, y, out=z)`` as ``aten::add`` with one more argument than the
functional form (``[x, y, alpha, z]`` against ``[x, y, alpha]``); nothing else tells the two apart.
A call is an ``out=`` variant when it records more arguments than any functional overload of that
op takes and its last argument is a tensor. The overloads' argument counts come from torch's own
schemas when torch is importable; without torch every call is read as recorded (a trace can be
diagnosed on a machine without torch, at the cost of counting the out buffer as a read).
"""

from __future__ import annotations

from functools import cache

__all__ = ["functional_arity", "drops_out_arg"]


@cache
def functional_arity(name: str) -> int | None:
    """The most arguments a functional (no ``out``) overload of ``aten::name`` takes, or None."""
    try:
        import torch
        packet = getattr(torch.ops.aten, name)
        counts = [len(s.arguments) for s in (getattr(packet, ov)._schema for ov in packet.overloads())
                  if not any(a.is_out for a in s.arguments)]
    except Exception:   # no torch, no such op, or a schema API that moved: read the call as recorded
        return None
    return max(counts) if counts else None


def drops_out_arg(name: str, recorded: int, last_is_tensor: bool) -> bool:
    """Whether the last of ``recorded`` arguments of ``aten::name`` is an ``out=`` buffer."""
    if not last_is_tensor or name.endswith("_"):
        return False
    arity = functional_arity(name)
    return arity is not None and recorded > arity
