"""Writing an output file a command was asked for (``--json``, ``--html``, ``--trace``, ...).

One place for what every such write must do: create missing folders (the analysis already ran, and
losing it to a traceback over ``out/`` not existing yet helps nobody) and turn an OS error into a
:class:`~narrowpipe.errors.NarrowpipeError` that names the flag and the file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import NarrowpipeError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["write_output", "make_parent", "reports_of", "say_wrote"]


def write_output(path: str | Path, text: str, flag: str) -> Path:
    """Write ``text`` to ``path`` (UTF-8), creating its folder; ``flag`` names the option in errors.
    ``-`` is standard output, as Unix tools take it (it wrote a file named ``-``)."""
    if str(path) == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
        return Path("-")
    out = Path(path)
    make_parent(out, flag)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise NarrowpipeError(f"cannot write {flag} {out}: {exc.strerror or exc}") from None
    return out


def make_parent(out: Path, flag: str) -> None:
    """Create ``out``'s missing folders, on purpose (README: output paths); where a part of the path
    is a file, say so: mkdir's 'File exists' named neither the file nor the problem."""
    for folder in reversed(out.parents):
        if folder.exists() and not folder.is_dir():
            raise NarrowpipeError(f"cannot write {flag} {out}: {folder} is a file, not a directory")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NarrowpipeError(f"cannot write {flag} {out}: {exc.strerror or exc}") from None


def reports_of(result: Any, what: str) -> list[Any]:
    """The reports a renderer draws from ``result`` (a :class:`Report` or a :class:`Comparison`), or a
    :class:`NarrowpipeError` saying what it takes: a ``Graph`` passed by mistake failed with
    ``'Graph' object has no attribute 'graph'``, an empty comparison with ``list index out of range``."""
    from ..costmodel.compare import Comparison
    from ..costmodel.report import Report
    if isinstance(result, Report):
        return [result]
    if isinstance(result, Comparison):
        if not result.reports:
            raise NarrowpipeError(f"{what}: the comparison has no targets")
        return list(result.reports)
    raise NarrowpipeError(f"{what} takes a Report (narrowpipe.analyze) or a Comparison (narrowpipe.compare), "
                          f"got a {type(result).__name__}")


def say_wrote(console: Console, path: str | Path, detail: str = "") -> None:
    """``wrote PATH<detail>`` on one unwrapped line, the path taken literally: rich wrapped a long path
    at the console's width (80 columns off a terminal), so the name a script or a reader copies
    from the line had a newline in it, and a path with ``[...]`` in it read as markup."""
    console.print(f"wrote {path}{detail}", markup=False, highlight=False, soft_wrap=True)
