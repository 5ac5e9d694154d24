"""Lowerings of the remaining ONNX ops: signal processing, detection, strings, ONNX-ML and the
preview training optimizers.

Strings are moved, compared and split, never computed on, so string ops lower to data movement or
comparisons (a string element counts as 8 bytes, a pointer). Optimizers lower to the elementwise
arithmetic of their update rule.
"""

from __future__ import annotations

from collections.abc import Callable

from ...ir import Dim, DType, Op, TensorType, Value, ValueKind
from .node import NodeCx
from .tensor import norm_axis, one

__all__ = ["MISC_LOWERINGS"]


def _dft(cx: NodeCx) -> None:
    rank = max(cx.rank(0), 1)
    axes = cx.known_ints(2) if cx.opset >= 20 and cx.n_inputs() > 2 else None
    axis = axes[0] if axes else int(cx.attr("axis", 1 if cx.opset < 20 else -2))
    cx.emit(Op.FFT, cx.inputs(0), {"axis": norm_axis(axis, rank), "inverse": bool(cx.attr("inverse", 0)),
                                   "onesided": bool(cx.attr("onesided", 0))})


def _stft(cx: NodeCx) -> None:
    """STFT: one FFT per frame; the output [batch, frames, bins, 2] holds all transforms."""
    cx.emit(Op.FFT, cx.inputs(), {"axis": 1, "frames": True})


def _window(cx: NodeCx) -> None:
    """Hann/Hamming/Blackman windows: the positions 0..size-1, then one cosine per element."""
    positions = cx.emit(Op.IOTA, cx.inputs(), {"window": cx.op_type}, bind=False, suffix="positions").outputs[0]
    cx.emit(Op.COS, [positions], {"window": cx.op_type})


def _col2im(cx: NodeCx) -> None:
    """Col2Im sums overlapping patches into the image: a scatter-add of every input element."""
    cx.emit(Op.SCATTER_ELEMENTS, cx.inputs(0), {"reduce": "add"})


def _nms(cx: NodeCx) -> None:
    cx.emit(Op.NMS, cx.inputs(), {"center_point_box": int(cx.attr("center_point_box", 0))})


def _regex(cx: NodeCx) -> None:
    cx.emit(Op.EQ, cx.inputs(), {"pattern": str(cx.attr("pattern", ""))})


def _binarizer(cx: NodeCx) -> None:
    """x > threshold as a bool mask, cast back to x's type (Binarizer yields 0/1 of its input type)."""
    out = cx.out_types()[0]
    mask = cx.emit(Op.GT, cx.inputs(), {"threshold": float(cx.attr("threshold", 0.0))},
                   types=[TensorType(DType.BOOL, out.shape)], bind=False, suffix="mask").outputs[0]
    cx.emit(Op.CAST, [mask], {"to": out.dtype.value})


def _label_encoder(cx: NodeCx) -> None:
    cx.emit(Op.GATHER, cx.inputs(), {"axis": 0, "lookup": "hash"})


def _linear_model(cx: NodeCx) -> None:
    """LinearRegressor/LinearClassifier: x @ coefficients^T (the coefficients live in attributes)."""
    x = cx.input(0)
    assert x is not None
    out = cx.out_types()
    targets = out[-1].shape[-1] if out[-1].rank else 1
    coef = cx.add_weight(f"{cx.name}.coefficients", TensorType(x.type.dtype, (targets, x.type.shape[-1])),
                         ValueKind.PARAM)
    scores_only = len(out) == 1 and out[0].dtype == x.type.dtype
    y = cx.emit(Op.DOT, [x, coef], {"lhs_contract": (x.type.rank - 1,), "rhs_contract": (1,), "lhs_batch": (),
                                    "rhs_batch": ()},
                types=[cx.tensor(x.type.dtype, (*x.type.shape[:-1], targets))] if not scores_only else None,
                bind=scores_only).outputs[0]
    if not scores_only:
        labels = cx.emit(Op.ARGMAX, [y], {"axes": (y.type.rank - 1,), "keepdims": False},
                         types=[cx.out_types()[0]], bind=False, suffix="label").outputs[0]
        cx.bind_at(0, labels)
        if cx.has_output(1):
            cx.bind_at(1, y)


def _svm(cx: NodeCx) -> None:
    """SVMClassifier/SVMRegressor: kernel of x against the support vectors (a dot and the kernel's
    elementwise op), then the dual coefficients (a second dot); a classifier also takes the argmax."""
    x = cx.input(0)
    assert x is not None
    features = x.type.shape[-1]
    sv = cx.attr("support_vectors") or []
    n_sv = len(sv) // features if isinstance(features, int) and features else 0
    out = cx.out_types()
    classes = out[-1].shape[-1] if out[-1].rank else 1
    dt = x.type.dtype
    dot = {"lhs_contract": (x.type.rank - 1,), "rhs_contract": (1,), "lhs_batch": (), "rhs_batch": ()}
    rows = x.type.shape[:-1]
    if n_sv:
        vectors = cx.add_weight(f"{cx.name}.support_vectors", TensorType(dt, (n_sv, features)), ValueKind.PARAM)
        k = cx.emit(Op.DOT, [x, vectors], dot, types=[cx.tensor(dt, (*rows, n_sv))], bind=False,
                    suffix="kernel").outputs[0]
        kernel = str(cx.attr("kernel_type", "LINEAR")).upper()
        k_op = {"RBF": Op.EXP, "POLY": Op.POW, "SIGMOID": Op.TANH}.get(kernel, Op.MUL)
        k = cx.emit(k_op, [k], {"kernel": kernel}, types=[k.type], bind=False, suffix="kernel_fn").outputs[0]
        width: Dim = n_sv
    else:
        k, width = x, features
    weights = cx.add_weight(f"{cx.name}.coefficients", TensorType(dt, (classes, width)), ValueKind.PARAM)
    scores_only = cx.op_type == "SVMRegressor"
    y = cx.emit(Op.DOT, [k, weights], dot, types=None if scores_only else [cx.tensor(dt, (*rows, classes))],
                bind=scores_only, suffix="" if scores_only else "scores").outputs[0]
    if not scores_only:
        cx.bind_at(0, cx.emit(Op.ARGMAX, [y], {"axes": (y.type.rank - 1,), "keepdims": False},
                              types=[cx.out_types()[0]], bind=False, suffix="label").outputs[0])
        if cx.has_output(1):
            cx.bind_at(1, y)


