"""narrowpipe: find the narrowest pipe (compute, memory, interconnect) of a model on real hardware.

Public API::

    g = narrowpipe.from_torch(model, args, kwargs)      # or narrowpipe.load("model.onnx" / ".pt2" / ".json")
    g = narrowpipe.transformer(layers=32, hidden=4096, heads=32, vocab=128256, kv_heads=8, gated_mlp=True)
    g = narrowpipe.from_config(transformers.AutoConfig.from_pretrained(...))   # or a config.json dict
    g.save("model.json"); narrowpipe.load("model.json")  # the IR graph round-trips, dims named
    narrowpipe.save_pt2(narrowpipe.export(model, args, dynamic_shapes=...), "m.pt2")  # Dim names kept
    r = narrowpipe.analyze(g, dims={"batch": 8, "seq": 2048})   # counts: r.flops, r.bytes, r.params, r.ops
    r = narrowpipe.analyze(g, "h100", dims={"seq": 2048})       # + times: r.time_s, r.mfu, r.ops[i].bound
    c = narrowpipe.compare(g, ["h100", "tpu-v5e", "groq-lpu"], dims={"batch": 8})
    g.role_size(narrowpipe.DimRole.BATCH)                       # dims carry roles: batch, sequence, kv length
    s = narrowpipe.serve(g, "h100", mode="decode", batch=64, context=8192)   # s.tpot_s, s.max_batch, s.memory
    p = narrowpipe.plan_capacity(g, "h100", rate=1000, input_len=2048, output_len=256, tpot=0.030)
    t = narrowpipe.training_step(g, optimizer="adamw", recompute="selective")   # forward + backward + optimizer
    narrowpipe.analyze(t, "h100").flops_by_phase                # {"forward": ..., "backward": ..., ...}
    p = narrowpipe.plan(g, "dgx-h100", 64, global_batch=512, seq=4096, parallel={"tp": 8})  # a training plan
    p.step_time_s, p.breakdown, p.memory_per_device, p.runners_up; narrowpipe.Plan.from_json(p.to_json())
    m = narrowpipe.training_memory(g, zero=3, dp=8, microbatch=1)  # bytes per device by term
    m.overflow("h100")                                          # [(term, bytes over), ...]
"""

from __future__ import annotations

from typing import Any

from . import schema  # noqa: F401  (narrowpipe.schema.validate(doc) after a plain import narrowpipe)
from .backends import get_target
from .backends import targets as _catalog_targets
from .costmodel.analyze import analyze
from .costmodel.compare import Comparison, WhatIf, compare, whatif
from .costmodel.diagnose import Diagnosis, diagnose
from .costmodel.planner import Parallel, Plan, shard
from .costmodel.planner.api import plan as _plan
from .costmodel.report import Bottleneck, OpRow, Report, ReportError, Timing, Unmodeled
from .costmodel.serving import ServingReport, serve, serving_graph
from .costmodel.serving.capacity import CapacityPlan, plan_capacity
from .costmodel.training import TrainingMemory, build_training_graph, training_memory
from .errors import (
    FrontendError,
    IRError,
    ModelLoadError,
    NarrowpipeError,
    PlanError,
    ShapeError,
    TargetSpecError,
    UnboundDimError,
    UnknownTargetError,
    UnsupportedOpError,
    VerificationError,
)
from .frontends import export, export_decode_step, from_torch, save_pt2
from .ir import DimRole, Graph
from .loading import load, load_model
from .models import from_config, transformer

__version__ = "0.1.0"

#: One training step of a forward graph (see :func:`narrowpipe.costmodel.training.build_training_graph`).
training_step = build_training_graph


def plan(model: Any, target: Any, devices: int, **options: Any) -> Plan:
    """A training plan for ``model`` (a graph, a model file or a bundled example's name) on ``devices``
    devices of ``target``: see :func:`narrowpipe.costmodel.planner.api.plan` for the options."""
    return _plan(load_model(model), target, devices, **options)


def targets() -> list[tuple[str, str]]:
    """Every catalog target as (name, family), sorted by name."""
    return _catalog_targets()


__all__ = [
    "from_torch", "export", "save_pt2", "load", "load_model", "transformer", "from_config", "analyze", "compare",
    "whatif",
    "diagnose", "targets", "get_target", "Graph", "DimRole", "serve", "serving_graph", "plan_capacity",
    "export_decode_step", "ServingReport", "CapacityPlan",
    "training_step", "build_training_graph",
    "training_memory", "TrainingMemory",
    "Report", "OpRow", "Unmodeled", "Timing", "Bottleneck", "Comparison", "WhatIf", "Diagnosis", "NarrowpipeError",
    "FrontendError", "ModelLoadError", "UnsupportedOpError", "ShapeError", "IRError",
    "VerificationError", "UnboundDimError", "TargetSpecError", "UnknownTargetError", "__version__",
    "plan", "Plan", "Parallel", "shard", "PlanError", "ReportError",
]
