"""Custom op libraries a ``.pt2`` archive calls into, made available before torch deserializes it.

A program exported from a transformers 5 mixture of experts calls
``torch.ops.transformers.grouped_mm_fallback``, a custom op that exists in a process only once
``transformers.integrations.moe`` has been imported; ``import transformers`` (lazy) does not import it
and the CLI has no way to. torch's loader then fails with a ``SerializeError`` that dumps the whole
node. The archive names every op it calls (``"target": "torch.ops.<namespace>.<op>.<overload>"``), so
the loader reads those names first, imports the module that registers a known namespace when (and
only when) one of its ops is missing, and otherwise says which namespace is missing and what to install.
"""

from __future__ import annotations

import importlib
import re
import zipfile
from pathlib import Path

import torch

__all__ = ["OP_LIBRARIES", "archive_ops", "missing_ops", "provide_op_libraries", "missing_ops_message"]

#: custom op namespace -> (modules whose import registers its ops, the package to install)
OP_LIBRARIES: dict[str, tuple[tuple[str, ...], str]] = {
    "transformers": (("transformers.integrations.moe",), "transformers"),
    "transformers_msa": (("transformers.integrations.msa_attention",), "transformers"),
}

#: namespaces torch itself provides (operators, prims, higher-order ops)
_BUILTIN = frozenset({"aten", "prims", "higher_order", "_ops", "profiler", "_c10d_functional",
                      "c10d_functional", "_dtensor", "quantized", "quantized_decomposed", "inductor"})

_TARGET = re.compile(rb"torch\.ops\.([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)")


def archive_ops(path: Path) -> set[tuple[str, str]]:
    """``(namespace, op)`` of every non-builtin op the archive's JSON entries name; empty when
    the file is not a readable zip (torch's own loader then says what is wrong with it)."""
    found: set[tuple[str, str]] = set()
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():   # models/<name>.json (older torch: serialized_exported_program.json)
                if info.filename.endswith(".json"):
                    for ns, op in _TARGET.findall(z.read(info)):
                        if ns.decode() not in _BUILTIN:
                            found.add((ns.decode(), op.decode()))
    except (OSError, zipfile.BadZipFile, ValueError):
        return set()
    return found


def _registered(ns: str, op: str) -> bool:
    try:
        getattr(getattr(torch.ops, ns), op)
    except (AttributeError, RuntimeError):
        return False
    return True


def missing_ops(ops: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """The ops of ``ops`` no library in this process has registered, sorted."""
    return sorted(o for o in ops if not _registered(*o))


def provide_op_libraries(ops: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """Import the registering module of each known namespace that has a missing op (lazily: nothing
    is imported for an archive that calls only aten); returns the ops still missing."""
    for ns in sorted({ns for ns, _ in missing_ops(ops)}):
        for module in OP_LIBRARIES.get(ns, ((), ""))[0]:
            try:
                importlib.import_module(module)
            except Exception:   # not installed or broken: missing_ops_message says what to install
                continue
    return missing_ops(ops)


def missing_ops_message(missing: list[tuple[str, str]]) -> str:
    """One sentence per missing namespace: which ops, and which package or module provides them."""
    by_ns: dict[str, list[str]] = {}
    for ns, op in missing:
        by_ns.setdefault(ns, []).append(op)
    parts = []
    for ns, ops in by_ns.items():
        names = ", ".join(f"torch.ops.{ns}.{op}" for op in ops)
        if ns in OP_LIBRARIES:
            modules, package = OP_LIBRARIES[ns]
            parts.append(f"the program calls {names}, custom ops of the {ns!r} namespace that "
                         f"{' / '.join(modules)} registers, and it cannot be imported here: "
                         f"install {package} (pip install {package})")
        else:
            parts.append(f"the program calls {names}, custom ops of the {ns!r} namespace that no library "
                         f"in this process registers: import the library that defines torch.ops.{ns} "
                         f"before loading (narrowpipe.load in Python)")
    return "; ".join(parts)
