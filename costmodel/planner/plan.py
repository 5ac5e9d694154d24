"""The answer a user acts on: a :class:`Plan` (strategy, placement, memory per device, step time and
where it goes, exposed communication, runners-up and why they lost), versioned JSON both ways.

Why a plain result type with its own JSON: launch tooling and notebooks read plans without
narrowpipe's model objects, and a saved plan must load back equal (``Plan.from_json(p.to_json()) ==
p``), so every field is data: numbers, strings, lists and dicts, plus the :class:`.Parallel` value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import PlanError
from ...jsonout import dumps as dump_json
from ...schema import SchemaMismatch, check
from ...schema.check import added_after, read_version
from .strategy import Parallel

__all__ = ["Plan", "RunnerUp", "PLAN_VERSION", "PLAN_FORMAT", "ARCH_FIELDS"]

#: 2: ``format`` (was ``kind``) like every other ``--json`` document, ``closed_form_step_s``, and
#: ``step_time_s`` from the simulated schedule. Version 1 files still load. 3: ``item_unit``. 4: the
#: architecture's ``rope_theta`` and ``rope_scaling`` (launch tools need the rotary base); older files
#: load without them. 5: the runtime's ``attention_layout``, ``fused_glu``, ``fused_norm`` and
#: ``vocab_multiple``, and ``memory_per_device.device`` an integer (it was written as a float).
#: 6: ``breakdown.tied_grad``, the tied embedding's gradient all-reduce between the first and last
#: pipeline stage (:mod:`.tied_grads`); older files load without it. 7: the runtime's optional ``fp8``
#: (``plan --dtype fp8``: Transformer Engine's FP8 GEMMs, :mod:`..training.fp8_gemms`). 8: ``recompute`` may
#: be ``dots`` (JAX's dots_with_no_batch_dims_saveable, the ``maxtext`` runtime's MaxText ``minimal``).
PLAN_VERSION = 10
#: The required fields each version added (path -> first version that wrote it): an older file may
#: lack them, and only them (the schema's own history: narrowpipe.schema.json's ``required``; what
#: version 1, before the schema, may lack is what its reader filled in).
_ADDED = {**{k: 2 for k in ("closed_form_step_s", "placement", "runners_up", "notes", "model_flops_per_step",
                             "hw_flops_per_step", "dtype", "architecture")},
          "item_unit": 3,
          **{f"memory_per_device/{k}": 5 for k in ("total", "capacity", "device")},
          **{f"runtime/{k}": 5 for k in ("attention_layout", "fused_glu", "fused_norm", "vocab_multiple")}}
PLAN_FORMAT = "narrowpipe.plan"
#: The model's sizes a plan keeps for launch tools (``Plan.architecture``), from the builder's spec.
ARCH_FIELDS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "gated_mlp", "activation",
               "norm", "positions", "max_positions", "tie_embeddings", "experts", "top_k", "attn_bias", "out_bias",
               "mlp_bias", "encoder", "rope_theta", "rope_scaling")


@dataclass(frozen=True)
class RunnerUp:
    """A strategy that lost: its step time (None when it does not fit) and the reason, in words."""

    parallel: Parallel
    step_time_s: float | None
    why: str
    memory_per_device: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"parallel": self.parallel.to_dict(), "step_time_s": self.step_time_s, "why": self.why,
                "memory_per_device": self.memory_per_device}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunnerUp:
        return cls(Parallel.from_dict(d["parallel"]), d.get("step_time_s"), d.get("why", ""),
                   float(d.get("memory_per_device", 0.0)))


@dataclass(frozen=True)
class Plan:
    """A training (or inference) plan for ``devices`` devices of ``target`` in ``system``.

    ``breakdown`` splits ``step_time_s`` into terms that add up to it (compute, recompute, exposed
    tensor/context/expert-parallel communication, pipeline sends, parameter gathers, the pipeline
    bubble, exposed data-parallel reduction, optimizer); ``exposed_comm`` and ``hidden_comm`` are the
    communication the step waits for and the communication compute hides. ``memory_per_device`` is
    the fullest device's bytes by term (``total`` and ``capacity`` included). ``stages`` hold per
    pipeline device its layers, times, memory and per model chunk the forward and backward seconds
    (what :func:`~narrowpipe.costmodel.planner.schedule.step_timeline` places). ``dtype`` is the
    parameters' training format and ``architecture`` the model's sizes when recognised (both for
    launch settings; empty when unknown). ``step_time_s`` is the simulated pipeline schedule's
    (:mod:`.simulated`); ``closed_form_step_s`` the closed form ``m * t_max + (sum(t) - t_max) / v``
    plus the same once-per-step terms (equal with equal stages; 0 in a version 1 file)."""

    model: str
    target: str
    system: str
    devices: int
    mode: str
    seq: int
    parallel: Parallel
    runtime: dict[str, Any]
    step_time_s: float
    breakdown: dict[str, float]
    exposed_comm: dict[str, float]
    hidden_comm: dict[str, float]
    tokens_per_s: float
    tflops_per_device: float
    hw_tflops_per_device: float
    mfu: float
    memory_per_device: dict[str, float]           # bytes by term; ``device`` the pipeline index (int)
    fits: bool
    stages: list[dict[str, Any]]
    collectives: list[dict[str, Any]]
    runners_up: list[RunnerUp] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Three times the forward's FLOPs (PaLM's MFU definition, Chowdhery et al. 2022, Appendix B: no
    #: recomputation of any kind, causal masking not discounted); ``tflops_per_device`` and ``mfu`` use it.
    model_flops_per_step: float = 0.0
    #: The FLOPs the step executes: forward and backward as run (fused attention's backward recomputes
    #: the scores) plus recomputed activations; ``hw_tflops_per_device`` uses it.
    hw_flops_per_step: float = 0.0
    dtype: str = ""
    architecture: dict[str, Any] = field(default_factory=dict)
    closed_form_step_s: float = 0.0
    #: What ``tokens_per_s`` counts: ``tokens`` for a model with a sequence dim, ``samples`` (images,
    #: rows) for one without (a ResNet plan's rate is images per second).
    item_unit: str = "tokens"

    @property
    def placement(self) -> dict[str, Any]:
        """Mesh axes with their sizes and strides (Megatron-LM rank order) and each pipeline
        device's layers."""
        p = self.parallel
        axes = {name: {"size": p.axis(name)[0], "stride": p.axis(name)[1]} for name in ("tp", "cp", "dp", "pp", "ep")}
        return {"axis_order": ["tp", "cp", "dp", "pp"], "axes": axes, "stages": self.stages}

    def to_dict(self) -> dict[str, Any]:
        return {"format": PLAN_FORMAT, "version": PLAN_VERSION, "model": self.model, "target": self.target,
                "system": self.system, "devices": self.devices, "mode": self.mode, "seq": self.seq,
                "parallel": self.parallel.to_dict(), "runtime": dict(self.runtime),
                "step_time_s": self.step_time_s, "breakdown": dict(self.breakdown),
                "exposed_comm": dict(self.exposed_comm), "hidden_comm": dict(self.hidden_comm),
                "tokens_per_s": self.tokens_per_s, "tflops_per_device": self.tflops_per_device,
                "hw_tflops_per_device": self.hw_tflops_per_device, "mfu": self.mfu,
                "memory_per_device": dict(self.memory_per_device), "fits": self.fits,
                "placement": self.placement, "stages": list(self.stages), "collectives": list(self.collectives),
                "runners_up": [r.to_dict() for r in self.runners_up], "notes": list(self.notes),
                "model_flops_per_step": self.model_flops_per_step, "hw_flops_per_step": self.hw_flops_per_step,
                "dtype": self.dtype, "architecture": dict(self.architecture),
                "closed_form_step_s": self.closed_form_step_s, "item_unit": self.item_unit}

    def to_json(self, indent: int | None = 2) -> str:
        return dump_json(self.to_dict(), indent, "plan")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Plan:
        """A plan from its JSON form, checked against the shipped schema (:mod:`narrowpipe.schema`)
        first, so a damaged field is a :class:`PlanError` naming it, never a raw ``ValueError`` or a
        default filled in; a file of an older version may lack only the fields added since."""
        if not isinstance(d, Mapping):
            raise PlanError(f"Plan.from_dict takes the parsed JSON object, got {type(d).__name__}"
                            + (" (for JSON text use Plan.from_json)" if isinstance(d, (str, bytes)) else ""))
        data = dict(d)
        if "format" not in data and "kind" in data:     # version 1 named it 'kind'
            data["format"] = data.pop("kind")
        if data.get("format") != PLAN_FORMAT:
            raise PlanError(f"not a narrowpipe plan (its 'format' is not {PLAN_FORMAT!r})")
        version = read_version(data, PLAN_VERSION, "plan", PlanError)
        try:
            check({**data, "version": PLAN_VERSION}, PLAN_FORMAT, may_lack=added_after(version, _ADDED))
        except SchemaMismatch as e:
            raise PlanError(f"plan JSON (version {version}): {e}") from None
        parallel = Parallel.from_dict(data["parallel"])
        if parallel.devices != data["devices"]:
            raise PlanError(f"plan JSON: parallel {parallel.describe()} uses tp x pp x dp x cp = {parallel.devices} "
                            f"devices, but the plan says devices = {data['devices']}")
        return cls(data["model"], data["target"], data["system"], int(data["devices"]), data["mode"],
                   int(data["seq"]), parallel, dict(data["runtime"]), float(data["step_time_s"]),
                   dict(data["breakdown"]), dict(data["exposed_comm"]), dict(data["hidden_comm"]),
                   float(data["tokens_per_s"]), float(data["tflops_per_device"]), float(data["hw_tflops_per_device"]),
                   float(data["mfu"]), dict(data["memory_per_device"]), data["fits"], list(data["stages"]),
                   list(data["collectives"]), [RunnerUp.from_dict(r) for r in data.get("runners_up", [])],
                   list(data.get("notes", [])), float(data.get("model_flops_per_step", 0.0)),
                   float(data.get("hw_flops_per_step", 0.0)), data.get("dtype", ""),
                   dict(data.get("architecture", {})), float(data.get("closed_form_step_s", 0.0)),
                   data.get("item_unit", "tokens"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        try:
            data = json.loads(text, parse_constant=_no_constant)
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as e:
            raise PlanError(f"plan JSON does not parse: {e}") from None
        except TypeError:
            raise PlanError(f"Plan.from_json takes JSON text, got {type(text).__name__}") from None
        if not isinstance(data, dict):
            raise PlanError(f"plan JSON is not an object (it is a {type(data).__name__})")
        return cls.from_dict(data)


def _no_constant(name: str) -> Any:
    """``json.loads`` reads ``NaN`` and ``Infinity``, which are not JSON: refuse them while parsing."""
    raise ValueError(f"{name} is not a JSON number")
