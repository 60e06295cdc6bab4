"""Bind kernel files' ``import nki`` to the real package, or to nkisim where it is absent or asked for."""
from __future__ import annotations

import importlib
import os
import sys

from .errors import NkiUsageError

_NAMES = ("nki", "nki.language", "nki.isa")
# This package's own module name ("nkisim", or the name it is installed under): what ``import nki`` gives
# when the emulator is bound.
_PACKAGE = __name__.rpartition(".")[0]


def _install_nkisim() -> str:
    from . import collectives, isa, isa_constants, language

    emulator = sys.modules[_PACKAGE]

    for name in list(sys.modules):
        if name == "nki" or name.startswith("nki."):
            del sys.modules[name]
    sys.modules["nki"] = emulator
    sys.modules["nki.language"] = language
    sys.modules["nki.isa"] = isa
    from .legacy import typing as nki_typing

    sys.modules["nki.typing"] = nki_typing   # annotations only, the same in both generations
    sys.modules["nki.isa.constants"] = isa_constants
    sys.modules["nki.collectives"] = collectives
    return "nkisim"


def active() -> str | None:
    """"nkisim" or "nki" for what ``import nki`` gives now, or None if nothing is bound yet."""
    mod = sys.modules.get("nki")
    if mod is None:
        return None
    return "nkisim" if getattr(mod, "__name__", "") == _PACKAGE else "nki"


def ensure_nki(prefer: str | None = None) -> str:
    """Make ``import nki`` work: the real package if it imports, else nkisim; returns which.

    ``prefer="nkisim"`` or the environment variable ``NKISIM=1`` forces nkisim; ``prefer="nki"``
    requires the real package (ImportError if it is absent).
    """
    if prefer not in (None, "nkisim", "nki"):
        raise NkiUsageError(f"ensure_nki: argument 'prefer': {prefer!r} must be None, 'nkisim' or 'nki'")
    force_sim = prefer == "nkisim" or (prefer is None and os.environ.get("NKISIM") == "1")
    if force_sim:
        return "nkisim" if active() == "nkisim" else _install_nkisim()
    if active() == "nki":
        return "nki"
    if active() == "nkisim" and prefer is None:
        return "nkisim"
    for name in _NAMES:
        sys.modules.pop(name, None)
    try:
        real = importlib.import_module("nki")
        importlib.import_module("nki.language")
        importlib.import_module("nki.isa")
        if not hasattr(real, "jit"):
            raise ImportError("the installed 'nki' has no jit (not the Neuron package)")
    except ImportError:   # the PyPI placeholder raises a plain ImportError
        for name in list(sys.modules):
            if name == "nki" or name.startswith("nki."):
                del sys.modules[name]
        if prefer == "nki":
            raise
        return _install_nkisim()
    return "nki"


_LEGACY_NAMES = ("neuronxcc", "neuronxcc.nki", "neuronxcc.nki.language", "neuronxcc.nki.isa",
                 "neuronxcc.nki.typing", "neuronxcc.nki.compiler")


def ensure_neuronxcc(prefer: str | None = None) -> str:
    """Make ``import neuronxcc.nki`` (the earlier generation) work: the real package, else nkisim.legacy.

    Returns "neuronxcc" or "nkisim". ``prefer="nkisim"`` or ``NKISIM=1`` installs nkisim even where
    the real compiler package imports; ``prefer="neuronxcc"`` requires the real one.
    """
    if prefer not in (None, "nkisim", "neuronxcc"):
        raise NkiUsageError(f"ensure_neuronxcc: argument 'prefer': {prefer!r} must be None, 'nkisim' or 'neuronxcc'")
    mod = sys.modules.get("neuronxcc.nki")
    if mod is not None and getattr(mod, "__name__", "") == f"{_PACKAGE}.legacy" and prefer != "neuronxcc":
        return "nkisim"
    force_sim = prefer == "nkisim" or (prefer is None and os.environ.get("NKISIM") == "1")
    if not force_sim:
        try:
            importlib.import_module("neuronxcc.nki")
            return "neuronxcc"
        except ImportError:
            if prefer == "neuronxcc":
                raise
    return _install_legacy()


def _install_legacy() -> str:
    import types

    from . import legacy
    from .legacy import compiler, isa, language, typing

    for name in list(sys.modules):
        if name == "neuronxcc" or name.startswith("neuronxcc."):
            del sys.modules[name]
    root = types.ModuleType("neuronxcc")
    root.__doc__ = "nkisim's stand-in for the Neuron compiler package: only its 'nki' subpackage"
    root.__path__ = []   # a package, so 'import neuronxcc.nki' resolves through sys.modules
    root.nki = legacy
    sys.modules["neuronxcc"] = root
    sys.modules["neuronxcc.nki"] = legacy
    sys.modules["neuronxcc.nki.language"] = language
    sys.modules["neuronxcc.nki.isa"] = isa
    sys.modules["neuronxcc.nki.typing"] = typing
    sys.modules["neuronxcc.nki.compiler"] = compiler
    return "nkisim"
