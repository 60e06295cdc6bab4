"""DMA instructions: dma_copy, dma_transpose, dma_compute; sendrecv and core_barrier between LNC programs."""
from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np

from .context import current_core
from .dge import hwdge_transpose_violation
from .dtypes import ITEMSIZE, PACKED_TYPES
from .errors import NkiStrictWarning, violation
from .isa_core import F32, access, buffer_in, enum_member, is_scalar, tensor, write
from .isa_dma_indirect import (
    index_reads,
    indirect_compute,
    indirect_copy,
    indirect_operands,
    indirect_transpose,
    indirect_transpose_rules,
    rmw_rules,
)
from .isa_enums import dge_mode, engine, oob_mode
from .isa_enums import dma_engine as _dma_engine
from .memory import PSUM, SBUF
from .ops import as_op
from .tensor import OutOfBoundsAccess
from .tensor_indirect import IndirectView
from .trace import Instr

_NOT_PSUM = frozenset({SBUF, "private_hbm", "shared_hbm"})
_SBUF = frozenset({SBUF})
_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def _enum(ins: str, role: str, value: object, kind: type) -> None:
    if not isinstance(value, kind):
        raise violation(ins, role, f"{value!r} is not an nki.isa.{kind.__name__} member (raw values are rejected)")


def _priority(ins: str, priority: object) -> None:
    if priority is not None and priority not in (0, 1, 2, 3):
        raise violation(ins, "priority", f"{priority!r} must be 0-3 or None")


def dma_copy(dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             engine=engine.unknown, name=None):
    """Copy src to dst (same total elements) through the DMA queues; casts via fp32 if dtypes differ."""
    core = current_core()
    ins = "dma_copy"
    _enum(ins, "oob_mode", oob_mode, _oob_mode)
    if oob_mode is _oob_mode.skip and any(isinstance(t, OutOfBoundsAccess) and t.dynamic_offset is not None
                                          for t in (dst, src)):
        # The runtime bounds check drops the whole transfer; the other operand must still be valid.
        for role, t in (("dst", dst), ("src", src)):
            if not (isinstance(t, OutOfBoundsAccess) and t.dynamic_offset is not None):
                tensor(ins, role, t)
        return
    tensor(ins, "dst", dst)
    tensor(ins, "src", src)
    dge_mode = enum_member(ins, "dge_mode", dge_mode, _dge_mode, ints=True)
    _priority(ins, priority)
    if src.storage.buffer == PSUM:
        raise violation(ins, "src", "dma_copy cannot read PSUM (tensor_copy it to SBUF first)")
    if dst.storage.buffer == PSUM:
        raise violation(ins, "dst", "dma_copy cannot write PSUM")
    if not isinstance(engine, _engine):
        raise violation(ins, "engine", f"{engine!r} is not an nki.isa.engine member")
    hw = dge_mode is _dge_mode.hwdge
    if engine is not _engine.unknown and (engine not in (_engine.scalar, _engine.sync) or not hw):
        raise violation(ins, "engine", f"engine.{engine.name} is only valid as engine.scalar or engine.sync "
                        "with dge_mode=hwdge")
    if hw and core.target.generation < 3:
        raise violation(ins, "dge_mode", f"hwdge needs NC-v3+ (trn2), target is {core.target.name}")
    if src.dtype != dst.dtype and PACKED_TYPES & {src.dtype, dst.dtype}:
        raise violation(ins, "dst", f"dtype {dst.dtype} must equal src's {src.dtype}: packed MX types are copied "
                        "bit-exactly, never converted")
    if hw and src.dtype != dst.dtype:
        raise violation(ins, "dst", f"dtype {dst.dtype} must equal src dtype {src.dtype} with dge_mode=hwdge")
    if src.size != dst.size:
        raise violation(ins, "dst", f"{dst.size} elements {dst.shape} must equal the src's {src.size} "
                        f"{src.shape}")
    indirect = indirect_operands(ins, (("dst", dst), ("src", src)), dge_mode, core)
    if not core.trace_only:
        if indirect:
            indirect_copy(ins, dst, src, oob_mode is _oob_mode.skip)
        else:
            values = src.array()
            if src.dtype != dst.dtype:
                values = values.astype(F32, copy=False)   # DMA casts through fp32
            write(dst, values)
    mode = "swdge" if indirect and dge_mode is _dge_mode.unknown else dge_mode.name
    core.record(Instr(ins, "dma", (access(src, "src", False), access(dst, "dst", True), *index_reads(indirect)),
                      (("dge_mode", mode), ("engine", engine.name)), core.program_id))


