"""The per-module-call cost calibrate measures: nested trivial modules against the same adds inline."""

from __future__ import annotations

import pytest

from narrowpipe.calibration.module_calls import module_chain

pytestmark = pytest.mark.timing   # it measures this host: the other test workers wait (tests/host_lock.py)


def test_both_chains_compute_the_same_adds():
    torch = pytest.importorskip("torch")
    x = torch.zeros(16)
    nested, inline = module_chain(True, 5), module_chain(False, 5)
    assert torch.equal(nested(x), inline(x)) and torch.equal(inline(x), torch.full((16,), 5.0))
    # the nested chain calls 2 modules per add (plus itself), the inline one only itself
    calls = [0]
    for m in nested.modules():
        m.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    nested(x)
    assert calls[0] == 1 + 2 * 5


def test_a_module_call_costs_a_plausible_time():
    pytest.importorskip("torch")
    from narrowpipe.calibration.module_calls import measure_module_call
    m = measure_module_call(n=16, rounds=5)
    assert m.kind == "module_call" and m.shape == (32, 16)
    assert 0.0 <= m.seconds < 50e-6        # CPython call overhead: about a microsecond, never 50
