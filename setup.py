"""Package discovery: the repository root *is* the ``narrowpipe`` package (``package-dir`` in
pyproject.toml), so every folder with an ``__init__.py`` below it, except tests, benchmarks and
tools, becomes ``narrowpipe.<folder>``. A new subpackage needs no edit here or in pyproject.toml.
This file and the root's ``conftest.py`` (pytest's view of the repository) are left out of the wheel:
``import narrowpipe.setup`` would run the build."""

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

_NOT_SHIPPED = ["tests", "tests.*", "benchmarks", "benchmarks.*", "tools", "tools.*", "build", "build.*",
                "docs", "docs.*"]
_NOT_MODULES = ("setup", "conftest")


class _BuildPy(build_py):
    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if not (package == "narrowpipe" and m[1] in _NOT_MODULES)]


setup(cmdclass={"build_py": _BuildPy},
      packages=["narrowpipe", *(f"narrowpipe.{p}" for p in find_packages(".", exclude=_NOT_SHIPPED))])
