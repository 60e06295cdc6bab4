"""``nki.isa.constants``: the nki.isa enums as a module of their own.

The Neuron docs list the enums under nki.isa ("NKI ISA Config Enums"); AWS's nki-library imports
them from ``nki.isa.constants`` (``from nki.isa.constants import dge_mode, oob_mode``), so that
module name holds the same enum classes.
"""
from __future__ import annotations

from .isa_enums import dge_mode, dma_engine, engine, matmul_perf_mode, nc_version, oob_mode, reduce_cmd

__all__ = ["dge_mode", "dma_engine", "engine", "matmul_perf_mode", "nc_version", "oob_mode", "reduce_cmd"]
