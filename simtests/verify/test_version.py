"""verify.version and ``conv3d-bwd --version``: the installed distribution's version, else pyproject's."""
from __future__ import annotations

from pathlib import Path

import pytest

from conv3d_bwd.verify import version
from conv3d_bwd.verify.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _pyproject_version() -> str:
    """pyproject's version by a real TOML parser (Python >= 3.11), independent of the code under test."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


@pytest.mark.fast
def test_source_version_reads_the_project_table_only(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["x"]\n\n[project]\nname = "p"\ndependencies = [\n    "numpy",\n]\n'
        'version = "1.2.3"\n\n[tool.other]\nversion = "9.9.9"\n', encoding="utf-8")
    assert version.source_version(tmp_path) == "1.2.3"


@pytest.mark.fast
def test_source_version_without_a_pyproject_is_none(tmp_path):
    assert version.source_version(tmp_path) is None
    (tmp_path / "pyproject.toml").write_text('[tool.other]\nversion = "9.9.9"\n', encoding="utf-8")
    assert version.source_version(tmp_path) is None


@pytest.mark.fast
def test_this_checkout_reports_its_pyproject_version():
    assert version.source_version() == _pyproject_version()
    assert version.project_version() == _pyproject_version()


class _FakeDistribution:
    def __init__(self, root: Path, dist_version: str) -> None:
        self.root, self.version = root, dist_version

    def locate_file(self, path: str) -> Path:
        return self.root / path


@pytest.mark.fast
def test_installed_version_only_for_the_distribution_that_holds_this_file(monkeypatch, tmp_path):
    # An installed tree whose module at the import-name path is this very file (a link to it).
    installed = tmp_path / "site"
    (installed / version.MODULE_PATH).parent.mkdir(parents=True)
    (installed / version.MODULE_PATH).symlink_to(Path(version.__file__).resolve())
    monkeypatch.setattr(version.importlib.metadata, "distribution",
                        lambda name: _FakeDistribution(installed, "7.0.1"))
    assert version.installed_version() == "7.0.1"
    assert version.project_version() == "7.0.1"
    # Another copy installed elsewhere does not speak for the code that runs.
    other = tmp_path / "other"
    (other / version.MODULE_PATH).parent.mkdir(parents=True)
    (other / version.MODULE_PATH).write_text("", encoding="utf-8")
    monkeypatch.setattr(version.importlib.metadata, "distribution",
                        lambda name: _FakeDistribution(other, "0.0.1"))
    assert version.installed_version() is None
    assert version.project_version() == _pyproject_version()


@pytest.mark.fast
def test_installed_version_of_an_absent_distribution_is_none():
    assert version.installed_version("no-such-distribution-of-this-project") is None


@pytest.mark.fast
def test_cli_version_flag(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"conv3d-bwd {_pyproject_version()}"
