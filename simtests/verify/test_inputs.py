"""Input generation: exact mode is really exact, stat mode is rounded, everything is deterministic."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from conv3d_bwd.reference.tolerance import dtype_info, oracle_gradients, round_to_dtype
from conv3d_bwd.verify.cases import CASE_SETS, Case
from conv3d_bwd.verify.inputs import InputModeError, make_input_set, make_inputs, stable_seed

DEFAULT = CASE_SETS["default"]


def _pick(*names_groups: tuple[str, str]) -> list[Case]:
    picked = []
    for name, dtype in names_groups:
        picked.append(next(c for c in DEFAULT if c.name == name and c.dtype == dtype))
    return picked


EXACT_CASES = _pick(("basic", "bf16"), ("stride", "bf16"), ("dil", "bf16"), ("pad_dil", "bf16"),
                    ("kern", "bf16"), ("chan", "bf16"), ("dtype", "fp16"), ("dtype", "fp32"),
                    ("dtype_stride", "fp16"), ("vae", "bf16"), ("lnc2_dw", "bf16"))


def _window(x, tap, case: Case):
    """x at the input positions tap reads for every output position (zero outside): [B, C, *out]."""
    b, c = x.shape[:2]
    out = case.out_size
    result = np.zeros((b, c, *out), dtype=x.dtype)
    index = []
    valid = []
    for a in range(3):
        pos = np.arange(out[a]) * case.stride[a] + tap[a] * case.dilation[a] - case.padding[2 * a]
        ok = (pos >= 0) & (pos < case.input[a])
        index.append(np.where(ok, pos, 0))
        valid.append(ok)
    gathered = x[:, :, index[0][:, None, None], index[1][None, :, None], index[2][None, None, :]]
    mask = valid[0][:, None, None] & valid[1][None, :, None] & valid[2][None, None, :]
    result[...] = np.where(mask, gathered, 0)
    return result, index, mask


def fp32_gradients(case: Case, dy, x, w, reverse: bool) -> dict[str, np.ndarray]:
    """An independent fp32 computation (per-tap GEMMs, taps in forward or reverse order)."""
    dy32, x32, w32 = (np.asarray(a, dtype=np.float32) for a in (dy, x, w))
    taps = list(np.ndindex(*case.kernel))
    if reverse:
        taps.reverse()
    dx = np.zeros(case.x_shape, np.float32)
    dw = np.zeros(case.w_shape, np.float32)
    for tap in taps:
        xw, index, mask = _window(x32, tap, case)
        dw[tap] = np.einsum("bidhw,bodhw->io", xw, dy32, dtype=np.float32)
        g = np.einsum("io,bodhw->bidhw", w32[tap], dy32, dtype=np.float32) * mask
        for od, oh, ow in zip(*np.nonzero(mask)):
            dx[:, :, index[0][od], index[1][oh], index[2][ow]] += g[:, :, od, oh, ow]
    flat = np.moveaxis(dy32, 1, -1).reshape(-1, case.c_out)
    if reverse:
        flat = flat[::-1]
    db = np.cumsum(flat, axis=0, dtype=np.float32)[-1]
    return {"dx": dx, "dw": dw, "db": db}


@pytest.mark.fast
@pytest.mark.parametrize("case", EXACT_CASES, ids=lambda c: c.id)
def test_exact_inputs_accumulate_exactly_in_fp32_in_any_order(case):
    inputs = make_input_set(case, "exact", 0)
    dy, x, w = inputs.as_tuple()
    ref = oracle_gradients(*(np.asarray(a, np.float64) for a in (dy, x, w)), case.stride,
                           case.padding, case.dilation, case.grads)
    limit = 2.0 ** dtype_info(case.dtype).digits
    s = oracle_gradients(*(np.asarray(a, np.float64) for a in (dy, x, w)), case.stride, case.padding,
                         case.dilation, case.grads, magnitudes=True)
    for name in case.grads:
        assert s[name].max() <= limit, f"{name}: sum|a||b| exceeds 2**p of {case.dtype}"
        # every output is exactly representable in its dtype
        assert np.array_equal(round_to_dtype(ref[name], case.dtype).astype(np.float64), ref[name])
    for reverse in (False, True):
        got = fp32_gradients(case, dy, x, w, reverse)
        for name in case.grads:
            assert np.array_equal(got[name].astype(np.float64), ref[name]), (name, reverse)


@pytest.mark.fast
def test_exact_inputs_are_small_integers_in_the_case_dtype():
    for case in EXACT_CASES:
        dy, x, w = make_inputs(case, "exact", 0)
        for array in (dy, x, w):
            assert array.dtype == np.dtype(dtype_info(case.dtype).np_type)
            values = array.astype(np.float64)
            assert np.array_equal(values, np.round(values))
            assert np.abs(values).max() <= 32


@pytest.mark.fast
def test_exact_references_are_mostly_nonzero_for_dense_geometries():
    for case in _pick(("basic", "bf16"), ("vae", "bf16"), ("unet", "bf16"), ("chan", "bf16")):
        inputs = make_input_set(case, "exact", 0)
        ref = oracle_gradients(*(np.asarray(a, np.float64) for a in inputs.as_tuple()), case.stride,
                               case.padding, case.dilation, case.grads)
        for name, values in ref.items():
            assert np.mean(values == 0) <= 0.30, f"{case.id} {name}: reference mostly zeros"


@pytest.mark.parametrize("seed", [0, 1])
def test_no_default_case_gets_a_mostly_zero_exact_reference(seed):
    """Unlucky draws (a few +-1 that cancel, e.g. db over 8 channels) are drawn again, so the
    default report is not MISTRUSTED by chance; the measure is the harness's (reachable elements)."""
    from conv3d_bwd.reference.tolerance import MISTRUST_ZERO_SHARE, accumulation_lengths

    offenders = []
    for case in CASE_SETS["default"]:
        inputs = make_input_set(case, "exact", seed)
        args = [np.asarray(a, np.float64) for a in inputs.as_tuple()]
        geo = (case.stride, case.padding, case.dilation, case.grads)
        ref = oracle_gradients(*args, *geo)
        live = accumulation_lengths(*(np.ones(a.shape) for a in args), *geo)
        for name, values in ref.items():
            reach = live[name] > 0
            share = np.count_nonzero(reach & (values == 0)) / max(1, np.count_nonzero(reach))
            if share > MISTRUST_ZERO_SHARE:
                offenders.append(f"{case.id} {name} {share:.0%}")
    assert not offenders


