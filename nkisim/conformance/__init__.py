"""A conformance runner: other people's NKI kernels, from a local checkout, under nkisim.

``python -m conv3d_bwd.nkisim.conformance --nki-library PATH --nki-samples PATH [--json]`` (see docs/nkisim.md).
"""
from __future__ import annotations

from .runner import Outcome, extract_function, run_spec
from .spec import Case, Criterion, FileReference, Generation, KernelSpec, LocalReference

__all__ = ["Case", "Criterion", "FileReference", "Generation", "KernelSpec", "LocalReference", "Outcome", "extract_function",
           "run_spec"]
