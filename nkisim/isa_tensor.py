"""TensorE instructions: nc_matmul and nc_transpose (plus Vector-engine transposes)."""
from __future__ import annotations

import warnings

import numpy as np

from .context import current_core
from .dtypes import bfloat16, float8_e4m3, float8_e4m3fn, float16, float32, tfloat32
from .errors import NkiStrictWarning, NkiUsageError, violation
from .isa_core import (
    F32,
    access,
    buffer_in,
    mark_written_by_other,
    on_chip,
    out_array,
    pick_engine,
    psum_state_of,
    set_psum_state,
    start_partition,
    stricter,
    tensor,
)
from .isa_enums import engine, matmul_perf_mode
from .memory import PSUM, PSUM_BY_MATMUL, PSUM_BY_OTHER, PSUM_FRESH, SBUF
from .trace import Instr

_SBUF = frozenset({SBUF})
_PSUM = frozenset({PSUM})
_MATMUL_INPUTS = frozenset({float8_e4m3, "float8_e5m2", bfloat16, float16, tfloat32, float32, float8_e4m3fn})
_FP32_INPUTS = frozenset({float32, tfloat32})


def _bank_rule(instr: str, dst, target) -> None:
    """On NC-v2/v3 one TensorE output must sit inside one 2 KiB PSUM bank."""
    if target.generation >= 4:
        return
    st = dst.storage
    lo, hi = dst.layout()[3:5]
    b_lo = st.byte_offset + lo * st.itemsize
    b_hi = st.byte_offset + hi * st.itemsize
    bank = target.psum_bank_bytes
    if b_lo // bank != (b_hi - 1) // bank:
        raise violation(instr, "dst", f"PSUM bytes [{b_lo}, {b_hi}) cross a {bank} B bank boundary; a "
                        f"TensorE output must fit in one PSUM bank ({target.name})")


