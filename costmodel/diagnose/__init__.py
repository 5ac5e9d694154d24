"""Diagnose a measured run from a ``torch.profiler`` trace: charge measured time to ops
(:mod:`.charge`), cost each op with the shared rules (:mod:`.cost`), label bounds and advise
(:mod:`.labels`), and report (:mod:`.report`); :mod:`.run` ties the steps together."""

from .run import (
                  DIAGNOSIS_FORMAT,
                  DIAGNOSIS_VERSION,
                  HOST_COPY,
                  LATENCY,
                  LONG_CALL_LAUNCHES,
                  LOW_COMPUTE_UTILIZATION,
                  OVERHEAD_UTILIZATION,
                  RUN_LABELS,
                  UNMODELED,
                  Diagnosis,
                  OpStat,
                  UnmodeledStat,
                  diagnose,
)

__all__ = ["diagnose", "Diagnosis", "OpStat", "UnmodeledStat", "OVERHEAD_UTILIZATION", "RUN_LABELS",
           "DIAGNOSIS_FORMAT", "DIAGNOSIS_VERSION", "LONG_CALL_LAUNCHES", "LOW_COMPUTE_UTILIZATION", "HOST_COPY",
           "LATENCY", "UNMODELED"]
