"""nkisim: a CPU emulator of the NKI 0.6 API (nki, nki.language, nki.isa) with rules, capacities and a trace.

Kernel files import ``nki``; ``nkisim.binding.ensure_nki()`` installs this package under that name
where the real Neuron package is absent.
"""
from __future__ import annotations

from . import collectives, isa, language
from .errors import NkiStrictWarning, NkiUsageError, NkiValidationError
from .kernel import Kernel, RunResult, TensorSpec, jit, run, simulate, simulate_kernel
from .tensor import NkiTensor

# ``nki.dtype``: the type of NKI dtypes (Neuron docs, nki.language: ``DType = str``); nki-library
# annotates arguments with it (``dtype: nki.dtype = nl.bfloat16``).
dtype = str

__all__ = ["Kernel", "NkiStrictWarning", "NkiTensor", "NkiUsageError", "NkiValidationError", "RunResult", "TensorSpec",
           "collectives", "dtype", "isa", "jit", "language", "run", "simulate", "simulate_kernel"]
