"""Operator tokens of nki.language (``nl.add``, ``nl.exp``, ...) with their numpy meaning.

Engines compute in fp32 (nki.api.shared), so the functions receive float32 arrays, except the
bitwise ops, which receive integers.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special as _special

from .errors import NkiUsageError


@dataclass(frozen=True, eq=False)
class Op:
    """One op token: ``arity`` 1 (activation functions) or 2 (tensor_tensor/tensor_scalar ops)."""

    name: str
    fn: Callable[..., np.ndarray]
    arity: int
    reduce: Callable[..., np.ndarray] | None = None   # for tensor_reduce / activation reduce
    bitwise: bool = False

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise NkiUsageError(f"nl.{self.name}(...) as a tensor function is not emulated by nkisim; pass "
                            f"nl.{self.name} as the op of an nki.isa instruction")

    def __repr__(self) -> str:
        return f"nl.{self.name}"


def _f(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32, copy=False)


def _cmp(fn: Callable) -> Callable:
    return lambda a, b: fn(a, b).astype(np.float32)


def _sigmoid(x):
    return (1.0 / (1.0 + np.exp(-x))).astype(np.float32)


def _rsqrt(x):
    return (1.0 / np.sqrt(x)).astype(np.float32)


def _relu(x):
    return np.maximum(x, np.float32(0))


def _silu(x):
    return (x * _sigmoid(x)).astype(np.float32)


# The GELU family and the other activation functions of the Neuron docs' activation table
# ("Supported Activation Functions for NKI ISA", nki.api.shared). The hardware evaluates piecewise
# polynomials; these are the exact functions they approximate, in fp32.
_SQRT_2_OVER_PI = np.float32(np.sqrt(2.0 / np.pi))
_GELU_SIGMOID_K = np.float32(1.702)   # the standard sigmoid approximation x*sigmoid(1.702x)


def _gelu(x):
    return (0.5 * x * (1.0 + _special.erf(x / np.sqrt(2.0)))).astype(np.float32)


def _gelu_dx(x):
    cdf = 0.5 * (1.0 + _special.erf(x / np.sqrt(2.0)))
    return (cdf + x * np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)).astype(np.float32)


def _gelu_tanh(x):
    return (0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))).astype(np.float32)


def _gelu_sigmoid(x):
    return (x * _sigmoid(_GELU_SIGMOID_K * x)).astype(np.float32)


def _gelu_sigmoid_dx(x):
    s = _sigmoid(_GELU_SIGMOID_K * x)
    return (s + _GELU_SIGMOID_K * x * s * (1.0 - s)).astype(np.float32)


def _silu_dx(x):
    s = _sigmoid(x)
    return (s * (1.0 + x * (1.0 - s))).astype(np.float32)


def _softplus(x):
    return np.logaddexp(np.float32(0), x).astype(np.float32)


def _mish(x):
    return (x * np.tanh(_softplus(x))).astype(np.float32)


def _erf_dx(x):
    return (2.0 / np.sqrt(np.pi) * np.exp(-x * x)).astype(np.float32)


def _abs_max(a, b):
    return np.maximum(np.abs(a), np.abs(b))


def _abs_min(a, b):
    return np.minimum(np.abs(a), np.abs(b))


def _bypass(a, b):
    """nl.bypass: the stage passes its data through (the operand is ignored)."""
    return a


def _mean_reduce(x, axis):
    return np.mean(x, axis=axis)


# binary
add = Op("add", np.add, 2, np.add.reduce)
subtract = Op("subtract", np.subtract, 2)
multiply = Op("multiply", np.multiply, 2, np.multiply.reduce)
divide = Op("divide", np.divide, 2)
maximum = Op("maximum", np.maximum, 2, np.maximum.reduce)
minimum = Op("minimum", np.minimum, 2, np.minimum.reduce)
power = Op("power", np.power, 2)
equal = Op("equal", _cmp(np.equal), 2)
not_equal = Op("not_equal", _cmp(np.not_equal), 2)
greater = Op("greater", _cmp(np.greater), 2)
greater_equal = Op("greater_equal", _cmp(np.greater_equal), 2)
less = Op("less", _cmp(np.less), 2)
less_equal = Op("less_equal", _cmp(np.less_equal), 2)
logical_and = Op("logical_and", _cmp(np.logical_and), 2)
logical_or = Op("logical_or", _cmp(np.logical_or), 2)
logical_xor = Op("logical_xor", _cmp(np.logical_xor), 2)
bitwise_and = Op("bitwise_and", np.bitwise_and, 2, np.bitwise_and.reduce, bitwise=True)
bitwise_or = Op("bitwise_or", np.bitwise_or, 2, np.bitwise_or.reduce, bitwise=True)
bitwise_xor = Op("bitwise_xor", np.bitwise_xor, 2, np.bitwise_xor.reduce, bitwise=True)
left_shift = Op("left_shift", np.left_shift, 2, bitwise=True)
right_shift = Op("right_shift", np.right_shift, 2, bitwise=True)
abs_max = Op("abs_max", _abs_max, 2)
abs_min = Op("abs_min", _abs_min, 2)
fmod = Op("fmod", np.fmod, 2)
mod = Op("mod", np.mod, 2)
bypass = Op("bypass", _bypass, 2)
average = Op("average", lambda a, b: (a + b) / 2, 2, _mean_reduce)   # a reduction op (tensor_partition_reduce)
# unary (activation functions)
copy = Op("copy", lambda x: x, 1)
exp = Op("exp", np.exp, 1)
log = Op("log", np.log, 1)
relu = Op("relu", _relu, 1)
tanh = Op("tanh", np.tanh, 1)
sigmoid = Op("sigmoid", _sigmoid, 1)
sqrt = Op("sqrt", np.sqrt, 1)
rsqrt = Op("rsqrt", _rsqrt, 1)
abs = Op("abs", np.abs, 1)
negative = Op("negative", np.negative, 1)
square = Op("square", np.square, 1)
reciprocal = Op("reciprocal", np.reciprocal, 1)
sin = Op("sin", np.sin, 1)
cos = Op("cos", np.cos, 1)
sign = Op("sign", np.sign, 1)
silu = Op("silu", _silu, 1)
silu_dx = Op("silu_dx", _silu_dx, 1)
gelu = Op("gelu", _gelu, 1)
gelu_dx = Op("gelu_dx", _gelu_dx, 1)
gelu_apprx_tanh = Op("gelu_apprx_tanh", _gelu_tanh, 1)
gelu_apprx_sigmoid = Op("gelu_apprx_sigmoid", _gelu_sigmoid, 1)
gelu_apprx_sigmoid_dx = Op("gelu_apprx_sigmoid_dx", _gelu_sigmoid_dx, 1)
softplus = Op("softplus", _softplus, 1)
mish = Op("mish", _mish, 1)
erf = Op("erf", lambda x: _special.erf(x).astype(np.float32), 1)
erf_dx = Op("erf_dx", _erf_dx, 1)
arctan = Op("arctan", np.arctan, 1)
tan = Op("tan", np.tan, 1)
ceil = Op("ceil", np.ceil, 1)
floor = Op("floor", np.floor, 1)
trunc = Op("trunc", np.trunc, 1)
logical_not = Op("logical_not", lambda x: np.logical_not(x).astype(np.float32), 1)
invert = Op("invert", np.invert, 1, bitwise=True)

ALL_OPS: dict[str, Op] = {v.name: v for v in list(globals().values()) if isinstance(v, Op)}


def as_op(value: object, instruction: str, operand: str, arity: int | None = None) -> Op:
    """Check that ``value`` is an op token (of the right arity) and return it."""
    from .errors import violation

    if not isinstance(value, Op):
        raise violation(instruction, operand, f"{value!r} is not an nki.language op token (e.g. nl.add)")
    if arity is not None and value.arity != arity:
        kind = "binary (e.g. nl.add)" if arity == 2 else "unary (e.g. nl.exp)"
        raise violation(instruction, operand, f"{value!r} is not a {kind} op")
    return value