def dma_transpose(dst, src, axes=None, priority=None, dge_mode=dge_mode.unknown, oob_mode=oob_mode.error,
                  name=None):
    """Transpose during DMA (NC-v3+): dst (SBUF) = src permuted by ``axes``."""
    core = current_core()
    ins = "dma_transpose"
    tensor(ins, "dst", dst)
    tensor(ins, "src", src)
    dge_mode = enum_member(ins, "dge_mode", dge_mode, _dge_mode, ints=True)
    _enum(ins, "oob_mode", oob_mode, _oob_mode)
    _priority(ins, priority)
    if core.target.generation < 3:
        raise violation(ins, "dst", f"dma_transpose needs NC-v3+ (trn2), target is {core.target.name}")
    buffer_in(ins, "dst", dst, _SBUF, "SBUF")
    buffer_in(ins, "src", src, _NOT_PSUM, "HBM or SBUF")
    if src.dtype != dst.dtype:
        raise violation(ins, "dst", f"dtype {dst.dtype} must equal the src dtype {src.dtype}")
    if isinstance(src, IndirectView):
        indirect_transpose_rules(src)
        return indirect_transpose(dst, src, _transpose_axes(ins, src, dst, axes), dge_mode, oob_mode, core)
    if isinstance(dst, IndirectView):
        raise violation(ins, "dst", "must be in SBUF (a vector_offset view indexes HBM)")
    if ITEMSIZE[src.dtype] not in (2, 4):
        # Trainium2 architecture guide, "DMA Transpose": "bit-accurate transposition for both 2-byte and
        # 4-byte data types"; the nki.isa.dma_transpose page asks for 2 bytes only under hwdge (checked below)
        # and for the indirect (gather) transpose.
        raise violation(ins, "src", f"dtype {src.dtype} ({ITEMSIZE[src.dtype]} B): the DMA transposes 2-byte "
                        "and 4-byte dtypes only")
    if dge_mode is _dge_mode.swdge:
        # DGE reference ("How .ap() Affects DGE Mode"): a static transpose runs with none, hwdge or the
        # compiler's choice (the nki.isa.dma_transpose page lists unknown and hwdge; AWS's mlp_tkg passes none);
        # the software DGE transposes only indirect (vector_offset) sources.
        raise violation(ins, "dge_mode", "a direct transpose needs dge_mode unknown, none or hwdge, got swdge "
                        "(swdge is the indirect transpose's)")
    axes = _transpose_axes(ins, src, dst, axes)
    if dge_mode is _dge_mode.hwdge:
        rule = hwdge_transpose_violation(src.shape, ITEMSIZE[src.dtype])
        if rule is not None:
            raise violation(ins, "src", rule)
    if not core.trace_only:
        write(dst, np.transpose(src.array(), axes))
    core.record(Instr(ins, "dma", (access(src, "src", False), access(dst, "dst", True)),
                      (("dge_mode", dge_mode.name), ("axes", axes)), core.program_id))


def _transpose_axes(ins: str, src, dst, axes) -> tuple[int, ...]:
    rank = len(src.shape)
    expected = _TRANSPOSE_AXES.get(rank)
    if expected is None:
        raise violation(ins, "src", f"rank {rank} is not 2, 3 or 4")
    axes = expected if axes is None else tuple(axes)
    if axes != expected:
        raise violation(ins, "axes", f"{axes} is not the supported permutation {expected} for rank {rank}")
    want = tuple(src.shape[a] for a in axes)
    if tuple(dst.shape) != want:
        raise violation(ins, "dst", f"shape {dst.shape} must equal the permuted src shape {want}")
    return axes


