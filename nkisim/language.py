"""nki.language for nkisim: dtypes, buffers, tile_size, allocation, ranges, program ids, op tokens."""
from __future__ import annotations

import dataclasses as _dataclasses
import inspect
import os
import typing as _typing

import numpy as np

from . import ops as _ops
from .allocation import allocate as _allocate
from .buffers import MemoryRegion, is_hbm, is_on_chip, is_psum, is_sbuf
from .context import current_core as _current_core
from .context import maybe_core as _maybe_core
from .dtypes import (
    bfloat16,
    bool_,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
    float8_e8m0fnu,
    float16,
    float32,
    int8,
    int16,
    int32,
    tfloat32,
    uint8,
    uint16,
    uint32,
)
from .errors import NkiUsageError as _NkiUsageError
from .errors import violation as _violation
from .ops import (  # noqa: F401 - op tokens re-exported under their NKI names
    abs,
    abs_max,
    abs_min,
    add,
    arctan,
    average,
    bitwise_and,
    bitwise_or,
    bitwise_xor,
    bypass,
    ceil,
    copy,
    cos,
    divide,
    equal,
    erf,
    erf_dx,
    exp,
    floor,
    fmod,
    gelu,
    gelu_apprx_sigmoid,
    gelu_apprx_sigmoid_dx,
    gelu_apprx_tanh,
    gelu_dx,
    greater,
    greater_equal,
    invert,
    left_shift,
    less,
    less_equal,
    log,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    mish,
    mod,
    multiply,
    negative,
    not_equal,
    power,
    reciprocal,
    relu,
    right_shift,
    rsqrt,
    sigmoid,
    sign,
    silu,
    silu_dx,
    sin,
    softplus,
    sqrt,
    square,
    subtract,
    tan,
    tanh,
    trunc,
)
from .targets import TargetSpec as _TargetSpec
from .targets import target_from_env as _target_from_env
from .tensor import NkiTensor

sbuf = MemoryRegion.sbuf
psum = MemoryRegion.psum
hbm = MemoryRegion.hbm
private_hbm = MemoryRegion.private_hbm
shared_hbm = MemoryRegion.shared_hbm

_ = (bfloat16, bool_, float4_e2m1fn_x4, float8_e4m3, float8_e4m3fn, float8_e4m3fn_x4, float8_e5m2, float8_e5m2_x4,
     float8_e8m0fnu, float16, float32, int8, int16, int32, tfloat32,
     uint8, uint16, uint32, is_hbm, is_on_chip, is_psum, is_sbuf, _ops)


class _NKIObjectType(type):
    """NKI's class semantics for ``NKIObject`` subclasses, which Python's own would break.

    The NKI language guide ("Class Support") says every NKI class is compiled like a data class
    whose default ``__init__`` gives each field without a default the default ``None``
    (``def __init__(self, x=None, y=False)``), with or without ``@dataclass``. So, at class
    creation (before a ``@dataclass`` decorator runs), an annotated field with no default gets
    ``None``: AWS's nki-library builds ``MLPTKGConstantsDimensionSizes`` without its
    ``remainderIFused`` field. And keyword arguments a subclass's own ``__init__`` does not take
    become attributes (the base's ``__init__(**kwargs)``; AWS's attention_cte builds a
    ``@dataclass`` with unannotated attributes by keyword).
    """

    def __new__(mcs, name, bases, namespace, **kwargs):
        for field_name, annotation in namespace.get("__annotations__", {}).items():
            if _is_class_var(annotation):
                continue
            value = namespace.get(field_name, _dataclasses.MISSING)
            if value is _dataclasses.MISSING:
                namespace[field_name] = None
            elif (isinstance(value, _dataclasses.Field) and value.default is _dataclasses.MISSING
                  and value.default_factory is _dataclasses.MISSING):
                value.default = None
        return super().__new__(mcs, name, bases, namespace, **kwargs)

    def __call__(cls, *args, **kwargs):
        params = inspect.signature(cls.__init__).parameters
        if args or all(k in params for k in kwargs) or any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return super().__call__(*args, **kwargs)
        obj = cls.__new__(cls)
        cls.__init__(obj, **{k: v for k, v in kwargs.items() if k in params})
        for key, value in kwargs.items():
            if key not in params:
                object.__setattr__(obj, key, value)
        return obj


def _is_class_var(annotation: object) -> bool:
    """``ClassVar[...]`` (a class constant, not a field), as an object or a postponed string."""
    if isinstance(annotation, str):
        return annotation.replace("typing.", "").startswith("ClassVar")
    return getattr(annotation, "__origin__", None) is _typing.ClassVar or annotation is _typing.ClassVar


