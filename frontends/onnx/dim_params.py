"""What an ONNX ``dim_param`` denotes: one opaque dim, or an expression over the model's dims.

ONNX gives a ``dim_param`` no syntax: ``batch-size`` is one dim, and ``batch size`` and ``batch_size``
are two. Exporters still write arithmetic in them, and always the way sympy prints it:

* torch.onnx's dynamo exporter prints each output's sympy size: ``sequence_length + past_sequence_length``,
  ``batch_size*sequence_length``, ``(((sequence_length - 3)//2)) + 1``, ``s27 + 1``, with the names the
  user gave kept verbatim inside (``batch-size*(seq len + past.len)``);
* onnxruntime's symbolic shape inference prints sympy too (``past_sequence_length + sequence_length``,
  ``batch_size*sequence_length``, ``floor(sequence_length/2 - 3/2) + 1``);
* Hugging Face optimum and onnxruntime's transformers scripts write such names by hand in the same
  style (``past_sequence_length + 1``, and onnxruntime's Whisper decoder input
  ``encode_sequence_length / 2``).

The legacy TorchScript exporter (``batch_size``, ``Concatk_dim_0``, ``x_dynamic_axes_1``), onnxruntime
GenAI's builder (``total_sequence_length``) and ONNX's own shape inference (``unk__3``) write plain names.
sympy puts a space on each side of a binary ``+`` and ``-``, and so do the hand-written names, so the
rule is: text is an expression when it parses as one over names, numbers and the known functions, with
a space each side of every binary ``+``, ``-`` and ``/`` (``seq-len`` and ``N/A`` are names); the
model's own opaque input names count as names inside it. A spaced ``/`` is the hand-written exact
division of a size, read as floor division; sympy's unspaced true division (inside ``floor``) is left
to a name, which the frontend re-derives like any output dim it cannot read (:mod:`.shapes`).
Anything else names one dim.

The IR's dim names are Python identifiers (shapes print as ``2*seq + 1`` and parse back), so an opaque
name that is not one is spelled as an identifier (``batch-size`` -> ``batch_size``), made unique
against every other name of the model (``batch size`` beside ``batch_size`` -> ``batch_size_1``); the
declared dim keeps the ONNX spelling as its ``source_name``, which binds it too (``--set "batch size=4"``).
"""

from __future__ import annotations

import ast
import keyword
import re
from collections.abc import Iterable
from typing import Any

from ...ir import Sym
from ...ir.dim_funcs import CANONICAL_NAME, FUNCS
from ...ir.dim_parse import NotAnExpression, walk
from ...ir.dims import Dim, parse_dim
from .symdims import RESERVED, sanitize_symbol

__all__ = ["DimParams", "is_plain_name"]

_FUNCTIONS = frozenset(FUNCS) | frozenset(CANONICAL_NAME)
_PUNCT = b" \t()"


def is_plain_name(text: str) -> bool:
    """A ``dim_param`` the IR can use as written: an identifier that is no keyword or dim function."""
    return text.isidentifier() and not keyword.iskeyword(text) and text not in RESERVED


class _Check:
    """A builder for :func:`~narrowpipe.ir.dim_parse.walk` that builds nothing: it only lets the walk
    refuse what is not a dim expression."""

    def name(self, text: str) -> int:
        return 0

    def const(self, n: int) -> int:
        return 0

    def binop(self, op: str, a: Any, b: Any) -> int:
        return 0

    def call(self, fn: str, args: list[Any]) -> int:
        return 0


def _exporter_style(node: ast.AST, src: bytes) -> bool:
    """Whether every binary ``+``, ``-`` and ``/`` has a space on each side (``src`` is the UTF-8
    text: ast positions count bytes)."""
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, (ast.Add, ast.Sub, ast.Div)):
            gap = src[node.left.end_col_offset or 0:node.right.col_offset]   # ") - (", " + ", "-"
            at = next((i for i, c in enumerate(gap) if c not in _PUNCT), -1)
            if not (0 < at < len(gap) - 1 and gap[at - 1:at].isspace() and gap[at + 1:at + 2].isspace()):
                return False
        return _exporter_style(node.left, src) and _exporter_style(node.right, src)
    if isinstance(node, ast.UnaryOp):
        return _exporter_style(node.operand, src)
    if isinstance(node, ast.Call):
        return all(_exporter_style(a, src) for a in node.args)
    return True


def _exact_division(node: ast.expr) -> ast.expr:
    """``a / 2`` as ``a // 2``: a hand-written size divides exactly."""
    if isinstance(node, ast.BinOp):
        op = ast.FloorDiv() if isinstance(node.op, ast.Div) else node.op
        return ast.BinOp(_exact_division(node.left), op, _exact_division(node.right))
    if isinstance(node, ast.UnaryOp):
        return ast.UnaryOp(node.op, _exact_division(node.operand))
    if isinstance(node, ast.Call):
        return ast.Call(node.func, [_exact_division(a) for a in node.args], [])
    return node


