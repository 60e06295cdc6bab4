"""report.json: {"schema", "meta", "records"}; reading, writing and merging shards."""
from __future__ import annotations

import json
from collections import defaultdict
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


def _shards_of(meta: dict) -> list[str]:
    """The shards a report holds: its own "I/N", or every shard a merged report was made of."""
    if meta.get("shards"):
        return [str(s) for s in meta["shards"]]
    return [str(meta.get("shard") or "1/1")]


def _run_family(meta: dict) -> tuple:
    """What the shards of one sharded run share (a different value means a different run)."""
    return (meta.get("set"), meta.get("backend"), tuple(meta.get("modes") or ()), meta.get("seed"),
            meta.get("target"), meta.get("only"))


def missing_shards(metas: list[dict]) -> list[str]:
    """Shards absent from the merge, e.g. ["set 'fast' (seed 0): 2/2"]: a merge of 1/2 alone
    would otherwise report PASS on half of a case set."""
    seen: dict[tuple, set[tuple[int, int]]] = defaultdict(set)
    for meta in metas:
        for shard in _shards_of(meta):
            try:
                index, count = (int(v) for v in shard.split("/"))
            except ValueError:
                continue  # not a shard label this tool writes: nothing to check against
            seen[(_run_family(meta), count)].add((index, count))
    missing = []
    for (family, count), have in sorted(seen.items(), key=str):
        absent = [f"{i}/{count}" for i in range(1, count + 1) if (i, count) not in have]
        if absent:
            missing.append(f"set {family[0]!r} (backend {family[1]}, seed {family[3]}): "
                           + ", ".join(absent))
    return missing


def merge_reports(paths: list[str | Path], allow_partial: bool = False) -> tuple[list[dict], dict]:
    """Concatenate shards (a record seen twice is kept once) and combine their meta data.

    Raises ReportFileError when a shard of a run is missing (unless allow_partial; the merged meta
    then lists the missing shards under "missing_shards").
    """
    merged: dict[tuple, dict] = {}
    metas = []
    # The same directory named twice is one shard (its wall time counts once).
    paths = list(dict.fromkeys(Path(p).resolve() for p in paths))
    for path in paths:
        records, meta = read_report(path)
        metas.append(meta)
        folder = path if path.is_dir() else path.parent
        for record in records:
            if record.get("timeline") and not Path(record["timeline"]).is_absolute():
                # relative to its shard's folder; the merged report names it from its own
                record = {**record, "timeline": str(folder / record["timeline"])}
            merged.setdefault(record_key(record), record)
    missing = missing_shards(metas)
    if missing and not allow_partial:
        raise ReportFileError(f"--merge: shards missing: {'; '.join(missing)} (merge every shard of "
                              "a run, or pass --partial to write an incomplete report)")
    shards = sorted({s for m in metas for s in _shards_of(m)})
    meta = {
        "merged_from": [str(p) for p in paths],
        "shards": shards,
        "set": ",".join(sorted({str(m.get("set")) for m in metas})),
        "backend": ",".join(sorted({str(m.get("backend")) for m in metas})),
        "modes": sorted({mode for m in metas for mode in m.get("modes", [])}),
        "wall_s": sum(float(m.get("wall_s") or 0.0) for m in metas),
        "tool_versions": metas[0].get("tool_versions", {}) if metas else {},
        # Shards of one run should come from one revision; more than one is shown, not hidden.
        "source": ", ".join(sorted({str(m.get("source")) for m in metas if m.get("source")})) or None,
        "n_cases": len({r.get("case_id") for r in merged.values()}),
        "missing_shards": missing,
    }
    for key in ("seed", "target", "only"):  # kept when every shard agrees (a merge can be merged)
        values = {json.dumps(m.get(key)) for m in metas}
        if len(values) == 1:
            meta[key] = metas[0].get(key)
    return list(merged.values()), meta