def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(),
              perf_mode=matmul_perf_mode.none, name=None):
    """dst = stationary.T @ moving on TensorE, accumulated in fp32 per the accumulate rule."""
    core = current_core()
    target = core.target
    ins = "nc_matmul"
    tensor(ins, "dst", dst)
    tensor(ins, "stationary", stationary)
    tensor(ins, "moving", moving)
    buffer_in(ins, "stationary", stationary, _SBUF, "SBUF")
    buffer_in(ins, "moving", moving, _SBUF, "SBUF")
    buffer_in(ins, "dst", dst, _PSUM, "PSUM")
    s_lay, m_lay, d_lay = stationary.layout(), moving.layout(), dst.layout()
    k, m = s_lay[1], s_lay[2]
    k_moving, n = m_lay[1], m_lay[2]
    if perf_mode is not matmul_perf_mode.none:
        if not isinstance(perf_mode, matmul_perf_mode):
            raise violation(ins, "perf_mode", f"{perf_mode!r} is not a matmul_perf_mode member")
        raise NkiUsageError("nc_matmul: argument 'perf_mode': double_row is not emulated by nkisim")
    k_max, m_max = 128, 128
    if tile_position or tile_size:
        if not (tile_position and tile_size) or len(tile_position) != 2 or len(tile_size) != 2:
            raise violation(ins, "tile_size", "tiling mode needs both tile_position=(row, col) and "
                            "tile_size=(rows, cols)")
        row_unit = 32 if target.generation >= 3 else 64
        for label, v in (("tile_size", tile_size), ("tile_position", tile_position)):
            if any(x % row_unit or x < 0 for x in v) or (label == "tile_size" and min(v) <= 0):
                raise violation(ins, label, f"{tuple(v)} must be multiples of {row_unit} ({target.name})")
        if tile_position[0] % tile_size[0] or tile_position[1] % tile_size[1]:
            raise violation(ins, "tile_position", f"{tuple(tile_position)} must be a multiple of tile_size "
                            f"{tuple(tile_size)}")
        k_max, m_max = tile_size
    if k > k_max:
        raise violation(ins, "stationary", f"contraction (partition) size {k} exceeds {k_max}")
    if k_moving != k:
        raise violation(ins, "moving", f"contraction partitions {k_moving} must equal the stationary's {k}")
    if m > m_max:
        raise violation(ins, "stationary", f"free size {m} exceeds {m_max} (gemm_stationary_fmax)")
    # dtypes
    sdt, mdt, ddt = stationary.dtype, moving.dtype, dst.dtype
    for role, dt in (("stationary", sdt), ("moving", mdt)):
        if dt not in _MATMUL_INPUTS:
            raise violation(ins, role, f"dtype {dt} is not a TensorE input type")
        if dt == float8_e4m3fn and target.generation < 4:
            raise violation(ins, role, f"float8_e4m3fn needs NC-v4 (trn3), target is {target.name}")
    if (sdt in _FP32_INPUTS) != (mdt in _FP32_INPUTS):
        raise violation(ins, "moving", f"dtypes {sdt} and {mdt}: if one input is fp32/tf32 both must be")
    if {sdt, mdt} == {float8_e4m3, float8_e4m3fn}:
        raise violation(ins, "moving", "float8_e4m3 and float8_e4m3fn cannot be mixed")
    if is_transpose:
        if target.generation < 3:
            raise violation(ins, "is_transpose", f"transpose mode needs NC-v3+ (trn2), target is {target.name}")
        if ddt not in (float32, sdt):
            raise violation(ins, "dst", f"transpose mode writes float32 or the input dtype {sdt}, got {ddt}")
    elif target.generation >= 4:
        if ddt not in (float32, bfloat16):
            raise violation(ins, "dst", f"dtype {ddt} must be float32 or bfloat16 ({target.name})")
    elif ddt != float32:
        raise violation(ins, "dst", f"dtype {ddt} must be float32 ({target.name})")
    n_max = 512 if target.generation < 4 else (4096 if ddt == float32 else 8192)
    if n > n_max:
        raise violation(ins, "moving", f"free size {n} exceeds {n_max} ({target.name})")
    if d_lay[1] != m:
        raise violation(ins, "dst", f"partition size {d_lay[1]} must equal the stationary free size {m}")
    if d_lay[2] != n:
        raise violation(ins, "dst", f"free size {d_lay[2]} must equal the moving free size {n}")
    start_partition(ins, "stationary", stationary, core)   # (documented for Vector/Scalar/GpSimd)
    start_partition(ins, "moving", moving, core)
    start_partition(ins, "dst", dst, core)
    _bank_rule(ins, dst, target)
    if accumulate not in (None, True, False):
        raise violation(ins, "accumulate", f"{accumulate!r} must be True, False or None")
    # Per-element accumulate state (checked in both modes: PSUM is small).
    state = psum_state_of(dst)
    if state is None:   # the whole tile is in one state: no per-element arrays needed
        u = dst.storage.psum_uniform
        any_other, all_fresh, any_fresh, fresh = u == PSUM_BY_OTHER, u == PSUM_FRESH, u == PSUM_FRESH, None
    else:
        fresh = state == PSUM_FRESH
        any_other, all_fresh, any_fresh = bool((state == PSUM_BY_OTHER).any()), bool(fresh.all()), bool(fresh.any())
    if accumulate is None and any_other:
        # The compiler infers the flag from matmul writes only ("first write overwrites"): a tile a
        # memset/tensor_copy initialised is overwritten by its first matmul. AWS's depthwise_conv1d
        # zeroes its PSUM tile with memset first, which the docs call undefined on NC-v2/v3
        # (nc_matmul, "Accumulation mode"): accepted, with a warning.
        warnings.warn(NkiStrictWarning(
            "nc_matmul: operand 'dst': accumulate=None onto PSUM written by a non-matmul instruction: the "
            "first matmul overwrites it (accumulating onto memset/tensor_copy-initialised PSUM is undefined "
            "on NC-v2/v3 per the nc_matmul docs)"), stacklevel=2)
        if state is None:
            all_fresh = any_fresh = True
        else:
            fresh = state != PSUM_BY_MATMUL
            all_fresh, any_fresh = bool(fresh.all()), bool(fresh.any())
        any_other = False
    if accumulate is True:
        if any_other:
            rule = ("accumulating onto PSUM written by a non-matmul instruction (memset/tensor_copy/nl.zeros/...) "
                    "is undefined on hardware")
            if target.generation < 4:   # documented for NC-v2/v3
                raise violation(ins, "dst", rule)
            stricter(core, ins, "dst", rule)
        if any_fresh:   # the real simulator warns
            stricter(core, ins, "dst", "accumulate=True onto PSUM never written is undefined on hardware (use "
                     "accumulate=False or None for the first matmul)")
    # Overwrite: accumulate=False, or None onto a tile no matmul wrote. accumulate=True always adds
    # (with NKISIM_STRICT=0 possibly onto the never-written sentinel, as the memory holds).
    overwrite = accumulate is False or (accumulate is None and all_fresh)
    if accumulate is True:
        any_fresh = False
    if not core.trace_only:
        s2 = stationary.array().reshape(k, m)
        m2 = moving.array().reshape(k, n)
        d = out_array(dst) if overwrite else dst.array()
        if is_transpose and k == n and np.array_equal(m2.astype(F32), np.eye(k, dtype=F32)):
            d[...] = s2.T.reshape(d.shape)   # bit-accurate transpose (NaN/Inf kept)
        else:
            # The PE multiplies in fp32 and accumulates in fp32: a float32 matmul.
            lhs = s2.astype(F32, copy=False).T
            rhs = m2.astype(F32, copy=False)
            if overwrite and d.dtype == F32 and d.flags.c_contiguous:
                np.matmul(lhs, rhs, out=d.reshape(m, n))   # straight into PSUM, no temporary
                prod = None
            else:
                prod = (lhs @ rhs).reshape(d.shape)
            if prod is None:
                pass
            elif overwrite:
                d[...] = prod
            elif not any_fresh:
                d += prod
            else:
                d[...] = np.where(fresh, prod, d.astype(F32) + prod)
    set_psum_state(dst, state, PSUM_BY_MATMUL)
    fp32 = sdt in _FP32_INPUTS
    core.record(Instr(ins, "tensor", (access(stationary, "stationary", False), access(moving, "moving", False),
                                      access(dst, "dst", True)),
                      (("stationary_free", m), ("moving_free", n), ("contraction", k), ("fp32", fp32),
                       ("is_transpose", bool(is_transpose)), ("accumulate", accumulate)),
                      core.program_id))