def _normalizer(cx: NodeCx) -> None:
    cx.emit(Op.LP_NORM, cx.inputs(), {"axis": max(cx.rank(0), 1) - 1, "norm": str(cx.attr("norm", "MAX"))})


def _scaler(cx: NodeCx) -> None:
    out = cx.out_types()
    s = cx.emit(Op.SUB, cx.inputs(), {"offset": True}, types=out, bind=False, suffix="offset").outputs[0]
    cx.emit(Op.MUL, [s], {"scale": True})


#: Optimizer update rules as elementwise steps ``(result, op, operands)`` per parameter; operands
#: name the parameter ``X``, gradient ``G``, state tensors ``S1``/``S2`` or earlier results.
_UPDATES: dict[str, tuple[int, list[tuple[str, Op, tuple[str, ...]]], tuple[str, ...]]] = {
    "Adagrad": (1, [("g2", Op.MUL, ("G", "G")), ("h", Op.ADD, ("S1", "g2")), ("r", Op.SQRT, ("h",)),
                    ("d", Op.ADD, ("r",)), ("q", Op.DIV, ("G", "d")), ("u", Op.MUL, ("q",)),
                    ("x", Op.SUB, ("X", "u"))], ("x", "h")),
    "Momentum": (1, [("a", Op.MUL, ("S1",)), ("b", Op.MUL, ("G",)), ("v", Op.ADD, ("a", "b")),
                     ("u", Op.MUL, ("v",)), ("x", Op.SUB, ("X", "u"))], ("x", "v")),
    "Adam": (2, [("a", Op.MUL, ("S1",)), ("b", Op.MUL, ("G",)), ("v", Op.ADD, ("a", "b")),
                 ("g2", Op.MUL, ("G", "G")), ("c", Op.MUL, ("S2",)), ("e", Op.MUL, ("g2",)),
                 ("h", Op.ADD, ("c", "e")), ("r", Op.SQRT, ("h",)), ("d", Op.ADD, ("r",)),
                 ("q", Op.DIV, ("v", "d")), ("u", Op.MUL, ("q",)), ("x", Op.SUB, ("X", "u"))], ("x", "v", "h")),
}


def _optimizer(cx: NodeCx) -> None:
    """Adagrad/Momentum/Adam(R, T, X..., G..., states...): the update rule per parameter."""
    n_states, steps, results = _UPDATES[cx.op_type]
    inputs = [cx.input(i) for i in range(2, cx.n_inputs())]
    tensors = [t for t in inputs if t is not None]
    n = len(tensors) // (2 + n_states)
    if n == 0 or len(tensors) != n * (2 + n_states) or len(tensors) != len(inputs):
        raise cx.error(f"{cx.op_type} expects (R, T, X..., G..., states...) with equal counts")
    for p in range(n):
        env: dict[str, Value] = {"X": tensors[p], "G": tensors[n + p]}
        for s in range(n_states):
            env[f"S{s + 1}"] = tensors[(2 + s) * n + p]
        t = env["X"].type
        for name, op, operands in steps:
            env[name] = cx.emit(op, [env[o] for o in operands], {"optimizer": cx.op_type}, types=[t], bind=False,
                                suffix=f"p{p}_{name}").outputs[0]
        for r, result in enumerate(results):
            k = r * n + p
            if cx.has_output(k):
                cx.bind_at(k, env[result])


MISC_LOWERINGS: dict[str, Callable[[NodeCx], None]] = {
    "DFT": _dft, "STFT": _stft, "HannWindow": _window, "HammingWindow": _window, "BlackmanWindow": _window,
    "Col2Im": _col2im, "NonMaxSuppression": _nms, "RegexFullMatch": _regex,
    "StringConcat": one(Op.COPY, strings="concat"), "StringNormalizer": one(Op.COPY, strings="normalize"),
    "StringSplit": one(Op.SPLIT, strings="split"),
    "ai.onnx.ml::ArrayFeatureExtractor": one(Op.GATHER, axis=-1), "ai.onnx.ml::Binarizer": _binarizer,
    "ai.onnx.ml::LabelEncoder": _label_encoder, "ai.onnx.ml::CategoryMapper": _label_encoder,
    "ai.onnx.ml::LinearRegressor": _linear_model, "ai.onnx.ml::LinearClassifier": _linear_model,
    "ai.onnx.ml::SVMClassifier": _svm, "ai.onnx.ml::SVMRegressor": _svm,
    "ai.onnx.ml::Normalizer": _normalizer, "ai.onnx.ml::Scaler": _scaler,
    "ai.onnx.ml::Imputer": one(Op.WHERE), "ai.onnx.ml::FeatureVectorizer": one(Op.CONCAT, axis=-1),
    "ai.onnx.ml::OneHotEncoder": one(Op.FILL),
    "ai.onnx.preview.training::Adagrad": _optimizer, "ai.onnx.preview.training::Momentum": _optimizer,
    "ai.onnx.preview.training::Adam": _optimizer,
}
