"""The op tokens of nki.language: the activation functions and ALU ops against numpy/scipy formulas.

Neuron docs, nki.api.shared: "Supported Activation Functions for NKI ISA" and "Supported Math
Operators for NKI ISA".
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

X = np.linspace(-4.0, 4.0, 64, dtype=np.float32).reshape(4, 16)


def _gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _sig(x):
    return 1 / (1 + np.exp(-x))


UNARY = {
    nl.gelu: _gelu,
    nl.gelu_apprx_tanh: lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    nl.gelu_apprx_sigmoid: lambda x: x * _sig(1.702 * x),
    nl.gelu_dx: lambda x: 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(
        2 * math.pi),
    nl.gelu_apprx_sigmoid_dx: lambda x: _sig(1.702 * x) + 1.702 * x * _sig(1.702 * x) * (1 - _sig(1.702 * x)),
    nl.silu_dx: lambda x: _sig(x) * (1 + x * (1 - _sig(x))),
    nl.softplus: lambda x: np.log1p(np.exp(x)),
    nl.mish: lambda x: x * np.tanh(np.log1p(np.exp(x))),
    nl.erf: np.vectorize(math.erf),
    nl.erf_dx: lambda x: 2 / math.sqrt(math.pi) * np.exp(-x * x),
    nl.arctan: np.arctan,
}


def _activation(op, x):
    def kernel(x):
        t = nl.load(x)
        nisa.activation(t, op, t)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out
    return nkisim.simulate(kernel)(x)


@pytest.mark.parametrize("op", list(UNARY), ids=[op.name for op in UNARY])
def test_activation_functions_match_their_formulas(op):
    np.testing.assert_allclose(_activation(op, X), UNARY[op](X.astype(np.float64)), rtol=2e-5, atol=2e-6)


def _tensor_tensor(op, a, b):
    def kernel(a, b):
        ta, tb = nl.load(a), nl.load(b)
        nisa.tensor_tensor(ta, ta, tb, op)
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, ta)
        return out
    return nkisim.simulate(kernel)(a, b)


@pytest.mark.parametrize("op,ref", [(nl.abs_max, lambda a, b: np.maximum(abs(a), abs(b))),
                                    (nl.abs_min, lambda a, b: np.minimum(abs(a), abs(b))),
                                    (nl.fmod, np.fmod), (nl.mod, np.mod)], ids=["abs_max", "abs_min", "fmod", "mod"])
def test_binary_alu_ops_match_numpy(op, ref):
    a, b = X, np.flip(X, axis=1) + np.float32(0.25)
    np.testing.assert_allclose(_tensor_tensor(op, a, b), ref(a, b), rtol=1e-6)


def test_bypass_passes_the_data_through():
    def kernel(x):
        t = nl.load(x)
        nisa.tensor_scalar(t, t, nl.multiply, 3.0, op1=nl.bypass, operand1=100.0)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out
    np.testing.assert_array_equal(nkisim.simulate(kernel)(X), X * 3)


def test_invert_is_a_unary_bitwise_token():
    assert nl.invert.arity == 1 and nl.invert.bitwise
    assert nl.logical_not.arity == 1
