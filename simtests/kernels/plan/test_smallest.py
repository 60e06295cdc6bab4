"""The smallest tiling (``kernels/plan/smallest.py``): where its working set fits SBUF the planner finds a plan;
where it does not, the no-plan error names the buffer and the overshoot."""
from __future__ import annotations

import pytest

from conv3d_bwd.kernels.costs import TARGET_FIGURES
from conv3d_bwd.kernels.errors import Conv3dBwdPlanError
from conv3d_bwd.kernels.geometry import validate
from conv3d_bwd.kernels.plan import plan_conv3d_bwd
from conv3d_bwd.kernels.plan.budget import _check
from conv3d_bwd.kernels.plan.problem import _base
from conv3d_bwd.kernels.plan.smallest import smallest_plan, smallest_working_set

from ..support import conv_shapes


def _problem(batch, c_in, c_out, size, kernel, stride=(1, 1, 1), padding=(0,) * 6, dilation=(1, 1, 1),
             dtype="bf16", target="trn2", lnc=1, grads=("dx", "dw", "db")):
    shapes = conv_shapes(batch, c_in, c_out, size, kernel, stride, padding, dilation)
    flags = {f"compute_{n}": n in grads for n in ("dx", "dw", "db")}
    g = validate(*shapes, stride, padding, dilation, dtype, **flags)
    base = _base(g, *shapes, stride, padding, dilation, target, lnc, *flags.values())
    kw = {"stride": stride, "padding": padding, "dilation": dilation, "dtype": dtype, "target": target, "lnc": lnc}
    return g, base, shapes, {**kw, **flags}


# geometries whose whole-row bands do not fit (W bands, column-chunked filter staging, dx C_out chunks, clipped dy
# bands, dw C_out passes): each has a plan
FITTING = [
    pytest.param({"batch": 1, "c_in": 1, "c_out": 1, "size": (16, 4, 132), "kernel": (7, 7, 1), "padding": (0, 3, 0, 3, 0, 3),
                      "dilation": (3, 1, 1), "dtype": "fp32", "grads": ("dw",)}, id="dw-x-row-too-wide"),
    pytest.param({"batch": 1, "c_in": 1, "c_out": 1024, "size": (8, 8, 128), "kernel": (7, 7, 1), "padding": (3, 3, 3, 3, 0, 0),
                      "grads": ("dx",)}, id="dx-all-c-out-band"),
    pytest.param({"batch": 1, "c_in": 1, "c_out": 100_000, "size": (1, 1, 1), "kernel": (1, 1, 1), "dtype": "fp32",
                      "grads": ("dx",)}, id="dx-c-out-100000"),
    pytest.param({"batch": 1, "c_in": 1, "c_out": 100_000, "size": (1, 1, 1), "kernel": (1, 1, 1), "dtype": "fp32",
                  "target": "trn1"}, id="all-c-out-100000-trn1"),
    pytest.param({"batch": 1, "c_in": 1, "c_out": 2048, "size": (20, 20, 20), "kernel": (3, 3, 3), "padding": (8,) * 6,
                  "dilation": (8, 8, 8), "grads": ("dx",)}, id="dx-c-out-chunks"),
    pytest.param({"batch": 1, "c_in": 1, "c_out": 256, "size": (2, 2, 2), "kernel": (3, 3, 3), "padding": (40,) * 6,
                  "dilation": (40, 40, 40), "grads": ("dx",)}, id="dx-reach-beyond-dy"),
    pytest.param({"batch": 1, "c_in": 3, "c_out": 5, "size": (2, 3, 9000), "kernel": (1, 3, 5), "padding": (0, 0, 1, 1, 2, 2),
                      "grads": ("dx", "dw", "db")}, id="w-9000"),
]


@pytest.mark.parametrize("geom", FITTING)
def test_a_geometry_whose_smallest_tiling_fits_gets_a_plan(geom):
    g, base, shapes, kw = _problem(**geom)
    usable = TARGET_FIGURES[kw["target"]].sbuf_usable
    assert smallest_working_set(g, base)[0] <= usable
    plan = plan_conv3d_bwd(*shapes, **kw)
    assert plan.sbuf_bytes <= usable


def test_the_smallest_plan_breaks_no_rule_but_capacity():
    for geom in [p.values[0] for p in FITTING] + [{"batch": 2, "c_in": 300, "c_out": 129, "size": (3, 4, 5), "kernel": (3, 3, 3),
                                                       "stride": (2, 1, 2), "padding": (1,) * 6, "lnc": 2}]:
        g, base, _shapes, kw = _problem(**geom)
        why = _check(g, smallest_plan(g, base), TARGET_FIGURES[kw["target"]])[0]
        assert why == "" or why.startswith("SBUF"), why


def test_a_geometry_whose_smallest_tiling_does_not_fit_names_the_buffer_and_overshoot():
    """A one-position dw box of a 40 x 40 x 40 kernel reads 40 x 40 x 40 x positions: its x band (two buffers,
    fp32) cannot fit trn1."""
    g, base, shapes, kw = _problem(1, 1, 1, (40, 40, 40), (40, 40, 40), dtype="fp32", target="trn1", grads=("dw",))
    need, (name, size) = smallest_working_set(g, base)
    usable = TARGET_FIGURES["trn1"].sbuf_usable
    assert need > usable and name == "dw x band" and size == 2 * 40 ** 3 * 4
    with pytest.raises(Conv3dBwdPlanError) as err:
        plan_conv3d_bwd(*shapes, **kw)
    msg = str(err.value)
    assert "even the smallest tiling" in msg and f"{need - usable} B over the {usable} B usable" in msg
    assert f"largest: dw x band {size} B" in msg
