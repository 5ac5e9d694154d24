"""The optimizer step as elementwise ops over each parameter, its gradient and its states.

Why spelled out: the step is memory-bound work over every parameter (AdamW reads the gradient, the
fp32 master weight and two fp32 moments, writes three of them back and the 16-bit weight), so its
time is its bytes, and its states are most of a training run's memory. Each op is the one torch's
``foreach`` AdamW runs (``torch/optim/adamw.py``: ``lerp_`` as multiply-add, ``mul_``/``addcmul_``,
``sqrt``, ``div_``/``add_``, ``addcdiv_``); a fusing target fuses them as it fuses any elementwise
chain. States are inputs of the step named after the parameter (``<name>.exp_avg``,
``.exp_avg_sq``, ``.master``) and its outputs updated, so a report's peak memory holds them through
the step and ``weight_bytes`` stays the weights; the fp32 master copy exists only when the
parameters are narrower than ``master`` (mixed precision: Micikevicius et al. 2018).

Hyperparameters are torch's defaults, as attributes for the record: they change no count.
"""

from __future__ import annotations

from ...errors import NarrowpipeError
from ...ir import DType, Graph, Op, Source, TensorType, Value, ValueKind
from .backward import param_scope
from .context import GradContext
from .phases import OPTIMIZER

__all__ = ["OPTIMIZERS", "STATES", "optimizer_step"]

#: fp32 states per parameter besides a master copy: Adam/AdamW two moments, momentum SGD one buffer.
STATES = {"adam": ("exp_avg", "exp_avg_sq"), "adamw": ("exp_avg", "exp_avg_sq"), "momentum": ("momentum_buffer",),
          "sgd": ()}
OPTIMIZERS = tuple(STATES)
_LR, _BETA1, _BETA2, _EPS, _WD, _MU = 1e-3, 0.9, 0.999, 1e-8, 1e-2, 0.9


def _state(graph: Graph, p: Value, which: str, dtype: DType) -> Value:
    """A state the step reads and returns updated: an input of the step (a functional optimizer, as
    in JAX), so liveness holds it for the whole step and frees it once its update has read it."""
    name = f"{p.source_name}.{which}"
    return graph.add_input(name, TensorType(dtype, p.shape), ValueKind.INPUT, source_name=name)


def _update(cx: GradContext, graph: Graph, p: Value, g: Value, optimizer: str, master: DType) -> list[Value]:
    """The new weight and states of one parameter; returns them (they are the step's outputs)."""
    def op(o: Op, ins: list[Value], scalar: float | None = None, name: str = "") -> Value:
        return cx.emit(o, ins, p.shape, master, {} if scalar is None else {"scalar": scalar},
                       name=f"{p.name}_{optimizer}_{name or o.value}")

    wide = p.dtype is not master
    w = _state(graph, p, "master", master) if wide else p
    g32 = g if g.dtype is master else cx.emit(Op.CAST, [g], p.shape, master, {"to": master.value},
                                              name=f"{p.name}_{optimizer}_grad_cast")
    states = [_state(graph, p, s, master) for s in STATES[optimizer]]
    new_states = []
    if optimizer in ("adam", "adamw"):
        m, v = states
        if optimizer == "adamw":                               # p.mul_(1 - lr * wd): decoupled decay
            w = op(Op.MUL, [w], 1 - _LR * _WD, "decay")
        m = op(Op.ADD, [op(Op.MUL, [m], _BETA1, "m_scale"), op(Op.MUL, [g32], 1 - _BETA1, "m_grad")], name="m")
        v = op(Op.ADD, [op(Op.MUL, [v], _BETA2, "v_scale"),
                        op(Op.MUL, [op(Op.MUL, [g32, g32], name="g2")], 1 - _BETA2, "v_grad")], name="v")
        denom = op(Op.ADD, [op(Op.DIV, [op(Op.SQRT, [v])], 1.0, "bias_correction")], _EPS, "denom")
        step = op(Op.MUL, [op(Op.DIV, [m, denom], name="ratio")], -_LR, "step")
        w = op(Op.ADD, [w, step], name="apply")
        new_states = [m, v]
    elif optimizer == "momentum":
        (buf,) = states
        buf = op(Op.ADD, [op(Op.MUL, [buf], _MU, "buf_scale"), g32], name="buf")
        w = op(Op.ADD, [w, op(Op.MUL, [buf], -_LR, "step")], name="apply")
        new_states = [buf]
    else:
        w = op(Op.ADD, [w, op(Op.MUL, [g32], -_LR, "step")], name="apply")
    outs = [w, *new_states]
    if wide:                                                   # the 16-bit copy the next forward reads
        outs.insert(0, cx.emit(Op.CAST, [w], p.shape, p.dtype, {"to": p.dtype.value},
                               name=f"{p.name}_{optimizer}_cast"))
    return outs


def optimizer_step(cx: GradContext, graph: Graph, grads: dict[Value, Value], optimizer: str,
                   master: DType | str = DType.FP32) -> list[Value]:
    """Append the update of every parameter with a gradient; return the updated values."""
    if optimizer not in STATES:
        raise NarrowpipeError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    master = master if isinstance(master, DType) else DType.parse(master)
    cx.phase = OPTIMIZER
    outs: list[Value] = []
    for p, g in grads.items():
        cx.serve(None, Source(op=f"optimizer.{optimizer}", name=p.source_name, scope=param_scope(p)))
        outs.extend(_update(cx, graph, p, g, optimizer, master if p.dtype.bits <= master.bits else p.dtype))
    return outs
