"""Progress for long runs (exporting a big model, a sweep, calibration): a bar on a terminal, nothing
when the output is piped, logged or ``--quiet``, so scripts and CI logs stay clean.

A run reports through a plain callback (``step(description)``), so the library never imports rich
for it and callers that do not care pass nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

__all__ = ["progress", "shows_progress"]


def shows_progress(console: Console) -> bool:
    """Whether ``console`` should draw live progress: a terminal, not quiet."""
    return console.is_terminal and not console.quiet


@contextmanager
def progress(console: Console, description: str, total: int | None = None) -> Iterator[Callable[..., None]]:
    """A step callback: ``step()`` advances by one, ``step("what now")`` also updates the text.
    ``total=None`` draws a spinner with the elapsed time (an export has no known length)."""
    if not shows_progress(console):
        yield lambda *_args, **_kw: None
        return
    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)

        def step(what: str | None = None, advance: int = 1) -> None:
            bar.update(task, advance=advance, description=what or None)

        yield step
