#!/usr/bin/env bash
# Lint and type-check: ruff over the whole tree, mypy over the `narrowpipe` package.
# The repository root *is* the package (package-dir {"narrowpipe" = "."}), so mypy needs a folder
# named `narrowpipe` to resolve the relative imports under their real names; a clone can live in a
# folder of any name, so this checks the package through a `narrowpipe` symlink in a scratch folder.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python -m ruff check .
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
ln -s "$root" "$scratch/narrowpipe"
cd "$scratch"
python -m mypy --config-file "$root/pyproject.toml" --cache-dir "$root/.mypy_cache" -p narrowpipe
