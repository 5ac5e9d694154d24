"""``.pt2`` archives (``torch.export.save``): loading with clear errors, and dim names that survive.

torch drops the names of ``torch.export.Dim("batch")`` at export: the program only knows ``s77``
and the input it sits on. :func:`save_pt2` writes the names into the archive (an extra file torch
carries along), :func:`load_pt2` reads them back, and a plain ``torch.export.save`` archive can be
given its names at load time with the same ``dynamic_shapes`` spec it was exported with. Without
names a dim is called ``<input>_<index>`` (``input_ids_1``).

Loading fails in torch with a generic "check the warnings above" after logging a traceback; the
cause (often an output type such as a ``ModelOutput`` subclass not registered as a pytree in this
process) is taken from that log and reported as one :class:`~narrowpipe.errors.ModelLoadError`.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from ...errors import FrontendError, ModelLoadError
from ...ir import Graph
from .op_libraries import archive_ops, missing_ops_message, provide_op_libraries

__all__ = ["load_pt2", "save_pt2", "names_from_spec", "stamp_dim_names", "stamped_dim_names", "NAMES_FILE"]

NAMES_FILE = "narrowpipe_dim_names.json"
_META_KEY = "narrowpipe_dim_names"

DimNames = dict[tuple[str, int], str]


def names_from_spec(specs: Mapping[str, Any]) -> DimNames:
    """(input name, dim index) -> the Dim's name, from ``{input: {index: Dim} or [Dim, ...]}``."""
    out: DimNames = {}
    for arg_name, spec in specs.items():
        if isinstance(spec, Mapping):
            items = list(spec.items())
        elif isinstance(spec, (list, tuple)):
            items = list(enumerate(spec))
        else:
            continue
        for dim, d in items:
            dim_name = getattr(d, "__name__", None)
            if isinstance(dim, int) and isinstance(dim_name, str) and dim_name not in ("AUTO", "DYNAMIC", "STATIC"):
                out[(arg_name, dim)] = dim_name
    return out


def _user_inputs(ep: ExportedProgram) -> list[str]:
    return [s.arg.name for s in ep.graph_signature.input_specs
            if s.kind == InputKind.USER_INPUT and hasattr(s.arg, "name")]


def _program_names(ep: ExportedProgram, dynamic_shapes: Any) -> DimNames:
    """A ``dynamic_shapes`` spec against a program: by input name, or in order of its inputs."""
    if dynamic_shapes is None:
        return {}
    if isinstance(dynamic_shapes, Mapping):
        return names_from_spec(dynamic_shapes)
    return names_from_spec(dict(zip(_user_inputs(ep), dynamic_shapes)))


def stamp_dim_names(ep: ExportedProgram, names: DimNames) -> None:
    """Remember the Dim names on the program (in memory; :func:`save_pt2` writes them out)."""
    ep.graph_module.meta[_META_KEY] = dict(names)


def stamped_dim_names(ep: ExportedProgram) -> DimNames:
    return dict(ep.graph_module.meta.get(_META_KEY) or {})


def save_pt2(program: ExportedProgram, path: str | Path, *, dynamic_shapes: Any = None) -> Path:
    """``torch.export.save`` that keeps the Dim names: those ``narrowpipe.export`` recorded, or those
    of ``dynamic_shapes`` (the spec the program was exported with)."""
    if not isinstance(program, ExportedProgram):
        raise FrontendError(f"save_pt2 saves a torch.export ExportedProgram, got {type(program).__name__}")
    names = _program_names(program, dynamic_shapes) or stamped_dim_names(program)
    p = Path(path)
    table: dict[str, dict[str, str]] = {}
    for (arg, dim), name in names.items():
        table.setdefault(arg, {})[str(dim)] = name
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        torch.export.save(program, str(p), extra_files={NAMES_FILE: json.dumps(table)})
    except Exception as exc:  # torch raises many types for what it cannot serialize
        raise FrontendError(f"cannot save {p}: {type(exc).__name__}: {exc}") from exc
    return p


