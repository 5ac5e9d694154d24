"""aten op names of the elementwise ops and the canonical op each lowers to.

Kept apart from the torch frontend (no torch import) so that readers of recorded traces
(``narrowpipe diagnose``) map the same names to the same canonical ops.
"""

from __future__ import annotations

from ...ir import Op

__all__ = ["ELEMENTWISE_OPS"]

ELEMENTWISE_OPS: dict[str, Op] = {
    "add": Op.ADD, "sub": Op.SUB, "rsub": Op.SUB, "mul": Op.MUL, "multiply": Op.MUL, "div": Op.DIV,
    "divide": Op.DIV, "true_divide": Op.DIV, "floor_divide": Op.DIV, "remainder": Op.MOD, "fmod": Op.MOD,
    "pow": Op.POW, "float_power": Op.POW, "maximum": Op.MAXIMUM, "minimum": Op.MINIMUM, "fmax": Op.MAXIMUM,
    "fmin": Op.MINIMUM, "neg": Op.NEG, "negative": Op.NEG, "abs": Op.ABS, "absolute": Op.ABS, "sign": Op.SIGN,
    "sgn": Op.SIGN, "signbit": Op.SIGN, "reciprocal": Op.RECIPROCAL, "square": Op.SQUARE, "floor": Op.FLOOR,
    "ceil": Op.CEIL, "round": Op.ROUND, "trunc": Op.ROUND, "fix": Op.ROUND, "frac": Op.SUB,
    "clamp": Op.CLAMP, "clip": Op.CLAMP, "clamp_min": Op.CLAMP, "clamp_max": Op.CLAMP,
    "relu": Op.RELU, "relu6": Op.HARDTANH, "leaky_relu": Op.LEAKY_RELU, "prelu": Op.PRELU,
    "_prelu_kernel": Op.PRELU, "rrelu": Op.LEAKY_RELU, "hardtanh": Op.HARDTANH, "hardsigmoid": Op.HARDSIGMOID,
    "hardswish": Op.HARDSWISH, "threshold": Op.WHERE, "hardshrink": Op.WHERE, "softshrink": Op.WHERE,
    "exp": Op.EXP, "exp2": Op.EXP, "expm1": Op.EXP, "log": Op.LOG, "log2": Op.LOG, "log10": Op.LOG,
    "log1p": Op.LOG, "logit": Op.LOG, "xlogy": Op.LOG, "sqrt": Op.SQRT, "rsqrt": Op.RSQRT, "tanh": Op.TANH,
    "sigmoid": Op.SIGMOID, "erf": Op.ERF, "erfc": Op.ERF, "erfinv": Op.ERF, "gelu": Op.GELU, "silu": Op.SILU,
    "elu": Op.ELU, "celu": Op.ELU, "selu": Op.SELU, "softplus": Op.SOFTPLUS, "mish": Op.MISH,
    "logsigmoid": Op.SOFTPLUS, "sin": Op.SIN, "cos": Op.COS, "tan": Op.TAN, "asin": Op.ASIN,
    "arcsin": Op.ASIN, "acos": Op.ACOS, "arccos": Op.ACOS, "atan": Op.ATAN, "arctan": Op.ATAN,
    "atan2": Op.ATAN, "arctan2": Op.ATAN, "sinh": Op.SINH, "cosh": Op.COSH, "asinh": Op.ASINH,
    "acosh": Op.ACOSH, "atanh": Op.ATANH, "hypot": Op.SQRT, "sinc": Op.SIN, "lgamma": Op.LOG,
    "polar": Op.POLAR,
    "digamma": Op.LOG, "eq": Op.EQ, "ne": Op.NE, "lt": Op.LT, "le": Op.LE, "gt": Op.GT, "ge": Op.GE,
    "equal": Op.EQ, "not_equal": Op.NE, "less": Op.LT, "less_equal": Op.LE, "greater": Op.GT,
    "greater_equal": Op.GE, "isclose": Op.EQ, "logical_and": Op.AND, "logical_or": Op.OR,
    "logical_xor": Op.XOR, "logical_not": Op.NOT, "bitwise_and": Op.AND, "bitwise_or": Op.OR,
    "bitwise_xor": Op.XOR, "bitwise_not": Op.NOT, "__and__": Op.AND, "__or__": Op.OR, "__xor__": Op.XOR,
    "__invert__": Op.NOT, "__lshift__": Op.BITWISE, "__rshift__": Op.BITWISE,
    "bitwise_left_shift": Op.BITWISE, "bitwise_right_shift": Op.BITWISE, "isnan": Op.ISNAN,
    "isinf": Op.ISINF, "isfinite": Op.ISINF, "isposinf": Op.ISINF, "isneginf": Op.ISINF,
    "nan_to_num": Op.WHERE, "masked_fill": Op.WHERE, "copysign": Op.MUL, "heaviside": Op.WHERE,
    "outer": Op.MUL, "ger": Op.MUL, "bucketize": Op.LT, "searchsorted": Op.LT,
    "quantize_per_tensor": Op.QUANTIZE, "quantize_per_channel": Op.QUANTIZE,
    "dequantize": Op.DEQUANTIZE, "fake_quantize_per_tensor_affine": Op.QUANTIZE,
    "fake_quantize_per_channel_affine": Op.QUANTIZE,
}
