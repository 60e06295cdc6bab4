"""report.html: one self-contained page (inline CSS, plots as base64 PNG, no external resources)."""
from __future__ import annotations

import html
from pathlib import Path

from verify.report import summary as S
from verify.report.markdown import ROW_HEADER

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
tr.FAIL td { background: #fde2e2; } tr.MISTRUSTED td { background: #fff5d6; }
.verdict-PASS { color: #17692e; } .verdict-FAIL { color: #b00020; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0 1.5em; }
.note { color: #555; font-size: 0.9em; }
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
    cells = [(r.label, r.cases, r.records, r.passed, r.failed, r.mistrusted,
              f"{r.worst_bound_ratio:.3g}", r.max_ulp) for r in rows]
    classes = ["FAIL" if r.failed else ("MISTRUSTED" if r.mistrusted else "PASS") for r in rows]
    return _table((first, *ROW_HEADER), cells, classes)


def _plots_section(records: list[dict]) -> str:
    from verify.report.plots import all_plots, matplotlib_missing

    missing = matplotlib_missing()
    if missing:
        return (f'<p class="note">Plots need matplotlib, which does not import here ({_esc(missing)}): '
                "install the <code>report</code> extra (<code>pip install .[report]</code>).</p>")
    plots = all_plots(records)
    if not plots:
        return '<p class="note">No judged results to plot.</p>'
    return "".join(f'<h3>{_esc(title)}</h3><img alt="{_esc(title)}" src="data:image/png;base64,{png}">'
                   for title, png in plots.items())


def render_html(records: list[dict], meta: dict, with_plots: bool = True) -> str:
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
        (_table(("case", "grad", "mode", "zero share", "reachable zero share"),
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
        "output dtype. MISTRUSTED: passed, but over 30% of the reachable reference is zero. "
         "Max ULP counts every element, including results of heavy cancellation (|ref| much "
         "smaller than &Sigma;|a||b|), where the allowed fp32 accumulation error spans many output "
         "ULPs; err/bound is the verdict.</p>"),
        ('<p class="note">Sections: <a href="#failures">failures</a> &middot; <a href="#plots">'
         'plots</a> &middot; <a href="#by-group">by group</a> &middot; <a href="#by-dtype">by dtype'
         '</a> &middot; <a href="#by-method">by method</a> &middot; <a href="#worst">worst</a> '
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
         "correctly rounded bf16 or fp16 result scores up to 0.5 whatever the accumulation did; "
         "fp32 shows the accumulation term; exact-mode results that match score 0 and are left "
         "out).</p>"),
        _table(("case", "grad", "mode", "K", "err/bound", "max ULP", "max abs", "err/max|ref|", "err/sum|ab|", "zeros",
                "status"),
               [(r.get("case_id"), r.get("grad"), r.get("mode"), r.get("K"),
                 f"{S.metric(r, 'bound_ratio'):.3g}", int(S.metric(r, "max_ulp")),
                 f"{S.metric(r, 'max_abs'):.3g}", f"{S.metric(r, 'max_range_rel'):.3g}",
                  f"{S.metric(r, 'max_norm_err'):.3g}",
                 f"{S.metric(r, 'zero_share'):.0%}", r.get("status")) for r in worst],
               [str(r.get("status")) for r in worst]),
        '<h2 id="all">All results</h2>',
        f"<details><summary>{len(records)} gradient results</summary>",
        _table(("case", "grad", "mode", "seed", "K", "err/bound", "max ULP", "zeros", "modelled us",
                "status"),
               [(r.get("case_id"), r.get("grad"), r.get("mode"), r.get("seed"), r.get("K"),
                 f"{S.metric(r, 'bound_ratio'):.3g}", int(S.metric(r, "max_ulp")),
                 f"{S.metric(r, 'zero_share'):.0%}",
                 "" if r.get("modelled_us") is None else f"{float(r['modelled_us']):.1f}",
                 r.get("status")) for r in records],
               [str(r.get("status")) for r in records]),
        "</details>",
        "" if fails else failures_html,
        mistrusted_html,
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write_html(records: list[dict], meta: dict, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(render_html(records, meta))
    return path
