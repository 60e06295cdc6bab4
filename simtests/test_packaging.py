"""One import namespace: the distribution installs ``conv3d_bwd`` alone, a checkout imports the same names.

- A source checkout: ``conv3d_bwd.<subpackage>`` is the folder at the repository root, and no module
  anywhere imports a subpackage by its bare top-level name (the same file loaded under two names would
  keep two plan caches, two forced-plan contexts, two error classes).
- The wheel (built from a copy of the sources, so the checkout gets no build/ folder): its top level is
  ``conv3d_bwd/`` and the dist-info only, it holds every module of the four folders, and once installed
  the console script answers ``--version`` and the kernel runs on nkisim, outside the checkout.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ("kernels", "reference", "nkisim", "verify")
# every folder whose Python files import the project
CODE_DIRS = SUBPACKAGES + ("conv3d_bwd", "simtests", "hwtests", "benchmarks")
# what the wheel is built from (pyproject.toml names README.md and LICENSE)
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "conv3d_bwd") + SUBPACKAGES


def _python_files() -> list[Path]:
    files = [ROOT / "conftest.py"]
    for folder in CODE_DIRS:
        if (ROOT / folder).is_dir():
            files += sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)
    return files


def bare_imports(source: str) -> list[str]:
    """'line: statement' for each absolute import of a subpackage by its top-level name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [f"{node.lineno}: {name}" for name in names if name.split(".")[0] in SUBPACKAGES]
    return found


@pytest.mark.fast
@pytest.mark.parametrize("template, package, expected", [
    ("import {}\n", "nkisim", ["1: nkisim"]),
    ("from {}.plan import plan_conv3d_bwd\n", "kernels", ["1: kernels.plan"]),
    ("def f():\n    import {}.cli as cli\n", "verify", ["2: verify.cli"]),
    ("from conv3d_bwd import {0}\nfrom conv3d_bwd.{0} import conv3d_bwd_ref\n", "reference", []),
    ("from . import {}\nfrom .plan import x\nimport nki\nimport numpy\n", "kernels", []),
], ids=["bare", "from", "nested-alias", "namespaced", "relative-and-others"])
def test_bare_import_finder_itself(template, package, expected):
    # the name is filled in here, so that the examples read the same after any import rewrite of the tree
    assert bare_imports(template.format(package)) == expected


@pytest.mark.fast
def test_no_module_imports_a_subpackage_by_its_top_level_name():
    offenders = {}
    for path in _python_files():
        found = bare_imports(path.read_text(encoding="utf-8"))
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert not offenders, f"import these through conv3d_bwd.<subpackage> (or relatively): {offenders}"


@pytest.mark.fast
@pytest.mark.parametrize("name", SUBPACKAGES)
def test_the_checkout_maps_each_subpackage_to_its_root_folder(name):
    module = __import__(f"conv3d_bwd.{name}", fromlist=["_"])
    assert Path(module.__file__).resolve() == ROOT / name / "__init__.py"
    assert module.__name__ == f"conv3d_bwd.{name}"


_IMPORT_ALL = """
import importlib, pkgutil, sys
import conv3d_bwd
failed = []
for sub in conv3d_bwd.SUBPACKAGES:
    package = importlib.import_module(f"conv3d_bwd.{sub}")
    for info in pkgutil.walk_packages(package.__path__, f"conv3d_bwd.{sub}."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as exc:   # an optional third-party package (torch, matplotlib) may be absent
            if (exc.name or "").split(".")[0] in conv3d_bwd.SUBPACKAGES + ("conv3d_bwd",):
                failed.append(f"{info.name}: {exc}")
print(len([n for n in sys.modules if n.startswith("conv3d_bwd.")]))
print(sorted(n for n in sys.modules if n.split(".")[0] in conv3d_bwd.SUBPACKAGES))
print(failed)
"""


@pytest.mark.slow
def test_every_module_imports_without_loading_a_bare_name():
    """In a fresh interpreter, every module of the four subpackages imports through conv3d_bwd, and
    nothing is loaded under a bare subpackage name (that would be a second copy of a module)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", _IMPORT_ALL], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    count, bare, failed = proc.stdout.strip().splitlines()[-3:]
    assert int(count) > 100, f"only {count} modules imported"
    assert bare == "[]", f"modules loaded under a bare name: {bare}"
    assert failed == "[]", f"modules that do not import: {failed}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the build inputs (the checkout is left untouched)."""
    src = tmp_path_factory.mktemp("src")
    for name in BUILD_INPUTS:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(origin, src / name)
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                           "--no-index", "-q", "-w", str(out)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = out.glob("*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_installs_one_namespace(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    dist_info = {t for t in top if t.endswith(".dist-info")}
    assert len(dist_info) == 1 and top - dist_info == {"conv3d_bwd"}, sorted(top)
    expected = {f"conv3d_bwd/{p.relative_to(ROOT).as_posix()}"
                for name in SUBPACKAGES for p in (ROOT / name).rglob("*.py") if "__pycache__" not in p.parts}
    assert expected - set(names) == set(), "modules missing from the wheel"
    for data in ("conv3d_bwd/verify/shape_sets/realworld.json", "conv3d_bwd/kernels/methods/s2d_gemm/design.md"):
        assert data in names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "conv3d-bwd = conv3d_bwd.verify.cli:main" in text


@pytest.mark.slow
def test_the_installed_wheel_runs_outside_the_checkout(wheel, tmp_path):
    """Installed into a bare folder and run from elsewhere: --version, then one tiny kernel run on nkisim
    checked against the oracle, every module loaded from the installed copy."""
    from conv3d_bwd.verify.version import source_version

    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                           "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CONV3D_BWD_BACKEND")}
    env.update(PYTHONPATH=str(site), NKISIM="1")   # the emulator even where the Neuron package is installed
    run = {"capture_output": True, "text": True, "timeout": 300, "cwd": tmp_path, "env": env}

    script = site / "bin" / "conv3d-bwd"
    version = subprocess.run([str(script), "--version"], check=False, **run)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"conv3d-bwd {source_version(ROOT)}"

    code = (
        "import sys, numpy as np\n"
        "from conv3d_bwd import nkisim\n"
        "from conv3d_bwd.kernels import conv3d_bwd\n"
        "from conv3d_bwd.reference import conv3d_bwd_ref\n"
        "rng = np.random.default_rng(0)\n"
        "dy, x, w = (rng.integers(-2, 3, s).astype(np.float32) for s in ((1, 2, 2, 3, 3), (1, 2, 4, 5, 5),"
        " (3, 3, 3, 2, 2)))\n"
        "got = nkisim.run(conv3d_bwd, dy, x, w).outputs\n"
        "want = conv3d_bwd_ref(dy.astype(np.float64), x.astype(np.float64), w.astype(np.float64))\n"
        "assert all(np.array_equal(g.astype(np.float64), r) for g, r in zip(got, want))\n"
        "print(sys.modules['nki'].__name__)\n"
        "print(sorted({m.__file__.split('/conv3d_bwd/')[0] for n, m in list(sys.modules.items())"
        " if n.startswith('conv3d_bwd') and getattr(m, '__file__', None)}))\n"
    )
    kernel = subprocess.run([sys.executable, "-c", code], check=False, **run)
    assert kernel.returncode == 0, kernel.stderr
    bound, origins = kernel.stdout.strip().splitlines()
    assert bound == "conv3d_bwd.nkisim"
    assert origins == repr([str(site)])
