"""The package keeps its shape: the wheel ships every subpackage and data file, no module imports
itself back through another, no module grows past the house limit, and the README's layout table
names the folders that exist."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_SHIPPED = {"tests", "benchmarks", "tools", "docs", "build", "dist"}
MAX_LINES = 400
#: Top-level files of the repository that are not modules of the package.
TOP_NOT_SHIPPED = {"setup.py", "conftest.py"}


def _shipped_files() -> list[Path]:
    out = []
    for p in ROOT.rglob("*"):
        rel = p.relative_to(ROOT)
        if (not p.is_file() or rel.parts[0] in NOT_SHIPPED or rel.parts[0].startswith(".")
                or "__pycache__" in rel.parts or rel.parts[0].endswith(".egg-info") or len(rel.parts) == 1
                and rel.suffix != ".py"):
            continue
        if not (p.parent / "__init__.py").exists():
            continue
        out.append(rel)
    return sorted(out)


def _module_name(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["narrowpipe", *parts])


def _package_modules() -> dict[str, Path]:
    return {_module_name(r): ROOT / r for r in _shipped_files() if r.suffix == ".py" and str(r) not in TOP_NOT_SHIPPED}


@pytest.mark.slow
def test_wheel_ships_every_subpackage_and_data_file(tmp_path):
    # build from a copy: setuptools writes build/ and *.egg-info/ beside the sources
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(src)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("narrowpipe-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {"narrowpipe/" + r.as_posix() for r in _shipped_files() if str(r) not in TOP_NOT_SHIPPED}
    assert expected - names == set()
    assert not {"narrowpipe/" + f for f in TOP_NOT_SHIPPED} & names
    packages = {r.parent for r in _shipped_files() if r.name == "__init__.py"}
    assert len(packages) >= 10 and Path("frontends/onnx") in packages and Path("costmodel/diagnose") in packages


def _imports(mod: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Modules imported at module level (lazy imports inside functions and TYPE_CHECKING blocks are
    left out: they do not run at import time)."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    package = mod if is_pkg else mod.rpartition(".")[0]
    out: set[str] = set()
    body = [n for n in tree.body if not (isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test))]
    for node in body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in modules else target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in modules and m != mod}


def test_no_import_cycles_between_modules():
    modules = _package_modules()
    g = nx.DiGraph()
    for mod, path in modules.items():
        for dep in _imports(mod, path, modules):
            # a package's __init__ re-exporting its submodules is not a cycle with them
            if not (dep.startswith(mod + ".") and path.name == "__init__.py") and not mod.startswith(dep + "."):
                g.add_edge(mod, dep)
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert cycles == []


def test_no_module_over_the_line_limit():
    long = {m: n for m, p in _package_modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_readme_layout_table_matches_the_tree():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    named = {m.rstrip("/") for m in re.findall(r"`([\w/]+/)`", section)}
    packages = {r.parent.as_posix() for r in _shipped_files() if r.name == "__init__.py" and r.parent != Path(".")}
    assert packages - named == set(), "every package is in the README's layout table"
    assert sorted(n for n in named if not (ROOT / n).is_dir()) == [], "every folder the table names exists"
