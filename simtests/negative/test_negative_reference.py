"""The oracle rejects every bad input with GeometryError naming the argument (never IndexError etc.)."""
from __future__ import annotations

import re

import pytest

from conv3d_bwd.reference import GeometryError, conv3d_bwd_magnitudes, conv3d_bwd_ref
from simtests.negative.bad_inputs import BAD_INPUTS, valid_call

ORACLE_CASES = [pytest.param(bad, id=bad.id) for bad in BAD_INPUTS if bad.oracle]


@pytest.mark.fast
def test_valid_call_is_accepted():
    """The base of every mutation is itself valid, so each error below comes from the one change."""
    arrays, kwargs = valid_call()
    dx, dw, db = conv3d_bwd_ref(*arrays, **kwargs)
    assert dx.shape == arrays[1].shape and dw.shape == arrays[2].shape and db.shape == (arrays[0].shape[1],)


@pytest.mark.fast
@pytest.mark.parametrize("function", [conv3d_bwd_ref, conv3d_bwd_magnitudes], ids=lambda f: f.__name__)
@pytest.mark.parametrize("bad", ORACLE_CASES)
def test_oracle_rejects_bad_input(bad, function):
    arrays, kwargs = bad.mutate(*valid_call())
    with pytest.raises(GeometryError) as info:
        function(*arrays, **kwargs)
    message = str(info.value)
    assert re.search(bad.names, message), f"message does not name the argument ({bad.names}): {message}"
    assert isinstance(info.value, ValueError)
