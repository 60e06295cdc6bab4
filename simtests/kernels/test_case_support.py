"""The suite's own verdict logic can fail: stand-in kernels with planted faults must be caught.

Uses the test-only stand-ins of simtests/verify/standins.py (a correct fp32 "kernel" built from the
oracle, and a wrapper that moves one element), so these run without the real kernel.
"""
from __future__ import annotations

import math

import pytest

from conv3d_bwd.verify.cases import Case
from conv3d_bwd.verify.harness import run_case
from simtests.verify.standins import ORACLE_FP32, WRONG, oracle_fp32, registered, with_fault

from .case_support import case_failures, case_properties, describe_result, repro_command

SEED = 3
CASE = Case(name="support", group="basic", batch=1, c_in=3, c_out=4, input=(3, 4, 5), kernel=(2, 3, 1),
            stride=(1, 2, 1), padding=(1, 0, 0, 1, 0, 0), dilation=(1, 1, 2), dtype="bf16")


@pytest.mark.fast
@pytest.mark.parametrize("mode", ["exact", "stat"])
def test_a_correct_kernel_is_accepted(mode):
    with registered(ORACLE_FP32, oracle_fp32):
        result = run_case(CASE, backend=ORACLE_FP32, mode=mode, seed=SEED)
    assert case_failures(result) == [], describe_result(result, SEED)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("mode", "grad", "fault", "expected"),
    [
        ("exact", "dx", {"delta_ulps": 1}, "dx: exact mode is not bit-exact"),
        ("exact", "dw", {"delta_ulps": -1}, "dw: exact mode is not bit-exact"),
        ("exact", "db", {"value": 0.0, "index": 1}, "db: exact mode is not bit-exact"),
        ("stat", "dx", {"delta_ulps": 4}, "dx: 1 of"),
        ("stat", "dw", {"value": math.nan}, "dw: 1 NaN/Inf the oracle does not have"),
        ("exact", "db", {"value": math.inf}, "db: 1 NaN/Inf the oracle does not have"),
    ],
    ids=["exact-dx-1ulp", "exact-dw-minus-1ulp", "exact-db-zeroed", "stat-dx-4ulp", "stat-dw-nan", "exact-db-inf"],
)
def test_a_planted_fault_fails_the_case(mode, grad, fault, expected):
    with registered(WRONG, with_fault(oracle_fp32, grad=grad, **fault)):
        result = run_case(CASE, backend=WRONG, mode=mode, seed=SEED)
    failures = case_failures(result)
    assert any(expected in f for f in failures), failures
    assert "reproduce: conv3d-bwd check" in describe_result(result, SEED)


@pytest.mark.fast
def test_properties_of_a_result():
    with registered(ORACLE_FP32, oracle_fp32):
        result = run_case(CASE, backend=ORACLE_FP32, mode="exact", seed=SEED)
    props = case_properties(result)
    assert props["case"] == CASE.id and props["mode"] == "exact" and props["backend"] == ORACLE_FP32
    assert props["modelled_us"] == 1.5  # the stand-in's summary
    for grad in ("dx", "dw", "db"):
        assert props[f"{grad}_max_abs_err"] == 0.0 and props[f"{grad}_max_ulp"] == 0
        assert props[f"{grad}_K"] == result.grads[grad].K_max >= 1
        assert props[f"{grad}_status"] in ("PASS", "MISTRUSTED")
    assert props["max_bound_ratio"] == 0.0


@pytest.mark.fast
def test_repro_command_names_every_field():
    command = repro_command(CASE, "stat", 17, "nkisim")
    assert command == (
        "conv3d-bwd check --batch 1 --channels 3,4 --input 3,4,5 --kernel 2,3,1 --stride 1,2,1 "
        "--padding 1,0,0,1,0,0 --dilation 1,1,2 --dtype bf16 --grads dx,dw,db --lnc 1 --mode stat "
        "--seed 17 --backend nkisim"
    )


def test_repro_command_reruns_the_case_in_the_cli(capsys, kernel_backend):
    """The printed line is a working command: the CLI parses it back into the same case and runs it."""
    import json

    from conv3d_bwd.verify.cli import main

    small = Case(name="repro", group="basic", batch=1, c_in=2, c_out=3, input=(2, 3, 4), kernel=(2, 1, 3),
                 stride=(1, 1, 2), padding=(0, 1, 0, 0, 1, 1), dilation=(1, 1, 1), dtype="fp16",
                 grads=("dx", "db"), lnc=2)
    argv = repro_command(small, "exact", SEED, kernel_backend).split()
    assert argv[0] == "conv3d-bwd"
    code = main([*argv[1:], "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    records = json.loads(out)
    assert [r["grad"] for r in records] == ["dx", "db"]
    for record in records:
        geometry = record["geometry"]
        for field in ("batch", "c_in", "c_out", "input", "kernel", "stride", "padding", "dilation", "dtype",
                      "grads", "lnc"):
            expected = getattr(small, field)
            assert geometry[field] == (list(expected) if isinstance(expected, tuple) else expected), field
        assert (record["mode"], record["seed"], record["backend"]) == ("exact", SEED, kernel_backend)
        assert record["passed"] is True
