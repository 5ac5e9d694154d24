"""Walks an ATen-level ``torch.fx`` graph and lowers each node through the aten table.

This module owns the mechanics (environment, getitem, placeholders, weights, source locations,
nested graphs of higher-order ops); :mod:`.aten_table` owns the mapping from each aten op to
canonical ops. Nothing here computes a cost.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
import torch.fx as fx

from ...errors import FrontendError, UnsupportedOpError
from ...ir import DimRole, Graph, Node, Op, Source, TensorType, Value, ValueKind
from ..mask_pattern import Band, band_attrs
from .aten_args import op_key
from .inplace import is_in_place, write_back
from .masks import CausalMasks
from .types import SymbolTable

_SOFTMAXES = frozenset({"softmax", "_softmax", "_safe_softmax"})

__all__ = ["AtenLowerer", "op_key"]


def _scope(node: fx.Node) -> str:
    stack = node.meta.get("nn_module_stack")
    if stack:
        last = next(reversed(stack.values()))
        if isinstance(last, tuple) and last and isinstance(last[0], str):
            return last[0].removeprefix("L['self'].").removeprefix("L__self__")
    return ""


class AtenLowerer:
    """Lowers fx nodes into an IR graph; the table functions call its helpers."""

    def __init__(self, graph: Graph, symbols: SymbolTable, table: dict[str, Callable[..., None]],
                 ignored: frozenset[str], *, file: str = "", strict: bool = False,
                 root: torch.nn.Module | None = None,
                 constants: Mapping[fx.Node, torch.Tensor] | None = None) -> None:
        self.graph = graph
        self.symbols = symbols
        self.table = table
        self.ignored = ignored
        self.file = file
        self.strict = strict
        self.root = root
        self.constants: Mapping[fx.Node, torch.Tensor] = constants or {}
        self.env: dict[fx.Node, Any] = {}
        self._masks: dict[fx.Graph, CausalMasks] = {}

    # -- helpers used by the table ----------------------------------------------------------------
    def value(self, arg: Any) -> Value | None:
        """The IR value of a tensor argument (an fx node), or None for scalars and absent args."""
        if isinstance(arg, fx.Node):
            v = self.env.get(arg)
            return v if isinstance(v, Value) else None
        return None

    def values(self, args: Iterable[Any]) -> list[Value]:
        out: list[Value] = []
        for a in args:
            if isinstance(a, (list, tuple)):
                out.extend(self.values(a))
            else:
                v = self.value(a)
                if v is not None:
                    out.append(v)
        return out

    def out_types(self, node: fx.Node) -> list[TensorType]:
        return [self.symbols.tensor_type(t) for t in _flat_tensors(node.meta.get("val"))]

    def type_of(self, t: Any) -> TensorType:
        return self.symbols.tensor_type(t)

    def source(self, node: fx.Node) -> Source:
        return Source(op=str(node.target), name=node.name, scope=_scope(node), file=self.file)

    def emit(self, op: Op, inputs: Iterable[Value | None], node: fx.Node, attrs: dict[str, Any] | None = None,
             types: list[TensorType] | None = None, *, bind: bool = True, name: str = "") -> Node:
        """Add a canonical node for fx ``node``; by default its outputs become the fx node's value."""
        out_types = self.out_types(node) if types is None else types
        ir = self.graph.add_node(op, inputs, out_types, attrs, name=name or node.name, source=self.source(node))
        if bind:
            self.bind(node, ir.outputs)
        return ir

    def bind(self, node: fx.Node, outputs: list[Value]) -> None:
        """Map the fx node's (possibly nested) result onto IR values, tensor by tensor."""
        val = node.meta.get("val")
        if isinstance(val, (list, tuple)):
            it = iter(outputs)
            self.env[node] = [next(it, None) if _is_tensor(x) else None for x in val]
        else:
            self.env[node] = outputs[0] if outputs else None

    def alias(self, node: fx.Node, value: Value | None) -> None:
        """The fx node is the same tensor as ``value`` (a no-op such as ``detach``)."""
        self.env[node] = value

    def get_attr(self, module: object, node: fx.Node) -> Any:
        """An fx ``get_attr`` on ``module``: submodules stay as they are (bodies of higher-order
        ops), tensors become constants of the graph."""
        obj = module
        for part in str(node.target).split("."):
            obj = getattr(obj, part, None)
        if isinstance(obj, torch.Tensor):
            return self.graph.add_input(node.name, self.symbols.tensor_type(obj), ValueKind.CONST,
                                        source_name=str(node.target))
        return obj

    def mask_band(self, node: Any) -> Band | None:
        """How ``node`` masks attention when it builds a causal mask: its sliding window, or None for
        plain causal (see :mod:`.masks`); None when it is not proven causal."""
        if not isinstance(node, fx.Node):
            return None
        masks = self._masks.get(node.graph)
        if masks is None:
            masks = self._masks[node.graph] = CausalMasks(node.graph, self._constant, self._dim_role)
        return masks.band(node)

    def mask_attrs(self, node: fx.Node) -> dict[str, Any]:
        """``{"causal": True}`` (:data:`~narrowpipe.ir.CAUSAL`), with the mask's ``window``
        (:data:`~narrowpipe.ir.WINDOW`) when it has one, for eager attention's mask step (an add or
        where feeding a softmax, with a causal mask operand), so the fused attention kernel skips masked blocks."""
        feeds_softmax = any(u.op == "call_function" and op_key(u.target)[1] in _SOFTMAXES for u in node.users)
        if not feeds_softmax:
            return {}
        for a in node.args:
            band = self.mask_band(a)
            if band is not None:
                return band_attrs(band)
        return {}

    def _dim_role(self, symbol: str) -> DimRole | None:
        """The role the frontend gave the dim behind torch symbol ``symbol`` (``s70`` -> ``seq``)."""
        spec = self.graph.dims.get(self.symbols.names.get(symbol, symbol))
        return spec.role if spec is not None else None

    def _constant(self, node: fx.Node) -> Any:
        """The concrete tensor behind a buffer/constant placeholder or a ``get_attr`` of the root."""
        if node.op == "placeholder":
            return self.constants.get(node)
        if node.op == "get_attr" and self.root is not None and node.graph is self.root.graph:
            obj: Any = self.root
            for part in str(node.target).split("."):
                obj = getattr(obj, part, None)
            return obj
        return None

    # -- the walk ---------------------------------------------------------------------------------
    def lower(self, gm_graph: fx.Graph, placeholders: dict[fx.Node, Any],
              get_attr: Callable[[fx.Node], Any]) -> list[Value]:
        outputs: list[Value] = []
        for node in gm_graph.nodes:
            if node.op == "placeholder":
                self.env[node] = placeholders.get(node)
            elif node.op == "get_attr":
                self.env[node] = get_attr(node)
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "call_module":
                if str(node.target).startswith("_guards"):
                    continue
                self._unknown(node, f"call_module:{node.target}")
            elif node.op == "call_method":
                self._unknown(node, f"call_method:{node.target}")
            elif node.op == "output":
                outputs = [v for v in _flatten(self._resolve(node.args[0])) if isinstance(v, Value)]
        return outputs

    def _resolve(self, arg: Any) -> Any:
        if isinstance(arg, fx.Node):
            return self.env.get(arg)
        if isinstance(arg, (list, tuple)):
            return [self._resolve(a) for a in arg]
        return None

    def _call(self, node: fx.Node) -> None:
        target = node.target
        if target is operator.getitem:
            base = node.args[0]
            src = self.env.get(base) if isinstance(base, fx.Node) else None
            idx = node.args[1]
            self.env[node] = src[idx] if isinstance(src, list) and isinstance(idx, int) and idx < len(src) else None
            return
        key, packet = op_key(target)
        fn = self.table.get(key) or self.table.get(packet)
        if fn is None and packet.endswith("_") and not packet.endswith("__"):
            fn = self.table.get(packet[:-1])  # an in-place variant lowers like its functional form
        if fn is not None:
            try:
                fn(self, node)
                if is_in_place(node):
                    write_back(self, node)
            except FrontendError:
                raise
            except Exception as exc:  # a lowering bug must still name the node
                raise FrontendError(f"cannot lower: {type(exc).__name__}: {exc}", file=self.file or None,
                                    node=node.name, op=str(target)) from exc
            return
        if key in self.ignored or packet in self.ignored:
            self.env[node] = None
            return
        if not _flat_tensors(node.meta.get("val")):
            # Symbolic-size arithmetic (operator.mul on SymInts, sym_size...) carries no tensor work.
            self.env[node] = None
            return
        self._unknown(node, str(target))

    def _unknown(self, node: fx.Node, name: str) -> None:
        if self.strict:
            raise UnsupportedOpError("no canonical lowering for this op", file=self.file or None,
                                     node=node.name, op=name)
        self.emit(Op.UNKNOWN, self.values(list(node.args) + list(node.kwargs.values())), node,
                  {"source_op": name})


def _is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def _flat_tensors(val: Any) -> list[torch.Tensor]:
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (list, tuple)):
        return [x for x in val if isinstance(x, torch.Tensor)]
    return []


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        out: list[Any] = []
        for y in x:
            out.extend(_flatten(y))
        return out
    return [x]
