"""The verifier's rules for the windowed ops, convolution and pooling: attributes that make sense, and
channels, batch and spatial dims that the window arithmetic (:mod:`.windows`) relates.

Why the shapes are passed in rather than read off a node: the same rule runs on the graph's types
(the verifier, and the ONNX frontend as it lowers each node) and on bound shapes (the cost rules,
:func:`narrowpipe.costmodel.shape_checks.check_window`), where a conv whose output is ``seq - 4``
meets ``seq=4``. Symbolic dims are compared with :func:`.dims.dim_eq`: only a difference the algebra
proves (two ints, or ``seq - 4`` against ``seq - 3``) is reported, never one that a binding could
make right.

A conv relates three shapes, input ``x``, weight ``w`` and output ``y``; its gradients (``role``
``grad_input``: ``(dy, w) -> dx``, ``grad_weight``: ``(x, dy) -> dw``, as the torch frontend and the
training pass emit them) state the same relation with another of the three as the result, so each is
checked as the forward conv it differentiates. A pool's gradient (``role="grad"``, ``(dy, x) -> dx``)
likewise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .dims import Dim, Shape, dim_eq, dim_mul
from .graph import Node
from .ops import Op
from .shapes import format_shape
from .windows import conv_spatial, pool_spatial

__all__ = ["window_attr_problems", "conv_problems", "pool_problems", "window_problems", "check_window"]

_AUTO_PADS = frozenset({"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"})


def _differ(a: Dim, b: Dim) -> bool:
    return dim_eq(a, b) is False


def _int_list(attrs: Mapping[str, Any], key: str, lengths: tuple[int, ...], least: int) -> str | None:
    """What is wrong with ``attrs[key]`` as a list of ints of one of ``lengths``, each >= ``least``."""
    v = attrs[key]
    if isinstance(v, str) or not isinstance(v, Sequence) or not all(isinstance(d, int) for d in v):
        return f"{key} {v!r} is not a list of integers"
    if len(v) not in lengths:
        want = " or ".join(map(str, lengths))
        return f"{key} {list(v)} has {len(v)} values for {lengths[0]} spatial dims (needs {want})"
    if any(d < least for d in v):
        return f"{key} {list(v)} has a value below {least}"
    return None


def window_attr_problems(attrs: Mapping[str, Any], n: int, *, conv: bool) -> list[str]:
    """Attributes of a conv (``conv``) or pool with ``n`` spatial dims that no program can have: a
    stride or dilation below 1, a negative pad, a list of the wrong length, groups below 1."""
    specs: list[tuple[str, tuple[int, ...], int]] = [("stride", (n,), 1), ("dilation", (n,), 1),
                                                     ("output_padding", (n,), 0), ("output_shape", (n,), 1)]
    if not conv:
        specs.append(("kernel", (n,), 1))
    padding = attrs.get("padding")
    if not (conv and isinstance(padding, str)):
        specs.append(("padding", (n, 2 * n), 0))
    elif padding not in ("same", "valid"):
        return [f"padding {padding!r} is neither 'same' nor 'valid'"]
    out = [p for key, lengths, least in specs if key in attrs
           for p in [_int_list(attrs, key, lengths, least)] if p is not None]
    groups = attrs.get("groups", 1)
    if conv and (not isinstance(groups, int) or groups < 1):
        out.append(f"groups {groups!r} is not a positive integer")
    auto = attrs.get("auto_pad", "NOTSET")
    if auto not in _AUTO_PADS:
        out.append(f"auto_pad {auto!r} is not one of {', '.join(sorted(_AUTO_PADS))}")
    return out


def _spatial_problems(got: Sequence[Dim], want: Sequence[tuple[Dim, ...]], x: Sequence[Dim],
                      how: str) -> list[str]:
    out: list[str] = []
    for i, (g, options) in enumerate(zip(got, want)):
        empty = all(isinstance(o, int) and o < 1 for o in options)
        if (isinstance(g, int) and g < 1) or empty:
            size = g if isinstance(g, int) and g < 1 else options[-1]
            out.append(f"output spatial dim {i} would have size {size}: the window ({how}) does not fit the "
                       f"input's {x[i]} (an output size must be at least 1)")
        elif all(_differ(g, o) for o in options):
            out.append(f"output spatial dims {format_shape(got)} are not "
                       f"{format_shape(o[0] for o in want)}, what the input's {format_shape(x)} gives ({how})")
            break
    return out


def _text(v: Any) -> str:
    return format_shape(v) if isinstance(v, Sequence) and not isinstance(v, str) else str(v)


def _how(attrs: Mapping[str, Any], kernel: Sequence[Dim]) -> str:
    keys = ("stride", "padding", "dilation", "output_padding", "auto_pad")
    return ", ".join([f"kernel {format_shape(kernel)}"] + [f"{k} {_text(attrs[k])}" for k in keys if k in attrs])


def conv_problems(attrs: Mapping[str, Any], x: Shape, w: Shape, y: Shape) -> list[str]:
    """What is wrong with input ``x``, weight ``w`` and output ``y`` of a convolution with ``attrs``
    (see :mod:`.ops` for the layout: ``w`` is ``[Cout, Cin/groups, *k]``, transposed
    ``[Cin, Cout/groups, *k]``)."""
    n = len(w) - 2
    if n < 1:
        return [f"weight {format_shape(w)} has rank {len(w)}; a convolution's is [out, in/groups, *kernel]"]
    out = window_attr_problems(attrs, n, conv=True)
    if out:
        return out
    if len(x) == n + 1 and len(y) == n + 1:   # torch's unbatched form
        x, y = (1, *x), (1, *y)
    if len(x) != n + 2 or len(y) != n + 2:
        return [f"input {format_shape(x)} and output {format_shape(y)} do not fit weight {format_shape(w)} "
                f"(needs rank {n + 2}: [N, C, *{n} spatial])"]
    groups = int(attrs.get("groups", 1))
    transposed = bool(attrs.get("transposed", False))
    c_in, c_out = (w[0], dim_mul(w[1], groups)) if transposed else (dim_mul(w[1], groups), w[0])
    if _differ(x[1], c_in):
        out.append(f"input has {x[1]} channels but weight {format_shape(w)} with groups={groups} expects {c_in}")
    if isinstance(w[0], int) and w[0] % groups:
        out.append(f"weight dim 0 ({w[0]} {'input' if transposed else 'output'} channels) does not split "
                   f"into groups={groups}")
    if _differ(y[0], x[0]):
        out.append(f"output batch {y[0]} is not the input's {x[0]}")
    if _differ(y[1], c_out):
        out.append(f"output has {y[1]} channels but weight {format_shape(w)} with groups={groups} gives {c_out}")
    want = [(d,) for d in conv_spatial(attrs, x[2:], w[2:])]
    return out + _spatial_problems(y[2:], want, x[2:], _how(attrs, w[2:]))


def pool_problems(attrs: Mapping[str, Any], x: Shape, y: Shape) -> list[str]:
    """What is wrong with a pool's output ``y`` of input ``x``: the leading dims (batch, channels) are
    kept, the last ``len(kernel)`` dims are windowed. A global pool keeps batch and channels (last
    with ``channels_last``) and leaves 1 elsewhere. Without a ``stride`` (torch's adaptive pools) or a
    ``padding`` (graphs saved before pools recorded it) the windowed dims are not checked."""
    if len(y) != len(x):
        return [f"output {format_shape(y)} and input {format_shape(x)} differ in rank"]
    if attrs.get("global_pool"):
        kept = (0, len(x) - 1) if attrs.get("channels_last") else (0, 1)
        want = tuple(x[i] if i in kept else 1 for i in range(len(x)))
        if any(_differ(a, b) for a, b in zip(y, want)):
            return [f"a global pool of {format_shape(x)} gives {format_shape(want)}, not {format_shape(y)}"]
        return []
    kernel = attrs.get("kernel")
    if kernel is None:
        return []
    n = len(kernel) if isinstance(kernel, Sequence) else 0
    out = window_attr_problems(attrs, n, conv=False)
    if out:
        return out
    lead = len(x) - n
    if lead < 1:
        return [f"a {n}-d pooling window needs an input of rank > {n}, got {format_shape(x)}"]
    if any(_differ(a, b) for a, b in zip(x[:lead], y[:lead])):
        return [f"output {format_shape(y)} does not keep the input's leading dims {format_shape(x[:lead])}"]
    if "stride" not in attrs or "padding" not in attrs:
        return []
    return _spatial_problems(y[lead:], pool_spatial(attrs, x[lead:]), x[lead:], _how(attrs, kernel))


def window_problems(op: Op, attrs: Mapping[str, Any], inputs: Sequence[Shape | None],
                    outputs: Sequence[Shape]) -> list[str]:
    """A conv or pool node's problems from its operand and result shapes, gradients included."""
    role = attrs.get("role")
    a = inputs[0] if inputs else None
    b = inputs[1] if len(inputs) > 1 else None
    if not outputs or a is None:
        return []
    result = outputs[0]
    if op is Op.POOL:
        if role == "grad":
            if b is None:
                return ["a pool gradient reads the output gradient and the input"]
            if len(result) != len(b) or any(_differ(p, q) for p, q in zip(result, b)):
                return [f"input gradient {format_shape(result)} is not the input's shape {format_shape(b)}"]
            return pool_problems(attrs, b, a)
        return pool_problems(attrs, a, result)
    if b is None:
        return []   # the verifier reports a missing operand (``_MIN_INPUTS``)
    if role == "grad_input":   # (dy, w) -> dx: the forward conv the other way round
        return conv_problems({**attrs, "transposed": not attrs.get("transposed", False)}, result, b, a)
    if role == "grad_weight":   # (x, dy) -> dw
        return conv_problems(attrs, a, result, b)
    return conv_problems(attrs, a, b, result)


def check_window(node: Node) -> list[str]:
    """The verifier's entry: :func:`window_problems` over the node's types."""
    return window_problems(node.op, node.attrs, [v.shape if v is not None else None for v in node.inputs],
                           [v.shape for v in node.outputs])
