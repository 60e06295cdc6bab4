"""Bind kernel files' ``import nki`` to the real package, or to nkisim where it is absent or asked for."""
from __future__ import annotations

import importlib
import os
import sys

from .errors import NkiUsageError

_NAMES = ("nki", "nki.language", "nki.isa")


def _install_nkisim() -> str:
    import nkisim
    from nkisim import isa, isa_constants, language

    for name in list(sys.modules):
        if name == "nki" or name.startswith("nki."):
            del sys.modules[name]
    sys.modules["nki"] = nkisim
    sys.modules["nki.language"] = language
    sys.modules["nki.isa"] = isa
    sys.modules["nki.isa.constants"] = isa_constants
    return "nkisim"


def active() -> str | None:
    """"nkisim" or "nki" for what ``import nki`` gives now, or None if nothing is bound yet."""
    mod = sys.modules.get("nki")
    if mod is None:
        return None
    return "nkisim" if getattr(mod, "__name__", "") == "nkisim" else "nki"


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
