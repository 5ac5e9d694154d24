"""Test-wide settings: never touch the Hugging Face hub; keep transformers quiet; verify every
graph a frontend or a pass produces (``NARROWPIPE_VERIFY``)."""

import os
from pathlib import Path

import pytest
from host_lock import host_lock, lock_path  # tests/host_lock.py (pytest puts tests/ on the path)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["NARROWPIPE_VERIFY"] = "1"


@pytest.fixture(scope="session")
def host_lock_file(tmp_path_factory) -> Path:
    return lock_path(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module", autouse=True)
def _host_share(request, host_lock_file):
    """Each module holds the host lock: exclusively where it is marked ``timing`` (it measures this
    machine), shared otherwise (see ``tests/host_lock.py``)."""
    with host_lock(host_lock_file, exclusive=request.node.get_closest_marker("timing") is not None):
        yield
