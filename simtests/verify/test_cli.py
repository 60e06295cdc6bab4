"""conv3d-bwd end to end: check, plan, report (files, shards, merge), bench, and the exit codes."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from html.parser import HTMLParser
from pathlib import Path

import pytest

import conv3d_bwd.verify.cases as cases_module
from conv3d_bwd.verify.cli import main
from simtests.verify.standins import ORACLE_FP32, oracle_fp32, registered, with_fault

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]
GEOMETRY = ["--batch", "2", "--channels", "8,8", "--input", "4,6,6", "--kernel", "3,3,3",
            "--padding", "1,1,1,1,1,1"]
TINY = tuple(c for c in cases_module.CASE_SETS["default"]
             if c.name in ("basic", "stride", "lnc2", "grads") and c.fast)[:4]


@pytest.fixture
def standin():
    with registered(ORACLE_FP32, oracle_fp32) as name:
        yield name


@pytest.fixture
def tiny_set(monkeypatch):
    """The fast set replaced by four small cases (groups basic, strides, lnc2, grads)."""
    assert len(TINY) == 4
    monkeypatch.setitem(cases_module.CASE_SETS, "fast", TINY)
    return TINY


def _one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("conv3d-bwd: error: "), err
    assert "Traceback" not in err
    return lines[0]


# ---------------------------------------------------------------------------------------------- check

def test_check_passes_with_exit_0(standin, capsys):
    assert main(["check", *GEOMETRY, "--backend", standin]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("PASS")
    assert re.search(r"^dx\s+PASS", out, re.MULTILINE) and re.search(r"^db\s+PASS", out, re.MULTILINE)


def test_check_fails_with_exit_1_on_an_injected_wrong_result(capsys):
    with registered("test-wrong", with_fault(oracle_fp32, "dx", index=11, delta_ulps=4)):
        assert main(["check", *GEOMETRY, "--backend", "test-wrong", "--mode", "stat"]) == 1
    out = capsys.readouterr().out
    assert out.rstrip().endswith("FAIL")
    assert re.search(r"^dx\s+FAIL", out, re.MULTILINE)
    assert "Worst element at index" in out


def test_check_json_is_machine_readable(standin, capsys):
    assert main(["check", *GEOMETRY, "--backend", standin, "--grads", "dw,db", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["grad"] for r in records] == ["dw", "db"]
    assert all(r["status"] == "PASS" for r in records)


@pytest.mark.parametrize(("argv", "needle"), [
    (["check", "--batch", "1", "--channels", "4,4", "--input", "3,4,4", "--kernel", "3,3"],
     "--kernel"),
    (["check", "--batch", "1", "--channels", "4,x", "--input", "3,4,4", "--kernel", "3,3,3"],
     "--channels"),
    (["check", "--batch", "1", "--channels", "4,4", "--input", "1,2,2", "--kernel", "3,3,3"],
     "output size"),
    (["check", *GEOMETRY, "--padding", "1,1,1"], "--padding"),
    (["check", *GEOMETRY, "--stride", "0,1,1"], "--stride"),
    (["check", *GEOMETRY, "--grads", "dx,dz"], "--grads"),
    (["check", *GEOMETRY, "--dtype", "fp8"], "--dtype"),
    (["check", *GEOMETRY, "--frobnicate"], "unrecognized"),
    (["check", *GEOMETRY, "--backend", "cuda"], "'cuda' is not one of"),
    (["check", "--batch", "1"], "required"),
    (["plan", *GEOMETRY, "--target", "trn9"], "--target"),
    (["report", "--shard", "3/2"], "--shard"),
    (["report", "--set", "huge"], "--set"),
    (["report", "--merge", "/nonexistent/shard"], "does not exist"),
    (["report", "--only", "("], "--only"),
    (["report", "--only", "no-such-case"], "matches no case"),
    (["report", "--out", __file__], "is a file, not a directory"),
    (["report", "--out", "/proc/no-such-dir/report"], "cannot be made a report directory"),
    (["launch"], "invalid choice"),
    # Negative tuples reach their parser (argparse would say "expected one argument").
    (["check", *GEOMETRY, "--padding", "-1,0,0,0,0,0"], "every value must be >= 0"),
    (["check", *GEOMETRY, "--stride", "-2,1,1"], "every value must be >= 1"),
    (["check", "--batch", "1", "--channels", "-4,4", "--input", "3,4,4", "--kernel", "3,3,3"],
     "--channels"),
    (["check", *GEOMETRY, "--seed", "-3"], "--seed"),
    # Planner input rules are usage errors in check too, not kernel failures.
    (["check", *GEOMETRY, "--lnc", "2", "--target", "trn1"], "LNC2 needs trn2"),
    (["plan", *GEOMETRY, "--lnc", "2", "--target", "trn1"], "LNC2 needs trn2"),
    # A geometry no machine holds is refused before any allocation.
    (["check", "--batch", "100000", "--channels", "512,512", "--input", "64,64,64", "--kernel",
      "3,3,3"], "is available here"),
    (["check", "--batch", "99999999999999999999", "--channels", "4,4", "--input", "3,4,4",
      "--kernel", "3,3,3"], "is available here"),
])
def test_usage_errors_exit_2_with_one_line(argv, needle, capsys):
    assert main(argv) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert needle in line


def test_unavailable_backend_is_a_usage_error(capsys):
    from conv3d_bwd.verify.backends import real_nki_missing

    if real_nki_missing() is None:
        pytest.skip("the real Neuron nki imports here")
    assert main(["check", *GEOMETRY, "--backend", "nki-simulate"]) == 2
    assert "nki" in _one_line_error(capsys.readouterr().err)
    assert main(["report", "--set", "fast", "--backend", "trn", "--out", "unused"]) == 2
    assert "backend 'trn' cannot run here" in _one_line_error(capsys.readouterr().err)


def test_usage_error_in_a_real_process_has_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "conv3d_bwd.verify.cli", "check", "--batch", "1", "--channels",
                           "4,4", "--input", "1,2,2", "--kernel", "3,3,3"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    _one_line_error(proc.stderr)


def test_help_on_each_subcommand(capsys):
    for command in ("check", "plan", "report", "bench"):
        assert main([command, "--help"]) == 0
        assert f"usage: conv3d-bwd {command}" in capsys.readouterr().out


def _subparsers():
    import argparse

    from conv3d_bwd.verify.cli import build_parser

    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_every_flag_has_help_and_shows_its_default():
    from conv3d_bwd.verify.cli import _shown_default

    for name, sub in _subparsers().items():
        text = " ".join(sub.format_help().split())  # argparse wraps lines
        for action in sub._actions:
            if not action.option_strings or action.dest == "help":
                continue
            assert action.help, f"{name} {action.option_strings[0]} has no help text"
            if action.default is not None and not isinstance(action.default, bool) and not action.required:
                shown = f"(default: {_shown_default(action.default)})"
                assert shown in text, f"{name} {action.option_strings[0]}: {shown} not in the help"


def test_choices_are_listed(capsys):
    from conv3d_bwd.verify.bench import BENCH_SETS

    assert main(["bench", "--help"]) == 0
    usage = " ".join(capsys.readouterr().out.split())
    assert "--set {" + ",".join(BENCH_SETS) + "}" in usage
    assert main(["bench", "--set", "nosuch"]) == 2
    assert "invalid choice" in _one_line_error(capsys.readouterr().err)


def test_check_mode_both_runs_exact_then_stat(standin, capsys):
    assert main(["check", *GEOMETRY, "--backend", standin, "--mode", "both"]) == 0
    out = capsys.readouterr().out
    assert out.count("PASS\n") == 2 and out.index("mode exact") < out.index("mode stat")
    assert main(["check", *GEOMETRY, "--backend", standin, "--mode", "both", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["mode"], r["grad"]) for r in records] == [
        (m, g) for m in ("exact", "stat") for g in ("dx", "dw", "db")]


def test_check_mode_both_fails_when_one_mode_fails(capsys):
    with registered("test-wrong", with_fault(oracle_fp32, "dx", index=11, delta_ulps=4)):
        assert main(["check", *GEOMETRY, "--backend", "test-wrong", "--mode", "both"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out


def test_check_timeline_writes_the_modelled_schedule(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert main(["check", *GEOMETRY, "--timeline", str(path), "--mode", "both"]) == 0
    out = capsys.readouterr().out
    assert f"timeline {path}" in out
    document = json.loads(path.read_text())
    slices = [e for e in document["traceEvents"] if e["ph"] == "X"]
    assert slices and all({"ts", "dur", "pid", "tid"} <= e.keys() for e in slices)
    modelled = float(re.search(r"^modelled\s+([\d.]+) us", out, re.MULTILINE).group(1))
    assert document["otherData"]["modelled_us"] == pytest.approx(modelled, abs=0.05)   # printed to 0.1 us


def test_check_timeline_rules(standin, tmp_path, capsys):
    assert main(["check", *GEOMETRY, "--backend", standin, "--timeline", str(tmp_path / "t.json")]) == 2
    assert "--timeline" in _one_line_error(capsys.readouterr().err)
    assert main(["check", *GEOMETRY, "--timeline", str(tmp_path)]) == 2
    assert "is a directory" in _one_line_error(capsys.readouterr().err)


def test_check_runs_the_real_kernel_under_nkisim(capsys):
    assert main(["check", *GEOMETRY, "--backend", "nkisim", "--mode", "stat", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"modelled [\d.]+ us \[[\d.]+ \.\. [\d.]+\] \(nkisim cost model\)", out)
    assert out.rstrip().endswith("PASS")


def test_check_reports_a_crashing_kernel_as_fail_also_in_json(capsys):
    def crashes(case, dy, x, w, target):
        raise RuntimeError("boom")

    with registered("test-crashes", crashes):
        assert main(["check", *GEOMETRY, "--backend", "test-crashes"]) == 1
        captured = capsys.readouterr()
        assert captured.out.strip() == "FAIL" and "RuntimeError: boom" in captured.err
        assert "kernel run failed on" in captured.err
        assert main(["check", *GEOMETRY, "--backend", "test-crashes", "--json"]) == 1
        records = json.loads(capsys.readouterr().out)
    assert [r["grad"] for r in records] == ["dx", "dw", "db"]
    assert all(r["status"] == "FAIL" and "boom" in r["error"] for r in records)


def test_check_names_the_failing_stage(standin, monkeypatch, capsys):
    from conv3d_bwd.verify import harness

    def bad_inputs(case, mode, seed):
        raise RuntimeError("no inputs")

    assert main(["check", *GEOMETRY, "--backend", standin]) == 0
    capsys.readouterr()
    monkeypatch.setattr(harness, "make_input_set", bad_inputs)
    assert main(["check", *GEOMETRY, "--backend", standin]) == 1
    err = capsys.readouterr().err
    assert "input generation failed on" in err and "RuntimeError: no inputs" in err
    assert "kernel run failed" not in err


def test_check_says_when_a_pass_is_mistrusted(standin, monkeypatch, capsys):
    from dataclasses import replace

    from conv3d_bwd.verify import harness

    real = harness.make_input_set

    def zero_dy(case, mode, seed):  # every gradient's reference becomes all zeros
        inputs = real(case, mode, seed)
        return replace(inputs, dy=inputs.dy * 0)

    monkeypatch.setattr(harness, "make_input_set", zero_dy)
    assert main(["check", *GEOMETRY, "--backend", standin]) == 0
    out = capsys.readouterr().out
    assert "note     dw is MISTRUSTED" in out and "try --mode stat" in out
    assert out.rstrip().endswith("PASS")


# ----------------------------------------------------------------------------------------------- plan

def test_plan_prints_the_table_and_json(capsys):
    assert main(["plan", *GEOMETRY]) == 0
    text = capsys.readouterr().out
    assert "pick (*):" in text and "runner-up:" in text
    assert main(["plan", *GEOMETRY, "--target", "trn1", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert "strategy" in plan


def _plan_rows(text: str) -> list[str]:
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("rank"))
    rows = []
    for line in lines[header + 1:]:
        if line.startswith("pick (*):") or line.lstrip().startswith("rejected ("):
            break
        rows.append(line)
    return rows


def test_plan_shows_the_top_candidates_sorted_with_the_pick_and_the_runner_up(capsys):
    from conv3d_bwd.kernels.plan import plan_conv3d_bwd
    from conv3d_bwd.verify.cli import _case_from, build_parser

    assert main(["plan", *GEOMETRY, "--top", "5"]) == 0
    text = capsys.readouterr().out
    rows = _plan_rows(text)
    assert len(rows) == 5
    estimates = [float(row[2:].split()[1]) for row in rows]
    assert estimates == sorted(estimates)
    assert [int(row[2:].split()[0]) for row in rows] == [1, 2, 3, 4, 5]
    case = _case_from(build_parser().parse_args(["plan", *GEOMETRY]))
    plan = plan_conv3d_bwd(case.dy_shape, case.x_shape, case.w_shape, stride=case.stride,
                           padding=case.padding, dilation=case.dilation, dtype=case.dtype)
    marked = [row for row in rows if row.startswith("*")]
    assert len(marked) == 1 and marked[0].endswith(plan.label)
    feasible = sorted(c.estimated_us for c in plan.candidates if c.feasible)
    others = sorted(c.estimated_us for c in plan.candidates if c.feasible and c.label != plan.label)
    gap = others[0] / plan.estimated_us - 1
    assert f"runner-up: {others[0]:.2f} us ({gap:+.1%} over the pick)" in text
    assert f"shown: 5 of {len(feasible)} feasible candidates" in text


def test_plan_all_lists_every_candidate(capsys):
    argv = ["plan", "--batch", "1", "--channels", "65,3", "--input", "5,9,9", "--kernel", "7,7,7",
            "--padding", "6,0,3,3,0,6", "--target", "trn1"]
    assert main([*argv, "--json"]) == 0
    candidates = json.loads(capsys.readouterr().out)["candidates"]
    assert main([*argv, "--all"]) == 0
    text = capsys.readouterr().out
    rows = _plan_rows(text)
    rejected = [c for c in candidates if not c["feasible"]]
    assert len(rows) == len(candidates) - len(rejected)
    if rejected:
        assert f"rejected ({len(rejected)}):" in text and rejected[0]["reason"] in text
    # the numbers come first, so they line up whatever the labels' lengths
    assert len({row.index(row[2:].split()[1]) + len(row[2:].split()[1]) for row in rows}) == 1


def test_plan_needs_no_memory_of_the_geometry_size(monkeypatch, capsys):
    """plan runs nothing: a geometry too big for this machine's oracle still gets its plan (check refuses it)."""
    from conv3d_bwd.verify import cli

    monkeypatch.setattr(cli, "_available_memory", lambda: 1024)
    assert main(["plan", *GEOMETRY]) == 0
    assert "dx:" in capsys.readouterr().out
    assert main(["check", *GEOMETRY]) == 2
    assert "is available here" in _one_line_error(capsys.readouterr().err)


