"""Launch settings for real tools from a plan: what ``--emit`` writes, as text or as JSON.

A :class:`Launch` is one tool's settings for one plan: an argument list for command-line tools
(Megatron-LM's ``pretrain_gpt.py``, ``vllm serve``), a Python snippet for libraries (PyTorch's
``DeviceMesh``/FSDP2/tensor parallelism, a JAX mesh), the settings as data either way, and notes
for whatever the tool cannot say the way the plan means it. Why notes and errors rather than a
best guess: a flag that silently runs something else than what was predicted makes the prediction
worthless, so an unrepresentable feature is either refused (:class:`~narrowpipe.NarrowpipeError`,
naming the feature and the way out) or written as a note next to the settings.

The per-tool mapping lives in ``emit_megatron``, ``emit_torch``, ``emit_jax`` and ``emit_vllm``.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..costmodel.planner.plan import Plan
from ..errors import NarrowpipeError
from ..jsonout import dumps as dump_json
from .output_file import write_output

__all__ = ["Launch", "LAUNCH_FORMAT", "LAUNCH_VERSION", "TRAINING_TOOLS", "SERVING_TOOLS", "write_launch",
           "plan_source", "training_dtype", "py_tuple", "software_stack", "STACKS", "TOOL_STACKS",
           "check_tool_target", "check_tool_runtime"]

LAUNCH_FORMAT, LAUNCH_VERSION = "narrowpipe.launch", 1
TRAINING_TOOLS = ("megatron", "torch", "jax")
SERVING_TOOLS = ("vllm",)


@dataclass
class Launch:
    """``tool``'s settings for a plan. ``program`` starts the command (``torchrun ... pretrain_gpt.py``,
    ``vllm serve MODEL``) and ``args`` are the tool's flags (command-line tools); ``code`` is a Python
    snippet (libraries); ``settings`` the values as data (flag -> value, ``True`` for a switch);
    ``source`` what the settings were made from (model, target, strategy)."""

    tool: str
    source: dict[str, Any]
    settings: dict[str, Any]
    program: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    code: str = ""
    notes: list[str] = field(default_factory=list)
    #: Where the flag names come from (the tool's repository, file and version).
    reference: str = ""

    @property
    def command(self) -> list[str]:
        return [*self.program, *self.args]

    def text(self) -> str:
        """What a person pastes: the command (one flag per line) or the snippet, notes as comments."""
        lines = [f"# {self.tool} settings from narrowpipe: {self.source.get('summary', '')}".rstrip()]
        if self.reference:
            lines.append(f"# flag names: {self.reference}")
        lines += [f"# note: {n}" for n in self.notes]
        if self.program:
            lines.append(_shell(self.program, self.args))
        if self.code:
            lines.append(self.code.rstrip("\n"))
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {"format": LAUNCH_FORMAT, "version": LAUNCH_VERSION, "tool": self.tool, "source": dict(self.source),
                "settings": dict(self.settings), "command": self.command, "code": self.code,
                "notes": list(self.notes), "reference": self.reference}

    def to_json(self, indent: int | None = 2) -> str:
        return dump_json(self.to_dict(), indent, "launch")


def _shell(program: list[str], args: list[str]) -> str:
    """The program on the first line, then a line per flag and its values, continued with backslashes."""
    lines = [" ".join(shlex.quote(a) for a in program)]
    for a in args:
        if a.startswith("--") or len(lines) == 1:
            lines.append("    " + shlex.quote(a))
        else:
            lines[-1] += " " + shlex.quote(a)
    return " \\\n".join(lines)


def write_launch(launch: Launch, out: str | None) -> str | None:
    """Write ``launch`` to ``out`` (``.json``: the JSON document; else the text) and return the path,
    or return None for no file (the caller prints :meth:`Launch.text`)."""
    if not out:
        return None
    path = Path(out)
    write_output(path, launch.to_json() if path.suffix.lower() == ".json" else launch.text(), "--emit-out")
    return str(path)


def plan_source(plan: Plan) -> dict[str, Any]:
    """What a training launch was made from, with a one-line summary for the text's header."""
    p = plan.parallel
    return {"kind": "narrowpipe.plan", "model": plan.model, "target": plan.target, "system": plan.system,
            "devices": plan.devices, "strategy": p.describe(), "schedule": p.schedule,
            "step_time_s": plan.step_time_s,
            "summary": f"{plan.model} on {plan.devices} x {plan.target} ({plan.system}): {p.describe()}, "
                       f"predicted step {plan.step_time_s:.4g} s"}


