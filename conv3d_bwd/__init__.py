"""nki-conv3d-bwd: the backward pass of 3D convolution as an NKI kernel, and what checks it.

Subpackages: ``conv3d_bwd.kernels`` (the NKI kernel and its planner), ``conv3d_bwd.reference`` (the
float64 oracle and tolerance bounds), ``conv3d_bwd.nkisim`` (the CPU emulator of the NKI API) and
``conv3d_bwd.verify`` (the harness and the ``conv3d-bwd`` command).

An installed distribution holds the subpackages inside this folder. A source checkout keeps them at the
repository root beside it (``kernels/``, ``reference/``, ``nkisim/``, ``verify/``): there the root joins
this package's search path, so that ``conv3d_bwd.kernels`` is ``<root>/kernels`` and a clone runs
``python -m conv3d_bwd ...`` from its root without installing anything. Nothing is added to ``sys.path``.
"""
from __future__ import annotations

from pathlib import Path as _Path

SUBPACKAGES = ("kernels", "reference", "nkisim", "verify")

_HERE = _Path(__file__).resolve().parent
if not (_HERE / SUBPACKAGES[0]).is_dir() and (_HERE.parent / SUBPACKAGES[0] / "__init__.py").is_file():
    __path__.append(str(_HERE.parent))