def test_plan_shows_it_is_alive_when_planning_is_slow(monkeypatch, capsys):
    import time as time_module

    from conv3d_bwd.kernels import plan as planner
    from conv3d_bwd.verify import progress

    real = planner.plan_conv3d_bwd

    def slow(*args, **kwargs):
        time_module.sleep(0.35)
        return real(*args, **kwargs)

    monkeypatch.setattr(planner, "plan_conv3d_bwd", slow)
    monkeypatch.setattr(progress, "HEARTBEAT_EVERY_S", 0.1)
    assert main(["plan", *GEOMETRY]) == 0
    err = capsys.readouterr().err
    assert "elapsed" in err and "done in" in err and "planning b2-ci8-co8" in err


def test_no_plan_lists_the_rejections_one_per_line(monkeypatch, capsys):
    from conv3d_bwd.kernels import plan as planner

    def no_plan(*args, **kwargs):
        raise ValueError("no plan fits trn2 for this geometry: A: SBUF 9 B exceeds 1 B; "
                         "B: PSUM 9 banks exceed 8")

    monkeypatch.setattr(planner, "plan_conv3d_bwd", no_plan)
    assert main(["plan", *GEOMETRY]) == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["candidate: rejection", "  A: SBUF 9 B exceeds 1 B",
                                         "  B: PSUM 9 banks exceed 8"]
    assert "all 2 candidates rejected (listed above)" in _one_line_error(captured.err)
    assert main(["check", *GEOMETRY]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "'conv3d-bwd plan' with the same flags" in _one_line_error(captured.err)


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_plan_exists_for_a_128_to_256_channel_7x7x7_layer(target, capsys):
    argv = ["plan", "--batch", "1", "--channels", "128,256", "--input", "8,16,16", "--kernel",
            "7,7,7", "--padding", "3,3,3,3,3,3", "--target", target]
    assert main(argv) == 0, capsys.readouterr().err


# --------------------------------------------------------------------------------------------- report

class _Structure(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.ids: set[str] = set()
        self.img_src: list[str] = []
        self.external: list[str] = []
        self.anchors: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "img":
            self.img_src.append(attrs.get("src", ""))
        for key in ("src", "href"):
            if attrs.get(key, "").startswith(("http:", "https:", "//")):
                self.external.append(attrs[key])
        if attrs.get("href", "").startswith("#"):
            self.anchors.append(attrs["href"][1:])


def _records(out_dir: Path) -> list[dict]:
    return json.loads((out_dir / "report.json").read_text())["records"]


def test_report_writes_three_files(standin, tiny_set, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", "--set", "fast", "--backend", standin, "--out", str(out), "--jobs", "1"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
    records = _records(out)
    expected = sum(len(c.grads) for c in tiny_set) * 2  # both modes
    assert len(records) == expected
    assert {r["mode"] for r in records} == {"exact", "stat"}
    assert {r["seed"] for r in records if r["mode"] == "stat"} == {0, 1}  # both distributions
    markdown = (out / "report.md").read_text()
    for heading in ("## By group", "## By plan method", "## Worst error/bound ratios", "## Failures"):
        assert heading in markdown
    assert "| basic |" in markdown
    page = _Structure()
    page.feed((out / "report.html").read_text())
    assert {"verdict", "plots", "by-group", "by-dtype", "by-method", "worst", "all", "failures",
            "mistrusted"} <= page.ids
    assert page.anchors and set(page.anchors) <= page.ids  # the section links all land
    assert page.tags.count("table") >= 4
    assert len(page.img_src) == 3 and all(s.startswith("data:image/png;base64,") for s in page.img_src)
    assert page.external == []
    err = capsys.readouterr().err
    assert "ETA" in err and f"{len(tiny_set) * 2}/{len(tiny_set) * 2}" in err


def test_report_exit_1_when_a_result_is_wrong(tiny_set, tmp_path, capsys):
    with registered("test-wrong", with_fault(oracle_fp32, "db", index=0, delta_ulps=8)):
        code = main(["report", "--set", "fast", "--backend", "test-wrong", "--out", str(tmp_path),
                     "--jobs", "1", "--mode", "exact"])
    assert code == 1
    failing = [r for r in _records(tmp_path) if r["status"] == "FAIL"]
    assert failing and {r["grad"] for r in failing} == {"db"}
    assert "## Failures" in (tmp_path / "report.md").read_text()


def test_report_shards_merge_to_the_whole(standin, tiny_set, tmp_path, capsys):
    whole, one, two, merged = (tmp_path / n for n in ("whole", "s1", "s2", "merged"))
    base = ["report", "--set", "fast", "--backend", standin, "--mode", "stat", "--jobs", "1"]
    assert main([*base, "--out", str(whole)]) == 0
    assert main([*base, "--out", str(one), "--shard", "1/2"]) == 0
    assert main([*base, "--out", str(two), "--shard", "2/2"]) == 0
    ids_one = {r["case_id"] for r in _records(one)}
    ids_two = {r["case_id"] for r in _records(two)}
    assert ids_one and ids_two and not ids_one & ids_two
    assert main(["report", "--merge", str(one), str(two), "--out", str(merged)]) == 0
    assert sorted(p.name for p in merged.iterdir()) == ["report.html", "report.json", "report.md"]

    def key(r):
        return (r["case_id"], r["mode"], r["seed"], r["grad"])

    whole_records = {key(r): r["metrics"] for r in _records(whole)}
    merged_records = {key(r): r["metrics"] for r in _records(merged)}
    assert whole_records == merged_records
    meta = json.loads((merged / "report.json").read_text())["meta"]
    assert meta["shards"] == ["1/2", "2/2"] and meta["missing_shards"] == []
    assert "source" in json.loads((one / "report.json").read_text())["meta"]  # git revision or None
    # A shard named twice counts once.
    assert main(["report", "--merge", str(one), str(two), f"{one}/", "--out", str(merged)]) == 0
    again = json.loads((merged / "report.json").read_text())["meta"]
    assert again["wall_s"] == meta["wall_s"] and len(again["merged_from"]) == 2
    # The whole report, shard for shard: every field but the wall times.
    def strip(r):
        return {k: v for k, v in r.items() if k != "timings_s"}

    assert [strip(r) for r in _records(whole)] == [strip(r) for r in _records(merged)]


def test_merge_of_an_incomplete_set_of_shards_is_refused(standin, tiny_set, tmp_path, capsys):
    one, merged = tmp_path / "s1", tmp_path / "merged"
    assert main(["report", "--set", "fast", "--backend", standin, "--mode", "exact", "--jobs", "1",
                 "--out", str(one), "--shard", "1/2"]) == 0
    capsys.readouterr()
    assert main(["report", "--merge", str(one), "--out", str(merged)]) == 2
    assert "2/2" in _one_line_error(capsys.readouterr().err)
    assert not merged.exists()
    # --partial writes it, and says so in the report and on stderr.
    assert main(["report", "--merge", str(one), "--partial", "--out", str(merged)]) == 0
    assert "incomplete merge" in capsys.readouterr().err
    assert "**INCOMPLETE**" in (merged / "report.md").read_text()
    assert 'id="incomplete"' in (merged / "report.html").read_text()


def test_report_over_a_process_pool(standin, tiny_set, tmp_path, capsys):
    """--jobs 2 runs cases in forked workers (the registered stand-in is inherited by fork)."""
    assert main(["report", "--set", "fast", "--backend", standin, "--out", str(tmp_path),
                 "--jobs", "2", "--mode", "exact"]) == 0
    assert len(_records(tmp_path)) == sum(len(c.grads) for c in tiny_set)


def test_report_with_the_real_kernel(tiny_set, tmp_path, capsys):
    assert main(["report", "--set", "fast", "--out", str(tmp_path), "--jobs", "1"]) == 0
    records = _records(tmp_path)
    assert all(r["backend"] == "nkisim" and r["modelled_us"] for r in records)
    assert all(r["status"] == "PASS" for r in records)
    # a timeline per case (from its first mode), named relative to the report, drawn in the page
    with_timeline = [r for r in records if r["timeline"]]
    assert {r["case_id"] for r in with_timeline} == {c.id for c in tiny_set}
    assert all(r["mode"] == "exact" for r in with_timeline)
    for record in with_timeline:
        document = json.loads((tmp_path / record["timeline"]).read_text())
        assert document["otherData"]["modelled_us"] == pytest.approx(record["modelled_us"], rel=1e-6)
    page = _Structure()
    page.feed((tmp_path / "report.html").read_text())
    assert {f"tl-{c.id}" for c in tiny_set} <= page.ids
    assert {"performance", "timelines"} <= page.ids
    assert all(r["performance"]["efficiency"] > 0 for r in records)


def test_report_says_on_stderr_when_plots_are_skipped(standin, tiny_set, tmp_path, monkeypatch, capsys):
    from conv3d_bwd.verify.report import plots

    monkeypatch.setattr(plots, "matplotlib_missing", lambda: "No module named 'matplotlib'")
    assert main(["report", "--set", "fast", "--backend", standin, "--out", str(tmp_path), "--jobs", "1",
                 "--mode", "exact"]) == 0
    err = capsys.readouterr().err
    assert "report.html has no plots: matplotlib does not import" in err


# ---------------------------------------------------------------------------------------------- bench

def test_bench_without_the_module_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "conv3d_bwd.verify.bench", None)  # import raises ImportError
    assert main(["bench"]) == 2
    assert "conv3d_bwd.verify.bench" in _one_line_error(capsys.readouterr().err)


def test_bench_calls_run_bench(monkeypatch, tmp_path):
    calls = []
    fake = types.ModuleType("conv3d_bwd.verify.bench")
    fake.run_bench = lambda **kwargs: calls.append(kwargs) or []
    monkeypatch.setitem(sys.modules, "conv3d_bwd.verify.bench", fake)
    path = str(tmp_path / "b.json")
    assert main(["bench", "--set", "smoke", "--target", "trn3", "--lnc", "2", "--json", path]) == 0
    assert main(["bench", "--only", "vae|wide", "--top", "5"]) == 0
    assert main(["bench", "--shapes", "mine.json"]) == 0
    assert calls == [{"set_name": "smoke", "target": "trn3", "lnc": 2, "json_path": path, "only": None, "top": None,
                      "shapes_path": None},
                     {"set_name": "default", "target": "trn2", "lnc": 1, "json_path": None, "only": "vae|wide",
                      "top": 5, "shapes_path": None},
                     {"set_name": "default", "target": "trn2", "lnc": 1, "json_path": None, "only": None,
                      "top": None, "shapes_path": "mine.json"}]


def test_report_survives_a_broken_case(tiny_set, tmp_path, capsys):
    """A backend that drops a gradient breaks the harness for that case only: FAIL records, exit 1."""
    from conv3d_bwd.verify.backends import KernelRun

    def drops_db(case, dy, x, w, target):
        run = oracle_fp32(case, dy, x, w, target)
        outputs = {k: v for k, v in run.outputs.items() if k != "db"}
        return KernelRun(outputs, run.summary, run.backend_version)

    with registered("test-drops-db", drops_db):
        code = main(["report", "--set", "fast", "--backend", "test-drops-db", "--out", str(tmp_path),
                     "--jobs", "1", "--mode", "exact"])
    assert code == 1
    records = _records(tmp_path)
    broken = [r for r in records if r["error"]]
    assert broken and all("harness failure" in r["error"] for r in broken)
    assert {r["case_id"] for r in broken} == {c.id for c in tiny_set if "db" in c.grads}


def test_report_only_selects_cases_by_id(standin, tmp_path, capsys):
    assert main(["report", "--set", "default", "--only", "^chan_k1-|^vae-", "--backend", standin,
                 "--out", str(tmp_path), "--jobs", "1", "--mode", "exact"]) == 0
    assert {r["case_name"] for r in _records(tmp_path)} == {"chan_k1", "vae"}


def test_a_merged_report_draws_each_shards_timelines(tmp_path, capsys):
    from conv3d_bwd.nkisim.timeline import write_timeline
    from conv3d_bwd.nkisim.trace import Instr
    from conv3d_bwd.verify.report import write_reports
    from simtests.nkisim.helpers import acc

    load = Instr("dma_copy", "dma", (acc("src", "hbm", 1), acc("dst", "sbuf", 2, write=True)))
    meta = {"set": "fast", "backend": "nkisim", "modes": ["exact"], "seed": 0, "wall_s": 1.0}
    for index in (1, 2):
        shard = tmp_path / f"s{index}"
        write_timeline([load], "trn2", shard / "timelines" / f"c{index}.json")
        record = {"case_id": f"c{index}", "grad": "dx", "mode": "exact", "seed": 0, "status": "PASS",
                  "backend": "nkisim", "metrics": {}, "modelled_us": 1.0,
                  "timeline": f"timelines/c{index}.json"}
        write_reports([record], {**meta, "shard": f"{index}/2"}, shard)
    out = tmp_path / "merged"
    assert main(["report", "--merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(out)]) == 0
    records = _records(out)
    assert sorted(r["timeline"] for r in records) == ["../s1/timelines/c1.json", "../s2/timelines/c2.json"]
    page = (out / "report.html").read_text()
    assert page.count("<svg") == 2 and "Cannot draw" not in page
