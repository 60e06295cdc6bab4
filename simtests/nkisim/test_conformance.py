"""nkisim.conformance: the runner on a tiny fake checkout that each test writes into tmp_path."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conv3d_bwd.nkisim.conformance import (
    Case,
    FileReference,
    Generation,
    KernelSpec,
    LocalReference,
    run_spec,
)
from conv3d_bwd.nkisim.conformance import __main__ as cli
from conv3d_bwd.nkisim.conformance.runner import extract_function

LEGACY_KERNEL = '''
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def add_kernel(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 4 + nl.arange(4)[:, None]
    iy = nl.arange(a.shape[1])[None, :]
    nl.store(c[ix, iy], value=nl.load(a[ix, iy]) + nl.load(b[ix, iy]))
    return c


@nki.jit
def off_by_one(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(c, value=nl.load(a) + nl.load(b) + 1.0)
    return c


@nki.jit
def too_many_partitions(a, b):
    nl.ndarray((nl.par_dim(200), 2), dtype=nl.float32, buffer=nl.sbuf, name="huge")
'''

# a reference file that, like the tutorials' *_torch.py, imports a device-only package at the top
REFERENCE = '''
import numpy as np
from torch_xla.core import xla_model as xm

device = xm.xla_device()


def add_ref(a, b):
    return np.add(a, b)


if __name__ == "__main__":
    raise SystemExit("not run by the runner")
'''

DEVICE_KERNEL = '''
import torch_xla.core.xla_model as xm
import neuronxcc.nki as nki
'''

LIBRARY_KERNEL = '''
import nki
import nki.isa as nisa
import nki.language as nl

from ..utils.scale import SCALE


@nki.jit
def scale(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nisa.tensor_scalar(t, t, nl.multiply, SCALE)
    nl.store(out, t)
    return out
'''

LIBRARY_REF = '''
import torch


def scale_torch_ref(x):
    return {"out": x * 2.0}
'''


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def _inputs(rng, module=None):
    return Case((rng.random((8, 16), dtype=np.float32), rng.random((8, 16), dtype=np.float32)))


def _legacy_spec(entry: str, reference=None, path: str = "contributed/kernels.py") -> KernelSpec:
    return KernelSpec(f"fake-samples {entry}", "nki-samples", path, entry, Generation.legacy, _inputs,
                      reference or FileReference("contributed/reference.py", "add_ref"), 1e-6, 1e-6,
                      "written by the test", grid=(2,))


@pytest.fixture
def samples(tmp_path: Path) -> Path:
    return _write(tmp_path / "samples", {"contributed/kernels.py": LEGACY_KERNEL,
                                         "contributed/reference.py": REFERENCE,
                                         "contributed/device_only.py": DEVICE_KERNEL})


@pytest.fixture
def library(tmp_path: Path) -> Path:
    lib = "src/nkilib_src/nkilib"
    return _write(tmp_path / "library", {
        "src/nkilib_src/__init__.py": "", f"{lib}/__init__.py": "", f"{lib}/core/__init__.py": "",
        f"{lib}/core/utils/__init__.py": "", f"{lib}/core/utils/scale.py": "SCALE = 2.0\n",
        f"{lib}/core/scale/__init__.py": "", f"{lib}/core/scale/scale.py": LIBRARY_KERNEL,
        f"{lib}/core/scale/scale_torch.py": LIBRARY_REF,
        f"{lib}/core/other/other.py": "def other(x):\n    return x\n",
        f"{lib}/core/other/other_torch.py": "def other_torch_ref(x):\n    return x\n"})


def test_legacy_kernel_with_a_reference_from_a_file_that_imports_torch_xla(samples):
    row = run_spec(_legacy_spec("add_kernel"), samples)
    assert (row.ran, row.matched, row.first_error) == (True, True, "")
    assert row.max_abs_err == pytest.approx(0.0, abs=1e-6)


def test_a_wrong_result_is_reported_with_the_first_mismatch(samples):
    row = run_spec(_legacy_spec("off_by_one"), samples)
    assert row.ran and not row.matched
    assert "128 of 128 elements outside rtol=1e-06 atol=1e-06" in row.first_error
    assert row.max_abs_err == pytest.approx(1.0, rel=1e-6)


def test_a_rule_violation_is_the_first_error(samples):
    row = run_spec(_legacy_spec("too_many_partitions"), samples)
    assert not row.ran and not row.matched
    assert row.first_error.startswith("NkiValidationError: ndarray: operand 'huge': partition dimension 200")


def test_a_device_only_import_is_skipped_with_its_reason(samples):
    row = run_spec(_legacy_spec("anything", path="contributed/device_only.py"), samples)
    assert not row.ran and row.skipped == "needs torch_xla (a device-only import)"


def test_a_missing_kernel_file_is_an_error_not_a_skip(samples):
    row = run_spec(_legacy_spec("add_kernel", path="contributed/gone.py"), samples)
    assert not row.ran and not row.skipped and "FileNotFoundError" in row.first_error


def test_local_reference(samples):
    spec = _legacy_spec("add_kernel", LocalReference(lambda a, b: a + b, "a + b"))
    assert run_spec(spec, samples).matched


def test_extract_function_runs_only_imports_functions_and_classes(samples):
    fn = extract_function(samples / "contributed/reference.py", "add_ref")
    np.testing.assert_array_equal(fn(np.ones(2), np.ones(2)), np.full(2, 2.0))
    with pytest.raises(LookupError, match="no function 'missing'"):
        extract_function(samples / "contributed/reference.py", "missing")


def test_extract_function_binds_literal_constants_but_runs_no_other_statement(tmp_path):
    # a test module's helper reads a module-level constant; a computed assignment is never run
    (tmp_path / "helpers.py").write_text(textwrap.dedent('''
        P_MAX = 128
        SIDE_EFFECT = open("must-not-be-created", "w")


        def rows():
            return P_MAX


        def side_effect():
            return SIDE_EFFECT
    '''))
    assert extract_function(tmp_path / "helpers.py", "rows")() == 128
    with pytest.raises(NameError, match="SIDE_EFFECT"):
        extract_function(tmp_path / "helpers.py", "side_effect")()
    assert not (tmp_path / "must-not-be-created").exists() and not Path("must-not-be-created").exists()


def _scale_inputs(rng, module):
    x = rng.random((4, 8), dtype=np.float32)
    return Case((), {"x": x}, ref_args=(), ref_kwargs={"x": x})


def test_current_generation_package_kernel_with_relative_imports_and_a_torch_reference(library):
    pytest.importorskip("torch")
    lib = "src/nkilib_src/nkilib/core/scale"
    spec = KernelSpec("fake-library core/scale/scale", "nki-library", f"{lib}/scale.py", "scale", Generation.current,
                      _scale_inputs, FileReference(f"{lib}/scale_torch.py", "scale_torch_ref", torch_inputs=True,
                                                   module="nkilib_src.nkilib.core.scale.scale_torch"),
                      0.0, 0.0, "written by the test", module="nkilib_src.nkilib.core.scale.scale")
    row = run_spec(spec, library)
    assert (row.ran, row.matched, row.first_error) == (True, True, "")


def test_a_reference_that_cannot_be_imported_still_runs_the_kernel_and_never_matches(library):
    lib = "src/nkilib_src/nkilib/core/scale"
    (library / lib / "scale_sdk_torch.py").write_text("import a_package_missing_here\n\n\ndef ref(x):\n    return x\n")
    spec = KernelSpec("fake-library core/scale/scale", "nki-library", f"{lib}/scale.py", "scale", Generation.current,
                      _scale_inputs, FileReference(f"{lib}/scale_sdk_torch.py", "ref",
                                                   module="nkilib_src.nkilib.core.scale.scale_sdk_torch"),
                      0.0, 0.0, "written by the test", module="nkilib_src.nkilib.core.scale.scale")
    row = run_spec(spec, library)
    assert (row.ran, row.matched, row.skipped) == (True, False, "")
    assert row.first_error.startswith("reference not importable: ModuleNotFoundError")
    assert "a_package_missing_here" in row.first_error


def test_a_checkout_whose_source_does_not_parse_is_skipped_with_the_file_and_line(library):
    """A kernel importing a module of the checkout that has a syntax error: no compiler could load it, so the
    row is skipped with where the checkout is broken, not counted as an emulator failure."""
    lib = "src/nkilib_src/nkilib/core/scale"
    (library / lib / "broken.py").write_text("def f():\n    return 1\n      return 2\n")
    (library / lib / "uses_broken.py").write_text((library / lib / "scale.py").read_text() + "\nfrom . import broken\n")
    spec = KernelSpec("fake-library core/scale/uses_broken", "nki-library", f"{lib}/uses_broken.py", "scale",
                      Generation.current, _scale_inputs, FileReference(f"{lib}/scale_torch.py", "scale_torch_ref"),
                      0.0, 0.0, "written by the test", module="nkilib_src.nkilib.core.scale.uses_broken")
    row = run_spec(spec, library)
    assert (row.ran, row.matched) == (False, False)
    assert row.skipped == "the checkout does not parse: IndentationError in broken.py, line 3: unexpected indent"


def test_an_unpublished_package_gets_a_placeholder_that_raises_when_used(library):
    """neuron_dtypes (imported at the top of AWS's references, not on PyPI): a reference that only imports
    it or names from it runs; one that uses it fails with a message naming the package, never a made-up value."""
    pytest.importorskip("torch")
    lib = "src/nkilib_src/nkilib/core/scale"
    (library / lib / "scale_dt_torch.py").write_text(
        "import neuron_dtypes as dt\nfrom neuron_dtypes import static_cast\n\n\n"
        "def ref(x):\n    return {'out': x * 2.0}\n\n\n"
        "def ref_using_it(x):\n    return static_cast(x, 'float32')\n\n\n"
        "def ref_using_the_module(x):\n    return dt.static_cast(x, 'float32')\n")

    def spec(name):
        return KernelSpec("fake-library core/scale/scale", "nki-library", f"{lib}/scale.py", "scale",
                          Generation.current, _scale_inputs,
                          FileReference(f"{lib}/scale_dt_torch.py", name, torch_inputs=True,
                                        module="nkilib_src.nkilib.core.scale.scale_dt_torch"),
                          0.0, 0.0, "written by the test", module="nkilib_src.nkilib.core.scale.scale")
    row = run_spec(spec("ref"), library)
    assert (row.ran, row.matched, row.first_error) == (True, True, "")
    for name in ("ref_using_it", "ref_using_the_module"):
        row = run_spec(spec(name), library)
        assert (row.ran, row.matched) == (True, False)
        assert row.first_error.startswith("reference not importable: ModuleNotFoundError: neuron_dtypes.static_cast: "
                                          "'neuron_dtypes' is not installed")
    import sys
    assert "neuron_dtypes" not in sys.modules   # removed after the run


def test_cli_prints_the_table_and_json(samples, library, monkeypatch, capsys):
    specs = (_legacy_spec("add_kernel"), _legacy_spec("off_by_one"))
    monkeypatch.setattr(cli, "catalog", lambda: {"nki-samples": specs, "nki-library": ()})
    assert cli.main(["--nki-samples", str(samples), "--nki-library", str(library)]) == 0
    table = capsys.readouterr().out
    assert "| fake-samples add_kernel | yes | yes |" in table
    assert "| fake-samples off_by_one | yes | no |" in table
    assert "nki-library core/other/other.py (extra) | no | no |  | skipped: no spec" in table
    assert "target kernels: 1 of 2 matched" in table
    assert cli.main(["--nki-samples", str(samples), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["kernel"], r["matched"]) for r in rows] == [("fake-samples add_kernel", True),
                                                          ("fake-samples off_by_one", False)]


def test_cli_rejects_missing_checkouts(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main([])
    with pytest.raises(SystemExit):
        cli.main(["--nki-samples", str(tmp_path / "nowhere")])
    assert "is not a directory" in capsys.readouterr().err


def test_range_criterion_scales_the_tolerance_with_the_largest_reference_value(samples):
    from conv3d_bwd.nkisim.conformance import Criterion

    # a + b (inputs in [0, 1)) is off by 5e-4 everywhere; the reference's largest value is close to 2
    spec = _legacy_spec("add_kernel", LocalReference(lambda a, b: a + b + 5e-4, "a + b, shifted"))
    per_element = KernelSpec(**{**spec.__dict__, "rtol": 1e-3, "atol": 0.0})
    by_range = KernelSpec(**{**per_element.__dict__, "criterion": Criterion.range})
    assert not run_spec(per_element, samples).matched   # 5e-4 > 1e-3 * |ref| where a + b < 0.5
    assert run_spec(by_range, samples).matched          # 5e-4 <= 1e-3 * max|ref|
