"""report.md: the summary a reviewer reads first (status counts, by group, by method, worst cases)."""
from __future__ import annotations

from pathlib import Path

from conv3d_bwd.verify.report import summary as S

ROW_HEADER = S.ROW_HEADER


def _table(header: tuple[str, ...], rows: list[tuple]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def _row_cells(row: S.Row) -> tuple:
    return S.row_cells(row)


def _performance_section(records: list[dict]) -> list[str]:
    rows = S.performance_rows(records)
    if not rows:
        return ["## Performance", "", "No modelled times (the backend has no cost model).", ""]
    header, cells = S.perf_table(rows)
    timelines = [r for r in rows if r.timeline]
    return ["## Performance", "", S.PERF_NOTE, "", *_table(header, cells), "",
            *([(f"Modelled schedules of {len(timelines)} cases (Chrome trace-event JSON, open in "
                "ui.perfetto.dev or chrome://tracing): "
                + ", ".join(f"[{r.case_id}]({r.timeline})" for r in timelines[:3])
                + (", ..." if len(timelines) > 3 else "") + "; report.html draws them all."), ""]
              if timelines else [])]


def _failures_section(records: list[dict]) -> list[str]:
    """The failures table, placed right under the verdict when there are any."""
    fails = S.failures(records)
    if not fails:
        return []
    return ["## Failures", "",
            *_table(("case", "grad", "mode", "seed", "why", "rerun"),
                    [(r.get("case_id"), r.get("grad"), r.get("mode"), r.get("seed"),
                      S.failure_text(r), f"`{S.repro_command(r)}`") for r in fails]),
            ""]


def render_markdown(records: list[dict], meta: dict) -> str:
    counts = S.totals(records)
    verdict = "FAIL" if counts["FAIL"] else "PASS"
    lines = [
        "# conv3d_bwd tolerance report",
        "",
        (f"**{verdict}**: {counts['records']} gradient results over {counts['cases']} case runs: "
        f"{counts['PASS']} pass, {counts['FAIL']} fail, {counts['MISTRUSTED']} mistrusted "
        "(passed, but more than 30% of the reachable reference elements are zero)."),
        "",
        *([f"**INCOMPLETE**: merged without shards {'; '.join(meta['missing_shards'])}.", ""]
          if meta.get("missing_shards") else []),
        (f"- set: `{meta.get('set')}`, backend: `{meta.get('backend')}`, modes: "
        f"{', '.join(meta.get('modes', []))}, target: {meta.get('target', 'trn2')}"),
        (f"- shard: {meta.get('shard') or ', '.join(meta.get('shards', [])) or '1/1'}; "
        f"wall time {float(meta.get('wall_s') or 0):.1f} s"),
        f"- tools: {', '.join(f'{k} {v}' for k, v in sorted(meta.get('tool_versions', {}).items()))}",
        f"- source revision: {meta.get('source') or 'unknown'}",
        ("- bound per element: `4 sqrt(K) u_fp32 sum|a||b| + ulp_out(|ref|)`; exact mode: bit "
        "equality with the oracle rounded to the output dtype. err/bound <= 1 passes in stat mode."),
        f"- {S.ACC_SHARE_NOTE}",
        f"- {S.K_NOTE}",
        f"- {S.ZEROS_NOTE}",
        f"- {S.ULP_NOTE} It is listed per result in report.html only.",
        "",
        *_failures_section(records),
        "## By group",
        "",
        *_table(("group", *ROW_HEADER), [_row_cells(r) for r in S.by_group(records)]),
        "",
        "## By dtype, mode and gradient",
        "",
        *_table(("dtype mode grad", *ROW_HEADER), [_row_cells(r) for r in S.by_dtype_mode(records)]),
        "",
        "## By plan method",
        "",
        *_table(("method", *ROW_HEADER), [_row_cells(r) for r in S.by_method(records)]),
        "",
        "## Worst error/bound ratios",
        "",
        ("Failures first, then the five largest err/bound per dtype and mode (a correctly rounded "
         "bf16 or fp16 result scores up to 0.5 whatever the accumulation did: its acc share shows "
         "the accumulation's margin; exact-mode results that match score 0 and are left out)."),
        "",
        *_table(S.WORST_HEADER[:-1] + ("rerun",),
                [(*S.worst_cells(r)[:-1], f"`{S.repro_command(r)}`") for r in S.worst_per_dtype(records)]),
        "",
        *_performance_section(records),
    ]
    fails = S.failures(records)
    if not fails:
        lines += ["## Failures", "", "None."]
    lines += ["", "## Mistrusted", ""]
    mis = S.mistrusted(records)
    if mis:
        lines += _table(("case", "grad", "mode", "zero share (all elements)", "reachable zero share (the rule's)"),
                        [(r.get("case_id"), r.get("grad"), r.get("mode"),
                          f"{S.metric(r, 'zero_share'):.0%}",
                          f"{S.metric(r, 'reachable_zero_share'):.0%}") for r in mis])
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"


def write_markdown(records: list[dict], meta: dict, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(render_markdown(records, meta))
    return path
