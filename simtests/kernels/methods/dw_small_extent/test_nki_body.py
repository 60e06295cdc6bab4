"""kernels/methods/dw_small_extent/nki_body.py against the float64 oracle (exact mode), on nkisim."""
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from conv3d_bwd.kernels.spec.record import DbMethod

from .support import run_exact, small

GEOMS = {
    # two samples in one position tile (2 x 3 x 4 = 24 positions each), C_in 8: 16 taps side by side per chunk
    "tiny": small(2, 8, 16, (2, 3, 4)),
    # C_in over a tile (130 = 128 + 2: chunks of unequal M), C_out over a tile and over a 512 block
    "c_in-130-c_out-520": small(1, 130, 520, (2, 2, 3)),
    # C_in 64: two taps per chunk, groups of 8 chunks share one x^T bank, store units of 8 chunks
    "c_in-64": small(1, 64, 24, (2, 3, 3)),
    # 12 position tiles of H_out pieces (72 and 60 positions: one x^T eviction per run of equal sizes);
    # a chunk's x^T over every tile spans two PSUM banks
    "tiles-12": small(2, 16, 8, (3, 11, 12), kernel=(1, 3, 3), padding=(0, 0, 1, 1, 1, 1)),
    # stride and asymmetric padding; windows step through the padded box
    "stride-2": small(2, 6, 10, (5, 7, 6), stride=(2, 2, 2), padding=(1, 0, 1, 1, 0, 2)),
    # dilation; input rows no window reaches are not loaded
    "dilation-2": small(1, 5, 7, (6, 7, 8), dilation=(2, 1, 2), padding=(2, 2, 0, 0, 1, 1)),
    # no padding at all (no memset of the box)
    "unpadded": small(3, 3, 5, (3, 4, 5), kernel=(2, 2, 2), padding=(0,) * 6),
}


@pytest.mark.parametrize("name", list(GEOMS))
def test_every_gradient_is_exact(name):
    run_exact(GEOMS[name])


@pytest.mark.parametrize("grads", [("dw",), ("dx", "dw"), ("dw", "db")], ids=lambda g: "+".join(g))
def test_every_dw_subset(grads):
    run_exact(GEOMS["stride-2"], grads=grads)


def test_db_by_its_own_pass_beside_the_method():
    run_exact(GEOMS["tiny"], db=DbMethod.STANDALONE)


@pytest.mark.parametrize("name", ["tiny", "c_in-130-c_out-520", "stride-2", "tiles-12"])
def test_lnc2_splits_the_taps(name):
    run_exact(GEOMS[name], lnc=2)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_other_dtypes(dtype):
    run_exact(GEOMS["stride-2"], dtype=dtype)
    run_exact(GEOMS["tiny"], dtype=dtype, grads=("dw", "db"))


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_trn1_evicts_on_vector_only(dtype):
    run_exact(GEOMS["tiny"], dtype=dtype, target="trn1")


def test_a_box_over_one_engine_access_is_zeroed_in_pieces():
    """Two samples' padded boxes of 25 x 28 x 52 (72,800 elements per partition, over the 65,536 one
    GpSimd access may touch): zeroed one sample at a time, still exact."""
    geom = small(2, 8, 8, (18, 13, 52), kernel=(7, 7, 1), stride=(3, 3, 1), padding=(0, 7, 2, 14, 0, 0),
                 dilation=(3, 3, 1))
    res = run_exact(geom, grads=("dw", "db"))
    assert res.summary.instr_counts["memset"] == 2 + 1   # the box in two pieces, the ones row


def test_lnc2_dw_alone():
    run_exact(GEOMS["c_in-64"], lnc=2, grads=("dw",))


@st.composite
def _drawn(draw):
    """A geometry of the class: few positions, any kernel, stride, dilation and (asymmetric) padding."""
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(3))
    stride = tuple(draw(st.integers(1, 2)) for _ in range(3))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(3))
    padding = tuple(draw(st.integers(0, 2)) for _ in range(6))
    size = tuple(draw(st.integers(max(1, dilation[a] * (kernel[a] - 1) + 1 - padding[2 * a] - padding[2 * a + 1]), 7))
                 for a in range(3))
    c_in = draw(st.sampled_from([3, 16, 40, 64, 96, 130]))
    c_out = draw(st.sampled_from([5, 24, 130]))
    # (at least a few input elements: sparse exact inputs of one element may all be zero)
    size = tuple(max(n, 2) for n in size)
    return small(draw(st.integers(1, 3)), c_in, c_out, size, kernel, padding, stride, dilation)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(gd=_drawn(), lnc=st.sampled_from([1, 2]))
def test_drawn_geometries_are_exact(gd, lnc):
    note(str(gd))
    run_exact(gd, lnc=lnc)
