"""Small helpers for the nkisim tests: run a body inside a kernel, match rule messages, build accesses."""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest

from conv3d_bwd import nkisim
from conv3d_bwd.nkisim.trace import Access


def inside(body: Callable[[], Any], target: str = "trn2", trace_only: bool = False) -> Any:
    """Run ``body`` as a kernel with no arguments and return what it returned (any Python value)."""
    box: dict[str, Any] = {}

    def kernel():
        box["value"] = body()

    nkisim.run(kernel, target=target, trace_only=trace_only)
    return box["value"]


def raises_rule(instruction: str, operand: str, rule: str):
    """pytest.raises for an NkiValidationError naming the instruction, the operand and the rule."""
    return pytest.raises(nkisim.NkiValidationError,
                         match=re.escape(f"{instruction}: operand '{operand}': ") + ".*" + rule)


ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


def acc(role, buffer, storage, dtype="bfloat16", shape=(128, 512), write=False, pstart=0,
        span=None, contig=None) -> Access:
    """An access of a whole tensor for hand-built traces: row-major, rows contiguous and the whole
    free range touched unless ``contig`` / ``span`` say otherwise."""
    isz = ITEMSIZE[dtype]
    size = math.prod(shape)
    if buffer in ("sbuf", "psum"):
        parts, free = shape[0], size // shape[0]
        span = span if span is not None else (0, free)
        contig = contig if contig is not None else free * isz
    else:
        parts, free, pstart = 1, size, 0
        span = span if span is not None else (0, size)
        contig = contig if contig is not None else shape[-1] * isz
    return Access(role, buffer, storage, dtype, tuple(shape), pstart, parts, free, size * isz, span,
                  contig, write)


def on_chip(body: Callable[..., Any], *arrays: Any, target: str = "trn2") -> Any:
    """Run ``body`` on SBUF copies of ``arrays`` (each loaded with nl.load); store the tile(s) it
    returns to shared HBM and return them as numpy arrays (a tuple for several)."""
    import conv3d_bwd.nkisim.isa as nisa
    import conv3d_bwd.nkisim.language as nl

    def kernel(*xs):
        outs = body(*[nl.load(x) for x in xs])
        single = not isinstance(outs, tuple)
        stored = []
        for t in (outs,) if single else outs:
            h = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(h, t)
            stored.append(h)
        return stored[0] if single else tuple(stored)

    return nkisim.run(kernel, *arrays, target=target).outputs
