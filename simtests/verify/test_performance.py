"""verify.performance: a case's roofline and efficiency, counted for the gradients it asks for."""
from __future__ import annotations

import math

import pytest

from conv3d_bwd.verify.bench import BenchShape
from conv3d_bwd.verify.bench import roofline_us as bench_roofline_us
from conv3d_bwd.verify.cases import Case
from conv3d_bwd.verify.performance import compulsory_bytes, efficiency_fields, roofline_us, useful_flops

pytestmark = pytest.mark.fast

CASE = Case("p", "basic", 2, 16, 32, (4, 6, 6), (3, 3, 3), padding=(1,) * 6)


def test_all_three_gradients_match_the_bench_roofline():
    shape = BenchShape("p", 2, 16, 32, (4, 6, 6), (3, 3, 3), padding=(1,) * 6)
    for target in ("trn1", "trn2", "trn3"):
        assert roofline_us(CASE, target) == pytest.approx(bench_roofline_us(shape, target, 1))


def test_only_the_requested_gradients_count():
    from dataclasses import replace

    dx_only = replace(CASE, grads=("dx",))
    assert useful_flops(dx_only) * 2 == useful_flops(CASE)
    two = 2  # bf16 bytes
    assert compulsory_bytes(dx_only) == two * (math.prod(CASE.dy_shape) + math.prod(CASE.w_shape)
                                                + math.prod(CASE.x_shape))  # dy, w read; dx written
    db_only = replace(CASE, grads=("db",))
    assert useful_flops(db_only) == 0
    assert compulsory_bytes(db_only) == two * (math.prod(CASE.dy_shape) + CASE.c_out)


def test_efficiency_is_roofline_over_modelled():
    fields = efficiency_fields(CASE, "trn2", 10.0)
    assert fields["efficiency"] == pytest.approx(fields["roofline_us"] / 10.0)
    assert efficiency_fields(CASE, "trn2", None)["efficiency"] is None
    assert efficiency_fields(CASE, "no-such-target", 10.0) == {}
