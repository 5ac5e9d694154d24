"""A bounded fuzz run in CI: byte- and field-level mutations of real ONNX files, fixed seed; the
only exceptions allowed out of load + analyze are NarrowpipeErrors (``tools/fuzz_onnx.py`` runs
the long version)."""

from __future__ import annotations

import time

import pytest

import fuzz_onnx  # noqa: E402  (tools/, put on the path by conftest)


def _corpus(exported) -> list[str]:
    files = fuzz_onnx.default_corpus()
    light = [f for f in files if "/light/" in f]
    rest = [f for f in files if "/light/" not in f][::6]
    extra = []
    try:
        extra = [exported("gpt2", "legacy")[0], exported("llama", "dynamo")[0]]
    except pytest.skip.Exception:
        pass
    return light + rest + extra


@pytest.mark.slow
def test_fuzzed_files_only_raise_narrowpipe_errors(exported) -> None:
    files = _corpus(exported)
    t = time.perf_counter()
    outcomes, findings = fuzz_onnx.fuzz(files, cases=200, seed=20240601, seconds=30)
    assert not findings, "\n".join(f"seed {f.seed} ({f.source}): {f.kind}: {f.detail}" for f in findings)
    assert sum(outcomes.values()) >= 150 or time.perf_counter() - t >= 30
    assert outcomes["ok"] > 0 and len(outcomes) > 2  # mutations both survive and fail


def test_mutations_are_reproducible() -> None:
    import random

    import onnx
    src = fuzz_onnx.default_corpus()[0]
    data = open(src, "rb").read()
    a = fuzz_onnx.mutate_bytes(data, random.Random(5))
    b = fuzz_onnx.mutate_bytes(data, random.Random(5))
    assert a == b
    model = onnx.load_model_from_string(data)
    assert fuzz_onnx.mutate_fields(model, random.Random(9)) == fuzz_onnx.mutate_fields(model, random.Random(9))
