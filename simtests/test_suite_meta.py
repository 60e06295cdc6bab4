"""Tests about the test suite itself: conventions that keep it honest and complete.

- Every test file seeds its randomness (a flaky numeric test on a simulator or a device is
  indistinguishable from a real bug; nki-library enforces the same rule).
- Planner coverage (every strategy and method the planner can choose is the pick of at least one case
  of the default matrix) is checked in simtests/verify/test_case_coverage.py, with the per-dtype check
  that shares its plans.
- The default matrix covers every case group, with unique ids.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE_DIRS = ("simtests", "hwtests")

# numpy calls that draw from the hidden global state (only reproducible after np.random.seed).
_NP_GLOBAL_DRAWS = {
    "rand", "randn", "randint", "random", "random_sample", "ranf", "sample", "choice", "shuffle",
    "permutation", "normal", "uniform", "standard_normal", "integers", "binomial", "poisson",
    "exponential", "bytes",
}
_STDLIB_GLOBAL_DRAWS = {
    "random", "randint", "randrange", "choice", "choices", "shuffle", "sample", "uniform", "gauss",
    "normalvariate", "getrandbits", "randbytes",
}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def unseeded_random_calls(source: str) -> list[str]:
    """Calls in ``source`` that draw randomness without an explicit seed, as 'line: call' strings."""
    tree = ast.parse(source)
    calls = [(node.lineno, _dotted(node.func), node) for node in ast.walk(tree) if isinstance(node, ast.Call)]
    names = {name for _, name, _ in calls}
    np_seeded = any(n.endswith("random.seed") and n != "random.seed" for n in names)
    stdlib_seeded = "random.seed" in names
    problems = []
    for line, name, node in calls:
        has_seed = bool(node.args or node.keywords)
        last = name.rsplit(".", 1)[-1]
        if last in ("default_rng", "RandomState", "Random", "SeedSequence", "PCG64", "Generator"):
            if not has_seed:
                problems.append(f"{line}: {name}() without a seed")
        elif name.startswith(("np.random.", "numpy.random.")) and last in _NP_GLOBAL_DRAWS:
            if not np_seeded:
                problems.append(f"{line}: {name}() draws from numpy's global state, never seeded")
        elif name.startswith("random.") and last in _STDLIB_GLOBAL_DRAWS and not stdlib_seeded:
            problems.append(f"{line}: {name}() draws from the stdlib global state, never seeded")
    return problems


def _suite_files() -> Iterator[Path]:
    for folder in SUITE_DIRS:
        yield from sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.fast
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import numpy as np\nrng = np.random.default_rng()\n", ["2: np.random.default_rng() without a seed"]),
        ("import numpy as np\nrng = np.random.default_rng(3)\n", []),
        ("import numpy as np\nx = np.random.randn(3)\n",
         ["2: np.random.randn() draws from numpy's global state, never seeded"]),
        ("import numpy as np\nnp.random.seed(1)\nx = np.random.randn(3)\n", []),
        ("import random\nx = random.randint(1, 3)\n",
         ["2: random.randint() draws from the stdlib global state, never seeded"]),
        ("import random\nr = random.Random(5)\nx = r.randint(1, 3)\n", []),
        ("from numpy.random import default_rng\nrng = default_rng(seed=None or 4)\n", []),
    ],
    ids=["rng-unseeded", "rng-seeded", "np-global", "np-global-seeded", "stdlib-global", "stdlib-instance",
         "rng-keyword-seed"],
)
def test_seed_checker_itself(source, expected):
    assert unseeded_random_calls(source) == expected


@pytest.mark.fast
def test_every_test_file_seeds_its_randomness():
    offenders = {}
    for path in _suite_files():
        problems = unseeded_random_calls(path.read_text(encoding="utf-8"))
        if problems:
            offenders[str(path.relative_to(ROOT))] = problems
    assert not offenders, f"unseeded randomness (pass an explicit seed): {offenders}"


@pytest.mark.fast
def test_default_matrix_ids_are_unique_and_cover_every_group():
    from conv3d_bwd.verify.cases import CASE_SETS

    cases = CASE_SETS["default"]
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    assert {c.id for c in CASE_SETS["fast"]} <= set(ids), "the fast set must be part of the default set"
    assert {c.id for c in cases if c.fast} == {c.id for c in CASE_SETS["fast"]}
    gaps = []
    channels = {c.c_in for c in cases} | {c.c_out for c in cases}
    for edge in (1, 63, 64, 65, 127, 128, 129, 256, 513):
        if edge not in channels:
            gaps.append(f"channel count {edge}")
    if not any(max(c.stride) > 1 for c in cases):
        gaps.append("stride > 1")
    if not any(max(c.dilation) > 1 for c in cases):
        gaps.append("dilation > 1")
    if not any(c.padding[0::2] != c.padding[1::2] for c in cases):
        gaps.append("asymmetric padding")
    if not any(7 in c.kernel for c in cases):
        gaps.append("kernel size 7")
    if not any(len(set(c.kernel)) > 1 for c in cases):
        gaps.append("asymmetric kernel")
    if not any(c.batch > 1 for c in cases):
        gaps.append("batch > 1")
    if not any(c.lnc == 2 for c in cases):
        gaps.append("LNC2")
    for dtype in ("bf16", "fp16", "fp32"):
        if not any(c.dtype == dtype for c in cases):
            gaps.append(f"dtype {dtype}")
    subsets = {tuple(c.grads) for c in cases}
    for subset in (("dx",), ("dw",), ("db",), ("dx", "dw"), ("dx", "db"), ("dw", "db"), ("dx", "dw", "db")):
        if subset not in subsets:
            gaps.append(f"gradient subset {'+'.join(subset)}")
    assert not gaps, f"the default matrix misses: {gaps}"


def test_junit_properties_survive_xdist(tmp_path, kernel_backend):
    """One small case in both modes through an xdist worker (``-n 1``: reports cross a process
    boundary as with any worker count): each <testcase> carries the per-case properties."""
    from conv3d_bwd.verify.cases import CASE_SETS

    case = min((c for c in CASE_SETS["fast"] if c.lnc == 1),
               key=lambda c: c.batch * c.c_in * c.c_out * c.input[0] * c.input[1] * c.input[2])
    xml_path = tmp_path / "junit.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "simtests/kernels/test_conv3d_bwd_cases.py", "-p", "no:cacheprovider",
         "-q", "-n", "1", "-k", f"test_case_matches_oracle and {case.id}", f"--junitxml={xml_path}",
         "--backend", kernel_backend],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    testcases = ET.parse(xml_path).getroot().findall(".//testcase")
    assert len(testcases) == 2, [t.get("name") for t in testcases]
    for testcase in testcases:
        props = {p.get("name"): p.get("value") for p in testcase.iter("property")}
        assert props["case"] == case.id and props["backend"] == kernel_backend
        assert props["mode"] in testcase.get("name")
        assert props["plan"], props
        for grad in case.grads:
            assert int(props[f"{grad}_K"]) >= 1
            assert float(props[f"{grad}_bound_ratio"]) <= 1.0
            assert float(props[f"{grad}_max_abs_err"]) >= 0.0
        if props["mode"] == "exact":
            assert all(float(props[f"{g}_max_abs_err"]) == 0.0 for g in case.grads)
