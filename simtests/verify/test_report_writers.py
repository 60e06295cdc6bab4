"""Report writers on hand-made records: tables, the no-matplotlib page, merge rules."""
from __future__ import annotations

import json

import pytest

from verify.report import merge_reports, write_reports
from verify.report.html import render_html
from verify.report.json_io import ReportFileError, read_report
from verify.report.markdown import render_markdown

pytestmark = pytest.mark.fast


def _record(case_id: str, grad: str, status: str, ratio: float, group: str = "basic",
            methods=("dx:gather_s1",), mode: str = "stat") -> dict:
    metrics = {"bound_ratio": ratio, "max_ulp": 1, "max_abs": 0.1, "max_norm_err": 1e-3,
               "max_range_rel": 1e-3, "zero_share": 0.0, "reachable_zero_share": 0.0,
               "ulp_histogram": [90, 10, 0, 0, 0], "reason": "" if status != "FAIL" else "too far"}
    return {"case_id": case_id, "group": group, "grad": grad, "mode": mode, "seed": 0, "K": 27,
            "dtype": "bf16", "status": status, "passed": status != "FAIL", "metrics": metrics,
            "methods": list(methods), "backend": "nkisim", "modelled_us": 3.0, "error": None}


RECORDS = [
    _record("a", "dx", "PASS", 0.4),
    _record("a", "dw", "FAIL", 2.5, methods=("dw:tap_pack",)),
    _record("b", "dx", "MISTRUSTED", 0.1, group="strides"),
]
META = {"set": "fast", "backend": "nkisim", "modes": ["stat"], "wall_s": 1.0}


def test_markdown_tables_count_statuses():
    text = render_markdown(RECORDS, META)
    assert text.startswith("# conv3d_bwd tolerance report")
    assert "**FAIL**: 3 gradient results" in text
    assert "| basic | 1 | 2 | 1 | 1 | 0 | 2.5 | 1 |" in text
    assert "| strides | 1 | 1 | 0 | 0 | 1 | 0.1 | 1 |" in text
    assert "| dw:tap_pack | 1 | 1 | 0 | 1 | 0 | 2.5 | 1 |" in text
    assert "too far" in text  # the failure's reason
    assert "## Mistrusted" in text and "| b | dx | stat |" in text


def test_html_without_matplotlib_still_renders_tables(monkeypatch):
    from verify.report import plots

    monkeypatch.setattr(plots, "matplotlib_missing", lambda: "No module named 'matplotlib'")
    page = render_html(RECORDS, META)
    assert "<img" not in page
    assert "report</code> extra" in page
    assert page.count("<table>") >= 4 and 'id="by-group"' in page


def test_write_reports_and_merge_deduplicate(tmp_path):
    write_reports(RECORDS[:2], {**META, "shard": "1/2"}, tmp_path / "s1")
    write_reports(RECORDS[1:], {**META, "shard": "2/2"}, tmp_path / "s2")  # record 1 in both
    records, meta = merge_reports([tmp_path / "s1", tmp_path / "s2"])
    assert len(records) == 3
    assert meta["shards"] == ["1/2", "2/2"] and meta["n_cases"] == 2
    assert meta["wall_s"] == 2.0


def test_read_report_rejects_what_is_not_a_report(tmp_path):
    (tmp_path / "report.json").write_text("{not json")
    with pytest.raises(ReportFileError, match="not valid JSON"):
        read_report(tmp_path)
    (tmp_path / "report.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(ReportFileError, match="not a conv3d-bwd report"):
        read_report(tmp_path)
