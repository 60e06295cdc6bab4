"""The earlier NKI generation, ``neuronxcc.nki`` (NKI 0.1.0), on nkisim.

``nkisim.binding.ensure_neuronxcc()`` installs this package as ``neuronxcc.nki`` (with
``.language``, ``.isa``, ``.typing``, ``.compiler``) where the real Neuron compiler package is
absent, so kernels written for it run unchanged: ``nki.jit``, ``kernel[gx, gy](...)``,
``nki.simulate_kernel(kernel, *args)``. Its semantics live in this package only; it shares the dtype
names, op tokens, ``tile_size`` and error types with the later generation (``nkisim``), but not the
trace, the cost model or the capacity accounting (see docs/nkisim.md).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import NkiUsageError, NkiValidationError
from . import compiler, isa, language, typing
from .launch import LegacyKernel, jit, simulate_kernel
from .typing import tensor

trace = jit   # ``nki.trace``: the tracing decorator the documentation's examples alias as nki_jit


def baremetal(func: Callable | None = None, **options: Any) -> Any:
    """``nki.baremetal(...)``: on a device it runs the kernel alone; here, with no device, it runs on the emulator."""
    return jit(func, **options)


def _device_only(name: str) -> Callable[..., Any]:
    def decorator(func: Callable | None = None, **options: Any) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise NkiUsageError(f"nki.{name}: measures a kernel on a Neuron device; nkisim has no device "
                                "(use nkisim.run for the modelled cost of a later-generation kernel)")
        return refuse if func is not None else (lambda f: refuse)
    return decorator


benchmark = _device_only("benchmark")
profile = _device_only("profile")

__all__ = ["LegacyKernel", "NkiUsageError", "NkiValidationError", "baremetal", "benchmark", "compiler", "isa",
           "jit", "language", "profile", "simulate_kernel", "tensor", "trace", "typing"]
