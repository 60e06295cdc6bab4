"""nkisim.kernel entry points: returning an argument tensor, and nki.simulate_kernel's NKI 0.6 error."""
from __future__ import annotations

import numpy as np
import pytest

import nkisim
import nkisim.isa as nisa
import nkisim.language as nl


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
