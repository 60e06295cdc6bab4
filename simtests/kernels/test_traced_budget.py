"""Traced SBUF peaks within the plan's budget where they once were not: db's standalone pass transfers the
planner's chunk (``db_chunk``: 8 KiB of dy per partition; fp32 took 16 KiB), and an LNC2 dw whose finish is
deferred past dx drops its dy^T ring with its other pools (the ring kept them live through dx)."""
from __future__ import annotations

import pytest

from conv3d_bwd import nkisim
from conv3d_bwd.kernels import conv3d_bwd
from conv3d_bwd.kernels.plan import forced_plan, plan_conv3d_bwd
from conv3d_bwd.kernels.spec.items import db_chunk
from conv3d_bwd.verify.cases import Case


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


def test_deferred_dw_frees_its_dyt_ring_before_dx():
    case = Case("dyt", "dw", 3, 8, 75, (22, 14, 27), (1, 1, 3), stride=(3, 1, 2), padding=(0, 0, 2, 0, 2, 0),
                dilation=(1, 1, 3), lnc=2)
    plan = plan_conv3d_bwd(case.dy_shape, case.x_shape, case.w_shape, stride=case.stride, padding=case.padding,
                           dilation=case.dilation, dtype="bf16", target="trn3", lnc=2)
    alts = plan.feasible_candidates(where=lambda p: p.dw_dyt_dma and p.dw_method.value == 'row_pack'
                                    and p.compute_dx and (p.strategy.value == 'per_gradient'))[:3]
    assert alts
    specs = [nkisim.TensorSpec(s, "bfloat16") for s in (case.dy_shape, case.x_shape, case.w_shape)]
    for p in alts:
        with forced_plan(p):
            res = nkisim.run(conv3d_bwd, *specs, lnc=2, target="trn3", trace_only=True, **case.kernel_kwargs())
        assert 0 < res.peak_sbuf_bytes_per_partition <= p.sbuf_bytes, p.label
