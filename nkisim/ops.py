"""Operator tokens of nki.language (``nl.add``, ``nl.exp``, ...) with their numpy meaning.

Engines compute in fp32 (nki.api.shared), so the functions receive float32 arrays, except the
bitwise ops, which receive integers.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

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
