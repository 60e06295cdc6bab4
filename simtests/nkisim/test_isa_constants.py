"""nki.isa.constants, integer enum values, tensor_copy(dtype=), nl.NKIObject and nki.dtype.

The names AWS's nki-library and nki-samples use beyond the documented signatures (Neuron docs,
nki.isa "NKI ISA Config Enums"; nki.language "class NKIObject"; ``DType = str``).
"""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

from .helpers import raises_rule

ROOT = Path(__file__).resolve().parents[2]


def test_constants_module_holds_the_isa_enums():
    from conv3d_bwd.nkisim import isa_constants
    assert nisa.constants is isa_constants
    for name in ("dge_mode", "oob_mode", "engine", "reduce_cmd", "dma_engine", "matmul_perf_mode", "nc_version"):
        assert getattr(isa_constants, name) is getattr(nisa, name)


def test_binding_installs_nki_isa_constants():
    code = ("from conv3d_bwd.nkisim.binding import ensure_nki; ensure_nki('nkisim')\n"
            "from nki.isa.constants import dge_mode, oob_mode\n"
            "from nki.isa import constants\n"
            "import nki\n"
            "print(dge_mode.hwdge.name, constants.oob_mode.skip.name, nki.dtype.__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["hwdge", "skip", "str"]


def _copy_kernel(**dma_kw):
    def kernel(x):
        t = nl.ndarray(x.shape, x.dtype)
        nisa.dma_copy(dst=t, src=x, **dma_kw)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t, **dma_kw)
        return out
    return kernel


@pytest.mark.parametrize("value,member", [(0, "unknown"), (1, "swdge"), (2, "hwdge"), (3, "none")])
def test_dge_mode_accepts_the_integer_values(value, member):
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    r = nkisim.run(_copy_kernel(dge_mode=value), x, target="trn2")
    np.testing.assert_array_equal(r.outputs, x)
    assert dict(r.trace.instrs[0].attrs)["dge_mode"] == member


def test_dge_mode_rejects_other_integers_and_other_enums_stay_strict():
    x = np.zeros((4, 8), np.float32)
    with raises_rule("dma_copy", "dge_mode", "7 is not a value of nki.isa.dge_mode"):
        nkisim.run(_copy_kernel(dge_mode=7), x)
    with raises_rule("dma_copy", "oob_mode", "raw values are rejected"):
        nkisim.run(_copy_kernel(oob_mode=1), x)


def _psum_to_sbuf(dtype_kw):
    def kernel(x):
        t = nl.load(x)
        p = nl.ndarray(x.shape, nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=p, src=t)
        s = nl.ndarray(x.shape, nl.bfloat16)
        nisa.tensor_copy(dst=s, src=p, dtype=dtype_kw)
        out = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(out, s)
        return out
    return kernel


def test_tensor_copy_accepts_dtype_and_writes_dsts_dtype():
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    out = nkisim.simulate(_psum_to_sbuf(nl.bfloat16))(x)
    np.testing.assert_array_equal(out.astype(np.float32), x.astype(out.dtype).astype(np.float32))
    # AWS's matmul tutorial passes dtype=bf16 with an fp32 dst: accepted with a warning
    with pytest.warns(nkisim.NkiStrictWarning, match="differs from dst's dtype bfloat16"):
        out = nkisim.simulate(_psum_to_sbuf(nl.float32))(x)
    np.testing.assert_array_equal(out.astype(np.float32), x.astype(out.dtype).astype(np.float32))
    with pytest.raises(nkisim.NkiUsageError, match="not an NKI dtype"):
        nkisim.run(_psum_to_sbuf("float64"), x)


