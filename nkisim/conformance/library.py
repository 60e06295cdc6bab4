"""Specs for aws-neuron/nki-library kernels (filled in below)."""
from __future__ import annotations

from .spec import KernelSpec

SPECS: tuple[KernelSpec, ...] = ()
