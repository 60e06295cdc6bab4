"""Run other people's NKI kernels (read from the user's checkout at run time) under nkisim and compare.

Nothing of the checkouts is stored in this project: the kernel files and their reference functions
are imported from the paths the user passes. Each kernel gets a fresh binding of ``nki`` /
``neuronxcc.nki`` to nkisim, so the real packages (if installed) are never used here.
"""
from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import sys
import traceback
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..torch_io import from_numpy_like, to_numpy
from .spec import Criterion, FileReference, Generation, KernelSpec, LocalReference

# imports that only exist on a Neuron device host (or with its SDK): a kernel needing one is skipped
DEVICE_ONLY = ("torch_xla", "torch_neuronx", "libneuronxla", "neuronxcc.starfish", "nki.compiler.backends")
# packages AWS's references import at the top of a module but that are not published on PyPI; where one
# is missing, a placeholder stands in whose every use raises (so a reference path that needs it still fails)
UNPUBLISHED = ("neuron_dtypes",)


@dataclass(frozen=True)
class Outcome:
    """One row of the table."""

    kernel: str
    ran: bool
    matched: bool
    first_error: str
    skipped: str = ""
    max_abs_err: float | None = None
    extra: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "ran": self.ran, "matched": self.matched, "first_error": self.first_error,
                "skipped": self.skipped, "max_abs_err": self.max_abs_err, "extra": self.extra}


class Skip(Exception):
    """The kernel cannot run here for a reason that is not nkisim's (a device-only import)."""


def run_spec(spec: KernelSpec, root: Path, seed: int = 0) -> Outcome:
    """Import, run and compare one kernel; never raises (errors become the row's first error)."""
    rng = np.random.default_rng(seed)
    ref_missing: ImportError | None = None
    try:
        with _bound(spec.generation), _on_path(root, spec), _unpublished_placeholders():
            kernel, module = _load_kernel(spec, root)
            case = spec.inputs(rng, module)
            try:
                ref = _reference(spec, root, case)
            except ImportError as exc:   # the reference needs a package missing here: still run the kernel
                ref_missing = exc
            out = _call(kernel, spec, case)
    except Skip as exc:
        return Outcome(spec.name, False, False, "", str(exc), extra=spec.extra)
    except SyntaxError as exc:   # the checkout's own source: no compiler could load it either
        where = f"{Path(exc.filename or '?').name}, line {exc.lineno}"
        return Outcome(spec.name, False, False, "", f"the checkout does not parse: {type(exc).__name__} in {where}: "
                       f"{exc.msg}", extra=spec.extra)
    except BaseException as exc:   # the kernel's own code may raise anything: report it
        if isinstance(exc, KeyboardInterrupt):
            raise
        return Outcome(spec.name, False, False, _first_line(exc), extra=spec.extra)
    if ref_missing is not None:   # the kernel ran; nothing to compare it with
        return Outcome(spec.name, True, False, f"reference not importable: {_first_line(ref_missing)}",
                       extra=spec.extra)
    try:
        got = _arrays(spec.output(out, case) if spec.output else out)
        want = _arrays(spec.ref_output(ref) if spec.ref_output else ref)
        return _compare(spec, got, want)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return Outcome(spec.name, True, False, f"comparing outputs: {_first_line(exc)}", extra=spec.extra)


def _compare(spec: KernelSpec, got: list[np.ndarray], want: list[np.ndarray]) -> Outcome:
    if len(got) != len(want):
        return Outcome(spec.name, True, False, f"{len(got)} output(s), the reference gives {len(want)}",
                       extra=spec.extra)
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            if g.size == w.size:
                g = g.reshape(w.shape)
            else:
                return Outcome(spec.name, True, False, f"output {i}: shape {g.shape}, reference {w.shape}",
                               extra=spec.extra)
        err = np.abs(g - w)
        worst = max(worst, float(np.nanmax(err)) if err.size else 0.0)
        if spec.criterion is Criterion.range:
            scale = float(np.nanmax(np.abs(w))) if w.size else 0.0
            ok = err <= spec.atol + spec.rtol * scale
        else:
            ok = np.isclose(g, w, rtol=spec.rtol, atol=spec.atol)
        if not ok.all():
            bad = int((~ok).sum())
            at = tuple(int(x) for x in np.argwhere(~ok)[0])
            return Outcome(spec.name, True, False,
                           f"output {i}: {bad} of {ok.size} elements outside rtol={spec.rtol} atol={spec.atol} "
                           f"({spec.criterion.value}) "
                           f"(first at {at}: {g[at]!r} vs {w[at]!r})", max_abs_err=worst, extra=spec.extra)
    return Outcome(spec.name, True, True, "", max_abs_err=worst, extra=spec.extra)


