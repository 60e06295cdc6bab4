"""The command line answers bad input with exit 2 and one line on stderr that names the flag.

Never a traceback: the message must be the only non-empty line of stderr, and no exception escapes
``verify.cli.main``.
"""
from __future__ import annotations

import re

import pytest

GOOD = ["--batch", "1", "--channels", "2,3", "--input", "3,4,5", "--kernel", "3,3,1"]


def _with(flag: str, value: str | None) -> list[str]:
    """GOOD with ``flag`` set to ``value`` (replacing it if present; None removes it)."""
    argv = list(GOOD)
    if flag in argv:
        i = argv.index(flag)
        del argv[i:i + 2]
    if value is not None:
        argv += [flag, value]
    return argv


BAD_CHECK_ARGS = [
    # (id, argv after "check", regex the message must match)
    ("unknown-flag", [*GOOD, "--frobnicate", "1"], r"--frobnicate"),
    ("missing-batch", _with("--batch", None), r"--batch"),
    ("batch-zero", _with("--batch", "0"), r"--batch|batch"),
    ("batch-not-int", _with("--batch", "two"), r"--batch|batch"),
    ("channels-one-value", _with("--channels", "4"), r"--channels|channels"),
    ("channels-zero", _with("--channels", "0,3"), r"--channels|channels|c_in"),
    ("input-two-values", _with("--input", "3,4"), r"--input|input"),
    ("input-malformed", _with("--input", "3,x,5"), r"--input|input"),
    ("kernel-four-values", _with("--kernel", "3,3,1,1"), r"--kernel|kernel"),
    ("stride-zero", [*GOOD, "--stride", "1,0,1"], r"--stride|stride"),
    ("stride-negative", [*GOOD, "--stride", "-1,1,1"], r"--stride|stride"),
    ("stride-float", [*GOOD, "--stride", "1.5,1,1"], r"--stride|stride"),
    ("dilation-zero", [*GOOD, "--dilation", "0,1,1"], r"--dilation|dilation"),
    ("padding-negative", [*GOOD, "--padding", "0,0,-1,0,0,0"], r"--padding|padding"),
    ("padding-three-values", [*GOOD, "--padding", "1,1,1"], r"--padding|padding"),
    ("dtype-unsupported", [*GOOD, "--dtype", "int8"], r"--dtype|dtype"),
    ("grads-unknown", [*GOOD, "--grads", "dx,dq"], r"--grads|grads|dq"),
    ("grads-empty", [*GOOD, "--grads", ""], r"--grads|grads"),
    ("lnc-three", [*GOOD, "--lnc", "3"], r"--lnc|lnc"),
    ("mode-unknown", [*GOOD, "--mode", "fuzzy"], r"--mode|mode"),
    ("backend-unknown", [*GOOD, "--backend", "gpu"], r"--backend|backend"),
    ("seed-not-int", [*GOOD, "--seed", "x"], r"--seed|seed"),
    # impossible geometry: the dilated kernel (1 + 2*(3-1) = 5) is wider than the input (3)
    ("output-dims-below-one", [*GOOD, "--dilation", "2,1,1"], r"out|dilation|kernel|input"),
]


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    from conv3d_bwd.verify.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:  # argparse exits; that is fine as long as the code is 2
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_usage_error(code, out: str, err: str, names: str) -> None:
    assert code == 2, f"exit {code}, expected 2\nstdout: {out}\nstderr: {err}"
    assert "Traceback" not in out + err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err}"
    assert re.search(names, lines[0]), f"message does not name the argument ({names}): {lines[0]}"


CHECK_ONLY_FLAGS = ("--mode", "--seed", "--backend")
GEOMETRY_PARAMS = [
    pytest.param(command, argv, names, id=f"{command}-{case_id}")
    for command in ("check", "plan")
    for case_id, argv, names in BAD_CHECK_ARGS
    if command == "check" or not any(flag in argv for flag in CHECK_ONLY_FLAGS)
]


@pytest.mark.fast
@pytest.mark.parametrize(("command", "argv", "names"), GEOMETRY_PARAMS)
def test_bad_geometry_flags_are_usage_errors(command, argv, names, capsys):
    code, out, err = _run([command, *argv], capsys)
    _assert_usage_error(code, out, err, names)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("argv", "names"),
    [
        pytest.param(["frobnicate"], r"frobnicate|command", id="unknown-subcommand"),
        pytest.param(["plan", *GOOD, "--target", "trn9"], r"--target|target", id="plan-target-unknown"),
        pytest.param(["report", "--set", "nope"], r"--set|set", id="report-set-unknown"),
        pytest.param(["report", "--shard", "3/2"], r"--shard|shard", id="report-shard-out-of-range"),
        pytest.param(["report", "--shard", "0/0"], r"--shard|shard", id="report-shard-zero"),
    ],
)
def test_bad_subcommand_arguments_are_usage_errors(argv, names, capsys):
    code, out, err = _run(argv, capsys)
    _assert_usage_error(code, out, err, names)


@pytest.mark.fast
def test_plan_accepts_the_good_geometry(capsys):
    """The base of every mutation above is valid: exit 0, so each error comes from the one change."""
    code, out, err = _run(["plan", *GOOD], capsys)
    assert code == 0, err
    assert out.strip()