@pytest.mark.fast
def test_stat_inputs_are_rounded_to_the_dtype_and_nonzero_mean_on_odd_seeds():
    case = _pick(("dtype", "bf16"))[0]
    even = make_input_set(case, "stat", 0)
    odd = make_input_set(case, "stat", 1)
    for inputs in (even, odd):
        for array in inputs.as_tuple():
            as64 = array.astype(np.float64)
            assert np.array_equal(round_to_dtype(as64, case.dtype).astype(np.float64), as64)
    assert even.x.astype(np.float64).min() < 0
    assert odd.x.astype(np.float64).min() >= 0  # |N(0,1)|: ReLU-like activations
    assert odd.dy.astype(np.float64).mean() > 0.1
    assert "N(0.25" in odd.distribution and "N(0,1)" in even.distribution


@pytest.mark.fast
def test_inputs_are_deterministic_per_case_mode_seed():
    case = EXACT_CASES[0]
    for mode in ("exact", "stat"):
        first, second = make_inputs(case, mode, 3), make_inputs(case, mode, 3)
        assert all(a.tobytes() == b.tobytes() for a, b in zip(first, second))
        other = make_inputs(case, mode, 4)
        assert any(a.tobytes() != b.tobytes() for a, b in zip(first, other))
    other_case = EXACT_CASES[1]
    assert stable_seed(case, "exact", 0) != stable_seed(other_case, "exact", 0)
    assert stable_seed(case, "exact", 0) != stable_seed(case, "stat", 0)


@pytest.mark.fast
@pytest.mark.parametrize("mode", ["exact", "stat"])
def test_the_rerun_command_gets_the_case_data(mode):
    """``conv3d-bwd check`` with a case's flags (a case named "cli") reads the same inputs as the
    case in the report or the test matrix, so a printed rerun command reproduces the failure."""
    from conv3d_bwd.verify.cases import case_from_args

    case = next(c for c in EXACT_CASES if c.name != "cli")
    cli = case_from_args(case.batch, (case.c_in, case.c_out), case.input, case.kernel, case.stride,
                         case.padding, case.dilation, case.dtype, case.grads, case.lnc)
    assert cli.name == "cli" and cli.id != case.id
    assert all(a.tobytes() == b.tobytes()
               for a, b in zip(make_inputs(case, mode, 5), make_inputs(cli, mode, 5)))


@pytest.mark.fast
def test_seed_does_not_depend_on_python_hash_randomisation():
    case = EXACT_CASES[0]
    code = ("from conv3d_bwd.verify.cases import CASE_SETS; from conv3d_bwd.verify.inputs import stable_seed; "
            f"c = [c for c in CASE_SETS['default'] if c.id == {case.id!r}][0]; "
            "print(stable_seed(c, 'stat', 7))")
    seen = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        seen.add(int(out.stdout.strip()))
    assert seen == {stable_seed(case, "stat", 7)}


def test_bad_mode_and_seed_are_named():
    case = EXACT_CASES[0]
    with pytest.raises(InputModeError, match="mode: 'fuzzy'"):
        make_inputs(case, "fuzzy", 0)
    with pytest.raises(InputModeError, match="seed: -1"):
        make_inputs(case, "exact", -1)


@pytest.mark.fast
def test_a_geometry_whose_windows_only_see_padding_gets_inputs():
    """Every H tap of the one output position lands in padding (K = 0 for dx and dw): no thinning
    to compute, and the all-zero references are reported MISTRUSTED rather than crashing."""
    case = Case("pad_only", "t", 2, 5, 4, (4, 2, 5), (2, 3, 5), (4, 4, 1), (0, 0, 1, 6, 3, 1),
                (1, 3, 2), "fp32", ("dx", "dw"))
    for mode in ("exact", "stat"):
        dy, x, w = make_inputs(case, mode, 0)
        assert (dy.shape, x.shape, w.shape) == (case.dy_shape, case.x_shape, case.w_shape)
        assert np.count_nonzero(dy) > 0
