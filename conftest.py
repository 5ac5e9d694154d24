"""pytest's view of the repository root: a plain folder, not a package.

The root *is* the ``narrowpipe`` package (it has an ``__init__.py``), so pytest would collect it as a
``Package`` and import that ``__init__.py`` under the folder's name before the first test: in a clone
whose folder is not a Python identifier (``narrowpipe-main``, as GitHub's zip unpacks) every test then
errors at setup, and under any other name the whole package is imported a second time under that
name. The tests import the installed ``narrowpipe``; the root needs no package-level setup. A conftest's
own hooks do not apply to the folder it sits in, so the hook is registered as a plugin. Not shipped
(setup.py leaves it out of the wheel).
"""

from __future__ import annotations

from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parent


class _RootIsAFolder:
    @pytest.hookimpl(tryfirst=True)
    def pytest_collect_directory(self, path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if path.resolve() == _ROOT:
            return pytest.Dir.from_parent(parent, path=path)
        return None


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_RootIsAFolder(), "narrowpipe-root-is-a-folder")
