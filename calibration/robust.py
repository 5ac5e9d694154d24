"""Guards between noisy measurements and a target file: outliers out, curves monotone, values plausible.

A calibration run on a busy machine once produced a GEMM efficiency of 0.0003 and an exp rate of
33 M elements/s, and both were written to the target file as if measured. Three checks stop that:

* Outliers: samples of one quantity (the points of a bin, the rates of one function) further than
  3.5 scaled MADs from their median are dropped before the median is taken (Iglewicz and Hoaglin's
  modified z-score; ``scipy.stats.median_abs_deviation``).
* Monotone curves: a GEMM does not get less efficient as it grows (per FLOPs), nor as its small
  side grows (the skinny curve); a dip is interference, so those curves are fitted by isotonic
  regression (``scipy.optimize.isotonic_regression``). The bandwidth curve keeps its steps: cache
  levels and page faults make it legitimately non-monotone.
* Plausibility: a large-GEMM plateau under :data:`MIN_PLAUSIBLE_GEMM` of the derived peak is not a
  measurement of the hardware but of interference: the fit refuses it (rerun on a quiet machine);
  a function rate (exp, tanh, ...) under :data:`MIN_PLAUSIBLE_FUNCTION` of the fp32 vector peak is
  dropped with a warning, and the cost model falls back to its documented default for it. Vector ops
  (norms, pooling) have no such floor: eager max-pooling really runs at ~1/1000 of the vector peak.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Sequence

import numpy as np
from scipy.optimize import isotonic_regression
from scipy.stats import median_abs_deviation

from ..errors import NarrowpipeError, NarrowpipeWarning

__all__ = ["drop_outliers", "robust_median", "monotone", "CalibrationError", "CalibrationWarning",
           "MIN_PLAUSIBLE_GEMM", "MIN_PLAUSIBLE_FUNCTION", "check_gemm_plateau", "plausible_rates"]

#: assumption: BLAS libraries (oneDNN, MKL, OpenBLAS) reach 50-90% of a CPU's FMA peak on large
#: GEMMs; under 2% the run measured something else (another process, a throttled core).
MIN_PLAUSIBLE_GEMM = 0.02
#: assumption: a vectorised exp/tanh/erf costs ~10-40 vector ops per element (SLEEF, oneDNN
#: eltwise); a rate under 1/1000 of the fp32 vector FLOP/s is interference, not the function.
MIN_PLAUSIBLE_FUNCTION = 1e-3
_Z = 3.5   # modified z-score cut (Iglewicz and Hoaglin)


class CalibrationError(NarrowpipeError):
    """Measurements too noisy to fit: the message says which value and what to do."""


class CalibrationWarning(NarrowpipeWarning):
    """A measured value was implausible and left out of the target file."""


def drop_outliers(values: Sequence[float]) -> list[float]:
    """``values`` without those more than 3.5 scaled MADs from the median (all kept when the MAD is 0)."""
    if len(values) < 3:
        return list(values)
    arr = np.asarray(values, dtype=float)
    med = float(np.median(arr))
    mad = float(median_abs_deviation(arr, scale="normal"))
    if mad == 0:
        return list(values)
    return [v for v in values if abs(v - med) / mad <= _Z]


def robust_median(values: Sequence[float]) -> float:
    return float(statistics.median(drop_outliers(values)))


def monotone(curve: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """The non-decreasing curve nearest ``curve`` (least squares, isotonic regression), x kept."""
    if len(curve) < 2:
        return tuple(curve)
    ys = isotonic_regression([y for _, y in curve]).x
    return tuple((x, round(float(y), 4)) for (x, _), y in zip(curve, ys))


def check_gemm_plateau(plateau: float) -> None:
    if plateau < MIN_PLAUSIBLE_GEMM:
        raise CalibrationError(
            f"the large-GEMM efficiency came out at {plateau:.2g} of the derived peak (plausible: above "
            f"{MIN_PLAUSIBLE_GEMM}); the machine was busy or throttled while measuring. Rerun calibrate on "
            "a quiet machine (and check --threads matches the cores you have)")


def plausible_rates(rates: dict[str, float], vector_peak: float, what: str) -> dict[str, float]:
    """``rates`` without those under :data:`MIN_PLAUSIBLE_FUNCTION` of ``vector_peak`` (warned)."""
    floor = MIN_PLAUSIBLE_FUNCTION * vector_peak
    bad = {k: v for k, v in rates.items() if v < floor}
    if bad:
        listed = ", ".join(f"{k} {v / 1e6:.3g} M/s" for k, v in sorted(bad.items()))
        warnings.warn(f"calibrate: {what} rates below {floor / 1e6:.3g} M/s (1/1000 of the fp32 vector peak) "
                      f"are interference, not the hardware: {listed}; left out (the cost model's default "
                      "applies to them)", CalibrationWarning, stacklevel=3)
    return {k: v for k, v in rates.items() if k not in bad}
