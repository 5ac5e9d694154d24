"""Plans written by hand for the renderers' tests: their numbers come from the paper's formulas and
the test's own choices, never from narrowpipe's step model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from narrowpipe import Plan
from narrowpipe.costmodel.planner import Parallel

LLAMA_8B = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "ffn": 14336, "vocab": 128256,
            "gated_mlp": True, "activation": "silu", "norm": "rms", "positions": "rotary", "max_positions": 8192,
            "tie_embeddings": False, "experts": None, "top_k": None, "attn_bias": False, "out_bias": False,
            "mlp_bias": False, "encoder": False, "rope_theta": 500000.0, "rope_scaling": None}
MEGATRON_CORE = {"name": "megatron-core", "overlap_grad_reduce": True, "overlap_param_gather": True,
                 "overlap_tp_comm": False, "pipeline_scatter_gather": True, "attention": "fused",
                 "attention_layout": "sbhd", "fused_glu": True, "fused_norm": True, "vocab_multiple": 128,
                 "dropout": 0.0, "grad_reduce_dtype": "fp32", "master_weights": True, "stage_split": "balanced",
                 "fusion": "full"}


def make_plan(pp: int, interleave: int, m: int, *, f: float = 1e-3, b: float = 2e-3, comm: float = 1e-4,
              p2p: float = 0.0, dp_total: float = 0.0, dp_exposed: float = 0.0, optimizer: float = 0.0,
              tp: int = 2, dp: int = 2, microbatch: int = 1, layers: list[int] | None = None, seq: int = 1024,
              target: str = "h100-sxm", system: str = "dgx-h100", dtype: str = "bf16",
              architecture: dict[str, Any] | None = None, runtime: dict[str, Any] | None = None,
              **parallel: Any) -> Plan:
    """A plan with equal chunks (``f``/``b`` per chunk per microbatch, ``comm`` of each exposed) and
    its step time written from the paper's formula, not from narrowpipe's step model."""
    par = Parallel(tp=tp, pp=pp, dp=dp, interleave=interleave, microbatch=microbatch,
                   global_batch=dp * microbatch * m, **parallel)
    v = interleave
    p2p = p2p if pp > 1 else 0.0                       # one stage sends nothing
    t = v * (f + b + 2 * p2p)                          # one device, one microbatch
    pipeline = m * t + (pp - 1) * t / v                # Narayanan et al. SC'21: bubble (p - 1) / v stage-times
    stages = []
    for d in range(pp):
        chunks = [{"chunk": c * pp + d, "layers": _layers(layers, c * pp + d), "forward_s": f, "backward_s": b,
                   "forward_comm_s": comm, "backward_comm_s": comm} for c in range(v)]
        stages.append({"device": d, "layers": [i for c in chunks for i in c["layers"]], "forward_s": v * f,
                       "backward_s": v * b,
                       "p2p_s": 2 * v * p2p, "p2p_each_s": p2p, "param_gather_s": 0.0, "chunks": chunks})
    step = pipeline + dp_exposed + optimizer
    breakdown = {"compute": m * v * (f + b - 2 * comm), "tp_comm": m * v * 2 * comm, "p2p": m * 2 * v * p2p,
                 "bubble": pipeline - m * t, "dp_comm": dp_exposed, "optimizer": optimizer}
    collectives = ([{"purpose": "data-parallel gradient reduction", "op": "all_reduce", "axis": "dp", "group_size": 2,
                     "per_step": 1, "comm_bytes": 0, "seconds": dp_total, "exposed_s": dp_exposed}]
                   if dp_total else [])
    return Plan("hand", target, system, par.devices, "train", seq, par, dict(runtime or MEGATRON_CORE), step,
                breakdown, {}, {}, 1.0, 1.0, 1.0, 0.5, {"total": 1.0, "capacity": 2.0, "device": 0}, True, stages,
                collectives, dtype=dtype, architecture=dict(architecture or {}))


def _layers(counts: list[int] | None, g: int) -> list[int]:
    """Layer indices of chunk ``g`` when chunk sizes are given (one layer per chunk otherwise)."""
    if counts is None:
        return [g]
    start = sum(counts[:g])
    return list(range(start, start + counts[g]))


@pytest.fixture
def hand_plan() -> Callable[..., Plan]:
    return make_plan


@pytest.fixture
def llama_arch() -> dict[str, Any]:
    """Llama-3 8B's sizes as a plan's ``architecture``."""
    return dict(LLAMA_8B)