def _arrays(value: Any) -> list[np.ndarray]:
    """Outputs as a list of float64 arrays (dicts in key order, tuples in order)."""
    if isinstance(value, dict):
        return [a for v in value.values() for a in _arrays(v)]
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in _arrays(v)]
    arr = to_numpy(value)
    if arr is None:
        arr = np.asarray(value)
    return [np.asarray(arr.astype(np.float32) if arr.dtype.kind == "V" else arr, dtype=np.float64)]


def _call(kernel: Any, spec: KernelSpec, case: Any) -> Any:
    if spec.generation is Generation.legacy:
        from conv3d_bwd.nkisim import legacy

        k = kernel if isinstance(kernel, legacy.LegacyKernel) else legacy.jit(kernel)
        if spec.grid:
            k = k[spec.grid]
        return legacy.simulate_kernel(k, *case.args, **case.kwargs)
    from conv3d_bwd import nkisim

    k = kernel if isinstance(kernel, nkisim.Kernel) else nkisim.jit(kernel)
    if spec.lnc != 1:
        k = k[spec.lnc]
    return nkisim.simulate(k)(*case.args, **case.kwargs)


def _reference(spec: KernelSpec, root: Path, case: Any) -> Any:
    ref = spec.reference
    args = case.ref_args if case.ref_args is not None else case.args
    kwargs = dict(case.ref_kwargs)
    if isinstance(ref, LocalReference):
        return ref.fn(*args, **kwargs)
    fn = _load_reference(ref, root)
    if ref.torch_inputs:   # as nki-library's torch_ref_wrapper: numpy -> torch, fp16/bf16 -> fp32
        args = tuple(_torch_input(a) for a in args)
        kwargs = {k: _torch_input(v) for k, v in kwargs.items()}
    return fn(*args, **kwargs)


def _torch_input(value: Any) -> Any:
    if not isinstance(value, np.ndarray):
        return value
    import torch

    t = from_numpy_like(value, torch.zeros(1))
    return t.float() if str(t.dtype) in ("torch.bfloat16", "torch.float16") else t


def _load_reference(ref: FileReference, root: Path) -> Any:
    if ref.module:
        try:
            return getattr(importlib.import_module(ref.module), ref.name)
        except ModuleNotFoundError as exc:
            _skip_if_device_only(exc)
            raise
    return extract_function(root / ref.path, ref.name)


def extract_function(path: Path, name: str) -> Any:
    """Function ``name`` of the file at ``path``, without running the file's other statements.

    Reference files often import device-only packages at the top or run a test when imported;
    only the file's imports (those that import here), functions and classes are executed.
    """
    namespace = extract_namespace(path)
    if name not in namespace:
        raise LookupError(f"{path}: no function '{name}'")
    return namespace[name]


def extract_namespace(path: Path) -> dict[str, Any]:
    """The imports (those that import here), functions, classes and literal constants of the file at ``path``.

    A literal constant is a module-level ``NAME = <literal>`` (e.g. ``P_MAX = 128``) that functions read.
    """
    source = path.read_text()
    tree = ast.parse(source, filename=str(path))
    mod_name = f"nkisim_conformance_extract_{path.stem}"
    namespace: dict[str, Any] = {"__name__": mod_name, "__file__": str(path)}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            try:
                exec(compile(ast.Module([node], []), str(path), "exec"), namespace)  # noqa: S102 - the user's checkout, by design
            except ImportError:
                if _imports_checkout(node):   # the kernel's own package failing to import is the error
                    raise
                continue
        elif _is_literal_constant(node):
            exec(compile(ast.Module([node], []), str(path), "exec"), namespace)  # noqa: S102 - a literal only
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            try:
                exec(compile(ast.Module([node], []), str(path), "exec"), namespace)  # noqa: S102 - the user's checkout, by design
            except NameError:   # a decorator or base from a skipped import (a test utility): not needed
                continue
    return namespace


def _is_literal_constant(node: ast.stmt) -> bool:
    """``NAME = <literal>``: one plain name bound to a Python literal (nothing is called or imported)."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
        return False
    try:
        ast.literal_eval(node.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _imports_checkout(node: ast.Import | ast.ImportFrom) -> bool:
    """An import of the checkout's own packages (which must work), not of a test utility or device package."""
    names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
    return getattr(node, "level", 0) > 0 or any(n.startswith("nkilib_src") for n in names)


