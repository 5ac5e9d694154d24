"""Recognise attention masks that are causal, and their sliding window, by evaluating the small
subgraph that builds them.

Why: exporters materialise the causal mask. Hugging Face models build it from ``arange``
comparisons (``kv_idx <= q_idx``, ANDed with packed-sequence and padding terms, and for a sliding
window ``kv_idx > q_idx - sliding_window``) and pass it to SDPA as ``attn_mask`` with
``is_causal=False``, although the same model run by a serving runtime calls a kernel that is told
``causal`` (and the window) and skips the masked blocks. A cost model that sees only the flag would
charge a causal LM's prefill attention twice its time on GPUs and TPUs, a windowed one (Mistral's
4096 at 32k tokens) four times more, and could not token-pipeline it on dataflow chips.

How: the mask depends on no weights and no activations, only on sizes (of float inputs too),
``arange`` and integer inputs (``attention_mask``). Its ancestors are evaluated with real CPU tensors at two small sizes
(every symbolic dim set to 5, then to 7), with integer and boolean user inputs filled with ones
(no padding) and inputs named ``position*`` counting up along their last dim. The mask is causal
when, at both sizes, the positions it lets attend (``True``, or ``0`` in an additive mask) are
exactly the lower triangle, or the same band of it (a window under 7 keys:
:func:`~..mask_pattern.causal_band`). A longer window looks like the triangle at those sizes, so
each integer literal of the subgraph at least 7 long (``sub(q_idx, 4096)``) is a candidate: the
subgraph is evaluated again with the sequence and KV-length dims (by the roles the frontend gave
them) just past it and every other dim at :data:`~..mask_pattern.PROBE_BATCH`, and the window is
what those two evaluations show, never the literal itself. A candidate whose probe would hold a
tensor over :data:`~..mask_pattern.MAX_PROBE_ELEMENTS` elements is not tried (the mask stays plain
causal). Anything else (the values of a float input, weights on the meta device, an op that fails on
concrete values, a subgraph over :data:`MAX_NODES`) leaves it non-causal: the inference only ever
adds what it proved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from math import prod
from typing import Any

import torch
import torch.fx as fx

from ...ir import DimRole
from ..mask_pattern import (
    LONG_ROLES,
    MAX_CANDIDATES,
    MAX_NODES,
    MAX_PROBE_ELEMENTS,
    SIZES,
    Band,
    agreed_band,
    causal_band,
    window_probes,
)

__all__ = ["CausalMasks"]

#: the size of each torch symbol (by name) in one evaluation
Sizes = Callable[[str], int]


class _NotConstant(Exception):
    """The subgraph depends on something that cannot be evaluated here."""


class CausalMasks:
    """Memoised causal-mask test over one fx graph.

    ``constant`` returns the concrete tensor of a placeholder or ``get_attr`` that is a buffer or
    constant (``None`` for user inputs); meta tensors count as unknown. ``role`` gives the role of a
    torch symbol (``s70``) as the frontend tagged its dim, or None; without one no window longer
    than the small sizes is looked for.
    """

    def __init__(self, graph: fx.Graph, constant: Callable[[fx.Node], Any],
                 role: Callable[[str], DimRole | None] = lambda _: None) -> None:
        self._order = {n: i for i, n in enumerate(graph.nodes)}
        self._constant = constant
        self._role = role
        self._memo: dict[fx.Node, Band | None] = {}

    def band(self, node: Any) -> Band | None:
        """The mask's band (its window, None for plain causal), or None when not proven causal."""
        if not isinstance(node, fx.Node):
            return None
        if node not in self._memo:
            try:
                self._memo[node] = self._prove(node)
            except Exception:   # any failure means "not proven causal", never a wrong flag
                self._memo[node] = None
        return self._memo[node]

    def _prove(self, node: fx.Node) -> Band | None:
        subgraph = self._ancestors(node)
        small = agreed_band(self._band_at(node, subgraph, _every(size)) for size in SIZES)
        if small is None or small.window is not None:
            return small
        for sizes in self._long_probes(subgraph, small.reach):
            try:
                long = agreed_band([small, *(self._band_at(node, subgraph, at) for at in sizes)])
            except Exception:   # what the small sizes proved stands
                continue
            if long is not None and long.window is not None:
                return long
        return small

    # -- window candidates ------------------------------------------------------------------------
    def _long_probes(self, subgraph: list[fx.Node], reach: int) -> Iterator[tuple[Sizes, ...]]:
        """For each candidate window (an integer literal of the subgraph longer than ``reach``), the
        two evaluations that would show it, when they stay under the element bound."""
        symbols = {str(s) for n in subgraph for s in _symbols(n)}
        long = {s for s in symbols if self._role(s) in LONG_ROLES}
        if not long:
            return
        literals = sorted({a for n in subgraph for a in _int_literals((n.args, n.kwargs)) if a > reach})
        tried = 0
        for w in literals:
            probes = window_probes(long, w)
            if any(_elements(n, at) > MAX_PROBE_ELEMENTS for at in probes for n in subgraph):
                continue
            yield probes
            tried += 1
            if tried >= MAX_CANDIDATES:
                return

    # -- evaluation -------------------------------------------------------------------------------
    def _ancestors(self, node: fx.Node) -> list[fx.Node]:
        seen: set[fx.Node] = set()
        stack = [node]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if len(seen) > MAX_NODES:
                raise _NotConstant(f"mask subgraph over {MAX_NODES} nodes")
            stack.extend(n.all_input_nodes)
        for n in seen:
            if n.op == "placeholder" and _is_float(n) and self._concrete(n) is None and \
                    not all(_is_size_query(u) for u in n.users if u in seen):
                raise _NotConstant(f"the mask reads the values of float input {n.name}")
        return sorted(seen, key=lambda n: self._order.get(n, -1))

    def _concrete(self, n: fx.Node) -> torch.Tensor | None:
        t = self._constant(n)
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            return t
        return None

    def _band_at(self, node: fx.Node, subgraph: list[fx.Node], at: Sizes) -> Band | None:
        env: dict[fx.Node, Any] = {}
        for n in subgraph:
            if n.op in ("placeholder", "get_attr"):
                env[n] = self._leaf(n, at)
            elif n.op == "call_function" and callable(n.target):   # never a str for call_function
                args = fx.node.map_aggregate(n.args, lambda a: _concrete_arg(a, env))
                kwargs = fx.node.map_aggregate(n.kwargs, lambda a: _concrete_arg(a, env))
                env[n] = n.target(*args, **kwargs)
            else:
                raise _NotConstant(f"{n.op} {n.name}")
        mask = env[node]
        if not isinstance(mask, torch.Tensor):
            return None
        return causal_band(mask.detach().float().numpy() if mask.dtype.is_floating_point else mask.numpy())

    def _leaf(self, n: fx.Node, at: Sizes) -> Any:
        t = self._concrete(n)
        if t is not None:
            return t
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise _NotConstant(f"{n.name} has no concrete value")
        shape = [_size(d, at) for d in val.shape]
        if val.dtype.is_floating_point:     # only its sizes are read (checked in _ancestors)
            return torch.zeros(shape, dtype=val.dtype)
        if "position" in n.name and shape:
            return torch.arange(shape[-1], dtype=val.dtype).expand(shape).contiguous()
        return torch.ones(shape, dtype=val.dtype)