def nc_transpose(dst, data, engine=engine.unknown, name=None):
    """Swap partition and (flattened) free dims, on TensorE (<= 128x128) or VectorE (<= 32x32)."""
    core = current_core()
    ins = "nc_transpose"
    tensor(ins, "dst", dst)
    tensor(ins, "data", data)
    on_chip(ins, "dst", dst)
    on_chip(ins, "data", data)
    d_lay, s_lay = dst.layout(), data.layout()
    p, f = s_lay[1], s_lay[2]
    default = (_engine_tensor if data.storage.buffer == SBUF and dst.storage.buffer == PSUM and f <= 128
               else _engine_vector)
    eng = pick_engine(ins, engine, (_engine_tensor, _engine_vector), default)
    if dst.dtype != data.dtype:
        raise violation(ins, "dst", f"dtype {dst.dtype} must equal the data dtype {data.dtype}")
    if eng is _engine_tensor:
        buffer_in(ins, "data", data, _SBUF, "SBUF (TensorE transpose)")
        buffer_in(ins, "dst", dst, _PSUM, "PSUM (TensorE transpose)")
        if p > 128 or f > 128:
            raise violation(ins, "data", f"TensorE transpose input {p}x{f} exceeds 128x128")
        _bank_rule(ins, dst, core.target)
    elif p > 32 or f > 32:
        raise violation(ins, "data", f"VectorE transpose input {p}x{f} exceeds 32x32")
    if d_lay[1] != f or d_lay[2] != p:
        raise violation(ins, "dst", f"shape {dst.shape} must be [{f}, {p}] (data {p}x{f} transposed)")
    stricter_core = core if eng is _engine_tensor else None   # documented for VectorE, extended to PE
    start_partition(ins, "data", data, stricter_core)
    start_partition(ins, "dst", dst, stricter_core)
    if not core.trace_only:
        src = data.array().reshape(p, f)
        out = out_array(dst)
        if out.flags.c_contiguous:
            out.reshape(f, p)[...] = src.T   # one strided copy (no transposed temporary)
        else:
            out[...] = src.T.reshape(out.shape)
    if dst.storage.buffer == PSUM:
        if eng is _engine_tensor:
            set_psum_state(dst, psum_state_of(dst), PSUM_BY_MATMUL)
        else:
            mark_written_by_other(dst)
    eng_name = "tensor" if eng is _engine_tensor else "vector"
    core.record(Instr(ins, eng_name, (access(data, "data", False), access(dst, "dst", True)),
                      (("stationary_free", f), ("moving_free", p), ("contraction", p),
                       ("fp32", data.dtype in _FP32_INPUTS), ("is_transpose", True)) if eng_name == "tensor"
                      else (), core.program_id))


_engine_tensor = engine.tensor
_engine_vector = engine.vector