def _load_kernel(spec: KernelSpec, root: Path) -> Any:
    path = root / spec.path
    if not path.is_file():
        raise FileNotFoundError(f"{spec.path}: not in the checkout {root}")
    try:
        if spec.extract:
            namespace = extract_namespace(path)
            if spec.entry not in namespace:
                raise LookupError(f"{spec.path}: no kernel '{spec.entry}'")
            return namespace[spec.entry], types.SimpleNamespace(**namespace)
        if spec.module:
            mod = importlib.import_module(spec.module)
        else:
            mod_name = f"nkisim_conformance_{spec.repo.replace('-', '_')}_{path.stem}"
            loader_spec = importlib.util.spec_from_file_location(mod_name, path)
            mod = importlib.util.module_from_spec(loader_spec)
            sys.modules[mod_name] = mod
            loader_spec.loader.exec_module(mod)
    except ModuleNotFoundError as exc:
        _skip_if_device_only(exc)
        raise
    if not hasattr(mod, spec.entry):
        raise LookupError(f"{spec.path}: no kernel '{spec.entry}'")
    return getattr(mod, spec.entry), mod


def _skip_if_device_only(exc: ModuleNotFoundError) -> None:
    missing = exc.name or ""
    for prefix in DEVICE_ONLY:
        if missing == prefix or missing.startswith(prefix + "."):
            raise Skip(f"needs {missing} (a device-only import)") from None


class _Unpublished(types.ModuleType):
    """A missing unpublished package: importing it, and importing names from it, works; calling one raises."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        package = self.__name__

        def unpublished(*_args: Any, **_kwargs: Any) -> Any:
            raise ModuleNotFoundError(f"{package}.{attr}: '{package}' is not installed (not published on PyPI); "
                                      "the conformance runner stands in a placeholder only for its import",
                                      name=package)
        unpublished.__name__ = attr
        return unpublished


@contextlib.contextmanager
def _unpublished_placeholders() -> Iterator[None]:
    """Placeholders for the UNPUBLISHED packages that do not import here, removed afterwards."""
    added = []
    for name in UNPUBLISHED:
        if name in sys.modules or importlib.util.find_spec(name) is not None:
            continue
        sys.modules[name] = _Unpublished(name)
        added.append(name)
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)


@contextlib.contextmanager
def _bound(generation: Generation) -> Iterator[None]:
    """Bind ``nki`` / ``neuronxcc.nki`` to nkisim for one kernel; restore the previous modules after."""
    from .. import binding

    prefixes = ("nki", "neuronxcc")
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] in prefixes}
    try:
        # both generations: current kernels may still import neuronxcc.nki.typing for annotations
        binding.ensure_neuronxcc(prefer="nkisim")
        if generation is Generation.current:
            binding.ensure_nki(prefer="nkisim")
        yield
    finally:
        for k in [k for k in sys.modules if k.split(".")[0] in prefixes]:
            del sys.modules[k]
        sys.modules.update(saved)


@contextlib.contextmanager
def _on_path(root: Path, spec: KernelSpec) -> Iterator[None]:
    """The kernel's folder (sibling imports) and the checkout's package root on sys.path, then restored."""
    extra = [str((root / spec.path).parent)]
    if spec.repo == "nki-library":
        # src: the kernels' package; the checkout root: its test helpers (``test.integration...``), which
        # some torch references import as the library's own test runs do (ahead of the standard ``test``)
        extra += [str(root / "src"), str(root)]
    before = list(sys.path)
    before_mods = set(sys.modules)
    sys.path[:0] = extra
    try:
        yield
    finally:
        sys.path[:] = before
        for name in set(sys.modules) - before_mods:   # the checkout's modules: re-imported per kernel
            if name.startswith(("nkilib_src", "nkisim_conformance_")) or _from_root(sys.modules.get(name), root):
                sys.modules.pop(name, None)


def _from_root(mod: Any, root: Path) -> bool:
    f = getattr(mod, "__file__", None)
    return bool(f) and str(f).startswith(str(root))


def _first_line(exc: BaseException) -> str:
    """The error's type and message, and where in the kernel (or nkisim) it was raised."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    where = ""
    tb = traceback.extract_tb(exc.__traceback__)
    if tb:
        last = tb[-1]
        where = f" [{Path(last.filename).name}:{last.lineno}]"
    return f"{type(exc).__name__}: {msg}{where}"
