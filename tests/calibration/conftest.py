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


@pytest.fixture(scope="session")
def host_contention(host) -> list[str]:
    """The signs that the machine was shared while ``host`` was calibrated (empty: none), by the rule
    calibrate applies (:mod:`narrowpipe.calibration.contention`): on a busy test machine it leaves
    the eager host-call terms out of the file, by design, and the tests of those terms check that."""
    from narrowpipe.calibration.calibrate import load_measurements, measured_threads, measurements_path
    from narrowpipe.calibration.contention import contention, file_clocks
    from narrowpipe.calibration.eager import eager_reference
    raw = measurements_path(host)
    ref = eager_reference(load_measurements(raw))
    assert ref is not None and ref.seconds > 0          # the stack was measured either way
    return contention(*file_clocks(raw), measured_threads(raw) or 1, ref.rounds)


@pytest.fixture()
def one_thread():
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
