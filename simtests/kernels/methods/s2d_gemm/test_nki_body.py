"""kernels/methods/s2d_gemm/nki_body.py against the float64 oracle (exact mode), on nkisim."""
import pytest

from .support import run_exact, tube

GEOMS = {
    # the VideoMAE tubelet's structure (C_in 3, kernel 2 x k x k) at a small size
    "tube-c3": tube(1, 3, 20, (2, 3, 4), (2, 4, 4)),
    # C_out over a tile (two C_out tiles, the second partial); D_out x H_out rows over 128 (two row tiles)
    "c_out-130-rows-150": tube(1, 2, 130, (3, 50, 2), (1, 2, 3)),
    # H_out over 128: row tiles are pieces of H rows; K_w = 1
    "h_out-130": tube(1, 1, 8, (1, 130, 2), (2, 1, 1)),
    # planes of more than 512 patch elements (dx chunks of K_w lines) and dw chunks of 128 / K_w lines
    "plane-576": tube(2, 1, 16, (1, 2, 2), (1, 24, 24)),
    # batch 3 of 4 rows each: one row tile holds the three batches
    "batch-3": tube(3, 4, 9, (2, 2, 3), (2, 2, 2)),
    # batch 14 of 10 rows: tiles of 12 batches and of 2
    "batch-14": tube(14, 2, 12, (2, 5, 3), (2, 2, 2)),
}


@pytest.mark.parametrize("name", list(GEOMS))
def test_every_gradient_is_exact(name):
    run_exact(GEOMS[name])


@pytest.mark.parametrize("grads", [("dx",), ("dw",), ("dx", "dw"), ("dx", "db"), ("dw", "db")],
                         ids=lambda g: "+".join(g))
def test_every_gradient_subset(grads):
    run_exact(GEOMS["tube-c3"], grads=grads)


def test_several_groups_accumulate_dw_in_fp32():
    """One row tile per group: dw adds each group's PSUM sums into fp32 SBUF, the next group's loads
    are issued ahead (double buffers)."""
    run_exact(GEOMS["batch-14"], group=1)
    run_exact(GEOMS["c_out-130-rows-150"], group=1, grads=("dw", "db"))


@pytest.mark.parametrize("name", ["tube-c3", "batch-14", "plane-576"])
def test_lnc2_splits_the_planes(name):
    run_exact(GEOMS[name], lnc=2)


def test_lnc2_with_one_plane_leaves_program_1_idle():
    run_exact(GEOMS["h_out-130"], lnc=2)


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_other_dtypes(dtype):
    run_exact(GEOMS["tube-c3"], dtype=dtype)
