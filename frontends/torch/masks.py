"""Recognise attention masks that are causal, by evaluating the small subgraph that builds them.

Why: exporters materialise the causal mask. Hugging Face models build it from ``arange``
comparisons (``kv_idx <= q_idx``, ANDed with packed-sequence and padding terms) and pass it to
SDPA as ``attn_mask`` with ``is_causal=False``, although the same model run eagerly calls SDPA with
``is_causal=True`` and gets FlashAttention's skipping of the blocks above the diagonal. A cost model
that sees only the flag would charge a causal LM's prefill attention twice its time on GPUs and
TPUs, and could not token-pipeline it on dataflow chips.

How: the mask depends on no weights and no activations, only on sizes (of float inputs too),
``arange`` and integer inputs (``attention_mask``). Its ancestors are evaluated with real CPU tensors at two small sizes
(every symbolic dim set to 5, then to 7), with integer and boolean user inputs filled with ones
(no padding) and inputs named ``position*`` counting up along their last dim. The mask is causal
when, at both sizes, the positions it lets attend (``True``, or ``0`` in an additive mask) are
exactly the lower triangle. Anything else (the values of a float input, weights on the meta
device, an op that fails on concrete values, a subgraph over :data:`MAX_NODES`) leaves it
non-causal: the inference only ever adds what it proved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from ..mask_pattern import MAX_NODES, SIZES, is_lower_triangle

__all__ = ["CausalMasks"]


class _NotConstant(Exception):
    """The subgraph depends on something that cannot be evaluated here."""


class CausalMasks:
    """Memoised causal-mask test over one fx graph.

    ``constant`` returns the concrete tensor of a placeholder or ``get_attr`` that is a buffer or
    constant (``None`` for user inputs); meta tensors count as unknown.
    """

    def __init__(self, graph: fx.Graph, constant: Callable[[fx.Node], Any]) -> None:
        self._order = {n: i for i, n in enumerate(graph.nodes)}
        self._constant = constant
        self._memo: dict[fx.Node, bool] = {}

    def is_causal(self, node: Any) -> bool:
        if not isinstance(node, fx.Node):
            return False
        hit = self._memo.get(node)
        if hit is None:
            try:
                subgraph = self._ancestors(node)
                hit = all(self._causal_at(node, subgraph, size) for size in SIZES)
            except Exception:   # any failure means "not proven causal", never a wrong flag
                hit = False
            self._memo[node] = hit
        return hit

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

    def _causal_at(self, node: fx.Node, subgraph: list[fx.Node], size: int) -> bool:
        env: dict[fx.Node, Any] = {}
        for n in subgraph:
            if n.op in ("placeholder", "get_attr"):
                env[n] = self._leaf(n, size)
            elif n.op == "call_function" and callable(n.target):   # never a str for call_function
                args = fx.node.map_aggregate(n.args, lambda a: _concrete_arg(a, env))
                kwargs = fx.node.map_aggregate(n.kwargs, lambda a: _concrete_arg(a, env))
                env[n] = n.target(*args, **kwargs)
            else:
                raise _NotConstant(f"{n.op} {n.name}")
        mask = env[node]
        if not isinstance(mask, torch.Tensor):
            return False
        return is_lower_triangle(mask.detach().float().numpy() if mask.dtype.is_floating_point else mask.numpy())

    def _leaf(self, n: fx.Node, size: int) -> Any:
        t = self._concrete(n)
        if t is not None:
            return t
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise _NotConstant(f"{n.name} has no concrete value")
        shape = [_size(d, size) for d in val.shape]
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


def _size(d: Any, size: int) -> int:
    if isinstance(d, torch.SymInt):
        expr = d.node.expr
        return int(expr.subs({s: size for s in expr.free_symbols}))
    return int(d)
