"""What the conformance runner needs to know about one kernel of someone else's checkout."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np


class Criterion(Enum):
    """How a tolerance is applied: per element (numpy/torch ``allclose``) or against the reference's range.

    ``range``: ``|out - ref| <= atol + rtol * max|ref|`` for every element, the rule of nki-library's
    test comparator (its default "max" mode: the relative term scales with the largest reference value).
    """

    elementwise = "allclose"
    range = "max-range"


class Generation(Enum):
    """Which NKI API the kernel file imports: ``nki`` (current) or ``neuronxcc.nki`` (earlier)."""

    current = "nki"
    legacy = "neuronxcc.nki"


@dataclass(frozen=True)
class Case:
    """One call: the kernel's arguments and the reference's (the same arrays unless given)."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    ref_args: tuple | None = None
    ref_kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class FileReference:
    """A reference function the checkout itself defines: ``name`` in ``path`` (relative to the checkout).

    ``module`` imports it as a package module (for relative imports) instead of reading the file;
    either way the function is taken from the user's checkout at run time. ``torch_inputs`` passes
    the reference torch tensors instead of numpy arrays.
    """

    path: str
    name: str
    torch_inputs: bool = False
    module: str | None = None


@dataclass(frozen=True)
class LocalReference:
    """A reference written here because the checkout computes it inline (e.g. ``a + b`` in ``__main__``).

    ``what`` says which computation of the checkout it restates.
    """

    fn: Callable[..., Any]
    what: str


@dataclass(frozen=True)
class KernelSpec:
    """One kernel: where it lives, how to call it at a small shape, what to compare it with."""

    name: str                          # table row: "<repo> <folder>" (e.g. "nki-samples tutorials/transpose2d")
    repo: str                          # "nki-samples" or "nki-library"
    path: str                          # the kernel file, relative to the checkout
    entry: str                         # the kernel function in that file
    generation: Generation
    inputs: Callable[[np.random.Generator, Any], Case]   # (rng, the loaded kernel module) -> Case
    reference: FileReference | LocalReference
    rtol: float
    atol: float
    tolerance_source: str              # where the tolerance comes from in the checkout
    grid: tuple[int, ...] = ()         # SPMD launch grid, ``kernel[grid](...)``
    module: str | None = None          # import the kernel as this package module (relative imports)
    output: Callable[[Any, Case], Any] | None = None  # picks the compared array(s): (result, case after the call)
    ref_output: Callable[[Any], Any] | None = None  # picks them from the reference's result
    criterion: Criterion = Criterion.elementwise
    extra: bool = False                # beyond the 27 target kernels (another version of one of them)
    lnc: int = 1                       # current generation: the LNC degree (``kernel[2]``) the tests use
    extract: bool = False              # take the entry function out of the file (see extract_function)
    compare: Callable[[Any, Any], Any] | None = None  # (kernel's arrays, reference's arrays) -> pairs to compare
