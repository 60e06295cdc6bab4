"""Report writers on hand-made records: tables, the no-matplotlib page, merge rules."""
from __future__ import annotations

import json

import pytest

from conv3d_bwd.verify.report import merge_reports, write_reports
from conv3d_bwd.verify.report.html import render_html
from conv3d_bwd.verify.report.json_io import ReportFileError, read_report
from conv3d_bwd.verify.report.markdown import render_markdown

pytestmark = pytest.mark.fast


def _record(case_id: str, grad: str, status: str, ratio: float, group: str = "basic",
            methods=("dx:gather_s1",), mode: str = "stat") -> dict:
    metrics = {"bound_ratio": ratio, "max_ulp": 1, "max_abs": 0.1, "max_norm_err": 1e-3,
               "max_range_rel": 1e-3, "zero_share": 0.0, "reachable_zero_share": 0.0,
               "ulp_histogram": [90, 10, 0, 0, 0], "reason": "" if status != "FAIL" else "too far",
               "accumulation_share": ratio / 2}
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
    # the last column: the worst error beyond output rounding as a share of the accumulation term
    assert "| basic | 1 | 2 | 1 | 1 | 0 | 2.5 | 1.25 |" in text
    assert "| strides | 1 | 1 | 0 | 0 | 1 | 0.1 | 0.05 |" in text
    assert "| dw:tap_pack | 1 | 1 | 0 | 1 | 0 | 2.5 | 1.25 |" in text
    assert "too far" in text  # the failure's reason
    assert "## Mistrusted" in text and "| b | dx | stat |" in text
    # A failing report opens on its failures, before the summary tables.
    assert text.index("## Failures") < text.index("## By group")


def test_html_puts_failures_first_and_lists_mistrusted():
    page = render_html(RECORDS, META, with_plots=False)
    assert page.index('id="failures"') < page.index('id="plots"') < page.index('id="by-group"')
    assert 'id="mistrusted"' in page and '<tr class="MISTRUSTED"><td>b</td>' in page
    passing = render_html(RECORDS[:1], META, with_plots=False)
    assert passing.index('id="by-group"') < passing.index('id="failures"')  # "None." at the end


def test_html_without_matplotlib_still_renders_tables(monkeypatch):
    from conv3d_bwd.verify.report import plots

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

    # Shards from two revisions: the merged report shows both, and the markdown says so.
    write_reports(RECORDS[:1], {**META, "shard": "1/2", "source": "abc123"}, tmp_path / "r1")
    write_reports(RECORDS[1:], {**META, "shard": "2/2", "source": "def456-dirty"}, tmp_path / "r2")
    records, meta = merge_reports([tmp_path / "r1", tmp_path / "r2"])
    assert meta["source"] == "abc123, def456-dirty"
    assert "source revision: abc123, def456-dirty" in render_markdown(records, meta)


