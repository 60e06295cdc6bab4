"""Entry points: nki.jit, nki.simulate and nkisim.run (with the trace and the cost summary)."""
from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .allocation import wrap_argument
from .context import CoreState, RunState, maybe_core, set_core
from .dtypes import NUMPY_TYPES, dtype_name
from .errors import NkiUsageError, NkiValidationError, violation
from .liveness import PsumLiveness
from .lnc import LncExchange, run_programs
from .targets import resolve_target, target_from_env
from .tensor import NkiTensor
from .trace import Trace


@dataclass(frozen=True)
class TensorSpec:
    """A kernel input with a shape and dtype but no data, for trace-only runs."""

    shape: tuple[int, ...]
    dtype: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        object.__setattr__(self, "dtype", dtype_name(self.dtype))


@dataclass(frozen=True)
class RunResult:
    """What one emulated kernel call produced."""

    outputs: Any                 # as nki.simulate returns: ndarray, tuple of them, or None
    trace: Trace
    summary: Any                 # nkisim.cost.Summary (None if the cost model is unavailable)
    peak_sbuf_bytes_per_partition: int
    peak_psum_banks: int
    target: str
    lnc: int


class Kernel:
    """What ``nki.jit`` returns: call it, index it with the LNC degree, or simulate it."""

    def __init__(self, fn: Callable, lnc: int | None = None, options: dict | None = None) -> None:
        self.fn = fn
        self.lnc = lnc
        self.options = dict(options or {})
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid: object) -> Kernel:
        dims = grid if isinstance(grid, tuple) else (grid,)
        if len(dims) != 1 or not isinstance(dims[0], int) or dims[0] not in (1, 2):
            raise NkiUsageError(f"kernel[{grid!r}]: the launch grid is the LNC degree, 1 or 2")
        return Kernel(self.fn, dims[0], self.options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if maybe_core() is not None:   # a kernel calling another: inline it
            return self.fn(*args, **kwargs)
        # There is no device here: like NKI_SIMULATOR=1, a call runs on the emulator. Every
        # argument is the kernel's (a kernel may take ``lnc`` or ``target`` itself).
        return execute(self, args, kwargs, target=target_from_env()).outputs


def jit(fn: Callable | None = None, **kwargs: Any) -> Any:
    """``@nki.jit`` or ``@nki.jit(...)``: wrap a kernel function."""
    if "platform_target" in kwargs:
        raise NkiUsageError("jit: argument 'platform_target' is an error since NKI 0.3.0; use "
                            "NEURON_PLATFORM_TARGET_OVERRIDE")
    kwargs.pop("mode", None)   # deprecated and ignored since 0.3.0
    if fn is None:
        return lambda f: Kernel(f, None, kwargs)
    return Kernel(fn, None, kwargs)


def simulate(kernel: Callable) -> Callable:
    """``nki.simulate(kernel)(*args)``: run on CPU, target from NEURON_PLATFORM_TARGET_OVERRIDE (default trn3).

    Inputs may be numpy arrays or CPU torch tensors; with torch inputs the outputs come back as torch
    tensors (Neuron docs source nki/api/nki/__init__.py, ``simulate``), and the kernel's writes into a
    torch input update it, as they update a numpy input. Every argument of the returned callable is
    the kernel's: the page gives ``simulate`` no options (the LNC degree comes from ``kernel[2]``), so a
    kernel parameter named ``lnc`` or ``target`` reaches the kernel.
    """
    def call(*args: Any, **kwargs: Any) -> Any:
        from .torch_io import from_numpy_like, is_torch_tensor, to_numpy

        like = next((v for v in (*args, *kwargs.values()) if is_torch_tensor(v)), None)
        if like is None:
            return execute(kernel, args, kwargs, target=target_from_env()).outputs
        np_args = [to_numpy(a) if is_torch_tensor(a) else a for a in args]
        np_kwargs = {k: to_numpy(v) if is_torch_tensor(v) else v for k, v in kwargs.items()}
        outputs = execute(kernel, tuple(np_args), np_kwargs, target=target_from_env()).outputs
        for original, arr in [*zip(args, np_args), *((kwargs[k], np_kwargs[k]) for k in kwargs)]:
            if is_torch_tensor(original):
                original.copy_(from_numpy_like(arr, like))   # the kernel's writes into its inputs
        return from_numpy_like(outputs, like)
    return call


def run(kernel: Callable, *args: Any, lnc: int | None = None, target: Any = "trn2", trace_only: bool = False,
        timeline: str | os.PathLike | None = None, cost_band: bool = True, **kwargs: Any) -> RunResult:
    """Run ``kernel`` eagerly on the emulator; return its outputs, trace, cost summary and peaks.

    timeline: a file path; the modelled schedule is written there in the Chrome trace-event
    format (``nkisim.timeline``), for Perfetto or chrome://tracing.
    ``cost_band``: the summary also schedules the trace at both ends of the cost model's assumptions
    (``Summary.band_us``); False skips those two schedules.
    The keywords above are ``run``'s own; a kernel parameter with one of these names is passed
    positionally, or through ``execute(kernel, args, kwargs, ...)``, which takes the kernel's
    arguments as a tuple and a dict.
    """
    return execute(kernel, args, kwargs, lnc=lnc, target=target, trace_only=trace_only, timeline=timeline,
                   cost_band=cost_band)


def execute(kernel: Callable, args: tuple, kwargs: dict, *, lnc: int | None = None, target: Any = "trn2",
            trace_only: bool = False, timeline: str | os.PathLike | None = None,
            cost_band: bool = True) -> RunResult:
    """``run`` with the kernel's own arguments kept apart from the run's options (no name clash)."""
    spec = resolve_target(target)
    fn = kernel.fn if isinstance(kernel, Kernel) else kernel
    grid = kernel.lnc if isinstance(kernel, Kernel) else None
    degree = lnc if lnc is not None else (grid or 1)
    if degree not in (1, 2):
        raise NkiUsageError(f"run: argument 'lnc': {degree!r} must be 1 or 2")
    if grid is not None and lnc is not None and grid != lnc:
        raise NkiUsageError(f"run: argument 'lnc': {lnc} disagrees with the launch grid kernel[{grid}]")
    if degree == 2 and spec.generation < 3:
        raise NkiUsageError(f"run: argument 'lnc': LNC=2 needs trn2 or later, target is {spec.name}")
    try:
        run_ = _attempt(fn, args, kwargs, spec, degree, grid, bool(trace_only), None)
    except NkiValidationError as exc:
        if not getattr(exc, "psum_overflow", False):
            raise
        # PSUM tiles held by Python past their last use (liveness.py): record the last uses, then run
        # again freeing each tile's banks there, as the compiler's allocator would.
        recorded = _attempt(fn, args, kwargs, spec, degree, grid, bool(trace_only), "record")
        try:
            run_ = _attempt(fn, args, kwargs, spec, degree, grid, bool(trace_only),
                            [core.liveness.last_use for core in recorded.cores])
        except NkiValidationError as live_exc:
            if getattr(live_exc, "psum_overflow", False):
                raise NkiValidationError(f"{live_exc} (also with every PSUM tile freed after its last use in "
                                         "program order)") from None
            raise
    state, cores, results, write_backs = run_.state, run_.cores, run_.results, run_.write_backs
    outputs = _to_numpy(results[0], trace_only)
    for original, data in write_backs:
        if original.flags.writeable:
            original[...] = data.reshape(original.shape)
    peak_sbuf = max(c.sbuf.peak for c in cores)
    peak_psum = max(c.psum.peak for c in cores)
    summary = _summarize(state.trace, spec.name, degree, peak_sbuf, peak_psum, cost_band)
    if timeline is not None:
        from .timeline import write_timeline

        write_timeline(state.trace, spec.name, timeline, title=getattr(fn, "__name__", ""))
    return RunResult(outputs, state.trace, summary, peak_sbuf, peak_psum, spec.name, degree)


@dataclass
class _Attempt:
    """One run of a kernel's programs: its state, cores, returned values and the arguments to write back."""

    state: RunState
    cores: list[CoreState]
    results: list[Any]
    write_backs: list[tuple[np.ndarray, np.ndarray]]


def _attempt(fn: Callable, args: tuple, kwargs: dict, spec: Any, degree: int, grid: int | None,
             trace_only: bool, liveness: str | list[dict[int, int]] | None) -> _Attempt:
    """Run ``fn``'s programs once. ``liveness``: None (Python lifetimes), "record" (note each PSUM tile's last
    use) or the per-program last uses of a recording run to free PSUM by (``liveness.py``)."""
    state = RunState(spec, degree, bool(trace_only))
    state.grid_ndim = 1 if (grid is not None or degree > 1) else 0
    buffer = "shared_hbm" if degree > 1 else "private_hbm"
    write_backs: list[tuple[np.ndarray, np.ndarray]] = []

    def wrap(name: str, value: Any) -> Any:
        if isinstance(value, TensorSpec):
            if not trace_only:
                raise NkiUsageError(f"run: argument '{name}': a TensorSpec has no data; pass trace_only=True")
            return wrap_argument(state, name, None, value.shape, value.dtype, buffer)[0]
        if isinstance(value, np.ndarray):
            try:
                dt = dtype_name(value.dtype)
            except NkiUsageError as exc:
                raise NkiUsageError(f"run: argument '{name}': {exc}") from None
            shape = value.shape if value.ndim else (1,)
            t, back = wrap_argument(state, name, value, shape, dt, buffer)
            if back is not None:
                write_backs.append((value, back))
            return t
        return value

    names = _parameter_names(fn, len(args))
    targs = [wrap(n, a) for n, a in zip(names, args)]
    tkwargs = {k: wrap(k, v) for k, v in kwargs.items()}
    arguments = {id(t.storage) for t in (*targs, *tkwargs.values()) if isinstance(t, NkiTensor)}
    cores = [CoreState(state, pid) for pid in range(degree)]
    if liveness is not None:
        for pid, core in enumerate(cores):
            core.liveness = PsumLiveness(None if liveness == "record" else liveness[pid])
    results: list[Any] = [None] * degree

    def body(pid: int) -> Callable[[], None]:
        def go() -> None:
            set_core(cores[pid])
            try:
                results[pid] = fn(*targs, **tkwargs)
                _check_returned(results[pid], arguments)
            finally:
                set_core(None)
        return go

    if degree == 1:
        previous = maybe_core()
        try:
            body(0)()
        finally:
            set_core(previous)
    else:
        state.exchange = LncExchange(degree)
        run_programs([body(pid) for pid in range(degree)], state.exchange)
        _check_same_returns(results)
    return _Attempt(state, cores, results, write_backs)


def _parameter_names(fn: Callable, n: int) -> list[str]:
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"arg{i}" for i in range(n)]


