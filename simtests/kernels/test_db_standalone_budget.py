"""db's standalone pass transfers the planner's chunk (``db_chunk``: 8 KiB of dy per partition), so its traced
SBUF peak stays within the plan's budget for every dtype (fp32 took 16 KiB against 8 KiB planned)."""
from __future__ import annotations

import pytest

import nkisim
from kernels import conv3d_bwd
from kernels.planner import db_chunk, plan_conv3d_bwd
from verify.cases import Case


@pytest.mark.parametrize("dtype, nki_dtype", [("fp32", "float32"), ("bf16", "bfloat16"), ("fp16", "float16")])
@pytest.mark.parametrize("lnc, target", [(1, "trn1"), (2, "trn2")])
def test_db_alone_stays_within_the_plan(dtype, nki_dtype, lnc, target):
    case = Case("db", "db", 2, 127, 259, (3, 17, 121), (1, 1, 1), dtype=dtype, grads=("db",), lnc=lnc)
    plan = plan_conv3d_bwd(case.dy_shape, case.x_shape, case.w_shape, dtype=dtype, target=target, lnc=lnc,
                           compute_dx=False, compute_dw=False, compute_db=True)
    assert case.out_size[0] * case.out_size[1] * case.out_size[2] > db_chunk(plan.geometry())   # several chunks
    specs = [nkisim.TensorSpec(s, nki_dtype) for s in (case.dy_shape, case.x_shape, case.w_shape)]
    res = nkisim.run(conv3d_bwd, *specs, lnc=lnc, target=target, trace_only=True, compute_dx=False,
                     compute_dw=False)
    assert 0 < res.peak_sbuf_bytes_per_partition <= plan.sbuf_bytes