def test_nki_object_is_a_dataclass_base():
    @dataclass
    class Config(nl.NKIObject):
        tile: int
        name: str = "x"

    c = Config(tile=4)
    assert (c.tile, c.name) == (4, "x") and isinstance(c, nl.NKIObject)
    @dataclass
    class Section(nl.NKIObject):   # unannotated attributes, built with keywords (AWS's attention_cte)
        index = None
        offset = None

    sec = Section(index=2, offset=64)
    assert (sec.index, sec.offset) == (2, 64)
    with pytest.raises(TypeError):
        Config(4, 5, 6)   # positional arguments still follow the dataclass signature
    @dataclass
    class Sizes(nl.NKIObject):   # AWS's MLPTKGConstantsDimensionSizes is built without one of its fields
        rows: int
        remainder: int
        k: int | None = None

    sizes = Sizes(rows=4)
    assert (sizes.rows, sizes.remainder, sizes.k) == (4, None, None)
    plain = nl.NKIObject(a=1, b="two")
    assert (plain.a, plain.b) == (1, "two")
    assert nkisim.dtype is str and isinstance(nl.float32, nkisim.dtype)


def test_nki_object_without_dataclass_gets_the_language_guides_default_initializer():
    """NKI language guide, "Class Support": ``def __init__(self, x=None, y=False)`` (fields in order,
    missing ones None or their default), then ``__post_init__``."""
    from typing import ClassVar

    class C(nl.NKIObject):
        limit: ClassVar[int] = 9   # a class constant, not a field
        x: int
        y: bool = False

        def toggle(self):
            self.y = not self.y

        def __post_init__(self):
            self.seen = True

    c = C(1)
    c.toggle()
    assert (c.x, c.y, c.seen, C.limit) == (1, True, True, 9)
    assert (C().x, C(y=True).y, C(2, True).y) == (None, True, True)
    assert C(extra=3).extra == 3
    with pytest.raises(TypeError, match="positional"):
        C(1, True, 3)
    with pytest.raises(TypeError, match="multiple values"):
        C(1, x=2)

    @dataclass(frozen=True)
    class Frozen(nl.NKIObject):   # release notes: frozen NKIObject dataclasses construct normally
        a: int
        b: int = 2
    assert (Frozen(1).b, Frozen().a) == (2, None)


def test_packed_x4_dtypes_move_bit_exactly_and_refuse_arithmetic():
    from conv3d_bwd.nkisim.dtypes import ITEMSIZE
    assert (ITEMSIZE[nl.float8_e4m3fn_x4], ITEMSIZE[nl.float8_e5m2_x4], ITEMSIZE[nl.float4_e2m1fn_x4]) == (4, 4, 2)
    assert ITEMSIZE[nl.float8_e8m0fnu] == 1
    bits = np.arange(8 * 4, dtype=np.uint32).reshape(8, 4) * 0x01010101

    def kernel(x):
        packed = nl.ndarray((8, 4), nl.float8_e4m3fn_x4)
        nisa.dma_copy(packed, x.view(nl.float8_e4m3fn_x4))
        copy = nl.ndarray((8, 4), nl.float8_e4m3fn_x4)
        nisa.tensor_copy(copy, packed)
        out = nl.ndarray((8, 4), nl.uint32, buffer=nl.shared_hbm)
        nisa.dma_copy(out.view(nl.float8_e4m3fn_x4), copy)
        return out
    np.testing.assert_array_equal(nkisim.simulate(kernel)(bits), bits)

    def arithmetic():
        t = nl.ndarray((8, 4), nl.float8_e4m3fn_x4)
        nisa.memset(t, 0)
        nisa.tensor_scalar(t, t, nl.add, 1.0)
    with raises_rule("tensor_scalar", "dst", "packed MX type"):
        nkisim.run(arithmetic)

    def convert():
        t = nl.ndarray((8, 4), nl.float8_e4m3fn_x4)
        nisa.memset(t, 0)
        nisa.tensor_copy(nl.ndarray((8, 4), nl.float32), t)
    with raises_rule("tensor_copy", "dst", "copied bit-exactly"):
        nkisim.run(convert)

    def nonzero_memset():
        nisa.memset(nl.ndarray((8, 4), nl.float4_e2m1fn_x4), 1)
    with raises_rule("memset", "value", "can only be set to 0"):
        nkisim.run(nonzero_memset)