def _returned_tensors(value: Any) -> list[tuple[str, NkiTensor]]:
    if value is None:
        return []
    if isinstance(value, NkiTensor):
        return [("return", value)]
    if isinstance(value, (tuple, list)):
        return [(f"return[{i}]", v) for i, v in enumerate(value)]
    return [("return", value)]


def _check_returned(value: Any, arguments: set[int] = frozenset()) -> None:
    """Returned tensors are ones the kernel allocated in shared_hbm (migration guide, "Output tensors must
    use nl.shared_hbm"), or its own arguments: nki-library's tests pass outputs as inputs the kernel
    writes and returns ("must_alias_input"), which the compiler accepts."""
    for role, t in _returned_tensors(value):
        if not isinstance(t, NkiTensor):
            raise violation("kernel return", role, f"must be an NkiTensor, got {type(t).__name__}")
        if id(t.storage) in arguments:
            continue
        if t.storage.buffer != "shared_hbm":
            raise violation("kernel return", role, f"returned tensors must be in shared_hbm, '{t.name}' is in "
                            f"{t.storage.buffer}")


def _check_same_returns(results: list[Any]) -> None:
    first = [t.storage.trace_id for _, t in _returned_tensors(results[0])]
    for pid, value in enumerate(results[1:], start=1):
        if [t.storage.trace_id for _, t in _returned_tensors(value)] != first:
            raise violation("kernel return", "return", f"program {pid} returns other tensors than program 0")


