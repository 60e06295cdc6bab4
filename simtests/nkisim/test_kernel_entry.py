"""nkisim.kernel entry points: returning an argument tensor, nki.simulate_kernel's NKI 0.6 error, kernel keywords."""
from __future__ import annotations

import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim


def test_a_kernel_may_return_the_argument_it_wrote():
    @nkisim.jit
    def kernel(x, out):
        t = nl.load(x)
        nisa.tensor_scalar(t, t, nl.add, 1.0)
        nl.store(out, t)
        return out   # nki-library's must_alias_input outputs: written in place and returned

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = np.zeros_like(x)
    np.testing.assert_array_equal(nkisim.simulate(kernel)(x, out), x + 1)
    np.testing.assert_array_equal(out, x + 1)


def test_returning_a_private_hbm_tensor_the_kernel_allocated_stays_an_error():
    @nkisim.jit
    def kernel(x):
        return nl.ndarray(x.shape, x.dtype, buffer=nl.hbm, name="mine")

    with pytest.raises(nkisim.NkiValidationError, match="kernel return: operand 'return': .*must be in shared_hbm"):
        nkisim.simulate(kernel)(np.zeros((2, 2), np.float32))


def test_current_generation_simulate_kernel_names_itself_and_the_alternatives():
    with pytest.raises(nkisim.NkiUsageError, match="nki.simulate_kernel is not available in NKI 0.6"):
        nkisim.simulate_kernel(lambda x: x, np.zeros((2, 2), np.float32))


def test_simulate_passes_every_keyword_to_the_kernel():
    """The nki.simulate page gives the returned callable no options of its own: a kernel parameter named
    ``lnc`` (AWS's attention_tkg wrapper has one) or ``target`` reaches the kernel."""
    def kernel(x, lnc, target):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nisa.tensor_scalar(t, t, nl.multiply, float(lnc * target))
        nl.store(out, t)
        return out
    x = np.ones((4, 8), np.float32)
    np.testing.assert_array_equal(nkisim.simulate(kernel)(x, lnc=3, target=5), 15 * x)
    np.testing.assert_array_equal(nkisim.jit(kernel)(x, lnc=2, target=1), 2 * x)
    from conv3d_bwd.nkisim.kernel import execute
    r = execute(kernel, (x,), {"lnc": 7, "target": 1}, target="trn2")
    np.testing.assert_array_equal(r.outputs, 7 * x)
