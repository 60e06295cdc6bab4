"""Report writers: report.json (records), report.md (summary tables), report.html (tables + plots).

``write_reports(records, meta, out_dir)`` writes all three; ``read_report`` / ``merge_reports``
combine shard directories.
"""
from __future__ import annotations

from pathlib import Path

from conv3d_bwd.verify.report.html import write_html
from conv3d_bwd.verify.report.json_io import merge_reports, read_report, write_json
from conv3d_bwd.verify.report.markdown import write_markdown

REPORT_FILES = ("report.json", "report.md", "report.html")


def write_reports(records: list[dict], meta: dict, out_dir: str | Path) -> list[Path]:
    """Write report.json, report.md and report.html into out_dir (created); return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return [write_json(records, meta, out / "report.json"),
            write_markdown(records, meta, out / "report.md"),
            write_html(records, meta, out / "report.html")]


__all__ = ["REPORT_FILES", "merge_reports", "read_report", "write_reports"]