def _to_numpy(value: Any, trace_only: bool) -> Any:
    def one(t: NkiTensor) -> np.ndarray:
        if trace_only:   # no data was computed: a zero placeholder of the right shape and dtype
            return np.zeros(t.shape, NUMPY_TYPES[t.dtype])
        view = t.array()
        st = t.storage
        if t.offset == 0 and t.shape == st.shape and t.is_contiguous() and st.buffer == "shared_hbm":
            return st.data.reshape(st.shape)   # the kernel's own output storage: no copy needed
        return np.array(view)
    if value is None:
        return None
    if isinstance(value, NkiTensor):
        return one(value)
    return tuple(one(t) for t in value)


def _summarize(trace: Trace, target: str, lnc: int, peak_sbuf: int, peak_psum: int, band: bool = True) -> Any:
    """The cost model's summary of the trace, carrying the capacity peaks."""
    from .cost import summarize

    return summarize(trace, target, lnc, peaks={"sbuf_bytes_per_partition": peak_sbuf, "psum_banks": peak_psum},
                     band=band)


def simulate_kernel(kernel: Callable, *args: Any, **kwargs: Any) -> Any:
    """``nki.simulate_kernel``: absent from NKI 0.6, where calling it raises an error naming it.

    Release notes (release-notes/components/nki.rst): "APIs not available in this release
    (nki.baremetal, nki.benchmark, nki.profile, nki.simulate_kernel) ... Each now raises a specific
    message naming the unsupported API". Earlier-generation kernels have it as
    ``neuronxcc.nki.simulate_kernel`` (``nkisim.legacy``).
    """
    raise NkiUsageError("nki.simulate_kernel is not available in NKI 0.6: use nki.simulate(kernel)(*args); "
                        "kernels written for neuronxcc.nki get it from neuronxcc.nki.simulate_kernel")
