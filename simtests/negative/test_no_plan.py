"""The planner's no-plan error: every rejected candidate counted, the rejection that bounds the geometry first
(the smallest SBUF overshoot, with the buffer and the bytes over), quickly on a hopeless geometry."""
from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from conv3d_bwd.kernels.errors import Conv3dBwdPlanError
from conv3d_bwd.kernels.plan import plan_conv3d_bwd
from conv3d_bwd.kernels.plan.no_plan import bounding_rejection, no_plan_message

# one channel, a 40 x 40 x 40 filter over a 40 x 40 x 40 input, fp32: one output position reads every input
# position, so dw's x band of even a one-position box (two buffers of 40^3 x 4 B) does not fit SBUF
HOPELESS = ((1, 1, 1, 1, 1), (1, 1, 40, 40, 40), (40, 40, 40, 1, 1))


def test_hopeless_geometry_counts_every_rejection_and_leads_with_the_closest():
    with pytest.raises(Conv3dBwdPlanError) as info:
        plan_conv3d_bwd(*HOPELESS, dtype="fp32", target="trn2")
    msg = str(info.value)
    n = int(re.search(r"all (\d+) candidates rejected", msg).group(1))
    assert n > 6   # (not a fixed count of kept records)
    by_kind = sum(int(k) for k in re.findall(r"(\d+) by ", msg))
    assert by_kind == n
    over = re.search(r"the closest, (\d+) B per partition over the (\d+) B usable: .*SBUF (\d+) B per partition", msg)
    assert over, msg
    assert int(over.group(1)) == int(over.group(3)) - int(over.group(2)) > 0
    assert re.search(r"largest: [a-z].* \d+ B", msg)


@dataclass(frozen=True)
class _Rec:
    label: str
    feasible: bool
    reason: str
    sbuf_bytes: int
    psum_banks: int


RECORDS = [
    _Rec("toeplitz", False, "C_in 1024 > 64: outside the method's domain", 0, 0),
    _Rec("big", False, "SBUF 900 B per partition exceeds 500 B usable (largest: dw acc 600 B)", 900, 2),
    _Rec("small", False, "SBUF 620 B per partition exceeds 500 B usable (largest: dx dy band 400 B)", 620, 2),
    _Rec("psum", False, "PSUM 9 banks exceed 8", 300, 9),
]


def test_the_bounding_rejection_is_the_smallest_sbuf_overshoot():
    assert bounding_rejection(RECORDS, 500, 8).label == "small"
    assert bounding_rejection(RECORDS[:1] + RECORDS[3:], 500, 8).label == "psum"
    assert bounding_rejection(RECORDS[:1], 500, 8).label == "toeplitz"


def test_message_counts_all_and_names_the_overshoot():
    msg = no_plan_message("trn2", RECORDS * 3, 500, 8)
    assert "all 12 candidates rejected (6 by SBUF, 3 by domain or legality, 3 by PSUM)" in msg
    assert "the closest, 120 B per partition over the 500 B usable: small:" in msg
    assert "dx dy band 400 B" in msg
