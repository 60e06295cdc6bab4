"""Operators of the earlier generation: ``nl.add`` is both a tile function and an op token for ``nisa``.

In ``neuronxcc.nki.language`` the math functions take tiles and return a new tile
(``nl.add(x, y, dtype=None, mask=None)``, ``nl.exp(x, dtype=None, mask=None)``,
``nl.sum(x, axis, dtype=None, mask=None, keepdims=False)``) and the same objects are passed as
``op=`` to ``nisa`` instructions; kernels also pass numpy ufuncs (``op0=np.multiply``). Docs:
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/api/nki.language.html (the
"relevant for Inf2, Trn1, Trn2" generation), nki/test/test_nki_nl_add.py.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import ops as current_ops
from ..errors import violation
from .tile import LegacyTile, binary, unary, value_array


@dataclass(frozen=True, eq=False)
class LegacyOp:
    """A math function of ``nl``; ``kind`` is 'binary', 'unary' or 'reduce' (how a call behaves)."""

    name: str
    kind: str
    fn: Callable[..., np.ndarray]                  # element-wise meaning (binary or unary)
    reduce: Callable[..., np.ndarray] | None = None

    def __call__(self, *args: Any, dtype: Any = None, mask: Any = None, **kwargs: Any) -> LegacyTile:
        if self.kind == "binary":
            x, y = _two(self.name, args, kwargs)
            return binary(self.fn, x, y, dtype=dtype, mask=mask)
        if self.kind == "unary":
            x = args[0] if args else kwargs.pop("x")
            return unary(self.fn, x, dtype=dtype, mask=mask)
        x = args[0] if args else kwargs.pop("x")
        axis = args[1] if len(args) > 1 else kwargs.pop("axis")
        keepdims = bool(kwargs.pop("keepdims", False))
        return reduce_tile(self, x, axis, dtype=dtype, mask=mask, keepdims=keepdims)

    def __repr__(self) -> str:
        return f"nl.{self.name}"


def _two(name: str, args: tuple, kwargs: dict) -> tuple[Any, Any]:
    vals = list(args)
    for k in ("x", "y"):
        if k in kwargs:
            vals.append(kwargs.pop(k))
    if len(vals) != 2 or kwargs:
        raise TypeError(f"nl.{name}(x, y, dtype=None, mask=None): got {len(vals)} operands and {sorted(kwargs)}")
    return vals[0], vals[1]


def reduce_tile(op: Any, x: Any, axis: Any, dtype: Any = None, mask: Any = None, keepdims: bool = False,
                instruction: str = "reduce") -> LegacyTile:
    """``op`` reduced over ``axis`` (an int or a list; the partition axis 0 is not a reduction axis)."""
    from .tile import carry_mask, cast, compute_dtype, storage_dtype

    a = value_array(x, mask)
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    axes = tuple(int(ax) % max(a.ndim, 1) for ax in axes)
    if 0 in axes and a.ndim > 1:
        raise violation(instruction, "axis", f"{axis!r} includes the partition axis 0; reductions run along free axes")
    red = reducer(op, instruction)
    work = a.astype(np.float32) if a.dtype.kind not in "iu" else a
    res = red(work, axis=axes, keepdims=keepdims)
    out_dt = storage_dtype(dtype) if dtype is not None else compute_dtype(a)
    out = LegacyTile(cast(np.asarray(res), out_dt), "sbuf", getattr(x, "name", ""))
    return carry_mask(out, mask, a.shape, axes, keepdims)


def reducer(op: Any, instruction: str) -> Callable[..., np.ndarray]:
    fn = _REDUCERS.get(_key(op))
    if fn is None:
        raise violation(instruction, "op", f"{op!r} is not a reduction operator (add, multiply, max, min, ...)")
    return fn


def elementwise(op: Any, instruction: str, operand: str = "op") -> Callable[..., np.ndarray]:
    """The numpy function of an op token (an ``nl`` function, a numpy ufunc, or a current-generation token)."""
    fn = _ELEMENTWISE.get(_key(op))
    if fn is None:
        raise violation(instruction, operand, f"{op!r} is not an nki.language operator or numpy ufunc")
    return fn


def _key(op: Any) -> Any:
    if isinstance(op, LegacyOp):
        return op.name
    if isinstance(op, current_ops.Op):
        return op.name
    if isinstance(op, np.ufunc):
        return _UFUNC_NAMES.get(op.__name__, op.__name__)
    return None


def _gelu(x: np.ndarray) -> np.ndarray:
    from math import sqrt

    import scipy.special

    return (0.5 * x * (1.0 + scipy.special.erf(x / sqrt(2.0)))).astype(np.float32)


_UFUNC_NAMES = {"true_divide": "divide", "absolute": "abs", "max": "maximum", "min": "minimum",
                "greater": "greater", "less": "less"}

_ELEMENTWISE: dict[str, Callable[..., np.ndarray]] = {
    name: op.fn for name, op in current_ops.ALL_OPS.items()
}
_ELEMENTWISE.update({"max": np.maximum, "min": np.minimum, "gelu": _gelu})

_REDUCERS: dict[str, Callable[..., np.ndarray]] = {
    "add": np.sum, "sum": np.sum, "multiply": np.prod, "prod": np.prod,
    "maximum": np.max, "max": np.max, "minimum": np.min, "min": np.min,
    "mean": np.mean,
    "bitwise_and": np.bitwise_and.reduce, "bitwise_or": np.bitwise_or.reduce,
    "bitwise_xor": np.bitwise_xor.reduce,
}


def _binop(name: str) -> LegacyOp:
    return LegacyOp(name, "binary", _ELEMENTWISE[name])


def _unop(name: str) -> LegacyOp:
    return LegacyOp(name, "unary", _ELEMENTWISE[name])


BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "equal", "not_equal",
          "greater", "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor",
          "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift")
UNARY = ("exp", "log", "relu", "tanh", "sigmoid", "sqrt", "rsqrt", "abs", "negative", "square", "reciprocal",
         "sin", "cos", "sign", "silu", "gelu")
REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "mean": np.mean}

LEGACY_OPS: dict[str, LegacyOp] = {n: _binop(n) for n in BINARY}
LEGACY_OPS.update({n: _unop(n) for n in UNARY})
LEGACY_OPS.update({n: LegacyOp(n, "reduce", {"max": np.maximum, "min": np.minimum}.get(n, np.add), fn)
                   for n, fn in REDUCE.items()})


def copy(x: Any, dtype: Any = None, mask: Any = None) -> LegacyTile:
    """``nl.copy(x, dtype=None, mask=None)``: a new tile with x's values (bit-exact when the dtype is kept)."""
    from .tile import carry_mask, cast, storage_dtype

    a = value_array(x, mask)
    out_dt = storage_dtype(dtype) if dtype is not None else a.dtype
    return carry_mask(LegacyTile(cast(np.array(a), np.dtype(out_dt)), "sbuf", getattr(x, "name", "")), mask)
