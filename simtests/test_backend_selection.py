"""The --backend switch of the suites, against the situations CI meets.

The trap: PyPI's ``nki`` placeholder raises a plain ImportError, not
ModuleNotFoundError. With it installed, the default backend must still run the kernel under nkisim,
and ``nki-simulate`` must skip the kernel tests with the placeholder's message as the reason.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = (
    'raise ImportError("WRONG PACKAGE. Please install the package from Neuron Repository - '
    'pip.repos.neuron.amazonaws.com")\n'
)
TARGET = "simtests/kernels/test_conv3d_bwd_determinism.py"


def _pytest(tmp_path: Path, *args: str, placeholder: bool = True, env_backend: str | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.pop("CONV3D_BWD_BACKEND", None)
    env.pop("NKISIM", None)
    if env_backend is not None:
        env["CONV3D_BWD_BACKEND"] = env_backend
    if placeholder:
        package = tmp_path / "site" / "nki"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(PLACEHOLDER)
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "-rs"],  # not -q: keep the header
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )


def test_placeholder_nki_skips_nki_simulate_with_its_message(tmp_path):
    proc = _pytest(tmp_path, TARGET, "--backend", "nki-simulate")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "backend 'nki-simulate' needs the real Neuron nki" in out, out
    assert "ImportError: WRONG PACKAGE" in out, out
    assert " passed" not in out and " failed" not in out, out


def test_placeholder_nki_does_not_stop_the_default_backend(tmp_path, kernel_backend):
    if kernel_backend != "nkisim":
        pytest.skip(f"checks the nkisim default; this run uses --backend {kernel_backend}")
    proc = _pytest(tmp_path, TARGET)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "conv3d_bwd backend: nkisim; nki bound to: nkisim" in out, out
    assert " passed" in out and "skipped" not in out and "failed" not in out, out


@pytest.mark.fast
def test_environment_variable_selects_the_backend_and_is_checked(tmp_path):
    proc = _pytest(tmp_path, TARGET, "--co", placeholder=False, env_backend="gpu")
    assert proc.returncode != 0
    assert "$CONV3D_BWD_BACKEND: 'gpu' is not one of nkisim, nki-simulate, trn" in proc.stdout + proc.stderr
    proc = _pytest(tmp_path, TARGET, "--co", "--backend", "gpu", placeholder=False)
    assert proc.returncode != 0
    assert "--backend: 'gpu' is not one of nkisim, nki-simulate, trn" in proc.stdout + proc.stderr
    proc = _pytest(tmp_path, TARGET, placeholder=False, env_backend="nki-simulate")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "conv3d_bwd backend: nki-simulate" in out, out
    if importlib.util.find_spec("nki") is None:  # no Neuron package at all on this machine
        assert "backend 'nki-simulate' needs the real Neuron nki" in out, out
