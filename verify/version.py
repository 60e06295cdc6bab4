"""The project's version: the installed distribution's, or pyproject.toml's when run from source."""
from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

DISTRIBUTION = "nki-conv3d-bwd"
_SOURCE_ROOT = Path(__file__).resolve().parents[1]
# Where an installed distribution holds this module, from its import name (the installed package's
# layout follows the import names, whatever folder the source sits in).
MODULE_PATH = __name__.replace(".", "/") + ".py"
# The [project] table (up to the next table header) and its version key; regexes rather than tomllib,
# which Python 3.10 lacks.
_PROJECT_TABLE = re.compile(r"^\[project\][ \t]*$(.*?)(?=^\[|\Z)", re.MULTILINE | re.DOTALL)
_VERSION_KEY = re.compile(r'^version\s*=\s*"([^"]+)"', re.MULTILINE)


def installed_version(distribution: str = DISTRIBUTION) -> str | None:
    """The version of the installed distribution that provides this very file, else None.

    A checkout run from source may sit beside an installed copy of another version; only a
    distribution whose files include this module speaks for the code that is running.
    """
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    provided = Path(str(dist.locate_file(MODULE_PATH)))
    if provided.exists() and provided.resolve() == Path(__file__).resolve():
        return dist.version
    return None


def source_version(root: Path = _SOURCE_ROOT) -> str | None:
    """The ``[project] version`` of ``root/pyproject.toml``, or None when there is none."""
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    table = _PROJECT_TABLE.search(text)
    found = _VERSION_KEY.search(table.group(1)) if table else None
    return found.group(1) if found else None


def project_version() -> str:
    """The installed distribution's version, else pyproject.toml's (run from source), else 'unknown'."""
    return installed_version() or source_version() or "unknown"