#: What trains on a chip, by its vendor's software rather than its execution-model family (the family
#: picks how the cost model times it: Gaudi 3 and Trainium2 are systolic arrays like TPUs, but neither
#: runs JAX's TPU runtime).
STACKS = {"cuda": "NVIDIA GPUs (CUDA)", "rocm": "AMD GPUs (ROCm)", "tpu": "Google TPUs (XLA: JAX, PyTorch/XLA)",
          "gaudi": "Intel Gaudi (PyTorch through Intel's HPU bridge, SynapseAI)",
          "neuron": "AWS Trainium (the Neuron SDK: torch-neuronx, NeuronX Distributed)", "cpu": "CPUs",
          "other": "its vendor's own compiler"}


#: The software stacks each training tool's emitter accepts (the rest it refuses, naming the way out):
#: what :func:`check_tool_target` checks before a plan is searched. ``tests/render/test_emit.py``
#: holds it against each emitter's own refusals.
TOOL_STACKS = {"megatron": ("cuda", "rocm", "gaudi"), "torch": ("cuda", "rocm", "gaudi", "cpu"),
               "jax": ("tpu", "cuda", "rocm", "neuron")}
_TOOL_NAMES = {"megatron": "Megatron-LM", "torch": "PyTorch's torch.distributed settings", "jax": "JAX"}


def check_tool_target(tool: str, target: Any) -> None:
    """Refuse ``--emit tool`` for a chip its emitter refuses, before the (possibly long) plan search:
    a plan found and printed first, then refused, wasted the search."""
    stack = software_stack(target)
    if tool in TOOL_STACKS and stack not in TOOL_STACKS[tool]:
        ok = sorted({STACKS[s] for s in TOOL_STACKS[tool]})
        others = [t for t, stacks in TOOL_STACKS.items() if stack in stacks]
        way_out = f"use --emit {' or '.join(others)}" if others else "plan for a GPU system"
        raise NarrowpipeError(f"--emit {tool}: {_TOOL_NAMES[tool]} runs on {', '.join(ok)}; {target.name} runs "
                              f"{STACKS[stack]}: {way_out}")


def check_tool_runtime(tool: str, runtime: str | None) -> None:
    """Refuse ``--emit megatron`` for a plan timed as another framework runs (``--runtime maxtext``):
    Megatron's flags would launch a run that behaves as Megatron-Core does, not as the plan assumed."""
    if tool == "megatron" and runtime is not None and not runtime.startswith("megatron"):
        raise NarrowpipeError(f"--emit megatron: the plan is timed as runtime {runtime!r} runs; Megatron-LM's "
                              "flags would launch a run that behaves as Megatron-Core does: re-plan with "
                              "--runtime megatron-core, or use --emit jax")


def software_stack(target: Any) -> str:
    """The key in :data:`STACKS` of the software that trains on ``target`` (a :class:`Target`)."""
    vendor = str(getattr(target, "vendor", "")).lower()
    if target.family == "gpu":
        return "rocm" if vendor == "amd" else "cuda"
    if "intel" in vendor and target.family == "tpu":
        return "gaudi"
    if vendor in ("aws", "amazon"):
        return "neuron"
    if target.family == "tpu":
        return "tpu"                     # Google's, or a systolic chip of a spec file: XLA's model of one
    return "cpu" if target.family == "cpu" else "other"


def py_tuple(items: Iterable[str]) -> str:
    """A Python tuple literal of already-written items: ``(1, 2)``, ``(1,)``."""
    parts = list(items)
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def training_dtype(plan: Plan) -> str:
    """The parameters' training format, refusing a plan saved without one."""
    if not plan.dtype:
        raise NarrowpipeError("this plan was saved without its training dtype (an older plan file): "
                              "re-run `narrowpipe plan` to emit launch settings")
    return plan.dtype
