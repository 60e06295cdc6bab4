"""nkisim.timeline: the modelled schedule as Chrome trace-event JSON, loaded back and checked, and
nkisim.timeline_svg's picture of it."""
from __future__ import annotations

import itertools
import json
import xml.etree.ElementTree as ET

import pytest

from conv3d_bwd import nkisim
from conv3d_bwd.nkisim.timeline import lane_order, timeline_document, write_timeline
from conv3d_bwd.nkisim.timeline_svg import timeline_svg

pytestmark = pytest.mark.fast

DY, X, W = (1, 8, 2, 4, 4), (1, 8, 2, 4, 4), (3, 3, 3, 8, 8)
GEO = {"padding": (1, 1, 1, 1, 1, 1)}
ENGINE_TRACKS = {"tensor": "TensorE", "vector": "VectorE", "scalar": "ScalarE", "gpsimd": "GpSimdE"}


def _conv3d_bwd():
    from conv3d_bwd.nkisim.binding import ensure_nki

    ensure_nki(prefer="nkisim")
    from conv3d_bwd.kernels import conv3d_bwd

    return conv3d_bwd


@pytest.fixture(scope="module", params=[1, 2], ids=["lnc1", "lnc2"])
def run_and_file(request, tmp_path_factory):
    """One trace-only kernel run writing its timeline, and the file loaded back."""
    path = tmp_path_factory.mktemp("timeline") / f"lnc{request.param}" / "t.json"
    specs = [nkisim.TensorSpec(s, "bfloat16") for s in (DY, X, W)]
    result = nkisim.run(_conv3d_bwd(), *specs, lnc=request.param, target="trn2", trace_only=True,
                        timeline=path, **GEO)
    return result, json.loads(path.read_text())


def _slices(document):
    return [e for e in document["traceEvents"] if e["ph"] == "X"]


def test_every_instruction_is_one_complete_event(run_and_file):
    result, document = run_and_file
    slices = _slices(document)
    assert len(slices) == len(result.trace) == document["otherData"]["instructions"]
    for event in slices:
        assert {"name", "ph", "ts", "dur", "pid", "tid", "args"} <= event.keys()
        assert event["ts"] >= 0 and event["dur"] >= 0
        assert event["args"]["op"] == event["name"]
        assert event["args"]["operands"], event  # every instruction names its operands
    # the events follow the trace: the same ops in program order per core
    for core in range(result.lnc):
        ops = [e["name"] for e in slices if e["pid"] == core]
        assert ops == [i.op for i in result.trace if i.program_id == core]


def test_one_track_per_engine_and_dma_queue_with_names(run_and_file):
    result, document = run_and_file
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in document["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    slices = _slices(document)
    assert {(e["pid"], e["tid"]) for e in slices} <= names.keys()  # every track is named
    assert {e["pid"] for e in slices} == set(range(result.lnc))     # a process per core
    for event in slices:
        track = names[(event["pid"], event["tid"])]
        engine = next(i.engine for i in result.trace if i.op == event["name"])
        if event["cat"] in ENGINE_TRACKS:
            assert track == ENGINE_TRACKS[event["cat"]]
        elif event["cat"] == "dma":
            assert track.startswith("DMA queue ") and engine == "dma"
    engines_used = {i.engine for i in result.trace} & set(ENGINE_TRACKS)
    assert {ENGINE_TRACKS[e] for e in engines_used} <= set(names.values())
    assert any(n.startswith("DMA queue ") for n in names.values())


def test_a_track_runs_one_instruction_at_a_time(run_and_file):
    _, document = run_and_file
    by_track: dict = {}
    for e in _slices(document):
        by_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - 1e-3  # rounding to 0.1 ns


def test_the_timeline_ends_when_the_cost_model_says(run_and_file):
    result, document = run_and_file
    assert document["otherData"]["modelled_us"] == pytest.approx(result.summary.modelled_us, rel=1e-9)
    last_visible = max(e["args"]["visible_us"] for e in _slices(document))
    assert last_visible == pytest.approx(result.summary.modelled_us, abs=1e-3)


def test_the_picture_has_a_row_per_track(run_and_file):
    _, document = run_and_file
    svg = timeline_svg(document)
    root = ET.fromstring(svg)  # well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    tracks = {(e["pid"], e["tid"]) for e in _slices(document)}
    labels = [t.text for t in root.iter(f"{ns}text") if t.text and t.text.startswith("core ")]
    assert len(labels) == len(tracks)
    assert "core 0 TensorE" in labels
    assert len(list(root.iter(f"{ns}rect"))) >= len(tracks)


def test_write_timeline_on_a_hand_made_trace(tmp_path):
    from conv3d_bwd.nkisim.trace import Instr
    from simtests.nkisim.helpers import acc

    load = Instr("dma_copy", "dma", (acc("src", "hbm", 1), acc("dst", "sbuf", 2, write=True)))
    copy = Instr("tensor_copy", "vector", (acc("src", "sbuf", 2), acc("dst", "sbuf", 3, write=True)))
    path = write_timeline([load, copy], "trn2", tmp_path / "sub" / "t.json", title="hand")
    document = json.loads(path.read_text())
    first, second = _slices(document)
    assert (first["name"], second["name"]) == ("dma_copy", "tensor_copy")
    assert second["ts"] >= first["ts"] + first["dur"] - 1e-3  # the copy waits for the load (RAW)
    assert first["tid"] == lane_order("dma:swdge#0") and second["tid"] == lane_order("vector")
    assert document == timeline_document([load, copy], "trn2", title="hand")
