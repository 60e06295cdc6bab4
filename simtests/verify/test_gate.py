"""verify.gate: a report passes the gate only when it is complete and every result passed."""
from __future__ import annotations

import json

import pytest

from conv3d_bwd.verify.gate import GateInputError, gate_report, main
from conv3d_bwd.verify.report.json_io import write_json


def _record(case: str, grad: str = "dx", status: str = "PASS", error: str | None = None) -> dict:
    passed = status != "FAIL"
    return {"case_id": case, "grad": grad, "mode": "stat", "passed": passed, "status": status,
            "error": error, "metrics": None if error else {"reason": "" if passed else "3 of 8 exceed"}}


def _report(tmp_path, records, **meta) -> str:
    out = tmp_path / "r"
    out.mkdir(exist_ok=True)
    write_json(records, {"set": "fast", "backend": "nkisim", "modes": ["stat"], "seed": 0, **meta},
               out / "report.json")
    return str(out)


@pytest.mark.fast
def test_all_passed_passes(tmp_path, capsys):
    path = _report(tmp_path, [_record("a"), _record("a", "dw"), _record("b", status="MISTRUSTED")])
    verdict = gate_report(path)
    assert verdict.passed and verdict.results == 3 and verdict.mistrusted == ("b dx stat",)
    assert main([path]) == 0
    assert "gate: PASS: 3 results" in capsys.readouterr().out


@pytest.mark.fast
def test_a_failed_or_crashed_result_fails_with_its_reason(tmp_path, capsys):
    path = _report(tmp_path, [_record("a"), _record("b", "dw", "FAIL"),
                              _record("c", "db", "FAIL", error="KeyError: 3 (at x.py:1)")])
    verdict = gate_report(path)
    assert not verdict.passed
    assert verdict.failed == ("b dw stat: 3 of 8 exceed", "c db stat: KeyError: 3 (at x.py:1)")
    assert main([path]) == 1
    err = capsys.readouterr().err
    assert "gate: FAIL" in err and "2 of 3 results failed" in err and "c db stat: KeyError" in err


@pytest.mark.fast
def test_mistrusted_fails_only_when_asked(tmp_path):
    path = _report(tmp_path, [_record("a", status="MISTRUSTED")])
    assert gate_report(path).passed
    verdict = gate_report(path, fail_on_mistrusted=True)
    assert verdict.reasons == ("1 results are MISTRUSTED (mostly-zero reference)",)
    assert main([path, "--fail-on-mistrusted"]) == 1


@pytest.mark.fast
def test_an_incomplete_report_fails(tmp_path):
    lone = _report(tmp_path, [_record("a")], shard="1/2")   # one shard of two, gated alone
    assert gate_report(lone).missing_shards == ("set 'fast' (backend nkisim, seed 0): 2/2",)
    assert not gate_report(lone).passed
    partial = _report(tmp_path, [_record("a")], shards=["1/2"], missing_shards=["set 'fast': 2/2"])
    assert gate_report(partial).reasons == ("incomplete: shards missing: set 'fast': 2/2",)
    complete = _report(tmp_path, [_record("a")], shards=["1/2", "2/2"])
    assert gate_report(complete).passed


@pytest.mark.fast
def test_an_empty_report_fails(tmp_path):
    assert gate_report(_report(tmp_path, [])).reasons == ("the report holds no result",)


@pytest.mark.fast
def test_unreadable_reports_are_named(tmp_path, capsys):
    with pytest.raises(GateInputError, match="does not exist"):
        gate_report(tmp_path / "nowhere")
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(GateInputError, match="cannot be read as JSON"):
        gate_report(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"records": []}), encoding="utf-8")
    with pytest.raises(GateInputError, match="is not a conv3d-bwd report.json"):
        gate_report(tmp_path / "other.json")
    assert main([str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith("gate: error: report: ")
