"""A plain run's fit leaves the runtime its share of each device (backends.defaults.runtime_memory_reserve).

Llama-3-8B bf16, batch 1, seq 4096 needs 16.06 GB of weights plus its activations: about 17.1 GB, under
the 17.18 GB (16 GiB) of a TPU v5e but over the 15.48 GiB (16.62 GB) XLA lets a program use there; it
read 'fits' before. Llama-3-8B at seq 1024 (about 16.3 GB) fits under XLA's limit and still fits.
"""

import math

import pytest

import narrowpipe
from narrowpipe.backends.defaults import runtime_memory_reserve
from narrowpipe.errors import NarrowpipeError
from narrowpipe.models.examples import load_example

XLA_V5E_LIMIT = 15.48 * 2**30   # "Used 21.95G of 15.48G hbm" (LargeWorldModel/LWM issue 60)


@pytest.fixture(scope="module")
def graph():
    return load_example("llama-3-8b")


def test_a_run_over_xlas_limit_does_not_fit_a_tpu_v5e(graph):
    report = narrowpipe.analyze(graph, "tpu-v5e", dims={"batch": 1, "seq": 4096})
    timing = report.timing
    assert XLA_V5E_LIMIT < timing.memory_required < timing.memory_capacity   # fit by the raw capacity only
    assert timing.fits is False and timing.devices_needed == 2
    assert any("runtime reserve" in n and "4% left to the runtime" in n for n in timing.notes)


def test_a_run_under_xlas_limit_fits_and_says_nothing_of_the_reserve(graph):
    timing = narrowpipe.analyze(graph, "tpu-v5e", dims={"batch": 1, "seq": 1024}).timing
    assert timing.memory_required < XLA_V5E_LIMIT and timing.fits is True
    assert not any("reserve" in n for n in timing.notes)


def test_the_reserve_is_the_callers_to_set(graph):
    """0 leaves none (the raw capacity decides), a serving step's 10% names `serve`, and a value that
    is not a fraction is refused by name."""
    none = narrowpipe.analyze(graph, "tpu-v5e", dims={"batch": 1, "seq": 4096}, memory_reserve=0.0).timing
    assert none.fits is True
    serving = narrowpipe.analyze(graph, "h100", dims={"batch": 1, "seq": 4096}, memory_reserve=0.1).timing
    assert any("serving reserve" in n and "as `serve` leaves it" in n for n in serving.notes)
    for bad in (1.0, -0.1, math.nan):
        with pytest.raises(NarrowpipeError, match="memory_reserve"):
            narrowpipe.analyze(graph, "h100", dims={"batch": 1, "seq": 128}, memory_reserve=bad)


def test_the_reserve_by_family():
    """XLA's reported reserve on TPUs (3.2-3.9%), the GPU runtime's 6%, none on a dataflow chip."""
    assert runtime_memory_reserve("tpu") == 0.04
    assert runtime_memory_reserve("gpu") == 0.06 and runtime_memory_reserve("cpu") == 0.06
    assert runtime_memory_reserve("dataflow") == 0.0


def test_one_output_gives_one_device_count(graph):
    """Llama-3-8B at batch 138 x seq 4096 on an H100 needs ~166 GB (16.06 GB of weights plus the
    activations): 2 cards by the raw 85.52 GB, ceil(166 / (0.94 x 85.52)) = 3 at the 6% reserve. The
    row said 3 while the schedule's note, written before the reserve, said 2; now both say 3."""
    timing = narrowpipe.analyze(graph, "h100", dims={"batch": 138, "seq": 4096}).timing
    capacity = 85.52e9                        # the H100 SXM: 79.65 GiB (catalog memory_capacity)
    assert timing.memory_capacity == pytest.approx(capacity, rel=1e-4)
    assert 2 * capacity * 0.94 < timing.memory_required < 2 * capacity
    assert timing.fits is False and timing.devices_needed == 3
    no_fit = [n for n in timing.notes if n.startswith("does not fit")]
    assert len(no_fit) == 1 and "needs >= 3 devices" in no_fit[0]


def test_the_whatif_row_does_not_read_as_a_fit(monkeypatch, capsys):
    """17.1 GB on a 17.2 GB TPU v5e read 'does not fit: 17.1 GB > 17.2 GB' once the reserve decided."""
    from narrowpipe.cli import main
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["whatif", "llama-3-8b", "--target", "tpu-v5e", "--scale", "hbm_bandwidth=2", "--set", "seq=4096"]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip("│ ").startswith("memory"))
    assert row.count("does not fit: 17.1 GB of 17.2 GB is over the runtime reserve") == 2
