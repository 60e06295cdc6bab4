"""What runs the kernel: one function, ``run_kernel``, over three backends.

- ``nkisim``: this project's emulator (``nkisim.run``: outputs, trace and cost-model summary);
- ``nki-simulate``: the real ``nki.simulate`` (only where the Neuron package imports);
- ``trn``: the jitted kernel on a NeuronCore with numpy in and out; ``dry=True`` swaps only the
  device call for nkisim, so everything around it (availability checks aside) runs on a CPU.

The backend is the argument, else ``$CONV3D_BWD_BACKEND``, else ``nkisim``. Tests may add
stand-in backends with ``register_backend`` (e.g. an fp32 oracle, or one that injects a wrong
result to prove that a failure is caught); those are never built in.
"""
from __future__ import annotations

import glob
import importlib.metadata
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from conv3d_bwd.verify.cases import GRADS, Case

BACKENDS = ("nkisim", "nki-simulate", "trn")
BACKEND_ENV = "CONV3D_BWD_BACKEND"
TARGETS = ("trn1", "trn2", "trn3")
DEVICE_GLOB = "/dev/neuron[0-9]*"


class BackendUnavailable(RuntimeError):
    """The backend cannot run here; the message names what is missing."""


class BackendError(ValueError):
    """A bad backend name or target (names the argument, the value and the rule)."""


class KernelOutputError(AssertionError):
    """The kernel returned the wrong number, shape or dtype of outputs."""


@dataclass(frozen=True)
class KernelRun:
    """One kernel execution: outputs by gradient name, the cost-model summary (nkisim) and versions."""

    outputs: dict[str, np.ndarray]
    summary: dict | None
    backend_version: str
    tool_versions: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0
    timeline: str | None = None  # the modelled-schedule file written (nkisim only), else None


Runner = Callable[[Case, np.ndarray, np.ndarray, np.ndarray, str], KernelRun]
_EXTRA_BACKENDS: dict[str, Runner] = {}


def register_backend(name: str, runner: Runner) -> None:
    """Add a backend (tests only: stand-ins and fault injection). ``runner(case, dy, x, w, target)``."""
    if name in BACKENDS:
        raise BackendError(f"backend: {name!r} is built in and cannot be replaced")
    _EXTRA_BACKENDS[name] = runner


def unregister_backend(name: str) -> None:
    _EXTRA_BACKENDS.pop(name, None)


def available_backend_names() -> tuple[str, ...]:
    return BACKENDS + tuple(sorted(_EXTRA_BACKENDS))


def resolve_backend(backend: str | None = None) -> str:
    """The argument, else $CONV3D_BWD_BACKEND, else "nkisim"; checked against the known names."""
    name = backend or os.environ.get(BACKEND_ENV) or "nkisim"
    if name not in available_backend_names():
        source = "backend" if backend else f"${BACKEND_ENV}"
        raise BackendError(f"{source}: {name!r} is not one of {', '.join(available_backend_names())}")
    return name


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def tool_versions(backend: str) -> dict[str, str]:
    """Versions that decide the numbers: numpy, ml_dtypes, and the backend's toolchain."""
    import ml_dtypes

    versions = {"python": sys.version.split()[0], "numpy": np.__version__,
                "ml_dtypes": ml_dtypes.__version__}
    if backend == "nkisim" or backend == "trn":
        try:
            from conv3d_bwd import nkisim

            versions["nkisim"] = str(getattr(nkisim, "__version__", _version("nki-conv3d-bwd") or "dev"))
        except ImportError:
            pass
    if backend in ("nki-simulate", "trn"):
        for dist in ("nki", "neuronx-cc"):
            found = _version(dist)
            if found:
                versions[dist] = found
    return versions


def _is_nkisim_module(module) -> bool:
    return (getattr(module, "__name__", "") != "nki"
            or "nkisim" in str(getattr(module, "__file__", "") or ""))