def _is_float(n: fx.Node) -> bool:
    val = n.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dtype.is_floating_point


def _is_size_query(n: fx.Node) -> bool:
    """``q.shape[-2]`` in an exported graph: ``aten.sym_size.int`` (or ``sym_numel``)."""
    name = getattr(n.target, "__name__", "") or str(n.target)
    return n.op == "call_function" and name.split(".")[0] in ("sym_size", "sym_numel", "size", "dim")


def _concrete_arg(a: Any, env: dict[fx.Node, Any]) -> Any:
    """An argument with nodes replaced by their values and every device (``meta`` in a meta-device
    export, positional in ``aten.to.device``) moved to the CPU."""
    if isinstance(a, fx.Node):
        return env[a]
    if isinstance(a, torch.device):
        return torch.device("cpu")
    return a


def _int_literals(a: Any) -> Iterator[int]:
    """The integer constants written into a node's arguments (``sub(q_idx, 4096)``)."""
    if isinstance(a, bool):
        return
    if isinstance(a, int):
        yield a
    elif isinstance(a, (list, tuple)):
        for x in a:
            yield from _int_literals(x)
    elif isinstance(a, dict):
        for x in a.values():
            yield from _int_literals(x)


def _every(size: int) -> Sizes:
    return lambda _: size



def _symbols(n: fx.Node) -> set[Any]:
    val = n.meta.get("val")
    dims = val.shape if isinstance(val, torch.Tensor) else (val,) if isinstance(val, torch.SymInt) else ()
    return {s for d in dims if isinstance(d, torch.SymInt) for s in d.node.expr.free_symbols}


def _elements(n: fx.Node, at: Sizes) -> int:
    """How many elements ``n``'s value holds with each symbol at its size (0 for a non-tensor)."""
    val = n.meta.get("val")
    return prod(_size(d, at) for d in val.shape) if isinstance(val, torch.Tensor) else 0


def _size(d: Any, at: Sizes) -> int:
    if isinstance(d, torch.SymInt):
        expr = d.node.expr
        return int(expr.subs({s: at(str(s)) for s in expr.free_symbols}))
    return int(d)
