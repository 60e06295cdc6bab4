"""``neuronxcc.nki.typing``: annotations only (``tensor[128, 512]``); they have no effect at run time.

Used as ``out_tile: nt.tensor[P, F] = ...`` and ``def kernel(x: nt.tensor)`` in the earlier
generation's tutorials; the migration guide (nki/migration/index.rst, "nki.typing module") lists the
module, and the later generation keeps it as ``nki.typing``. Indexing ``tensor`` with a shape
returns the class itself.
"""
from __future__ import annotations

from typing import Any


class _TensorType(type):
    def __getitem__(cls, shape: Any) -> type:
        return cls


class tensor(metaclass=_TensorType):
    """The annotation type of a kernel tensor (any shape, any dtype)."""


class mutable_tensor(metaclass=_TensorType):
    """The annotation of a tensor argument the kernel writes (nki/library/api/router-topk.rst uses it)."""


__all__ = ["mutable_tensor", "tensor"]