def real_nki_missing() -> str | None:
    """None when the real Neuron ``nki`` is importable (and is what ``nki`` names), else why not."""
    bound = sys.modules.get("nki")
    if bound is not None and _is_nkisim_module(bound):
        installed = _version("nki")
        if installed is None:
            return "the Neuron package 'nki' is not installed (nkisim stands in for it here)"
        return (f"nki {installed} is installed, but the module name 'nki' is bound to the nkisim "
                "emulator in this process (NKISIM=1, or the installed package did not import)")
    try:
        import nki  # noqa: F401
    except ImportError as exc:  # the PyPI placeholder raises a plain ImportError
        return f"the Neuron package 'nki' does not import: {exc}"
    return None


def device_missing() -> str | None:
    """None when a Neuron device node exists, else what was looked for."""
    if glob.glob(DEVICE_GLOB):
        return None
    return f"no NeuronCore on this machine: nothing matches {DEVICE_GLOB}"


def backend_unavailable_reason(backend: str, dry: bool = False) -> str | None:
    """Why the backend cannot run here (None when it can): the real nki for nki-simulate, and the
    real nki plus a NeuronCore for trn (unless dry)."""
    if backend == "nki-simulate":
        missing = real_nki_missing()
        return f"backend 'nki-simulate' needs the real Neuron nki: {missing}" if missing else None
    if backend == "trn" and not dry:
        missing = real_nki_missing() or device_missing()
        return f"backend 'trn' cannot run here: {missing}" if missing else None
    return None


def outputs_by_grad(case: Case, returned) -> dict[str, np.ndarray]:
    """Map the kernel's return value (bare array, or tuple in dx, dw, db order) to {grad: array}."""
    arrays = returned if isinstance(returned, (tuple, list)) else (returned,)
    if len(arrays) != len(case.grads):
        raise KernelOutputError(
            f"kernel returned {len(arrays)} outputs, expected {len(case.grads)} ({', '.join(case.grads)})")
    outputs = {}
    expected_dtype = np.dtype(_np_type(case.dtype))
    for name, array in zip(case.grads, arrays):
        array = np.asarray(array)
        shape = case.grad_shapes[name]
        if array.shape != shape:
            raise KernelOutputError(f"{name}: kernel returned shape {array.shape}, expected {shape}")
        if array.dtype != expected_dtype:
            raise KernelOutputError(f"{name}: kernel returned dtype {array.dtype}, expected "
                                    f"{expected_dtype} ({case.dtype})")
        outputs[name] = array
    return outputs


def _np_type(dtype: str):
    from conv3d_bwd.reference.tolerance import DTYPE_INFO

    return DTYPE_INFO[dtype].np_type


def _check_target(target: str) -> str:
    if target not in TARGETS:
        raise BackendError(f"target: {target!r} is not one of {', '.join(TARGETS)}")
    return target


def _summary_dict(summary) -> dict | None:
    if summary is None:
        return None
    to_dict = getattr(summary, "to_dict", None)
    return to_dict() if callable(to_dict) else dict(summary)


def _kernel(prefer_emulator: bool):
    """Import the kernel after binding the NKI module (nkisim when asked for)."""
    if prefer_emulator:
        from conv3d_bwd.nkisim.binding import ensure_nki

        ensure_nki(prefer="nkisim")
    from conv3d_bwd.kernels import conv3d_bwd

    return conv3d_bwd


def _nkisim_call(case: Case, dy, x, w, target: str, timeline: str | None = None):
    from conv3d_bwd import nkisim

    kernel = _kernel(prefer_emulator=True)
    result = nkisim.run(kernel, dy, x, w, lnc=case.lnc, target=target, timeline=timeline,
                        **case.kernel_kwargs())
    return result.outputs, _summary_dict(result.summary)


def _run_nkisim(case: Case, dy, x, w, target: str, timeline: str | None = None) -> KernelRun:
    start = time.perf_counter()
    returned, summary = _nkisim_call(case, dy, x, w, target, timeline)
    wall = time.perf_counter() - start
    versions = tool_versions("nkisim")
    return KernelRun(outputs_by_grad(case, returned), summary, f"nkisim {versions.get('nkisim', '?')}",
                     versions, wall, timeline)


