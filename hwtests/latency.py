"""Latency records of the Trainium suite: one JSON file per session, safe under pytest-xdist.

Each process appends its records to its own part file next to the target (``<path>.parts/<worker>.jsonl``);
the controlling process merges the parts into ``<path>`` at the end of the session.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any


def default_latency_path(rootdir: Path) -> Path:
    """``$TOX_WORK_DIR/hw-latency.json`` under tox, else ``<rootdir>/.tox/hw-latency.json``."""
    workdir = os.environ.get("TOX_WORK_DIR")
    return Path(workdir) / "hw-latency.json" if workdir else rootdir / ".tox" / "hw-latency.json"


def latency_path(config) -> Path:
    """The JSON path of a pytest session: ``--hw-latency-json``, else the default."""
    option = config.getoption("--hw-latency-json")
    return Path(option) if option else default_latency_path(Path(str(config.rootpath)))


def parts_dir(path: Path) -> Path:
    return path.with_name(path.name + ".parts")


class LatencyLog:
    """Appends latency records for one process; ``merge`` combines every process' records."""

    def __init__(self, path: Path, worker: str | None = None) -> None:
        self.path = Path(path)
        self.worker = worker or os.environ.get("PYTEST_XDIST_WORKER") or "main"

    @property
    def part_file(self) -> Path:
        return parts_dir(self.path) / f"{self.worker}.jsonl"

    def add(self, record: dict[str, Any]) -> None:
        self.part_file.parent.mkdir(parents=True, exist_ok=True)
        with self.part_file.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")


def merge_latency_parts(path: Path) -> list[dict[str, Any]] | None:
    """Merge the part files into ``path`` (sorted by case id, then mode) and remove them.

    Returns the merged records, or None when there were no parts (nothing was recorded).
    """
    path = Path(path)
    parts = parts_dir(path)
    if not parts.is_dir():
        return None
    records = []
    for part in sorted(parts.glob("*.jsonl")):
        records.extend(json.loads(line) for line in part.read_text(encoding="utf-8").splitlines() if line)
    records.sort(key=lambda r: (r.get("case", ""), r.get("mode", ""), r.get("backend", "")))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"records": records}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    shutil.rmtree(parts)
    return records
