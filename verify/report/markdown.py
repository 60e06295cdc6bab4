"""report.md: the summary a reviewer reads first (status counts, by group, by method, worst cases)."""
from __future__ import annotations

from pathlib import Path

from verify.report import summary as S

ROW_HEADER = ("cases", "records", "pass", "fail", "mistrusted", "worst err/bound", "max ULP")


def _table(header: tuple[str, ...], rows: list[tuple]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def _row_cells(row: S.Row) -> tuple:
    return (row.label, row.cases, row.records, row.passed, row.failed, row.mistrusted,
            f"{row.worst_bound_ratio:.3g}", row.max_ulp)


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
        ("- max ULP counts every element, including results of heavy cancellation (|ref| << "
         "sum|a||b|), where the fp32 accumulation error the bound allows spans many output ULPs; "
         "err/bound is the verdict, the ULP histogram in report.html shows how rare those are."),
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
         "bf16 or fp16 result scores up to 0.5 whatever the accumulation did; fp32 shows the "
         "accumulation term; exact-mode results that match score 0 and are left out)."),
        "",
        *_table(("case", "grad", "mode", "K", "err/bound", "max ULP", "max abs", "err/max|ref|", "err/sum|ab|",
                 "zeros", "status"),
                [(r.get("case_id"), r.get("grad"), r.get("mode"), r.get("K"),
                  f"{S.metric(r, 'bound_ratio'):.3g}", int(S.metric(r, "max_ulp")),
                  f"{S.metric(r, 'max_abs'):.3g}", f"{S.metric(r, 'max_range_rel'):.3g}",
                  f"{S.metric(r, 'max_norm_err'):.3g}",
                  f"{S.metric(r, 'zero_share'):.0%}", r.get("status"))
                 for r in S.worst_per_dtype(records)]),
        "",
    ]
    fails = S.failures(records)
    if not fails:
        lines += ["## Failures", "", "None."]
    lines += ["", "## Mistrusted", ""]
    mis = S.mistrusted(records)
    if mis:
        lines += _table(("case", "grad", "mode", "zero share", "reachable zero share"),
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
