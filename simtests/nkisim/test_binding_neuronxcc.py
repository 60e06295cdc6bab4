"""nkisim.binding.ensure_neuronxcc: ``import neuronxcc.nki`` gives the earlier generation on nkisim."""
from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

from conv3d_bwd.nkisim.binding import ensure_neuronxcc
from conv3d_bwd.nkisim.errors import NkiUsageError


@pytest.fixture
def clean_modules():
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] in ("neuronxcc", "nki")}
    yield
    for k in [k for k in sys.modules if k.split(".")[0] in ("neuronxcc", "nki")]:
        del sys.modules[k]
    sys.modules.update(saved)


def test_neuronxcc_nki_imports_resolve_to_nkisim_legacy(clean_modules):
    assert ensure_neuronxcc(prefer="nkisim") == "nkisim"
    nki = importlib.import_module("neuronxcc.nki")
    nl = importlib.import_module("neuronxcc.nki.language")
    nisa = importlib.import_module("neuronxcc.nki.isa")
    nt = importlib.import_module("neuronxcc.nki.typing")
    ncc = importlib.import_module("neuronxcc.nki.compiler")
    from neuronxcc import nki as nki_from
    assert nki is nki_from and nki.language is nl and nki.isa is nisa and nt.tensor and ncc.sbuf

    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.tensor_copy(nl.load(a)))
        return out

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, a), a)


def test_prefer_must_be_known():
    with pytest.raises(NkiUsageError, match="argument 'prefer'"):
        ensure_neuronxcc(prefer="device")


def test_requiring_the_real_package_raises_where_it_is_absent(clean_modules):
    for name in [k for k in sys.modules if k.split(".")[0] == "neuronxcc"]:
        del sys.modules[name]   # a stand-in another test installed must not count as the real package
    try:
        importlib.import_module("neuronxcc.nki")
        pytest.skip("the real Neuron compiler package is installed here")
    except ImportError:
        pass
    with pytest.raises(ImportError):
        ensure_neuronxcc(prefer="neuronxcc")