def load_pt2(path: str | Path, *, strict: bool = False, dynamic_shapes: Any = None) -> Graph:
    """A program saved with ``torch.export.save`` (or :func:`save_pt2`), as an IR graph. Dim names
    come from ``dynamic_shapes`` if given, else from the archive if :func:`save_pt2` wrote them."""
    from .frontend import from_exported_program
    p = Path(path)
    if not p.exists():
        raise ModelLoadError("file not found", file=str(p))
    extra = {NAMES_FILE: ""}
    ep = _load(p, extra)
    names = _program_names(ep, dynamic_shapes) or _read_names(extra.get(NAMES_FILE))
    return from_exported_program(ep, strict=strict, name=p.stem, file=str(p), dim_names=names)


def _read_names(text: Any) -> DimNames:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not text:
        return {}
    try:
        table = json.loads(text)
        return {(arg, int(dim)): str(name) for arg, dims in table.items() for dim, name in dims.items()}
    except (ValueError, AttributeError, TypeError):
        return {}   # names are a convenience: a damaged table falls back to input_index names


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


#: Libraries whose output types a ``.pt2`` may name and that this loader imports itself: transformers
#: registers its ``ModelOutput`` classes with torch's pytree as ``transformers.modeling_outputs`` is
#: imported, which ``import transformers`` (lazy) does not do; the CLI has no way to import it at all.
_TRUSTED_TYPE_MODULES = ("transformers.",)


def _load(p: Path, extra: dict[str, Any]) -> ExportedProgram:
    """``torch.export.load`` without its logged traceback, failing with the underlying reason. An
    output type of a trusted library not yet registered is imported and the load tried once more; the
    custom op libraries the archive calls are imported first (:mod:`.op_libraries`)."""
    missing = provide_op_libraries(archive_ops(p))
    for attempt in (0, 1):
        logger = logging.getLogger("torch.export")   # torch gives it a stderr handler of its own
        capture, propagate, handlers = _Capture(), logger.propagate, logger.handlers[:]
        logger.handlers = [capture]
        logger.propagate = False
        try:
            return torch.export.load(str(p), extra_files=extra)
        except Exception as exc:
            text = _cause_and_text(exc, capture.records)[1]
            if attempt == 0 and _import_type_module(_unregistered_type(text)):
                continue
            if missing:   # torch's SerializeError would dump the whole node calling the op
                raise ModelLoadError(missing_ops_message(missing), file=str(p)) from None
            raise ModelLoadError(_reason(exc, capture.records), file=str(p)) from None
        finally:
            logger.handlers = handlers
            logger.propagate = propagate
    raise AssertionError("unreachable")


def _unregistered_type(text: str) -> str | None:
    """The dotted type name torch could not deserialize, from its message, or None."""
    if "pytree is not registered" not in text:
        return None
    return text.removeprefix("Deserializing ").split(" in pytree")[0].strip()


def _import_type_module(type_name: str | None) -> bool:
    """Import the module defining ``type_name`` when it belongs to a trusted library; True if it did."""
    if not type_name or not type_name.startswith(_TRUSTED_TYPE_MODULES) or "." not in type_name:
        return False
    try:
        importlib.import_module(type_name.rsplit(".", 1)[0])
    except Exception:   # not installed, or broken: the load's own error says what is missing
        return False
    return True


def _cause_and_text(exc: BaseException, records: list[logging.LogRecord]) -> tuple[BaseException, str]:
    cause: BaseException = exc
    for r in records:
        if r.exc_info and r.exc_info[1] is not None:
            cause = r.exc_info[1]
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    return cause, text


def _reason(exc: BaseException, records: list[logging.LogRecord]) -> str:
    cause, text = _cause_and_text(exc, records)
    type_name = _unregistered_type(text)
    if type_name is not None:
        module = type_name.rsplit(".", 1)[0]
        return (f"the program's inputs or outputs use the type {type_name}, which is not registered with "
                f"torch's pytree in this process: import the module that defines it before loading "
                f"(`import {module}`), or export a model that returns plain tensors or tuples")
    if isinstance(cause, (KeyError, ValueError, OSError)) or "zip" in text.lower():
        return f"not a torch.export archive ({type(cause).__name__}: {text})"
    return f"torch cannot load this archive: {type(cause).__name__}: {text}"
