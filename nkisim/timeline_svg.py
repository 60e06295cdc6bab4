"""A timeline document (``nkisim.timeline``) drawn as an inline SVG picture: one row per track.

Rows are the (core, track) pairs of the document in track order; each row shows when its track
is busy. Slices closer than one pixel are merged into one bar, so a run of 100,000 instructions
draws a few hundred rectangles, not 100,000.
"""
from __future__ import annotations

import html
import math
from collections import defaultdict

__all__ = ["timeline_svg"]

CATEGORY_COLORS = {"tensor": "#1f77b4", "vector": "#2ca02c", "scalar": "#ff7f0e", "gpsimd": "#9467bd",
                   "dma": "#8c564b", "sync": "#d62728"}
_LABEL_W = 190
_ROW_H = 13
_AXIS_H = 34


def _tick_step(span_us: float, ticks: int = 8) -> float:
    """A 1-2-5 step that gives at most about ``ticks`` ticks over ``span_us``."""
    raw = max(span_us / ticks, 1e-6)
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if power * factor >= raw:
            return power * factor
    return power * 10  # pragma: no cover


def _merged(intervals: list[tuple[float, float]], min_gap: float) -> list[tuple[float, float]]:
    """Union of the intervals, also joining those less than ``min_gap`` apart."""
    out: list[list[float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1] + min_gap:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def timeline_svg(document: dict, width: int = 1100, title: str | None = None) -> str:
    """The document's busy intervals per track as an SVG string (``width`` pixels wide)."""
    events = document.get("traceEvents", [])
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    cores = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    rows: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    category: dict[tuple[int, int], str] = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        key = (e["pid"], e["tid"])
        rows[key].append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
        category.setdefault(key, str(e.get("cat", "")))
    end_us = max((b for spans in rows.values() for _, b in spans), default=0.0)
    end_us = max(end_us, float(document.get("otherData", {}).get("modelled_us") or 0.0), 1e-3)
    plot_w = width - _LABEL_W - 10
    scale = plot_w / end_us
    order = sorted(rows)
    height = _AXIS_H + _ROW_H * len(order) + 24
    heading = title if title is not None else (
        f"modelled schedule, {end_us:.2f} us ({len(cores) or 1} core(s), "
        f"{sum(len(v) for v in rows.values()):,} instructions)")
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10">'),
             f'<text x="4" y="13" font-size="12">{html.escape(heading)}</text>']
    step = _tick_step(end_us)
    for k in range(int(end_us / step + 1e-9) + 1):
        tick = round(k * step, 9)
        x = _LABEL_W + tick * scale
        parts.append(f'<line x1="{x:.1f}" y1="{_AXIS_H - 6}" x2="{x:.1f}" y2="{height - 20}" '
                     'stroke="#ddd"/>')
        parts.append(f'<text x="{x:.1f}" y="{_AXIS_H - 9}" text-anchor="middle">{tick:g}</text>')
    parts.append(f'<text x="{_LABEL_W + plot_w}" y="{height - 6}" text-anchor="end">time (us)</text>')
    previous_core = None
    for i, key in enumerate(order):
        y = _AXIS_H + i * _ROW_H
        if key[0] != previous_core and i:
            parts.append(f'<line x1="0" y1="{y}" x2="{width}" y2="{y}" stroke="#888"/>')
        previous_core = key[0]
        label = f"core {key[0]} {names.get(key, f'track {key[1]}')}"
        parts.append(f'<text x="4" y="{y + _ROW_H - 3}">{html.escape(label)}</text>')
        color = CATEGORY_COLORS.get(category.get(key, ""), "#7f7f7f")
        for a, b in _merged(rows[key], 1.0 / scale):
            w = max((b - a) * scale, 0.5)
            parts.append(f'<rect x="{_LABEL_W + a * scale:.1f}" y="{y + 1}" width="{w:.1f}" '
                         f'height="{_ROW_H - 2}" fill="{color}"/>')
    parts.append("</svg>")
    return "\n".join(parts)
