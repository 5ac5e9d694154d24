"""Package discovery: the repository root *is* the ``narrowpipe`` package (``package-dir`` in
pyproject.toml), so every folder with an ``__init__.py`` below it, except tests, benchmarks and
tools, becomes ``narrowpipe.<folder>``. A new subpackage needs no edit here or in pyproject.toml."""

from setuptools import find_packages, setup

_NOT_SHIPPED = ["tests", "tests.*", "benchmarks", "benchmarks.*", "tools", "tools.*", "build", "build.*",
                "docs", "docs.*"]

setup(packages=["narrowpipe", *(f"narrowpipe.{p}" for p in find_packages(".", exclude=_NOT_SHIPPED))])
