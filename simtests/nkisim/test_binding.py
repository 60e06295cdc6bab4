"""nkisim.binding.ensure_nki, each case in a fresh interpreter (it edits sys.modules)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

KERNEL = """
import numpy as np
from conv3d_bwd.nkisim.binding import ensure_nki
print(ensure_nki({prefer}))
import nki
import nki.language as nl
import nki.isa as nisa

@nki.jit
def double(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype)
    nisa.dma_copy(t, x)
    nisa.tensor_tensor(t, t, t, op=nl.add)
    nisa.dma_copy(out, t)
    return out

print(nki.simulate(double)(np.ones((4, 4), np.float32)).sum())
"""

PLACEHOLDER = """raise ImportError("placeholder: install from the Neuron repository")\n"""
FAKE_REAL = """
def jit(fn=None, **kw):
    return fn
"""


def _run(code: str, extra_path: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    paths = [str(ROOT)] + ([str(extra_path)] if extra_path else [])
    full_env = {k: v for k, v in os.environ.items() if k not in ("NKISIM", "PYTHONPATH")}
    full_env["PYTHONPATH"] = os.pathsep.join(paths)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, timeout=60, cwd=ROOT, check=False)


def _package(tmp_path: Path, body: str) -> Path:
    pkg = tmp_path / "site" / "nki"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    (pkg / "language.py").write_text("")
    (pkg / "isa.py").write_text("")
    return tmp_path / "site"


def test_without_nki_installed_the_kernel_runs_on_nkisim(tmp_path):
    r = _run(KERNEL.format(prefer=""), _package(tmp_path, PLACEHOLDER))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["nkisim", "32.0"]


def test_nothing_installed_at_all():
    r = _run(KERNEL.format(prefer=""))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "nkisim"


def test_real_package_is_preferred_when_it_imports(tmp_path):
    code = "from conv3d_bwd.nkisim.binding import ensure_nki\nprint(ensure_nki())\nimport nki\nprint(nki.__name__)\n"
    r = _run(code, _package(tmp_path, FAKE_REAL))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["nki", "nki"]


@pytest.mark.parametrize("how", ["prefer", "env"])
def test_nkisim_can_be_forced_over_the_real_package(tmp_path, how):
    prefer = "'nkisim'" if how == "prefer" else ""
    env = {"NKISIM": "1"} if how == "env" else {}
    r = _run(KERNEL.format(prefer=prefer), _package(tmp_path, FAKE_REAL), env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["nkisim", "32.0"]


def test_prefer_real_without_it_is_an_import_error(tmp_path):
    code = "from conv3d_bwd.nkisim.binding import ensure_nki\nensure_nki('nki')\n"
    r = _run(code, _package(tmp_path, PLACEHOLDER))
    assert r.returncode != 0
    assert "ImportError" in r.stderr
