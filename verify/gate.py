"""Gate a CI job on a report: ``python -m conv3d_bwd.verify.gate report/`` exits 0 only when the report is
complete and every result passed.

A report fails the gate when it holds no result, when any result failed (outside its bound, not
bit-exact in exact mode, or a kernel that crashed), when it lacks shards of a sharded run (a lone
shard, or a merge made with ``--partial``), and, with ``--fail-on-mistrusted``, when any result is
MISTRUSTED. Exit codes: 0 pass, 1 gate failed, 2 the report cannot be read.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from conv3d_bwd.verify.report.json_io import SCHEMA, missing_shards


class GateInputError(ValueError):
    """A report that cannot be read (names the path and what is wrong)."""


@dataclass(frozen=True)
class GateVerdict:
    """What the gate found in one report.json."""

    path: str
    results: int
    failed: tuple[str, ...]          # "case_id grad mode: reason" of each failed result
    mistrusted: tuple[str, ...]      # "case_id grad mode" of each MISTRUSTED result
    missing_shards: tuple[str, ...]
    fail_on_mistrusted: bool = False

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the gate fails, one line each (empty when it passes)."""
        out = []
        if not self.results:
            out.append("the report holds no result")
        if self.failed:
            out.append(f"{len(self.failed)} of {self.results} results failed")
        if self.missing_shards:
            out.append("incomplete: shards missing: " + "; ".join(self.missing_shards))
        if self.fail_on_mistrusted and self.mistrusted:
            out.append(f"{len(self.mistrusted)} results are MISTRUSTED (mostly-zero reference)")
        return tuple(out)

    @property
    def passed(self) -> bool:
        return not self.reasons


def load_report(path: str | Path) -> tuple[list[dict], dict, Path]:
    """(records, meta, file) of a report.json, or of the report.json in a directory."""
    path = Path(path)
    file = path / "report.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GateInputError(f"report: {str(file)!r} does not exist (give a report directory or its "
                             "report.json)") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise GateInputError(f"report: {str(file)!r} cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("records"), list):
        raise GateInputError(f"report: {str(file)!r} is not a conv3d-bwd report.json (schema {SCHEMA})")
    return data["records"], dict(data.get("meta") or {}), file


def _label(record: dict) -> str:
    return f"{record.get('case_id')} {record.get('grad')} {record.get('mode')}"


def _failure_reason(record: dict) -> str:
    if record.get("error"):
        return str(record["error"])
    metrics = record.get("metrics") or {}
    return str(metrics.get("reason") or record.get("status") or "failed")


def gate_report(path: str | Path, fail_on_mistrusted: bool = False) -> GateVerdict:
    """Judge one report (a directory or its report.json)."""
    records, meta, file = load_report(path)
    failed = tuple(f"{_label(r)}: {_failure_reason(r)}" for r in records
                   if not r.get("passed") or r.get("status") == "FAIL")
    mistrusted = tuple(_label(r) for r in records if r.get("status") == "MISTRUSTED")
    missing = tuple(meta.get("missing_shards") or missing_shards([meta]))
    return GateVerdict(str(file), len(records), failed, mistrusted, missing, fail_on_mistrusted)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m conv3d_bwd.verify.gate", description=__doc__.split("\n\n")[0])
    parser.add_argument("report", help="a report directory (conv3d-bwd report --out DIR) or its report.json")
    parser.add_argument("--fail-on-mistrusted", action="store_true",
                        help="also fail when a result is MISTRUSTED (default: MISTRUSTED passes)")
    parser.add_argument("--show", type=int, default=10, metavar="N",
                        help="list at most N failed results (default: 10)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m conv3d_bwd.verify.gate``; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        verdict = gate_report(args.report, args.fail_on_mistrusted)
    except GateInputError as exc:
        print(f"gate: error: {exc}", file=sys.stderr)
        return 2
    if verdict.passed:
        print(f"gate: PASS: {verdict.results} results in {verdict.path} "
              f"({len(verdict.mistrusted)} MISTRUSTED)")
        return 0
    print(f"gate: FAIL: {verdict.path}: " + "; ".join(verdict.reasons), file=sys.stderr)
    for line in verdict.failed[:args.show]:
        print(f"  {line}", file=sys.stderr)
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
