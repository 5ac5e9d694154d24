"""A quick calibration of this machine (one thread, for steady timings), shared by the tests here."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def host(tmp_path_factory):
    torch = pytest.importorskip("torch")
    from narrowpipe.calibration import calibrate
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        path = tmp_path_factory.mktemp("cal") / "host.toml"
        calibrate(path, quick=True)
    finally:
        torch.set_num_threads(threads)   # session-scoped: never leak one thread into other tests
    return path


@pytest.fixture()
def one_thread():
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
