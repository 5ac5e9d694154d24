"""Dim text (canonical ``2*seq + 1`` or torch's sympy ``FloorDiv(s0, 2)``) walked into a builder.

The parser knows Python expression syntax and nothing of :class:`~narrowpipe.ir.Sym`: it calls the
builder's ``name``/``const``/``binop``/``call`` for each piece, so :mod:`.dims` decides the algebra
and this module stays below it. Text that is not such an expression raises :class:`NotAnExpression`
(ONNX allows any string as a ``dim_param``; the caller keeps it as one name).
"""

from __future__ import annotations

import ast
from typing import Any, Protocol

__all__ = ["NotAnExpression", "Builder", "walk"]


class NotAnExpression(ValueError):
    """The text is not an integer expression over names and the known functions."""


class Builder(Protocol):
    def name(self, text: str) -> Any: ...
    def const(self, n: int) -> Any: ...
    def binop(self, op: str, a: Any, b: Any) -> Any: ...
    def call(self, fn: str, args: list[Any]) -> Any: ...


_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
           ast.Div: "/"}


def walk(text: str, builder: Builder, functions: frozenset[str] | set[str] | Any) -> Any:
    """Build ``text`` bottom-up with ``builder``; ``functions`` are the callable names allowed."""
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError) as exc:
        raise NotAnExpression(text) from exc

    def go(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, int) and not isinstance(node.value, bool):
                return builder.const(node.value)
            raise NotAnExpression(text)
        if isinstance(node, ast.Name):
            return builder.name(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            x = go(node.operand)
            return builder.binop("-", builder.const(0), x) if isinstance(node.op, ast.USub) else x
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return builder.binop(_BINOPS[type(node.op)], go(node.left), go(node.right))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions \
                and not node.keywords:
            return builder.call(node.func.id, [go(a) for a in node.args])
        raise NotAnExpression(text)

    try:
        return go(tree)
    except RecursionError as exc:
        raise NotAnExpression(text) from exc
