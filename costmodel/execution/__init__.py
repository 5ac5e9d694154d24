"""Execution models, one per chip family: how a kernel's work becomes time on a target.

Sequential families (GPU, TPU, CPU) time each kernel and add them up; the dataflow family lays the
program out over chips and pipelines it. All return per-kernel :class:`KernelTime` rows.
"""

from __future__ import annotations

from typing import Any

from ...backends import Target
from ...errors import TargetSpecError
from .common import BOUNDS, KernelTime, TimingOptions
from .cpu import CpuModel
from .dataflow import DataflowModel, DataflowPlan
from .gpu import GpuModel
from .tpu import TpuModel

__all__ = ["MODELS", "model_for", "KernelTime", "TimingOptions", "BOUNDS", "DataflowPlan"]

MODELS: dict[str, Any] = {"gpu": GpuModel(), "tpu": TpuModel(), "cpu": CpuModel(), "dataflow": DataflowModel()}


def model_for(target: Target) -> Any:
    try:
        return MODELS[target.family]
    except KeyError:
        raise TargetSpecError(f"no execution model for family {target.family!r}") from None