def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=oob_mode.error, name=None):
    """dst = reduce_op over srcs[i] * scales[i], computed in fp32 during DMA."""
    core = current_core()
    ins = "dma_compute"
    tensor(ins, "dst", dst)
    op = as_op(reduce_op, ins, "reduce_op", 2)
    if op.reduce is None:
        raise violation(ins, "reduce_op", f"{op!r} is not a reduction op")
    _enum(ins, "oob_mode", oob_mode, _oob_mode)
    if not isinstance(srcs, (tuple, list)) or not srcs:
        raise violation(ins, "srcs", "must be a non-empty tuple of tensors")
    if scales is not None and (len(scales) != len(srcs) or not all(is_scalar(s) for s in scales)):
        raise violation(ins, "scales", f"must be {len(srcs)} numbers, got {scales!r}")
    if dst.storage.buffer == PSUM:
        raise violation(ins, "dst", "DMA cannot write PSUM")
    accesses = []
    for i, s in enumerate(srcs):
        role = f"srcs[{i}]"
        tensor(ins, role, s)
        if s.storage.buffer == PSUM:
            raise violation(ins, role, "DMA cannot read PSUM")
        if s.size != dst.size:
            raise violation(ins, role, f"{s.size} elements must equal the dst's {dst.size}")
        accesses.append(access(s, "srcs", False))
    operands = (("dst", dst), *((f"srcs[{i}]", s) for i, s in enumerate(srcs)))
    indirect = indirect_operands(ins, operands, _dge_mode.unknown, core)
    if indirect:
        rmw_rules(ins, srcs, scales, unique_indices, reduce_op)
    if not core.trace_only:
        if indirect:
            indirect_compute(ins, dst, srcs, op, indirect, oob_mode is _oob_mode.skip)
        else:
            acc = None
            for i, s in enumerate(srcs):
                v = s.array().astype(F32).reshape(-1)
                if scales is not None:
                    v = v * F32(scales[i])
                acc = v if acc is None else op.fn(acc, v)
            write(dst, acc)
    accesses.append(access(dst, "dst", True))
    accesses.extend(index_reads(indirect))
    attrs = (("reduce_op", op.name),) + ((("dge_mode", "swdge"),) if indirect else ())
    core.record(Instr(ins, "dma", tuple(accesses), attrs, core.program_id))


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=_dma_engine.dma, name=None):
    """Send ``src`` to the other LNC program's ``dst`` and receive its ``src`` into ours.

    ``dma_engine`` is validated and has no effect here.
    """
    core = current_core()
    ins = "sendrecv"
    _enum(ins, "dma_engine", dma_engine, _dma_engine)
    tensor(ins, "src", src)
    tensor(ins, "dst", dst)
    if core.target.generation < 3:
        raise violation(ins, "src", f"sendrecv needs NC-v3+ (trn2), target is {core.target.name}")
    if core.run.lnc < 2:
        raise violation(ins, "src", "sendrecv needs LNC=2 (launch the kernel as kernel[2])")
    for role, rank in (("send_to_rank", send_to_rank), ("recv_from_rank", recv_from_rank)):
        if rank not in (0, 1):
            raise violation(ins, role, f"{rank!r} must be 0 or 1")
    buffer_in(ins, "src", src, _SBUF, "SBUF")
    buffer_in(ins, "dst", dst, _SBUF, "SBUF")
    if src.dtype != dst.dtype:
        raise violation(ins, "dst", f"dtype {dst.dtype} must equal the src dtype {src.dtype}")
    ls, ld = src.layout(), dst.layout()
    if ls[1] != ld[1] or ls[2] != ld[2]:
        raise violation(ins, "dst", f"shape {dst.shape} must match src {src.shape} (partitions and elements "
                        "per partition)")
    payload = None if core.trace_only else np.array(src.array())
    received = core.run.exchange.sendrecv(core.program_id, int(send_to_rank), int(recv_from_rank), pipe_id,
                                          payload, ls[1:3])
    if not core.trace_only:
        write(dst, received)
    core.record(Instr(ins, "dma", (access(src, "src", False), access(dst, "dst", True)),
                      (("send_to_rank", send_to_rank), ("recv_from_rank", recv_from_rank)), core.program_id))


def core_barrier(data, cores, engine=engine.unknown, name=None):
    """Wait until both LNC programs reach this barrier (after writing their parts of ``data``)."""
    core = current_core()
    ins = "core_barrier"
    tensor(ins, "data", data)
    if core.target.generation < 3:
        raise violation(ins, "data", f"core_barrier needs NC-v3+ (trn2), target is {core.target.name}")
    if not isinstance(engine, _engine):
        raise violation(ins, "engine", f"{engine!r} is not an nki.isa.engine member (raw values are rejected)")
    if not isinstance(cores, (tuple, list)) or tuple(cores) != (0, 1):
        raise violation(ins, "cores", f"{cores!r}: only the tuple (0, 1) is supported")
    if isinstance(cores, list):
        # The nki.isa.core_barrier page asks for a tuple; AWS's router_topk passes the list [0, 1].
        warnings.warn(NkiStrictWarning(
            "core_barrier: operand 'cores': a list; the nki.isa.core_barrier page documents the tuple (0, 1)"),
            stacklevel=2)
    if core.run.lnc < 2:
        # The docs allow core_barrier only with LNC enabled; AWS's router_topk issues it in its LNC=1
        # configurations too. With one program there is no peer to wait for: a no-op, with a warning.
        warnings.warn(NkiStrictWarning(
            "core_barrier: operand 'cores': an LNC=1 launch has no peer core; the barrier is a no-op here (the "
            "nki.isa.core_barrier docs allow it only when LNC is enabled)"), stacklevel=2)
        return
    if data.storage.buffer != "shared_hbm":
        raise violation(ins, "data", f"must be in shared_hbm (the data both cores synchronise on), got "
                        f"{data.storage.buffer}")
    # A sync point, not a transfer: 'data' orders the barrier after this core's writes to it,
    # with no bytes moved (the cost model schedules both cores' k-th barrier together).
    a = access(data, "data", False)
    core.record(Instr(ins, "sync", (replace(a, nbytes=0),), (("cores", (0, 1)),), core.program_id))
    core.run.exchange.barrier(core.program_id)


_engine = engine
_dge_mode = dge_mode
_oob_mode = oob_mode
