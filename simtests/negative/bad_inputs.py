"""A table of bad inputs to ``conv3d_bwd`` and ``conv3d_bwd_ref`` (same signature), as data.

Each entry starts from one valid small geometry and breaks one thing. ``names`` is a regular
expression that the error message must match: it names the offending argument.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

SEED = 7

# A valid geometry: B=2, C_in=3, C_out=4, input 4x5x6, kernel 3x2x1, stride (1,2,1),
# padding (1,0,0,1,0,0), dilation (1,1,2) -> output 3x3x6.
BATCH, C_IN, C_OUT = 2, 3, 4
IN_SIZE = (4, 5, 6)
KERNEL = (3, 2, 1)
STRIDE = (1, 2, 1)
PADDING = (1, 0, 0, 1, 0, 0)
DILATION = (1, 1, 2)
OUT_SIZE = (3, 3, 6)


def valid_call(dtype=ml_dtypes.bfloat16) -> tuple[tuple[np.ndarray, ...], dict[str, Any]]:
    """(dy, x_in, filters) and keyword arguments of one valid call."""
    rng = np.random.default_rng(SEED)
    dy = rng.standard_normal((BATCH, C_OUT, *OUT_SIZE)).astype(dtype)
    x = rng.standard_normal((BATCH, C_IN, *IN_SIZE)).astype(dtype)
    w = rng.standard_normal((*KERNEL, C_IN, C_OUT)).astype(dtype)
    kwargs = {"stride": STRIDE, "padding": PADDING, "dilation": DILATION,
                  "compute_dx": True, "compute_dw": True, "compute_db": True}
    return (dy, x, w), kwargs


Mutation = Callable[[tuple[np.ndarray, ...], dict[str, Any]], tuple[tuple[np.ndarray, ...], dict[str, Any]]]


@dataclass(frozen=True)
class BadInput:
    id: str
    mutate: Mutation
    names: str                      # regex the message must match (the argument's name)
    kernel: bool = True             # the kernel rejects it
    oracle: bool = True             # the oracle rejects it
    # Not an NKI dtype at all: the simulator's argument conversion may reject it (with its own
    # ValueError subclass naming the dtype) before the kernel's validation can run.
    simulator_boundary: bool = False
    notes: str = ""


def _arrays(i: int, fn) -> Mutation:
    def mutate(arrays, kwargs):
        arrays = list(arrays)
        arrays[i] = fn(arrays[i])
        return tuple(arrays), kwargs
    return mutate


def _kw(**changes) -> Mutation:
    def mutate(arrays, kwargs):
        return arrays, {**kwargs, **changes}
    return mutate


DY, X, W = 0, 1, 2

BAD_INPUTS: tuple[BadInput, ...] = (
    # ranks
    BadInput("dy-rank4", _arrays(DY, lambda a: a[0]), r"\bdy\b"),
    BadInput("x-rank6", _arrays(X, lambda a: a[None]), r"\bx_in\b"),
    BadInput("filters-rank4", _arrays(W, lambda a: a[0]), r"\bfilters\b"),
    BadInput("dy-rank0", _arrays(DY, lambda a: a.reshape(-1)[0]), r"\bdy\b"),
    # channel and batch agreement
    BadInput("cin-mismatch", _arrays(W, lambda a: a[:, :, :, :2, :]), r"\bfilters\b|\bx_in\b|C_in"),
    BadInput("cout-mismatch", _arrays(DY, lambda a: a[:, :3]), r"\bdy\b|C_out"),
    BadInput("batch-mismatch", _arrays(DY, lambda a: a[:1]), r"\bdy\b|batch"),
    BadInput("x-zero-batch", _arrays(X, lambda a: a[:0]), r"\bx_in\b|batch"),
    # dy spatial dims against the forward formula
    BadInput("dy-depth-plus-one", _arrays(DY, lambda a: np.concatenate([a, a[:, :, :1]], axis=2)), r"\bdy\b"),
    BadInput("dy-width-minus-one", _arrays(DY, lambda a: a[..., :-1]), r"\bdy\b"),
    # dtypes
    BadInput("dtype-mismatch", _arrays(X, lambda a: a.astype(np.float32)), r"dtype", oracle=False,
             notes="the oracle widens each input exactly, so mixed dtypes are fine there"),
    BadInput("dtype-int32", lambda arrs, kw: (tuple(a.astype(np.int32) for a in arrs), kw), r"dtype"),
    BadInput("dtype-float64", lambda arrs, kw: (tuple(a.astype(np.float64) for a in arrs), kw), r"dtype",
             oracle=False, simulator_boundary=True,
             notes="fp64 is the oracle's own precision; the kernel takes bf16/fp16/fp32"),
    BadInput("dtype-int8-filters", _arrays(W, lambda a: a.astype(np.int8)), r"dtype"),
    # stride
    BadInput("stride-zero", _kw(stride=(1, 0, 1)), r"\bstride\b"),
    BadInput("stride-negative", _kw(stride=(-1, 2, 1)), r"\bstride\b"),
    BadInput("stride-float", _kw(stride=(1, 2.0, 1)), r"\bstride\b"),
    BadInput("stride-bool", _kw(stride=(True, 2, 1)), r"\bstride\b"),
    BadInput("stride-length2", _kw(stride=(1, 2)), r"\bstride\b"),
    BadInput("stride-scalar-string", _kw(stride="121"), r"\bstride\b"),
    # dilation
    BadInput("dilation-zero", _kw(dilation=(0, 1, 2)), r"\bdilation\b"),
    BadInput("dilation-negative", _kw(dilation=(1, 1, -2)), r"\bdilation\b"),
    BadInput("dilation-float", _kw(dilation=(1.5, 1, 2)), r"\bdilation\b"),
    BadInput("dilation-bool", _kw(dilation=(1, False, 2)), r"\bdilation\b"),
    # padding
    BadInput("padding-negative", _kw(padding=(1, 0, 0, 1, -1, 0)), r"\bpadding\b"),
    BadInput("padding-length3", _kw(padding=(1, 0, 0)), r"\bpadding\b"),
    BadInput("padding-length7", _kw(padding=(1, 0, 0, 1, 0, 0, 0)), r"\bpadding\b"),
    BadInput("padding-float", _kw(padding=(1, 0, 0, 1.0, 0, 0)), r"\bpadding\b"),
    BadInput("padding-bool", _kw(padding=(True, 0, 0, 1, 0, 0)), r"\bpadding\b"),
    # output dims < 1: depth 4 padded to 5, but the dilated kernel spans 1 + 3*(3-1) = 7 positions
    BadInput("output-dims-below-one", _kw(dilation=(3, 1, 2)), r"out|\bdilation\b|\bkernel\b"),
    # no gradient requested
    BadInput("no-gradient", _kw(compute_dx=False, compute_dw=False, compute_db=False), r"compute_d"),
)
