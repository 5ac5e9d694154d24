"""Timing: a counted program on a target becomes a :class:`Schedule`, through the target's family model.

The only place above the execution models that picks one; it asks the model for its default fusion
and its schedule and nothing else, so a new family (or the placement planner) plugs in here unseen.
"""

from __future__ import annotations

from dataclasses import replace

from ..backends import Target
from .execution import DeviceGroup, Program, Schedule, TimingOptions, model_for
from .interpreter import CostTable

__all__ = ["fused_program", "time_program"]


def fused_program(table: CostTable, target: Target, options: TimingOptions) -> Program:
    """The program as ``target``'s family runs it: fused by ``options.fusion``, or the family's default."""
    fusion = options.fusion or model_for(target).default_fusion
    return Program.fused(table, replace(options, fusion=fusion))


def time_program(program: Program, devices: DeviceGroup | Target) -> Schedule:
    """The schedule of ``program`` on ``devices`` (a bare target: as many of it as its family's layout needs)."""
    group = devices if isinstance(devices, DeviceGroup) else DeviceGroup(devices)
    return model_for(group.target).run(program, group)