def _run_nki_simulate(case: Case, dy, x, w, target: str) -> KernelRun:
    missing = backend_unavailable_reason("nki-simulate")
    if missing:
        raise BackendUnavailable(missing)
    import nki

    kernel = _kernel(prefer_emulator=False)
    launch = kernel[case.lnc] if case.lnc > 1 else kernel
    previous = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE")
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = target
    try:
        start = time.perf_counter()
        returned = nki.simulate(launch)(dy, x, w, **case.kernel_kwargs())
        wall = time.perf_counter() - start
    finally:
        if previous is None:
            os.environ.pop("NEURON_PLATFORM_TARGET_OVERRIDE", None)
        else:
            os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = previous
    versions = tool_versions("nki-simulate")
    return KernelRun(outputs_by_grad(case, returned), None, f"nki {versions.get('nki', '?')}",
                     versions, wall)


def _device_call(case: Case, dy, x, w, target: str):
    """The one line that needs a NeuronCore: numpy in, numpy out, through nki.jit."""
    kernel = _kernel(prefer_emulator=False)
    launch = kernel[case.lnc] if case.lnc > 1 else kernel
    return launch(dy, x, w, **case.kernel_kwargs()), None


def _run_trn(case: Case, dy, x, w, target: str, dry: bool) -> KernelRun:
    missing = backend_unavailable_reason("trn", dry)
    if missing:
        raise BackendUnavailable(missing)
    configured = os.environ.get("NEURON_LOGICAL_NC_CONFIG")
    if configured and configured != str(case.lnc):
        raise BackendUnavailable(
            f"backend 'trn': case needs LNC {case.lnc} but NEURON_LOGICAL_NC_CONFIG={configured}")
    args = [np.ascontiguousarray(a) for a in (dy, x, w)]
    call = _nkisim_call if dry else _device_call
    start = time.perf_counter()
    returned, summary = call(case, *args, target)
    wall = time.perf_counter() - start
    versions = tool_versions("nkisim" if dry else "trn")
    label = f"trn (dry: nkisim {versions.get('nkisim', '?')})" if dry else (
        f"trn nki {versions.get('nki', '?')} neuronx-cc {versions.get('neuronx-cc', '?')}")
    summary = dict(summary or {})
    summary["measured_us"] = wall * 1e6
    summary["dry"] = dry
    return KernelRun(outputs_by_grad(case, returned), summary, label, versions, wall)


def run_kernel(case: Case, dy: np.ndarray, x: np.ndarray, w: np.ndarray, backend: str | None = None,
               target: str = "trn2", dry: bool = False, timeline: str | None = None) -> KernelRun:
    """Run conv3d_bwd for the case on the backend; outputs keyed by gradient name (dx, dw, db).

    timeline: with the nkisim backend, write the modelled schedule there (Chrome trace-event
    JSON, ``nkisim.timeline``); other backends have no modelled schedule and ignore it
    (``KernelRun.timeline`` then stays None).

    Raises BackendUnavailable (naming what is missing), KernelOutputError (wrong outputs), or
    whatever the kernel raises (its input errors are ValueError subclasses; emulator rule
    violations nkisim.NkiValidationError).
    """
    name = resolve_backend(backend)
    _check_target(target)
    if name in _EXTRA_BACKENDS:
        return _EXTRA_BACKENDS[name](case, dy, x, w, target)
    if name == "nkisim":
        return _run_nkisim(case, dy, x, w, target, None if timeline is None else str(timeline))
    if name == "nki-simulate":
        return _run_nki_simulate(case, dy, x, w, target)
    return _run_trn(case, dy, x, w, target, dry)


__all__ = [
    "BACKENDS", "BACKEND_ENV", "GRADS", "BackendError", "BackendUnavailable", "KernelOutputError",
    "KernelRun", "available_backend_names", "backend_unavailable_reason", "device_missing",
    "outputs_by_grad", "real_nki_missing", "register_backend", "resolve_backend", "run_kernel",
    "tool_versions", "unregister_backend",
]
