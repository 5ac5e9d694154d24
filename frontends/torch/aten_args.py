"""Small helpers shared by the aten lowering functions: argument access and attribute cleaning."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

__all__ = ["op_key", "arg", "scalar", "ints", "tensor_meta", "rank_of", "norm_axis", "norm_axes"]


_KEY_CACHE: dict[Any, tuple[str, str]] = {}


def op_key(target: Any) -> tuple[str, str]:
    """``("add.Tensor", "add")`` for ``aten.add.Tensor``: overload-specific and packet keys."""
    hit = _KEY_CACHE.get(target)
    if hit is not None:
        return hit
    if isinstance(target, torch._ops.OpOverload):
        ns, _, rest = target.name().partition("::")
        packet = rest.split(".")[0]
        overload = target._overloadname
        prefix = "" if ns == "aten" else f"{ns}::"
        key = (f"{prefix}{packet}.{overload}", f"{prefix}{packet}")
    elif isinstance(target, torch._ops.HigherOrderOperator):
        key = (f"higher_order::{target.name()}", f"higher_order::{target.name()}")
    elif callable(target):
        name = getattr(target, "__name__", str(target))
        key = (f"python::{name}", f"python::{name}")
    else:
        key = (str(target), str(target))
    _KEY_CACHE[target] = key
    return key


def arg(node: fx.Node, index: int, name: str, default: Any = None) -> Any:
    """Argument ``index`` of an fx call, or keyword ``name``, or ``default``."""
    if index < len(node.args):
        return node.args[index]
    return node.kwargs.get(name, default)


def scalar(x: Any) -> Any:
    """A JSON-friendly attribute value (symbolic sizes become their text)."""
    if isinstance(x, bool) or x is None or isinstance(x, (int, float, str)):
        return x
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return str(x)
    if isinstance(x, fx.Node):
        val = x.meta.get("val")
        return str(val) if val is not None and not isinstance(val, torch.Tensor) else None
    if isinstance(x, torch.dtype):
        return str(x).removeprefix("torch.")
    if isinstance(x, (list, tuple)):
        return tuple(scalar(y) for y in x)
    return str(x)


def ints(x: Any, n: int | None = None) -> tuple[int, ...]:
    """An int or list of ints as a tuple, repeated to ``n`` entries for a single int."""
    if x is None:
        return ()
    if isinstance(x, (list, tuple)):
        return tuple(int(v) if not isinstance(v, fx.Node) else -1 for v in x)
    v = int(x)
    return (v,) * (n or 1)


def tensor_meta(x: Any) -> torch.Tensor | None:
    if isinstance(x, fx.Node):
        val = x.meta.get("val")
        return val if isinstance(val, torch.Tensor) else None
    return None


def rank_of(x: Any) -> int:
    t = tensor_meta(x)
    return t.dim() if t is not None else 0


def norm_axis(axis: Any, rank: int) -> int:
    a = int(axis)
    return a % rank if rank else 0


def norm_axes(axes: Any, rank: int) -> tuple[int, ...]:
    """Reduction axes; None or [] means all axes (torch's convention)."""
    if axes is None or (isinstance(axes, (list, tuple)) and len(axes) == 0):
        return tuple(range(rank))
    if isinstance(axes, (list, tuple)):
        return tuple(sorted(norm_axis(a, rank) for a in axes))
    return (norm_axis(axes, rank),)
