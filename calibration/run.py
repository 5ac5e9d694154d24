"""Every sweep's cases measured together: what ``calibrate`` runs on a device.

The cases of all sweeps (:mod:`.sweeps`, and on the CPU the GEMM grid and batched GEMMs, pads, depthwise layers,
module calls, eager stacks and host calls after heavy traffic) are built first and then measured
in interleaved rounds that span the whole run (:mod:`.rounds`), so each fitted term is the median
over rounds minutes apart, not one burst of the machine's state.
"""

from __future__ import annotations

from collections.abc import Callable

from .measurement import Case, Measurement
from .rounds import DEFAULT_ROUNDS, QUICK_ROUNDS, measure_in_rounds
from .sweeps import (
    ELEMENTS,
    FP16_SQUARES,
    MATMUL_SQUARES,
    QUICK_ELEMENTS,
    QUICK_FP16_SQUARES,
    QUICK_SQUARES,
    ColdPool,
    attention_cases,
    bandwidth_cases,
    conv_cases,
    dispatch_cases,
    fp16_linear_cases,
    fresh_page_cases,
    matmul_cases,
    transcendental_cases,
    vector_op_cases,
)

__all__ = ["calibration_cases", "run_all"]


def calibration_cases(device: str, quick: bool) -> list[Case]:
    """The cases of a full calibration (or of a quick one, for tests: fewer GEMM and transfer sizes,
    no GEMM grid)."""
    pool = ColdPool(device)
    cases = [*dispatch_cases(device),
             *matmul_cases(pool, squares=QUICK_SQUARES if quick else MATMUL_SQUARES, skinny=not quick),
             *bandwidth_cases(device, QUICK_ELEMENTS if quick else ELEMENTS), *transcendental_cases(device),
             *conv_cases(device), *vector_op_cases(device)]
    if device == "cpu":
        from .bmm_sweep import bmm_cases
        from .cold_calls import cold_call_cases
        from .depthwise_sweep import depthwise_cases
        from .eager import eager_case
        from .evicted_calls import evicted_call_cases
        from .gemm_grid_sweep import gemm_grid_cases
        from .host import cache_bytes
        from .module_calls import module_call_cases
        from .pad_sweep import pad_row_cases
        from .unaligned_sweep import unaligned_cases
        # a CPU's fp16 rate is its own (native, or a reference loop without fp16 arithmetic)
        cases += fp16_linear_cases(pool, QUICK_FP16_SQUARES if quick else FP16_SQUARES)
        cases += [*attention_cases(device), *fresh_page_cases(device), *pad_row_cases(device),
                  *depthwise_cases(device), *module_call_cases(), eager_case(), *cold_call_cases(),
                  *evicted_call_cases(cache_bytes(2))]
        cases += [] if quick else [*gemm_grid_cases(pool), *bmm_cases(pool), *unaligned_cases(pool)]
    return cases


def run_all(device: str, quick: bool, progress: Callable[[str], None] | None = None,
            rounds: int | None = None) -> list[Measurement]:
    """Every case of :func:`calibration_cases` measured in ``rounds`` interleaved rounds (default
    :data:`.rounds.DEFAULT_ROUNDS`, or :data:`.rounds.QUICK_ROUNDS` when ``quick``), and the
    per-module-call cost derived from its two chains; each finished round reported to ``progress``."""
    import torch

    from .module_calls import module_call_from
    with torch.no_grad():
        cases = calibration_cases(device, quick)
        if progress:
            progress(f"{len(cases)} cases built")
        out = measure_in_rounds(cases, rounds or (QUICK_ROUNDS if quick else DEFAULT_ROUNDS), device=device,
                                progress=progress)
    module = module_call_from(out)
    return out + ([module] if module is not None else [])
