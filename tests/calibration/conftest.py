"""A quick calibration of this machine (one thread, for steady timings), shared by the tests here."""

from __future__ import annotations

import pytest
from host_lock import host_lock  # tests/host_lock.py


@pytest.fixture(scope="session")
def host(tmp_path_factory, host_lock_file):
    """Calibrated with the other test workers waiting (``tests/host_lock.py``): a quick sweep taken
    while another worker compiles or traces describes a slower machine than the one tests run on."""
    torch = pytest.importorskip("torch")
    from narrowpipe.calibration import calibrate
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        path = tmp_path_factory.mktemp("cal") / "host.toml"
        with host_lock(host_lock_file, exclusive=True):
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
