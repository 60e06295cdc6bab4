"""``neuronxcc.nki.compiler``: allocation and scheduling directives of the earlier generation.

The Neuron documentation source shows them in nki/test/test_sbuf_modulo_alloc.py and
test_psum_modulo_alloc.py (``ncc.sbuf.alloc(func)``, ``ncc.sbuf.mod_alloc(base_addr=...,
num_free_tiles=...)``, ``ncc.psum.mod_alloc(base_bank=..., num_bank_tiles=...)``) and the attention
tutorial (``skip_middle_end_transformations``, ``no_reorder()``). They place tiles or constrain the
compiler's schedule; a correct kernel's values do not depend on them, so nkisim allocates each tile
in the named buffer (fresh memory, no aliasing between tiles the allocator would overlap) and runs
in program order. Arguments are kept for inspection but not validated beyond their names.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Allocator:
    """An allocation directive: ``buffer=`` of ``nl.ndarray`` accepts it as its buffer."""

    buffer: str
    kind: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict, hash=False)


class _Buffer:
    def __init__(self, name: str) -> None:
        self._name = name

    def alloc(self, func: Callable | None = None, *args: Any, **kwargs: Any) -> Allocator:
        return Allocator(self._name, "alloc", (func, *args), kwargs)

    def mod_alloc(self, *args: Any, **kwargs: Any) -> Allocator:
        return Allocator(self._name, "mod_alloc", args, kwargs)

    def auto_alloc(self, *args: Any, **kwargs: Any) -> Allocator:
        return Allocator(self._name, "auto_alloc", args, kwargs)

    def __repr__(self) -> str:
        return f"nki.compiler.{self._name}"


sbuf = _Buffer("sbuf")
psum = _Buffer("psum")


def skip_middle_end_transformations(func: Callable) -> Callable:
    """A compiler directive: no effect on the emulated values."""
    return func


def enable_stack_allocator(func: Callable | None = None, **kwargs: Any) -> Any:
    return func if func is not None else (lambda f: f)


def force_auto_alloc(func: Callable | None = None, **kwargs: Any) -> Any:
    return func if func is not None else (lambda f: f)


@dataclass(frozen=True)
class no_reorder:
    """A loop directive (``sequential_range(n, directives=no_reorder())``): loops already run in order."""


__all__ = ["Allocator", "enable_stack_allocator", "force_auto_alloc", "no_reorder", "psum", "sbuf",
           "skip_middle_end_transformations"]
