"""Aggregations shared by the markdown and HTML writers (pure functions over records)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

STATUSES = ("PASS", "FAIL", "MISTRUSTED")


def number(value, default: float = 0.0) -> float:
    """A metric as float: JSON keeps inf/nan as strings."""
    if value is None:
        return default
    if isinstance(value, str):
        return float(value)
    return float(value)


def metric(record: dict, name: str, default: float = 0.0) -> float:
    metrics = record.get("metrics") or {}
    return number(metrics.get(name), default)


@dataclass(frozen=True)
class Row:
    """One line of a summary table: a label, counts and the worst figures."""

    label: str
    cases: int
    records: int
    passed: int
    failed: int
    mistrusted: int
    worst_bound_ratio: float
    max_ulp: int


def _rows(groups: dict[str, list[dict]]) -> list[Row]:
    rows = []
    for label, records in sorted(groups.items()):
        statuses = [r.get("status") for r in records]
        rows.append(Row(
            label=label,
            cases=len({r.get("case_id") for r in records}),
            records=len(records),
            passed=statuses.count("PASS"),
            failed=statuses.count("FAIL"),
            mistrusted=statuses.count("MISTRUSTED"),
            worst_bound_ratio=max((metric(r, "bound_ratio") for r in records), default=0.0),
            max_ulp=int(max((metric(r, "max_ulp") for r in records), default=0)),
        ))
    return rows


def by_key(records: list[dict], key) -> list[Row]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        groups[str(key(record))].append(record)
    return _rows(groups)


def by_group(records: list[dict]) -> list[Row]:
    return by_key(records, lambda r: r.get("group"))


def by_dtype_mode(records: list[dict]) -> list[Row]:
    return by_key(records, lambda r: f"{r.get('dtype')} {r.get('mode')} {r.get('grad')}")


def by_method(records: list[dict]) -> list[Row]:
    """One row per plan method (a record counts for every method its gradient used)."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        methods = record.get("methods") or ["(no plan)"]
        for method in methods:
            groups[method].append(record)
    return _rows(groups)


def worst(records: list[dict], n: int = 15) -> list[dict]:
    """The n records with the largest error/bound ratio (failures first)."""
    return sorted(records, key=lambda r: (r.get("status") != "FAIL", -metric(r, "bound_ratio")))[:n]


def worst_per_dtype(records: list[dict], n: int = 5, max_failures: int = 25) -> list[dict]:
    """Failures first (up to max_failures), then the n largest err/bound per dtype and mode.

    One global ranking would show only bf16: a correctly rounded bf16 or fp16 output scores up to
    0.5 whatever the accumulation did, which buries the fp32 results, the only ones where the
    accumulation term of the bound is what is measured.
    """
    def ratio_order(r):
        return (-metric(r, "bound_ratio"), str(r.get("case_id")), str(r.get("grad")))

    chosen = sorted(failures(records), key=ratio_order)[:max_failures]
    taken = {id(r) for r in chosen}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for record in records:
        if id(record) not in taken and metric(record, "bound_ratio") > 0:
            groups[(str(record.get("dtype")), str(record.get("mode")))].append(record)
    for key in sorted(groups):
        chosen += sorted(groups[key], key=ratio_order)[:n]
    return chosen


def failures(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("status") == "FAIL"]


def mistrusted(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("status") == "MISTRUSTED"]


def totals(records: list[dict]) -> dict[str, int]:
    counts = {status: 0 for status in STATUSES}
    for record in records:
        counts[record.get("status", "FAIL")] = counts.get(record.get("status", "FAIL"), 0) + 1
    counts["records"] = len(records)
    counts["cases"] = len({(r.get("case_id"), r.get("mode"), r.get("seed")) for r in records})
    return counts


def failure_text(record: dict) -> str:
    """Why a record failed: the error, or the verdict's reason and where its worst element is."""
    if record.get("error"):
        return str(record["error"])
    metrics = record.get("metrics") or {}
    reason = str(metrics.get("reason") or "")
    index = metrics.get("worst_index")
    if index is None or "worst_got" not in metrics:
        return reason
    return (f"{reason}; worst {record.get('grad')}[{', '.join(map(str, index))}]: got "
            f"{number(metrics.get('worst_got')):.6g}, ref {number(metrics.get('worst_ref')):.6g}, "
            f"bound {number(metrics.get('worst_bound')):.3g}")


def repro_command(record: dict) -> str:
    """The ``conv3d-bwd check`` command that reruns one record's case, mode and seed."""
    geo = record.get("geometry") or {}
    if not geo:
        return ""

    def csv(key: str) -> str:
        return ",".join(str(v) for v in geo.get(key, ()))

    return (f"conv3d-bwd check --batch {geo.get('batch')} --channels {geo.get('c_in')},"
            f"{geo.get('c_out')} --input {csv('input')} --kernel {csv('kernel')} --stride "
            f"{csv('stride')} --padding {csv('padding')} --dilation {csv('dilation')} --dtype "
            f"{geo.get('dtype')} --grads {csv('grads')} --lnc {geo.get('lnc')} --mode "
            f"{record.get('mode')} --seed {record.get('seed')} --backend {record.get('backend')} "
            f"--target {record.get('target', 'trn2')}")
