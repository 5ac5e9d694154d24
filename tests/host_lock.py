"""One test at a time while this host's speed is measured.

The suite runs on every core (pytest-xdist). Most tests do not care, but a test that times this
machine (calibration, validation against eager torch, a profiled trace judged on a calibrated
target) measures whatever else the other workers run: on CI's two cores a profiled 8-element add
read 92 us and an elementwise validation median 74% off. So every test module holds a lock on the
host: shared by default, exclusive in modules marked ``timing`` and while the session's quick
calibration runs, so a timing test runs with the other workers waiting.

A reader-writer lock over ``flock`` on one file in the session's shared temporary folder (the
workers' ``basetemp`` folders sit side by side in it). A process holds it through one open file
and nests: asking for it exclusively while holding it shared converts the lock (flock releases,
then waits), so a session fixture that calibrates in the middle of a shared module never waits
on its own process. Without xdist there is one process and it never waits.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

__all__ = ["host_lock", "lock_path"]

_held: list[bool] = []        # this process's nested holds: exclusive or not
_file: IO[str] | None = None


def lock_path(basetemp: Path) -> Path:
    """The lock file every worker of this run opens: beside the workers' own temporary folders."""
    return basetemp.parent / "narrowpipe-host-timing.lock"


def _mode() -> int:
    return fcntl.LOCK_EX if any(_held) else fcntl.LOCK_SH


@contextmanager
def host_lock(path: Path, exclusive: bool) -> Iterator[None]:
    global _file
    if _file is None:
        _file = open(path, "a+")   # noqa: SIM115 (held across nested holds, closed by the last)
    before = _mode() if _held else None
    _held.append(exclusive)
    if _mode() != before:
        fcntl.flock(_file, _mode())
    try:
        yield
    finally:
        _held.pop()
        if not _held:
            fcntl.flock(_file, fcntl.LOCK_UN)
            _file.close()
            _file = None
        elif _mode() != fcntl.LOCK_EX:
            fcntl.flock(_file, fcntl.LOCK_SH)
