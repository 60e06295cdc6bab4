"""The case matrix: ids, groups, coverage of the geometry space, validation."""
from __future__ import annotations

import re

import pytest

from conv3d_bwd.reference import ConvGeometry
from conv3d_bwd.verify.cases import CASE_SETS, DTYPES, GRAD_SUBSETS, GROUPS, Case, CaseError, case_from_args

pytestmark = pytest.mark.fast

DEFAULT = CASE_SETS["default"]
ID_PATTERN = re.compile(
    r"^[a-z0-9_]+-b\d+-ci\d+-co\d+-\d+x\d+x\d+-k[\d.]+-s[\d.]+-p[\d.]+-d[\d.]+-(bf16|fp16|fp32)"
    r"-(dx)?(dw)?(db)?-lnc[12]$")


@pytest.mark.parametrize("set_name", ["fast", "default", "full"])
def test_ids_are_unique_and_readable(set_name):
    ids = [c.id for c in CASE_SETS[set_name]]
    assert len(ids) == len(set(ids))
    for case_id in ids:
        assert ID_PATTERN.match(case_id), case_id


def test_id_example_from_the_contract():
    case = Case("unet_c64", "layers", 2, 64, 64, (8, 32, 32), (3, 3, 3), padding=(1,) * 6)
    assert case.id == "unet_c64-b2-ci64-co64-8x32x32-k333-s111-p111111-d111-bf16-dxdwdb-lnc1"
    wide = Case("w", "g", 1, 1, 1, (20, 4, 4), (7, 1, 1), padding=(12, 6, 0, 0, 0, 0), dilation=(3, 1, 1))
    assert "-p12.6.0.0.0.0-" in wide.id


def test_sets_nest():
    fast, default, full = ({c.id for c in CASE_SETS[n]} for n in ("fast", "default", "full"))
    assert fast < default < full


@pytest.mark.parametrize("set_name", ["fast", "default"])
def test_every_group_is_present(set_name):
    assert {c.group for c in CASE_SETS[set_name]} == set(GROUPS)


def test_gradient_subsets_dtypes_and_lnc():
    assert {c.grads for c in DEFAULT} == set(GRAD_SUBSETS)
    assert len(GRAD_SUBSETS) == 7
    assert {c.dtype for c in DEFAULT} == set(DTYPES)
    assert {c.lnc for c in DEFAULT} == {1, 2}
    assert {c.dtype for c in CASE_SETS["fast"]} == set(DTYPES)


def test_geometry_space_coverage():
    strides = {s for c in DEFAULT for s in c.stride}
    assert {1, 2, 3, 4} <= strides   # and the tubelet class: stride equal to the kernel
    assert any(len(set(c.stride)) > 1 for c in DEFAULT)  # mixed per axis
    assert {d for c in DEFAULT for d in c.dilation} == {1, 2, 3}
    assert any(len(set(c.dilation)) == 3 for c in DEFAULT)
    kernels = {c.kernel for c in DEFAULT}
    assert {(7, 7, 7), (3, 1, 1), (1, 7, 7), (1, 1, 3), (5, 3, 3)} <= kernels
    channels = {v for c in DEFAULT for v in (c.c_in, c.c_out)}
    assert {1, 63, 64, 65, 127, 128, 129, 256, 513} <= channels
    assert {c.batch for c in DEFAULT} >= {1, 2, 3, 8}
    asym = [c for c in DEFAULT if c.padding[0::2] != c.padding[1::2]]
    assert len(asym) >= 5
    # padding reaches the maximum dil*(k-1) on some side
    assert any(max(c.padding) == max(r * (k - 1) for r, k in zip(c.dilation, c.kernel)) > 2
               for c in asym)
    layers = {c.name for c in DEFAULT if c.group == "layers"}
    assert {"vae", "unet", "stem"} <= layers
    vae = next(c for c in DEFAULT if c.name == "vae")
    assert vae.padding == (2, 0, 1, 1, 1, 1)
    stem = next(c for c in DEFAULT if c.name == "stem")
    assert stem.kernel == (3, 7, 7) and stem.stride == (1, 2, 2)


@pytest.mark.parametrize("case", CASE_SETS["full"], ids=lambda c: c.id)
def test_case_shapes_agree_with_the_oracle_geometry(case):
    geometry = case.geometry()
    assert isinstance(geometry, ConvGeometry)
    assert tuple(geometry.out_size) == case.out_size
    assert tuple(geometry.dy_shape) == case.dy_shape
    assert tuple(geometry.w_shape) == case.w_shape


@pytest.mark.parametrize(("field", "value", "match"), [
    ("dtype", "fp8", "dtype: 'fp8'"),
    ("grads", ("dx", "dz"), "grads"),
    ("grads", (), "grads"),
    ("lnc", 4, "lnc: 4"),
    ("batch", 0, "batch: 0"),
    ("stride", (1, 0, 1), "stride"),
    ("padding", (1, 1, 1), "padding"),
    ("kernel", (9, 3, 3), "output size"),
])
def test_bad_case_fields_are_named(field, value, match):
    fields = {"name": "x", "group": "g", "batch": 1, "c_in": 2, "c_out": 2, "input": (4, 4, 4), "kernel": (3, 3, 3)}
    fields[field] = value
    with pytest.raises(CaseError, match=match):
        Case(**fields)


def test_case_from_args_and_grad_order():
    case = case_from_args(2, (3, 5), (4, 5, 6), (3, 1, 1), stride=(2, 1, 1), grads=("db", "dx"))
    assert (case.batch, case.c_in, case.c_out, case.input) == (2, 3, 5, (4, 5, 6))
    assert case.grads == ("dx", "db")
    assert case.kernel_kwargs()["compute_dw"] is False
    with pytest.raises(CaseError, match="channels"):
        case_from_args(1, (3,), (4, 4, 4), (1, 1, 1))

