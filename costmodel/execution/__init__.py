"""Execution models, one per chip family, behind one interface: ``model.run(program, devices) -> Schedule``.

Sequential families (GPU, TPU, CPU) time each kernel on one device and add them up; the dataflow
family lays the program out over chips and pipelines it. Both return a :class:`Schedule`.
"""

from __future__ import annotations

from ...backends import Target
from ...errors import TargetSpecError
from .common import BOUNDS, KernelTime, TimingOptions
from .cpu import CpuModel
from .dataflow import DataflowModel
from .gpu import GpuModel
from .program import DeviceGroup, ExecutionModel, Program, Schedule
from .tpu import TpuModel

__all__ = ["MODELS", "model_for", "KernelTime", "TimingOptions", "BOUNDS", "Program", "DeviceGroup", "Schedule",
           "ExecutionModel"]

MODELS: dict[str, ExecutionModel] = {"gpu": GpuModel(), "tpu": TpuModel(), "cpu": CpuModel(),
                                     "dataflow": DataflowModel()}


def model_for(target: Target) -> ExecutionModel:
    try:
        return MODELS[target.family]
    except KeyError:
        raise TargetSpecError(f"no execution model for family {target.family!r}") from None
