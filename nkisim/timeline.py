"""The modelled schedule of a run as a timeline in the Chrome trace-event format.

``write_timeline(trace, target, path)`` schedules the trace on the cost model (as
``nkisim.cost.summarize`` does) with recording on, and writes one *complete event* (``"ph": "X"``)
per instruction: ``ts``/``dur`` in microseconds, ``pid`` the core (LNC program), ``tid`` the track
that ran it (each compute engine, each DMA queue, the cross-core sync track), ``args`` the op, the
operands (role, dtype, shape, buffer) and when the result became visible. Metadata events
(``"ph": "M"``) name the processes and threads. Perfetto (ui.perfetto.dev) and chrome://tracing
open the file; the format is Google's "Trace Event Format" document (the JSON Object Format with a
``traceEvents`` list).

A compute instruction's slice spans its occupancy (start until the engine is free again); its
result becomes visible later (``args.visible_us``), after the engine's pipeline latency. A DMA
slice spans trigger to completion on its queue.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .cost import HardwareTarget, _split_programs, get_target
from .dge import DmaQueue
from .schedule import schedule_programs
from .trace import Instr, Trace

__all__ = ["TimelineSlice", "lane_order", "timeline_document", "timeline_slices", "write_timeline"]

COMPUTE_LANES = ("tensor", "vector", "scalar", "gpsimd")
SYNC_LANE = "sync"
_DMA_TID_BASE = 100  # DMA queues are threads 100 + their index in DmaQueue: after the compute engines
_DMA_PREFIX = "dma:"
_DMA_SLOTS = 64       # rows per DMA queue: a queue triggers in order, but its transfers overlap in flight
_DMA_QUEUES = tuple(q.value for q in DmaQueue)


@dataclass(frozen=True)
class TimelineSlice:
    """One instruction on the modelled timeline (times in ns from the kernel's start)."""

    core: int
    lane: str          # 'tensor', 'vector', 'scalar', 'gpsimd', 'dma:<queue>#<slot>' or 'sync'
    start_ns: float
    release_ns: float  # the track is free again
    visible_ns: float  # dependants may read the result
    instr: Instr


def lane_order(lane: str) -> int:
    """The thread id of a track: compute engines first, then sync, then the DMA queues by number."""
    if lane in COMPUTE_LANES:
        return COMPUTE_LANES.index(lane) + 1
    if lane == SYNC_LANE:
        return len(COMPUTE_LANES) + 1
    queue, _, slot = lane[len(_DMA_PREFIX):].partition("#")
    if lane.startswith(_DMA_PREFIX) and queue in _DMA_QUEUES:
        return _DMA_TID_BASE + _DMA_QUEUES.index(queue) * _DMA_SLOTS + min(int(slot or 0), _DMA_SLOTS - 1)
    return _DMA_TID_BASE * _DMA_SLOTS  # an engine name this module does not know: last, still shown


def lane_label(lane: str) -> str:
    """The track's name in a viewer, e.g. 'TensorE', 'DMA queue 3'."""
    names = {"tensor": "TensorE", "vector": "VectorE", "scalar": "ScalarE", "gpsimd": "GpSimdE",
             SYNC_LANE: "cross-core sync"}
    if lane in names:
        return names[lane]
    if lane.startswith(_DMA_PREFIX):
        queue, _, slot = lane[len(_DMA_PREFIX):].partition("#")
        return f"DMA queue {queue}" + (f" [{slot}]" if slot else "")
    return lane


def timeline_slices(traces: Trace | Sequence[Trace] | Iterable[Instr],
                    target: str | HardwareTarget) -> list[TimelineSlice]:
    """Every instruction of the trace with its modelled track and times, core by core."""
    programs = _split_programs(traces)
    result = schedule_programs(programs, get_target(target), record=True)
    slices = []
    for core, instrs in enumerate(programs):
        per_core = zip(instrs, result.lanes[core], result.starts_ns[core], result.releases_ns[core],
                       result.ends_ns[core], strict=True)
        slots: dict[str, list[float]] = {}   # per DMA queue: when each of its rows is free again
        for instr, lane, start, release, visible in per_core:
            if lane.startswith(_DMA_PREFIX):   # one row per transfer in flight, so rows never overlap
                free = slots.setdefault(lane, [])
                row = next((i for i, t in enumerate(free) if t <= start + 1e-6), len(free))
                free[row:row + 1] = [release]
                lane = f"{lane}#{row}"
            slices.append(TimelineSlice(core, lane, start, release, visible, instr))
    return slices


def _operands(instr: Instr) -> list[str]:
    return [f"{a.role}{'(w)' if a.write else ''}: {a.dtype}[{','.join(map(str, a.shape))}] {a.buffer}"
            for a in instr.accesses]


def _event(s: TimelineSlice) -> dict:
    args: dict = {"op": s.instr.op, "operands": _operands(s.instr), "visible_us": round(s.visible_ns / 1e3, 4)}
    if s.instr.attrs:  # op-specific facts (matmul sizes, ALU op, ...), apart: they may be named "op"
        args["attrs"] = {str(k): v if isinstance(v, (int, float, str, bool)) else str(v)
                         for k, v in s.instr.attrs}
    return {"name": s.instr.op, "cat": s.lane.partition("#")[0].rstrip("0123456789"), "ph": "X",
            "ts": round(s.start_ns / 1e3, 4), "dur": round(max(0.0, s.release_ns - s.start_ns) / 1e3, 4),
            "pid": s.core, "tid": lane_order(s.lane), "args": args}


def _metadata(slices: Sequence[TimelineSlice], target: str) -> list[dict]:
    events = []
    for core in sorted({s.core for s in slices}):
        events.append({"name": "process_name", "ph": "M", "pid": core, "tid": 0,
                       "args": {"name": f"NeuronCore {core} ({target}, nkisim cost model)"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": core, "tid": 0,
                       "args": {"sort_index": core}})
        for lane in sorted({s.lane for s in slices if s.core == core}, key=lane_order):
            tid = lane_order(lane)
            events.append({"name": "thread_name", "ph": "M", "pid": core, "tid": tid,
                           "args": {"name": lane_label(lane)}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": core, "tid": tid,
                           "args": {"sort_index": tid}})
    return events


def timeline_document(traces: Trace | Sequence[Trace] | Iterable[Instr],
                      target: str | HardwareTarget, title: str = "") -> dict:
    """The trace-event JSON object: metadata events first, then one "X" event per instruction."""
    hw = get_target(target)
    slices = timeline_slices(traces, hw)
    makespan = max((s.visible_ns for s in slices), default=0.0)
    return {
        "traceEvents": _metadata(slices, hw.name) + [_event(s) for s in slices],
        "displayTimeUnit": "ns",
        "otherData": {"title": title, "target": hw.name, "cores": len({s.core for s in slices}),
                      "instructions": len(slices), "modelled_us": makespan / 1e3,
                      "source": "nkisim cost model (modelled, not measured)"},
    }


def write_timeline(traces: Trace | Sequence[Trace] | Iterable[Instr], target: str | HardwareTarget,
                   path: str | Path, title: str = "") -> Path:
    """Write the timeline of the trace to ``path`` (parent folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = timeline_document(traces, target, title)
    path.write_text(json.dumps(document, separators=(",", ":")))
    return path
