"""Shared fixtures of the ONNX frontend tests: paths to the benchmark helpers, and the tiny
transformers models exported once per session."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
for sub in ("benchmarks", "tools"):
    if str(ROOT / sub) not in sys.path:
        sys.path.insert(0, str(ROOT / sub))

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., tuple[str, dict]]:
    """``exported(name, exporter, attn)`` -> (path of the tiny model's .onnx, torch-path reference)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import onnx_models

    cache: dict[tuple[str, str, str], tuple[str, dict]] = {}
    refs: dict[tuple[str, str], dict] = {}
    directory = tmp_path_factory.mktemp("exports")

    def get(name: str, exporter: str, attn: str = "eager") -> tuple[str, dict]:
        key = (name, exporter, attn)
        if key not in cache:
            model = onnx_models.build(name, "tiny", attn)
            if (name, attn) not in refs:
                refs[(name, attn)] = onnx_models.torch_reference(model, name)
            path = str(directory / f"{name}_{attn}_{exporter}.onnx")
            onnx_models.export(model, name, path, exporter)
            cache[key] = (path, refs[(name, attn)])
        return cache[key]

    return get
