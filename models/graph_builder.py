"""A thin helper over :class:`~narrowpipe.ir.Graph` for writing models by hand, block by block.

Why: the model builder emits hundreds of nodes whose only variety is the op, the output shape and
the module scope they belong to. Keeping the scope as state (``with b.scope("mlp"):``) lets the
blocks read like the PyTorch modules they mirror, and gives every node and weight the Hugging Face
module path (``model.layers.3.mlp.down_proj``) that reports group rows by. Nothing here knows about
transformers: it only builds typed values and nodes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..ir import DType, Graph, Op, Source, TensorType, Value, ValueKind
from ..ir.dims import Dim, Shape

__all__ = ["GraphBuilder"]


class GraphBuilder:
    """Appends nodes to ``graph`` under the current module scope, in dtype ``dtype``."""

    def __init__(self, graph: Graph, dtype: DType) -> None:
        self.graph = graph
        self.dtype = dtype
        self._scope: list[str] = []
        #: values built once and read by every layer (an eager attention's causal mask)
        self.shared: dict[str, Value] = {}

    # -- scopes -----------------------------------------------------------------------------------
    @property
    def path(self) -> str:
        return ".".join(self._scope)

    @contextmanager
    def scope(self, *parts: str | int) -> Iterator[None]:
        """Enter a module (``b.scope("layers", 3)`` is ``layers.3``) for the nodes built inside."""
        added = [str(p) for p in parts if str(p)]
        self._scope.extend(added)
        try:
            yield
        finally:
            del self._scope[len(self._scope) - len(added):]

    def _qualified(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    # -- values -----------------------------------------------------------------------------------
    def input(self, name: str, shape: Shape, dtype: DType) -> Value:
        return self.graph.add_input(name, TensorType(dtype, tuple(shape)))

    def weight(self, name: str, shape: Shape, *, kind: ValueKind = ValueKind.PARAM,
               dtype: DType | None = None) -> Value:
        """A weight named by its state-dict key (``model.layers.0.mlp.up_proj.weight``)."""
        full = self._qualified(name)
        return self.graph.add_input(full, TensorType(dtype or self.dtype, tuple(shape)), kind, source_name=full)

    # -- nodes ------------------------------------------------------------------------------------
    def emit(self, op: Op, inputs: Sequence[Value | None], shape: Shape, attrs: Mapping[str, Any] | None = None,
             *, name: str = "", dtype: DType | None = None) -> Value:
        """One node with one output of ``shape``; returns that output."""
        return self.emit_multi(op, inputs, [(shape, dtype)], attrs, name=name)[0]

    def emit_multi(self, op: Op, inputs: Sequence[Value | None], outs: Sequence[tuple[Shape, DType | None]],
                   attrs: Mapping[str, Any] | None = None, *, name: str = "") -> list[Value]:
        types = [TensorType(dt or self.dtype, tuple(s)) for s, dt in outs]
        base = name or op.value
        node = self.graph.add_node(op, inputs, types, attrs, name=self._qualified(base).replace(".", "_"),
                                   source=Source(op=f"narrowpipe.models.{base}", name=base, scope=self.path))
        return list(node.outputs)

    def linear(self, x: Value, out_features: Dim, name: str, *, bias: bool = False) -> Value:
        """``nn.Linear`` in the module ``name``: weight ``[out, in]`` contracted over x's last dim."""
        in_features = x.shape[-1]
        with self.scope(name):
            w = self.weight("weight", (out_features, in_features))
            y = self.dot(x, w, name="linear")
            if bias:
                b = self.weight("bias", (out_features,))
                y = self.emit(Op.ADD, [y, b], y.shape, {"role": "bias"}, name="bias")
        return y

    def dot(self, x: Value, w: Value, *, name: str = "linear") -> Value:
        """``x @ w.T`` for a ``[out, in]`` weight, the dot_general torch's ``aten.linear`` lowers to."""
        rank = x.type.rank
        return self.emit(Op.DOT, [x, w], (*x.shape[:-1], w.shape[0]),
                         {"lhs_contract": (rank - 1,), "rhs_contract": (1,), "lhs_batch": (), "rhs_batch": ()},
                         name=name)

    def unary(self, op: Op, x: Value, attrs: Mapping[str, Any] | None = None, *, name: str = "") -> Value:
        return self.emit(op, [x], x.shape, attrs, name=name)

    def binary(self, op: Op, a: Value, b: Value, *, name: str = "") -> Value:
        """An elementwise op on operands whose broadcast is ``a``'s shape (the builder keeps it so)."""
        return self.emit(op, [a, b], a.shape, name=name)

    def reshape(self, x: Value, shape: Shape, *, name: str = "view") -> Value:
        return self.emit(Op.RESHAPE, [x], shape, name=name, dtype=x.dtype)

    def permute(self, x: Value, perm: Sequence[int], *, name: str = "transpose") -> Value:
        shape = tuple(x.shape[p] for p in perm)
        return self.emit(Op.PERMUTE, [x], shape, {"perm": tuple(perm)}, name=name, dtype=x.dtype)
