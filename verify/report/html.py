"""report.html: one self-contained page (inline CSS, plots as base64 PNG, no external resources)."""
from __future__ import annotations

import html
from pathlib import Path

from conv3d_bwd.verify.report import summary as S
from conv3d_bwd.verify.report.markdown import ROW_HEADER
from conv3d_bwd.verify.report.timelines import timelines_section

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
tr.FAIL td { background: #fde2e2; } tr.MISTRUSTED td { background: #fff5d6; }
.verdict-PASS { color: #17692e; } .verdict-FAIL { color: #b00020; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0 1.5em; }
.note { color: #555; font-size: 0.9em; }
td.cmd { text-align: left; font-size: 0.8em; color: #444; }
.timeline { overflow-x: auto; margin: 0.3em 0 1em; }
"""


def _esc(value) -> str:
    return html.escape(str(value))


def _table(header, rows, row_classes=None) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{_esc(row_classes[i])}"' if row_classes else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _summary_table(rows: list[S.Row], first: str) -> str:
    cells = [S.row_cells(r) for r in rows]
    classes = ["FAIL" if r.failed else ("MISTRUSTED" if r.mistrusted else "PASS") for r in rows]
    return _table((first, *ROW_HEADER), cells, classes)


def _plots_section(records: list[dict]) -> str:
    from conv3d_bwd.verify.report.plots import all_plots, matplotlib_missing

    missing = matplotlib_missing()
    if missing:
        return (f'<p class="note">Plots need matplotlib, which does not import here ({_esc(missing)}): '
                "install the <code>report</code> extra (<code>pip install .[report]</code>).</p>")
    plots = all_plots(records)
    if not plots:
        return '<p class="note">No judged results to plot.</p>'
    return "".join(f'<h3>{_esc(title)}</h3><img alt="{_esc(title)}" src="data:image/png;base64,{png}">'
                   for title, png in plots.items())


def _performance_section(records: list[dict]) -> str:
    rows = S.performance_rows(records)
    if not rows:
        return '<p class="note">No modelled times (the backend has no cost model).</p>'
    header, cells = S.perf_table(rows)
    link = {r.case_id: r.timeline for r in rows if r.timeline}
    head = "".join(f"<th>{_esc(h)}</th>" for h in (*header, "timeline"))
    body = "".join(
        "<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row)
        + (f'<td><a href="#tl-{_esc(row[0])}">picture</a> &middot; <a href="{_esc(link[row[0]])}">'
           "JSON</a></td>" if row[0] in link else "<td></td>") + "</tr>"
        for row in cells)
    return (f'<p class="note">{_esc(S.PERF_NOTE)}</p>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def _worst_table(worst: list[dict]) -> str:
    """One row of figures per result, its rerun command on a full-width row beneath."""
    header = S.WORST_HEADER[:-1]
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = []
    for r in worst:
        *cells, command = S.worst_cells(r)
        status = _esc(r.get("status"))
        body.append(f'<tr class="{status}">' + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
        body.append(f'<tr class="{status}"><td class="cmd" colspan="{len(header)}">rerun: '
                    f"<code>{_esc(command)}</code></td></tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_html(records: list[dict], meta: dict, with_plots: bool = True,
                report_dir: str | Path | None = None) -> str:
    """The page; ``report_dir`` (where the page goes) lets it read the timeline files it draws."""
    counts = S.totals(records)
    verdict = "FAIL" if counts["FAIL"] else "PASS"
    worst = S.worst_per_dtype(records)
    fails = S.failures(records)
    failures_html = "".join([
        '<h2 id="failures">Failures</h2>',
        (_table(("case", "grad", "mode", "seed", "why", "rerun"),
                [(r.get("case_id"), r.get("grad"), r.get("mode"), r.get("seed"), S.failure_text(r),
                  S.repro_command(r)) for r in fails], ["FAIL"] * len(fails))
         if fails else "<p>None.</p>"),
    ])
    mis = S.mistrusted(records)
    mistrusted_html = "".join([
        '<h2 id="mistrusted">Mistrusted</h2>',
        (_table(("case", "grad", "mode", "zero share (all elements)", "reachable zero share (the rule's)"),
                [(r.get("case_id"), r.get("grad"), r.get("mode"), f"{S.metric(r, 'zero_share'):.0%}",
                  f"{S.metric(r, 'reachable_zero_share'):.0%}") for r in mis],
                ["MISTRUSTED"] * len(mis)) if mis else "<p>None.</p>"),
    ])
    tools = ", ".join(f"{k} {v}" for k, v in sorted(meta.get("tool_versions", {}).items()))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>conv3d_bwd tolerance report</title>',
        f"<style>{CSS}</style></head><body>",
        "<h1>conv3d_bwd tolerance report</h1>",
        (f'<p id="verdict" class="verdict-{verdict}"><strong>{verdict}</strong>: '
        f"{counts['records']} gradient results over {counts['cases']} case runs: {counts['PASS']} pass, "
        f"{counts['FAIL']} fail, {counts['MISTRUSTED']} mistrusted.</p>"),
        (f'<p id="incomplete" class="verdict-FAIL"><strong>INCOMPLETE</strong>: merged without '
         f"shards {_esc('; '.join(meta['missing_shards']))}.</p>" if meta.get("missing_shards") else ""),
        (f"<p>set <code>{_esc(meta.get('set'))}</code>, backend <code>{_esc(meta.get('backend'))}</code>, "
        f"modes {_esc(', '.join(meta.get('modes', [])))}, wall time "
        f"{float(meta.get('wall_s') or 0):.1f} s, source revision "
        f"<code>{_esc(meta.get('source') or 'unknown')}</code>. Tools: {_esc(tools)}.</p>"),
        ('<p class="note">Bound per element: 4&#8730;K&middot;u<sub>fp32</sub>&middot;&Sigma;|a||b| + '
        "ulp<sub>out</sub>(|ref|); exact mode requires bit equality with the oracle rounded to the "
        "output dtype. MISTRUSTED: passed, but over 30% of the reachable reference is zero.</p>"),
        "".join(f'<p class="note">{_esc(note)}</p>'
                for note in (S.ACC_SHARE_NOTE, S.K_NOTE, S.ZEROS_NOTE, S.ULP_NOTE)),
        ('<p class="note">Sections: <a href="#failures">failures</a> &middot; <a href="#plots">'
         'plots</a> &middot; <a href="#by-group">by group</a> &middot; <a href="#by-dtype">by dtype'
         '</a> &middot; <a href="#by-method">by method</a> &middot; <a href="#worst">worst</a> '
         '&middot; <a href="#performance">performance</a> &middot; <a href="#timelines">timelines</a> '
         '&middot; <a href="#all">all results</a> &middot; <a href="#mistrusted">mistrusted</a></p>'),
        failures_html if fails else "",  # a failing report opens on its failures
        '<h2 id="plots">Plots</h2>',
        _plots_section(records) if with_plots else "",
        '<h2 id="by-group">By group</h2>', _summary_table(S.by_group(records), "group"),
        '<h2 id="by-dtype">By dtype, mode and gradient</h2>',
        _summary_table(S.by_dtype_mode(records), "dtype mode grad"),
        '<h2 id="by-method">By plan method</h2>', _summary_table(S.by_method(records), "method"),
        '<h2 id="worst">Worst error/bound ratios</h2>',
        ('<p class="note">Failures first, then the five largest err/bound per dtype and mode (a '
         "correctly rounded bf16 or fp16 result scores up to 0.5 whatever the accumulation did: "
         "its acc share shows the accumulation's margin; exact-mode results that match score 0 "
         "and are left out). Each row's rerun command reproduces it.</p>"),
        _worst_table(worst),
        '<h2 id="performance">Performance</h2>', _performance_section(records),
        '<h2 id="timelines">Timelines</h2>', timelines_section(records, report_dir),
        '<h2 id="all">All results</h2>',
        f"<details><summary>{len(records)} gradient results</summary>",
        _table(S.ALL_HEADER, [S.all_cells(r) for r in records], [str(r.get("status")) for r in records]),
        "</details>",
        "" if fails else failures_html,
        mistrusted_html,
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write_html(records: list[dict], meta: dict, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(render_html(records, meta, report_dir=path.parent))
    return path