def test_read_report_rejects_what_is_not_a_report(tmp_path):
    (tmp_path / "report.json").write_text("{not json")
    with pytest.raises(ReportFileError, match="not valid JSON"):
        read_report(tmp_path)
    (tmp_path / "report.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(ReportFileError, match="not a conv3d-bwd report"):
        read_report(tmp_path)


def _mixed_records() -> list[dict]:
    bf16 = [_record(f"b{i}", "dx", "PASS", 0.49 + i / 1000) for i in range(8)]
    fp32 = [{**_record(f"f{i}", "dw", "PASS", 0.01 * (i + 1), methods=("dw:row_pack",)),
             "dtype": "fp32"} for i in range(3)]
    exact = [{**_record("e", "db", "PASS", 0.0, mode="exact"),
              "metrics": {**_record("e", "db", "PASS", 0.0)["metrics"], "bound_ratio": 0.0,
                          "ulp_histogram": [50, 0, 0, 0, 0]}}]
    failing = [_record("x", "dx", "FAIL", 3.0)]
    return bf16 + fp32 + exact + failing


def test_worst_table_shows_failures_then_each_dtype():
    from conv3d_bwd.verify.report import summary

    chosen = summary.worst_per_dtype(_mixed_records(), n=5)
    ids = [r["case_id"] for r in chosen]
    assert ids[0] == "x"                                   # the failure first
    assert ids[1:6] == ["b7", "b6", "b5", "b4", "b3"]      # five worst bf16 stat
    assert ids[6:] == ["f2", "f1", "f0"]                   # fp32 is not buried under bf16's 0.5
    assert "e" not in ids                                  # a matching exact result scores 0
    text = render_markdown(_mixed_records(), META)
    assert "| f0 | dw | stat |" in text


def test_plots_render_for_mixed_records():
    pytest.importorskip("matplotlib", exc_type=ImportError)
    import base64

    from conv3d_bwd.verify.report.plots import all_plots

    plots = all_plots(_mixed_records())
    assert len(plots) == 3
    for png in plots.values():
        assert base64.b64decode(png).startswith(b"\x89PNG")
    only_exact = [r for r in _mixed_records() if r["mode"] == "exact"]
    assert len(all_plots(only_exact)) == 3  # nothing measurable still draws (empty axes), no crash


def _with_performance(record: dict, **performance) -> dict:
    geometry = {"batch": 1, "c_in": 8, "c_out": 8, "input": [4, 6, 6], "kernel": [3, 3, 3],
                "stride": [1, 1, 1], "padding": [1] * 6, "dilation": [1, 1, 1], "dtype": "bf16",
                "grads": ["dx", "dw", "db"], "lnc": 1}
    return {**record, "geometry": geometry, "target": "trn2", "plan": {"estimated_us": 2.4},
            "performance": {"modelled_us": record["modelled_us"], "roofline_us": 0.3,
                            "efficiency": 0.1, "tensor_util": 0.25, **performance}}


def test_performance_section_per_case_without_a_band():
    records = [_with_performance(r) for r in RECORDS]
    text = render_markdown(records, META)
    section = text[text.index("## Performance"):]
    assert "| a | 3.00 | 2.40 | -20% | 0.30 | 0.100 | 25.0% |" in section
    assert "| b | 3.00 |" in section and "band us" not in section
    page = render_html(records, META, with_plots=False)
    assert 'id="performance"' in page and "<td>-20%</td>" in page


def test_performance_section_shows_the_cost_models_band():
    from conv3d_bwd.verify.harness import performance_fields

    fields = performance_fields({"modelled_us": 3.0, "tensor_util": 0.25, "band_us": [2.5, 4.0]})
    records = [_with_performance(r, **fields) for r in RECORDS]
    text = render_markdown(records, META)
    assert "band us" in text and "| a | 3.00 | 2.50 .. 4.00 | 2.40 |" in text


def test_every_worst_row_has_its_rerun_command():
    from conv3d_bwd.verify.report import summary

    records = [_with_performance(r) for r in RECORDS]
    text = render_markdown(records, META)
    worst = text[text.index("## Worst"):text.index("## Performance")]
    rows = [line for line in worst.splitlines() if line.startswith(("| a ", "| b "))]
    assert rows and all("`conv3d-bwd check --batch 1 --channels 8,8" in row for row in rows)
    page = render_html(records, META, with_plots=False)
    for record in summary.worst_per_dtype(records):
        assert f"rerun: <code>{summary.repro_command(record)}</code>" in page.replace("&#x27;", "'")


def test_headline_tables_show_k_per_meaning_and_the_reachable_zero_share():
    records = [{**r, "K_structural": 64, "K": 27,
                "metrics": {**r["metrics"], "zero_share": 0.85, "reachable_zero_share": 0.12}}
               for r in RECORDS]
    text = render_markdown(records, META)
    assert "| K terms | K nonzero |" in text and "| 64 | 27 |" in text
    assert "| 12% |" in text and "| 85% |" not in text.split("## Mistrusted")[0]
    assert "max ULP" not in text.split("## By group")[1].split("## Mistrusted")[0]


def test_timelines_are_drawn_beside_a_link_to_their_file(tmp_path):
    from conv3d_bwd.nkisim import timeline
    from conv3d_bwd.nkisim.trace import Instr
    from simtests.nkisim.helpers import acc

    load = Instr("dma_copy", "dma", (acc("src", "hbm", 1), acc("dst", "sbuf", 2, write=True)))
    timeline.write_timeline([load], "trn2", tmp_path / "timelines" / "a.json")
    records = [{**_with_performance(r), "timeline": "timelines/a.json" if r["case_id"] == "a" else None}
               for r in RECORDS]
    write_reports(records, META, tmp_path)
    page = (tmp_path / "report.html").read_text()
    block = page[page.index('<details id="tl-a"'):]
    block = block[:block.index("</details>")]
    assert '<a href="timelines/a.json">JSON</a>' in block and "<svg" in block
    assert "core 0 DMA queue swdge [0]" in block
    assert '<a href="#tl-a">picture</a>' in page and 'id="tl-b"' not in page
    # a missing file is named, not a crash
    (tmp_path / "timelines" / "a.json").unlink()
    assert "Cannot draw timelines/a.json" in render_html(records, META, with_plots=False,
                                                          report_dir=tmp_path)
