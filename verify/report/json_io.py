"""report.json: {"schema", "meta", "records"}; reading, writing and merging shards."""
from __future__ import annotations

import json
from pathlib import Path

SCHEMA = 1


class ReportFileError(ValueError):
    """A report directory or file that cannot be read (names the path and what is wrong)."""


def write_json(records: list[dict], meta: dict, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps({"schema": SCHEMA, "meta": meta, "records": records}, indent=1,
                               sort_keys=False) + "\n")
    return path


def read_report(path: str | Path) -> tuple[list[dict], dict]:
    """(records, meta) from a report.json file or a directory that holds one."""
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    if not path.is_file():
        raise ReportFileError(f"--merge: {str(path)!r} does not exist (expected a report.json)")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ReportFileError(f"--merge: {str(path)!r} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or "records" not in data:
        raise ReportFileError(f"--merge: {str(path)!r} is not a conv3d-bwd report (schema {SCHEMA})")
    return list(data["records"]), dict(data.get("meta", {}))


def record_key(record: dict) -> tuple:
    return (record.get("case_id"), record.get("mode"), record.get("seed"), record.get("grad"),
            record.get("backend"))


def merge_reports(paths: list[str | Path]) -> tuple[list[dict], dict]:
    """Concatenate shards (a record seen twice is kept once) and combine their meta data."""
    merged: dict[tuple, dict] = {}
    metas = []
    for path in paths:
        records, meta = read_report(path)
        metas.append(meta)
        for record in records:
            merged.setdefault(record_key(record), record)
    shards = sorted({m.get("shard") or "1/1" for m in metas})
    meta = {
        "merged_from": [str(p) for p in paths],
        "shards": shards,
        "set": ",".join(sorted({str(m.get("set")) for m in metas})),
        "backend": ",".join(sorted({str(m.get("backend")) for m in metas})),
        "modes": sorted({mode for m in metas for mode in m.get("modes", [])}),
        "wall_s": sum(float(m.get("wall_s") or 0.0) for m in metas),
        "tool_versions": metas[0].get("tool_versions", {}) if metas else {},
        "n_cases": len({r.get("case_id") for r in merged.values()}),
    }
    return list(merged.values()), meta
