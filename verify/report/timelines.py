"""report.html's timelines: each case's modelled schedule drawn inline (SVG), beside its JSON file.

The files are the Chrome trace-event JSON that ``conv3d-bwd report`` writes per case into
``timelines/`` (``nkisim.timeline``); the picture is ``nkisim.timeline_svg`` of the same file, so
what the page shows is what Perfetto opens.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

OPEN_FIRST = 1  # pictures shown unfolded; the rest are one click away


def _esc(value) -> str:
    return html.escape(str(value))


def case_timelines(records: list[dict]) -> list[tuple[str, str]]:
    """(case id, timeline path as recorded) per case that has one, in record order."""
    seen: dict[str, str] = {}
    for record in records:
        path = record.get("timeline")
        if path and record.get("case_id") not in seen:
            seen[str(record.get("case_id"))] = str(path)
    return list(seen.items())


def timelines_section(records: list[dict], report_dir: str | Path | None) -> str:
    """A <details> block per case: the picture (engines and DMA queues as rows) and a link."""
    from conv3d_bwd.nkisim.timeline_svg import timeline_svg

    items = case_timelines(records)
    if not items:
        return ('<p class="note">No timelines: they come from the nkisim backend\'s cost model '
                "(and <code>--no-timelines</code> turns them off).</p>")
    parts = [('<p class="note">The modelled schedule of each case (nkisim cost model, not a '
             "measurement): one row per engine and DMA queue of each core, bars where it is busy. "
             "The JSON opens in ui.perfetto.dev or chrome://tracing with every instruction, its "
             "operands and times.</p>")]
    for i, (case_id, path) in enumerate(items):
        file = Path(path) if report_dir is None else Path(report_dir) / path
        try:
            document = json.loads(file.read_text())
            picture = timeline_svg(document)
            modelled = float(document.get("otherData", {}).get("modelled_us") or 0.0)
            summary = f"{_esc(case_id)}: {modelled:.2f} us modelled"
        except (OSError, ValueError, KeyError, TypeError) as exc:
            picture = f'<p class="note">Cannot draw {_esc(path)}: {_esc(exc)}</p>'
            summary = _esc(case_id)
        parts.append(f'<details id="tl-{_esc(case_id)}"{" open" if i < OPEN_FIRST else ""}>'
                     f'<summary>{summary} &middot; <a href="{_esc(path)}">JSON</a></summary>'
                     f'<div class="timeline">{picture}</div></details>')
    return "".join(parts)
