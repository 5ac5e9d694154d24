"""The plan's step table names each term as the runtime does it."""

import pytest

from narrowpipe.cli import main


@pytest.mark.parametrize("zero, label", [(1, "ZeRO-1 parameter all-gather after the optimizer"),
                                         (3, "ZeRO-3 parameter gathers")])
def test_the_parameter_gather_is_named_for_its_zero_stage(zero, label, capsys):
    """ZeRO 1-2's gather is the distributed optimizer's, once a step; it was labelled ZeRO-3's."""
    assert main(["plan", "llama-3-8b", "--devices", "16", "--target", "dgx-h100", "--global-batch", "64", "--seq",
                 "2048", "--fix", f"tp=1,pp=1,zero={zero},microbatch=1,recompute=full"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert label in out
    other = "ZeRO-3 parameter gathers" if zero == 1 else "after the optimizer"
    assert other not in out