class NKIObject(metaclass=_NKIObjectType):
    """``nl.NKIObject``: the base class of NKI kernel dataclasses and configuration objects.

    Neuron docs, nki.language ("class NKIObject", ``__init__(self, **kwargs)``) and the NKI language
    guide ("Class Support"): a subclass without its own ``__init__`` (and without ``@dataclass``)
    takes its annotated fields positionally or by keyword, each missing one is its class default or
    ``None``, other keywords become attributes, then ``__post_init__`` runs if the class has one.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        fields = _annotated_fields(type(self))
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__}() takes {len(fields)} positional field(s) "
                            f"{tuple(fields)}, got {len(args)}")
        values = dict(zip(fields, args))
        for key, value in kwargs.items():
            if key in values:
                raise TypeError(f"{type(self).__name__}() got multiple values for field '{key}'")
            values[key] = value
        for field_name in fields:
            if field_name not in values:
                values[field_name] = getattr(type(self), field_name, None)
        for key, value in values.items():
            object.__setattr__(self, key, value)
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()


def _annotated_fields(cls: type) -> list[str]:
    """The annotated (non-ClassVar) names of ``cls`` and its NKIObject bases, base classes first."""
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        for field_name, annotation in vars(klass).get("__annotations__", {}).items():
            if not _is_class_var(annotation) and field_name not in names:
                names.append(field_name)
    return names


def _target() -> _TargetSpec:
    core = _maybe_core()
    return core.target if core is not None else _target_from_env()


class _TileSize:
    """``nl.tile_size``: hardware tile constants of the current target (the run's, else the env's)."""

    pmax = 128
    psum_fmax = 512
    psum_bank_fmax = 512
    psum_bank_fmax_bytes = 2048
    psum_fmax_bytes = 2048
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 4

    @property
    def psum_num_banks(self) -> int:
        reserved = os.environ.get("NKI_DMA_TRANSPOSE_AS_PE_TRANSPOSE", "").lower() == "true"
        return 7 if reserved and _target().generation >= 3 else 8

    @property
    def total_available_sbuf_size(self) -> int:
        return _target().usable_sbuf_bytes

    @property
    def sbuf_fmax_bytes(self) -> int:
        return _target().usable_sbuf_bytes

    @property
    def sbuf_fmax(self) -> int:
        return _target().usable_sbuf_bytes // 4

    @property
    def sbuf_size_bytes(self) -> int:
        return _target().sbuf_partition_bytes * 128

    def __repr__(self) -> str:
        return f"nl.tile_size({_target().name})"


tile_size = _TileSize()


def ndarray(shape, dtype, buffer=sbuf, name="", address=None) -> NkiTensor:
    """A new tensor; its memory is not initialised (NaN for floats, 4 for ints, as in the simulator)."""
    return _allocate(_current_core(), shape, dtype, buffer, name, address)


def zeros(shape, dtype, buffer=sbuf, name="") -> NkiTensor:
    """A new tensor filled with zeros (a memset on chip)."""
    from .isa_compute import memset

    core = _current_core()
    t = _allocate(core, shape, dtype, buffer, name, None, instruction="zeros")
    if t.on_chip:
        memset(t, 0)
    elif not core.trace_only:
        t.array()[...] = 0
    return t


def load(src, dtype=None) -> NkiTensor:
    """A new SBUF tile holding ``src`` (an HBM tensor), cast to ``dtype``: one dma_copy (0.3.0+)."""
    from .isa_dma import dma_copy

    if not isinstance(src, NkiTensor) or src.on_chip:
        raise _violation("load", "src", f"must be an HBM tensor, got {_where(src)}")
    tile = _allocate(_current_core(), src.shape, src.dtype if dtype is None else dtype, sbuf, src.name,
                     None, instruction="load")
    dma_copy(tile, src)
    return tile


def store(dst, value) -> None:
    """Write the SBUF tile ``value`` into the HBM tensor ``dst``: one dma_copy (0.3.0+)."""
    from .isa_dma import dma_copy

    if not isinstance(dst, NkiTensor) or dst.on_chip:
        raise _violation("store", "dst", f"must be an HBM tensor, got {_where(dst)}")
    if not isinstance(value, NkiTensor) or value.storage.buffer != "sbuf":
        raise _violation("store", "value", f"must be an SBUF tile, got {_where(value)}")
    dma_copy(dst, value)


def _where(t: object) -> str:
    return f"a tensor in {t.storage.buffer}" if isinstance(t, NkiTensor) else type(t).__name__


def ds(start: int, size: int) -> slice:
    """``start:start+size``."""
    return slice(start, start + size)


def shared_constant(constant) -> NkiTensor:
    """A shared_hbm tensor holding ``constant`` (a numpy array or the path of a ``.npy`` file).

    Neuron docs, nki.language.shared_constant: embedded in the binary and loaded at model load
    time, so nothing is traced; under LNC2 both programs get the same tensor.
    """
    from .dtypes import dtype_name

    if isinstance(constant, (str, os.PathLike)):
        constant = np.load(constant)
    if not isinstance(constant, np.ndarray):
        raise _NkiUsageError(f"shared_constant: argument 'constant': {type(constant).__name__} must be a numpy "
                             "array or a .npy path")
    core = _current_core()
    shape = constant.shape if constant.ndim else (1,)
    t = _allocate(core, shape, dtype_name(constant.dtype), shared_hbm, "shared_constant", None,
                  instruction="shared_constant")
    if not core.trace_only:
        t.array()[...] = constant.reshape(shape)
    return t


def shared_identity_matrix(n, dtype=uint8, dst=None) -> NkiTensor:
    """An n x n identity in SBUF (or written into ``dst``), loaded from a shared constant."""
    from .isa_core import access, mark_written_by_other
    from .trace import Access, Instr

    core = _current_core()
    if dst is None:
        dst = _allocate(core, (n, n), dtype, sbuf, f"identity{n}", None, instruction="shared_identity_matrix")
    elif not isinstance(dst, NkiTensor) or dst.layout()[1:3] != (n, n):
        raise _violation("shared_identity_matrix", "dst", f"must be an ({n}, {n}) tensor")
    if not core.trace_only:
        from .isa_core import out_array

        a = out_array(dst)
        a[...] = np.eye(n, dtype=np.float32).reshape(a.shape).astype(a.dtype)
    mark_written_by_other(dst)
    isz = dst.storage.itemsize
    src = Access("src", "shared_hbm", 0, dst.dtype, (n, n), 0, 1, n * n, n * n * isz, (0, n * n), n * n * isz,
                 False)
    core.record(Instr("dma_copy", "dma", (src, access(dst, "dst", True)), (("constant", "identity"),),
                      core.program_id))
    return dst


def program_id(axis=0) -> int:
    if axis != 0:
        raise _NkiUsageError(f"program_id: argument 'axis': {axis!r}; only axis 0 exists under LNC launches")
    return _current_core().program_id


def num_programs(axes=0) -> int:
    if axes != 0:
        raise _NkiUsageError(f"num_programs: argument 'axes': {axes!r}; only axis 0 exists under LNC launches")
    return _current_core().run.lnc


def program_ndim() -> int:
    return _current_core().run.grid_ndim


def affine_range(*args) -> range:
    return range(*args)


def sequential_range(*args) -> range:
    return range(*args)


def static_range(*args) -> range:
    return range(*args)


def dynamic_range(start, stop=None, step=1) -> range:
    """A loop whose bounds may be registers (their values now: the emulator runs eagerly)."""
    from .isa_register import bound, step_of

    lo, hi = (0, start) if stop is None else (start, stop)
    return range(bound(lo, "dynamic_range", "start"), bound(hi, "dynamic_range", "stop"),
                 step_of(step, "dynamic_range"))


def fori_loop(lower, upper, body_fun, step=1) -> None:
    """``for i in range(lower, upper, step): body_fun(i)`` with ``i`` passed as a VirtualRegister."""
    from .isa_register import VirtualRegister, bound, step_of

    for i in range(bound(lower, "fori_loop", "lower"), bound(upper, "fori_loop", "upper"),
                   step_of(step, "fori_loop")):
        body_fun(VirtualRegister(i))


def while_loop(init, body_fun) -> None:
    """``r = init; while r != 0: r = body_fun(r)`` with registers, checked before each iteration."""
    from .isa_register import VirtualRegister, known_value

    r = init
    while True:
        if not isinstance(r, VirtualRegister):
            raise _NkiUsageError(f"while_loop: the condition {r!r} must be a VirtualRegister (body_fun returns "
                                 "the next one)")
        if known_value(r, "while_loop") == 0:
            return
        r = body_fun(VirtualRegister(r.value))


def device_print(prefix, tensor) -> None:
    """Print a tensor's values (as the simulator does)."""
    core = _current_core()
    print(prefix, None if core.trace_only else np.array(tensor.array()))


