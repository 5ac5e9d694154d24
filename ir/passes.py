"""The pass manager: named passes, pipelines written as text, cached analyses with invalidation.

A pass is a function ``(graph, am) -> Graph | PassResult`` or a frozen dataclass whose fields are its
options and whose ``run`` method has that signature (xDSL style); one whose options are not fields
(``bind-dims`` takes dim names) builds itself with a ``from_options(options)`` classmethod. Passes are
registered by name so a pipeline can be written as ``"bind-dims{batch=8,seq=2048},fuse{mode=none}"``
(both registered by ``narrowpipe.costmodel``). Analyses are functions ``(graph, am) -> result`` cached
per graph version; a pass declares which analyses it keeps valid (LLVM style) and the manager drops
the rest.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Union, get_type_hints, runtime_checkable

from ..errors import PassError
from .graph import Graph
from .verifier import verify, verify_enabled

__all__ = ["Pass", "PassResult", "Pipeline", "AnalysisManager", "register_pass", "register_analysis",
           "get_pass", "parse_pipeline", "registered_passes", "registered_analyses", "ALL", "run_passes"]

#: Sentinel for "this pass preserves every analysis".
ALL: frozenset[str] = frozenset({"*"})


@dataclass(frozen=True)
class PassResult:
    graph: Graph
    preserved: frozenset[str] = frozenset()


@runtime_checkable
class Pass(Protocol):
    def run(self, graph: Graph, am: AnalysisManager) -> Graph | PassResult: ...


PassLike = Union[Pass, Callable[[Graph, "AnalysisManager"], Graph | PassResult]]

_PASSES: dict[str, Callable[..., Any]] = {}
_ANALYSES: dict[str, Callable[[Graph, AnalysisManager], Any]] = {}


def register_pass(name: str) -> Callable[[Any], Any]:
    """Register a pass class (options as dataclass fields) or a pass function under ``name``."""
    def deco(obj: Any) -> Any:
        if name in _PASSES:
            raise PassError(f"pass {name!r} registered twice")
        _PASSES[name] = obj
        try:
            obj.pass_name = name
        except (AttributeError, TypeError):
            pass
        return obj
    return deco


def register_analysis(name: str) -> Callable[[Callable[[Graph, AnalysisManager], Any]], Any]:
    def deco(fn: Callable[[Graph, AnalysisManager], Any]) -> Any:
        _ANALYSES[name] = fn
        return fn
    return deco


def registered_passes() -> list[str]:
    return sorted(_PASSES)


def registered_analyses() -> list[str]:
    return sorted(_ANALYSES)


class AnalysisManager:
    """Caches analysis results per (analysis, graph, graph version)."""

    def __init__(self) -> None:
        # keyed by the graph object (not ``id()``, which a freed graph's successor may reuse)
        self._cache: dict[tuple[str, Graph], tuple[int, Any]] = {}
        self.computed: list[str] = []  # names computed (not served from cache), for tests and tracing

    def get(self, name: str, graph: Graph) -> Any:
        try:
            fn = _ANALYSES[name]
        except KeyError:
            raise PassError(f"unknown analysis {name!r}; known: {', '.join(sorted(_ANALYSES)) or 'none'}") from None
        key = (name, graph)
        hit = self._cache.get(key)
        if hit is not None and hit[0] == graph.version:
            return hit[1]
        result = fn(graph, self)
        self._cache[key] = (graph.version, result)
        self.computed.append(name)
        return result

    def put(self, name: str, graph: Graph, result: Any) -> None:
        """Record ``result`` as analysis ``name`` of ``graph`` as it is now: a pass that computes an
        analysis as a by-product (fusion's kernel list) hands it on; the next mutation drops it."""
        if name not in _ANALYSES:
            raise PassError(f"unknown analysis {name!r}; known: {', '.join(sorted(_ANALYSES)) or 'none'}")
        self._cache[(name, graph)] = (graph.version, result)

    def invalidate(self, graph: Graph, preserved: Iterable[str] = ()) -> None:
        """Drop ``graph``'s analyses except ``preserved``, which are re-stamped with the current
        version (a pass that edited the graph in place vouches that they still hold)."""
        keep = set(preserved)
        for key in [k for k in self._cache if k[1] is graph]:
            if "*" in keep or key[0] in keep:
                self._cache[key] = (graph.version, self._cache[key][1])
            else:
                del self._cache[key]

    def carry_over(self, old: Graph, new: Graph, preserved: Iterable[str]) -> None:
        """When a pass returns a new graph, move the preserved analyses over to it."""
        keep = set(preserved)
        for (name, g), (_, result) in list(self._cache.items()):
            if g is old and ("*" in keep or name in keep):
                self._cache[(name, new)] = (new.version, result)


def _pass_name(p: PassLike) -> str:
    return getattr(p, "pass_name", None) or getattr(p, "__name__", None) or type(p).__name__


def _run_one(p: PassLike, graph: Graph, am: AnalysisManager) -> Graph:
    out = p.run(graph, am) if isinstance(p, Pass) else p(graph, am)
    result = out if isinstance(out, PassResult) else PassResult(out)
    if not isinstance(result.graph, Graph):   # a pass that forgot its return statement, most often
        raise PassError(f"pass {_pass_name(p)!r} returned {type(result.graph).__name__} instead of a Graph "
                        f"or a PassResult; a pass returns the graph it was given (or a new one)")
    if result.graph is graph:
        am.invalidate(graph, result.preserved)
    else:
        am.carry_over(graph, result.graph, result.preserved)
    if verify_enabled():
        verify(result.graph, after=f"pass {_pass_name(p)}")
    return result.graph


@dataclass(frozen=True)
class Pipeline:
    """A sequence of passes; itself a pass."""

    passes: tuple[PassLike, ...]

    def run(self, graph: Graph, am: AnalysisManager | None = None) -> Graph:
        am = am or AnalysisManager()
        for p in self.passes:
            graph = _run_one(p, graph, am)
        return graph


def run_passes(graph: Graph, passes: str | Sequence[PassLike], am: AnalysisManager | None = None) -> Graph:
    pipeline = parse_pipeline(passes) if isinstance(passes, str) else Pipeline(tuple(passes))
    return pipeline.run(graph, am)


def get_pass(name: str, **options: Any) -> PassLike:
    try:
        obj = _PASSES[name]
    except KeyError:
        raise PassError(f"unknown pass {name!r}; known: {', '.join(sorted(_PASSES)) or 'none'}") from None
    build = getattr(obj, "from_options", None)
    if build is not None:   # options it cannot list as fields (``bind-dims{batch=8}`` takes dim names)
        made = build(options)
        if not isinstance(made, Pass):
            raise PassError(f"pass {name!r}: {obj.__name__}.from_options gave no pass")
        return made
    if dataclasses.is_dataclass(obj) and isinstance(obj, type):
        try:
            made = obj(**_coerce_options(obj, options))
        except (TypeError, ValueError) as exc:   # a __post_init__ refusing a value says why
            raise PassError(f"pass {name!r}: {exc}") from exc
        if not isinstance(made, Pass):
            raise PassError(f"pass {name!r}: {obj.__name__} has no run(graph, am) method")
        return made
    if options:
        raise PassError(f"pass {name!r} takes no options, got {sorted(options)}")
    return obj


def _coerce_options(cls: type, options: dict[str, Any]) -> dict[str, Any]:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = get_type_hints(cls)
    out: dict[str, Any] = {}
    for key, raw in options.items():
        if key not in fields:
            raise PassError(f"pass {cls.__name__}: unknown option {key!r}; options: {', '.join(fields)}")
        hint = hints.get(key)
        try:
            out[key] = _coerce(raw, hint)
        except ValueError:
            name = getattr(cls, "pass_name", cls.__name__)
            raise PassError(f"pass {name!r}: option {key}={raw!r} is not {_WORDS.get(hint, str(hint))}") from None
    return out


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_WORDS: dict[Any, str] = {bool: f"a boolean ({'/'.join(_TRUE)} or {'/'.join(_FALSE)})",
                          int: "an integer", float: "a number"}


def _coerce(raw: Any, hint: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    if hint is bool:
        if raw.lower() not in _TRUE + _FALSE:   # "ture" used to read as False
            raise ValueError(raw)
        return raw.lower() in _TRUE
    if hint is int:
        return int(raw)
    if hint is float:
        return float(raw)
    return raw


_ITEM = re.compile(r"\s*([A-Za-z0-9_\-.]+)\s*(\{([^}]*)\})?\s*(,|$)")


def parse_pipeline(text: str) -> Pipeline:
    """Parse ``"name{opt=v,opt2=v},other"`` into a :class:`Pipeline` of registered passes."""
    passes: list[PassLike] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _ITEM.match(text, pos)
        if not m or m.end() == pos:
            raise PassError(f"cannot parse pipeline {text!r} at position {pos}")
        name, body = m.group(1), m.group(3)
        options: dict[str, Any] = {}
        if body:
            for item in body.split(","):
                if not item.strip():
                    continue
                if "=" not in item:
                    raise PassError(f"pass {name!r}: option {item!r} is not key=value")
                k, v = item.split("=", 1)
                options[k.strip()] = v.strip()
        passes.append(get_pass(name, **options))
        pos = m.end()
    return Pipeline(tuple(passes))