class DimParams:
    """The ``dim_param`` texts of one model as IR dims (module doc), and each IR name's ONNX spelling.

    Built from the graph inputs' texts (of the model and of its bodies), in order: their plain names
    are kept first (an input's ``batch_size`` stays ``batch_size`` beside another's ``batch size``).
    Texts met later (outputs, value_info, inference's ``unk__N``) are read the same way and never take
    a name already given: an output's own ``batch_size`` is not the input's ``batch size``.
    """

    def __init__(self, input_texts: Iterable[str] = ()) -> None:
        self._owner: dict[str, str] = {}     # IR name -> the ONNX text it spells ("" for a generated dim)
        self._names: dict[str, str] = {}     # ONNX text read as one opaque dim -> its IR name
        self._read: dict[str, Dim] = {}
        self._opaque: list[str] = []         # the inputs' names that are not identifiers (matched in expressions)
        self._pattern: re.Pattern[str] | None = None
        texts = list(dict.fromkeys(input_texts))
        for t in texts:
            if is_plain_name(t):
                self._own(t)
        candidates = [t for t in texts if not is_plain_name(t) and self._expression(t) is None]
        for t in candidates:   # "seq len + past.len" is an expression over the other two
            self._set_opaque([c for c in candidates if c != t])
            if self._expression(t) is None:
                self._opaque.append(t)
        self._set_opaque(self._opaque)
        for t in self._opaque:
            self._read[t] = Sym.atom(self._own(t))
        #: IR names of the dims the graph inputs carry: the only names trusted as given.
        self.trusted: frozenset[str] = frozenset().union(*(s.symbols for s in map(self.read, texts)
                                                           if isinstance(s, Sym)))

    def copy(self) -> DimParams:
        out = DimParams.__new__(DimParams)
        out._owner, out._names, out._read = dict(self._owner), dict(self._names), dict(self._read)
        out._opaque = list(self._opaque)
        out._pattern, out.trusted = self._pattern, self.trusted
        return out

    # -- reading ---------------------------------------------------------------------------------
    def read(self, text: str) -> Dim:
        """The IR dim ``text`` denotes."""
        hit = self._read.get(text)
        if hit is None:
            hit = None if is_plain_name(text) else self._expression(text)
            if hit is None:
                hit = Sym.atom(self._own(text))
            self._read[text] = hit
        return hit

    def name(self, text: str) -> str:
        """The IR name of ``text`` read as one opaque dim (a name inference could not derive)."""
        return self._own(text)

    def source(self, name: str) -> str:
        """The ONNX spelling of IR name ``name`` (itself for a generated or foreign name)."""
        return self._owner.get(name) or name

    def free(self, name: str) -> bool:
        """Whether no ONNX text and no generated dim has IR name ``name`` yet."""
        return name not in self._owner

    def reserve(self, name: str) -> None:
        """Keep ``name`` for a dim the frontend made up: a later text spelled so gets another name."""
        self._owner.setdefault(name, "")

    # -- internals -------------------------------------------------------------------------------
    def _own(self, text: str) -> str:
        """The IR name of opaque ``text``: as written when that is an identifier, else spelled as one;
        unique either way (``batch size`` beside ``batch_size`` is ``batch_size_1``)."""
        hit = self._names.get(text)
        if hit is not None:
            return hit
        base = text if is_plain_name(text) else sanitize_symbol(text)
        name, i = base, 1
        while self._owner.get(name, text) != text:
            name, i = f"{base}_{i}", i + 1
        self._owner[name] = text
        self._names[text] = name
        return name

    def _set_opaque(self, names: list[str]) -> None:
        alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        self._pattern = re.compile(rf"(?<![\w.])(?:{alternatives})(?![\w.])") if names else None

    def _expression(self, text: str) -> Dim | None:
        """``text`` as an exporter's expression (module doc), else None."""
        if text != text.strip() or "\n" in text or "\r" in text:   # no printer pads; ast positions are per line
            return None
        slots: dict[str, str] = {}
        if self._pattern is not None:
            def slot(m: re.Match[str]) -> str:
                n = len(slots)
                while f"_{n}_dim_" in text or f"_{n}_dim_" in slots:
                    n += 1
                slots[f"_{n}_dim_"] = m.group(0)
                return f"_{n}_dim_"
            text = self._pattern.sub(slot, text)
        try:
            tree: ast.expr = ast.parse(text, mode="eval").body
            walk(text, _Check(), _FUNCTIONS)
        except (SyntaxError, ValueError, RecursionError, MemoryError):   # NotAnExpression is a ValueError
            return None
        called = {id(c.func) for c in ast.walk(tree) if isinstance(c, ast.Call)}
        if not any(isinstance(n, ast.Name) and id(n) not in called for n in ast.walk(tree)) or \
                not any(isinstance(n, (ast.BinOp, ast.UnaryOp, ast.Call)) for n in ast.walk(tree)):
            return None   # a number ("1", a constant size is a dim_value) or "(seq)" names a dim
        if not _exporter_style(tree, text.encode()):
            return None
        try:
            dim = parse_dim(ast.unparse(_exact_division(tree)))
        except (NotAnExpression, ValueError, RecursionError):
            return None
        if isinstance(dim, int):
            return dim
        rename = {n: self._own(slots.get(n, n)) for n in dim.symbols}
        return dim.rename(rename) if any(k != v for k, v in rename.items()) else dim
