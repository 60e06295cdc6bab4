"""Helpers for the kernel's own development tests: exact-mode inputs and the oracle comparison."""
from __future__ import annotations

import importlib

import ml_dtypes
import numpy as np
import pytest

import kernels  # noqa: F401  (binds nki to nkisim where the real package is absent)

DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}

# the stem's kernel and stride (stem_k377: C_in 3, 3x7x7, stride (1, 2, 2)) at a small size; H padding clips
# 1-2 rows per plane on both sides
STEM_SMALL = {"batch": 2, "c_in": 3, "c_out": 8, "size": (5, 14, 13), "kernel": (3, 7, 7), "stride": (1, 2, 2),
              "padding": (1, 1, 3, 3, 3, 3)}


def out_size(n: int, k: int, s: int, lo: int, hi: int, r: int) -> int:
    return (n + lo + hi - r * (k - 1) - 1) // s + 1


def geom_shapes(geom: dict) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The (dy, x, w) shapes of a geometry dict (batch, c_in, c_out, size, kernel, padding, stride?,
    dilation?)."""
    k, s, p = geom["kernel"], geom.get("stride", (1, 1, 1)), geom["padding"]
    d = geom.get("dilation", (1, 1, 1))
    o = tuple(out_size(geom["size"][a], k[a], s[a], p[2 * a], p[2 * a + 1], d[a]) for a in range(3))
    return ((geom["batch"], geom["c_out"]) + o, (geom["batch"], geom["c_in"]) + tuple(geom["size"]),
            tuple(k) + (geom["c_in"], geom["c_out"]))


def spy(monkeypatch, owner, name: str, record, seen: list | None = None) -> list:
    """Wraps ``owner.name`` (a function or method) so that each call first appends
    ``record(*args, **kwargs)`` to ``seen`` (unless it is None), then runs the original. Returns ``seen``:
    a test that counts the calls knows the path it checks really ran."""
    seen = [] if seen is None else seen
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        if (entry := record(*args, **kwargs)) is not None:
            seen.append(entry)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return seen


def geom_kw(geom: dict) -> dict:
    """The stride / padding / dilation keywords a geometry dict sets."""
    return {k: geom[k] for k in ("stride", "padding", "dilation") if k in geom}


def exact_inputs(batch, c_in, c_out, size, kernel, stride=(1, 1, 1), padding=(0,) * 6, dilation=(1, 1, 1),
                 dtype="bf16", seed=0, density=0.5):
    """Small-integer inputs (sparse), exactly representable; every partial sum stays exact in fp32."""
    rng = np.random.default_rng(seed)
    o = tuple(out_size(size[a], kernel[a], stride[a], padding[2 * a], padding[2 * a + 1], dilation[a])
              for a in range(3))

    def draw(shape):
        a = rng.integers(-3, 4, size=shape).astype(np.float32)
        return (a * (rng.random(shape) < density)).astype(DTYPES[dtype])

    dy = draw((batch, c_out) + o)
    x = draw((batch, c_in) + tuple(size))
    w = draw(tuple(kernel) + (c_in, c_out))
    return dy, x, w


def oracle(dy, x, w, dtype, **kw):
    """reference.conv3d_bwd_ref on the same (rounded) inputs, cast to the output dtype, as a tuple."""
    from reference import conv3d_bwd_ref

    ref = conv3d_bwd_ref(dy.astype(np.float64), x.astype(np.float64), w.astype(np.float64), **kw)
    ref = ref if isinstance(ref, tuple) else (ref,)
    return tuple(np.asarray(r).astype(DTYPES[dtype]) for r in ref)


@pytest.fixture
def inside_runs(monkeypatch):
    """The times dw ran dx inside its last row pass (so a test knows the path ran, not the fallback)."""
    seen = []
    module = importlib.import_module("kernels.conv3d_bwd")   # (kernels.conv3d_bwd is the kernel)
    original = module.run_dw_streaming

    def counted(ctx, pid, lnc, db_state, prefetch=None, after_first=None, before_last_finish=None, inside=None):
        if inside is not None:
            inner = inside

            def inside(*args, **kwargs):   # (dx_inside_boxes: also called with before=True)
                seen.append(pid)
                return inner(*args, **kwargs)
        return original(ctx, pid, lnc, db_state, prefetch, after_first, before_last_finish, inside)

    monkeypatch.setattr(module, "run_dw_streaming", counted)
    return seen
