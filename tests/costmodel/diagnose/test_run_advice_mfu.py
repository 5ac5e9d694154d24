"""A compute-bound run's advice follows its MFU: near the roof only fewer FLOPs, a narrower dtype
or a faster chip help; far below it the kernels fall short (shapes, kernel choice, precision).
MFU never prints above 100% (the header's formatter)."""

from __future__ import annotations

from narrowpipe.costmodel.diagnose.labels import Machine, Timeline, run_advice

_TL = Timeline(1.0, 1.0, 0.0, 1.0, 0.0, 0.0)
_BY = {"compute": 1.0, "memory": 0.0, "overhead": 0.0, "latency": 0.0, "interconnect": 0.0, "host-copy": 0.0,
       "idle": 0.0, "unmodeled": 0.0, "dispatch": 0.0}
_CPU = Machine(False, "cpu", False, False)
_H100 = Machine(True, "gpu", True, True, True)


def test_low_mfu_is_not_told_it_is_beyond_the_roof() -> None:
    """QA's mlp on the host: compute-bound at MFU 16%: half a roof's worth of headroom is the kernels'."""
    advice = run_advice("compute", _CPU, _TL, _BY, 0.16, [])[0]
    assert advice.startswith("MFU 16.0%, far below the roof")
    assert "beyond" not in advice and "torch.get_num_threads()" in advice


def test_low_mfu_on_a_cuda_gpu_names_its_kernels_and_precisions() -> None:
    advice = run_advice("compute", _H100, _TL, _BY, 0.2, [])[0]
    assert "cudnn.benchmark" in advice and "bf16/TF32/fp8 matmuls" in advice


def test_mfu_near_the_roof_says_only_fewer_flops_or_a_faster_chip_help() -> None:
    advice = run_advice("compute", _H100, _TL, _BY, 0.8, [])[0]
    assert advice == "MFU 80.0%, near the roof: bf16/TF32/fp8 matmuls; beyond it only fewer FLOPs or a faster chip help"


def test_mfu_past_the_peak_is_not_printed_as_a_share() -> None:
    """QA read "MFU 1448%" here while the header said ">100%"."""
    advice = run_advice("compute", _CPU, _TL, _BY, 14.48, [])[0]
    assert "1448" not in advice and advice.startswith("MFU >100% (faster than the peak)")
