"""`conv3d-bwd bench` end to end on the smoke set: the command, its table and its JSON (not timings)."""
import contextlib
import io
import json
import re

import pytest

from conv3d_bwd.verify.bench import SMOKE_NOTE, SMOKE_SHAPES, SMOKE_TOP
from conv3d_bwd.verify.cli import main

# The fields every shape record carries.
REQUIRED_FIELDS = {"name", "geometry", "plan", "modelled_us", "roofline_us", "efficiency",
                   "tensor_util", "hbm_bytes", "compulsory_bytes", "candidates"}


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """One smoke bench for the tests that read its exit code, JSON, plot or printed table."""
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["bench", "--set", "smoke", "--target", "trn2", "--json", str(out)])
    return code, out, printed.getvalue()


def test_bench_exits_zero_and_writes_json_and_plot(bench_run):
    code, out, _ = bench_run
    assert code == 0
    assert out.exists() and out.with_suffix(".png").stat().st_size > 0


def test_bench_records_carry_the_required_fields(bench_run):
    _, out, _ = bench_run
    records = json.loads(out.read_text())
    assert [r["name"] for r in records] == [s.name for s in SMOKE_SHAPES]
    for r in records:
        assert REQUIRED_FIELDS <= r.keys(), REQUIRED_FIELDS - r.keys()
        assert r["error"] in (None, "")
        assert r["modelled_us"] > 0 and r["roofline_us"] > 0
        # efficiency is the ratio it claims to be
        assert r["efficiency"] == pytest.approx(r["roofline_us"] / r["modelled_us"], rel=1e-6)
        assert 0 < r["tensor_util"] <= 1
        # HBM traffic can never be below what must be read and written once
        assert r["hbm_bytes"] >= r["compulsory_bytes"] > 0
        # the cost model's band holds the central value; efficiency at its pessimistic end
        low, high = r["modelled_band_us"]
        assert 0 < low <= r["modelled_us"] <= high
        assert r["efficiency_pessimistic"] == pytest.approx(r["roofline_us"] / high, rel=1e-6)


def test_bench_pick_is_among_feasible_candidates(bench_run):
    _, out, _ = bench_run
    for r in json.loads(out.read_text()):
        timed = [c for c in r["candidates"] if c.get("modelled_us")]
        assert len(timed) >= 1
        picks = [c for c in timed if c.get("is_pick")]
        assert len(picks) == 1
        assert picks[0]["modelled_us"] == pytest.approx(r["modelled_us"])
        assert r["best_candidate_us"] == pytest.approx(min(c["modelled_us"] for c in timed))


def test_bench_prints_a_table(bench_run):
    out = bench_run[2]
    for shape in SMOKE_SHAPES:
        assert shape.name in out
    assert re.search(r"pick: modelled [\d.]+ us \[[\d.]+ \.\. [\d.]+\], efficiency [\d.]+ \(pessimistic", out)
    assert SMOKE_NOTE in out  # what the smoke set is for, and what its figures do not say


def test_the_smoke_set_models_the_pick_and_its_best_estimated_rival_only(bench_run):
    _, out, _ = bench_run
    for r in json.loads(out.read_text()):
        assert len(r["candidates"]) == 1 + SMOKE_TOP < r["feasible_candidates"]
        assert r["candidates"][0]["is_pick"]


def test_target_checks_give_the_geometric_mean_at_the_pessimistic_end():
    from conv3d_bwd.verify.bench import target_checks

    records = [{"name": n, "efficiency": e, "efficiency_pessimistic": p, "candidates": [{}],
                "pick_over_best": 1.0, "estimate_error": 0.0} for n, e, p in (("a", 0.8, 0.4), ("b", 0.5, 0.1))]
    lines = target_checks(records)
    assert "geometric mean efficiency 0.632" in lines[-2]
    assert lines[-1] == "geometric mean efficiency at the cost model's pessimistic end 0.200"


def test_bench_only_selects_shapes_by_name(capsys, tmp_path):
    out = tmp_path / "one.json"
    assert main(["bench", "--set", "smoke", "--only", "pointwise$", "--json", str(out)]) == 0
    assert [r["name"] for r in json.loads(out.read_text())] == ["smoke_pointwise"]
    assert "smoke_k3" not in capsys.readouterr().out


@pytest.mark.parametrize("only, rule", [("nomatch", "matches no shape"), ("(", "regular expression")])
def test_bench_only_rejects_what_selects_nothing(only, rule, capsys):
    assert main(["bench", "--set", "smoke", "--only", only]) == 2
    err = capsys.readouterr().err
    assert "only=" in err and rule in err


def test_a_shape_that_cannot_be_planned_is_reported_not_fatal(monkeypatch):
    from conv3d_bwd.kernels import plan as planner
    from conv3d_bwd.kernels.errors import Conv3dBwdPlanError
    from conv3d_bwd.verify.bench import PICK_FIELDS, bench_shape, format_table

    def no_plan(*args, **kwargs):
        raise Conv3dBwdPlanError("no candidate fits")

    monkeypatch.setattr(planner, "plan_conv3d_bwd", no_plan)
    record = bench_shape(SMOKE_SHAPES[0])
    assert record["error"].startswith("planning failed: Conv3dBwdPlanError: no candidate fits")
    assert record["candidates"] == [] and record["plan"] is None
    # the same fields as a planned shape, all empty, so JSON consumers need no special case
    assert all(record[f] is None for f in PICK_FIELDS)
    assert SMOKE_SHAPES[0].name in format_table([record])


def test_bench_figures_do_not_depend_on_jobs():
    from conv3d_bwd.verify.bench import bench_shape

    one, two = (bench_shape(SMOKE_SHAPES[0], jobs=j, top=3) for j in (1, 2))
    assert len(one["candidates"]) == len(two["candidates"]) >= 2
    for a, b in zip(one["candidates"], two["candidates"]):
        assert (a["label"], a["modelled_us"], a["is_pick"]) == (b["label"], b["modelled_us"], b["is_pick"])


def test_bench_top_runs_the_pick_and_the_best_estimated_others(capsys, tmp_path):
    out = tmp_path / "top.json"
    assert main(["bench", "--set", "smoke", "--only", "k3", "--top", "1", "--json", str(out)]) == 0
    (r,) = json.loads(out.read_text())
    assert r["feasible_candidates"] >= 3   # so that pruning to 1 + 1 really drops some
    assert len(r["candidates"]) == 2 and r["candidates"][0]["is_pick"]
    others = [c for c in r["plan"]["candidates"] if c["feasible"] and c["label"] != r["plan"]["label"]]
    assert r["candidates"][1]["estimated_us"] == pytest.approx(min(c["estimated_us"] for c in others))
    table = capsys.readouterr().out
    assert f"2/{r['feasible_candidates']}" in table and "top 1" in table


def test_bench_top_rejects_a_negative_count(capsys):
    assert main(["bench", "--set", "smoke", "--top", "-1"]) == 2
    assert "--top" in capsys.readouterr().err


def test_bench_shapes_runs_a_layer_file_end_to_end(capsys, tmp_path):
    layers = tmp_path / "layers.json"
    layers.write_text(json.dumps([{"name": "my_small", "batch": 1, "channels": [8, 16], "input": [2, 6, 6],
                                   "kernel": 3, "padding": 1, "source": "a user's layer"}]))
    out = tmp_path / "mine.json"
    assert main(["bench", "--shapes", str(layers), "--top", "1", "--json", str(out)]) == 0
    (r,) = json.loads(out.read_text())
    assert r["name"] == "my_small" and r["lnc"] == 1 and r["geometry"]["source"] == "a user's layer"
    assert REQUIRED_FIELDS <= r.keys() and r["error"] in (None, "")
    assert r["modelled_us"] > 0 and len(r["candidates"]) == 2
    assert r["plan_seconds"] > 0   # a geometry no other test plans: never a cache hit
    assert "my_small" in capsys.readouterr().out


def test_bench_shapes_takes_a_layer_lnc_from_the_file(tmp_path):
    from conv3d_bwd.verify.bench import bench_shape
    from conv3d_bwd.verify.bench_shapes import load_shapes

    layers = tmp_path / "l2.json"
    layers.write_text(json.dumps([{"name": "pw", "batch": 1, "channels": [32, 16], "input": [2, 4, 4],
                                   "kernel": 1, "lnc": 2}]))
    (shape,) = load_shapes(layers)
    r = bench_shape(shape, lnc=1, top=0)
    assert r["lnc"] == 2 and r["plan"]["lnc"] == 2 and r["modelled_us"] > 0


def test_bench_shapes_bad_file_is_a_usage_error(capsys, tmp_path):
    layers = tmp_path / "bad.json"
    layers.write_text(json.dumps([{"name": "x", "batch": 1, "channels": [8, 16], "input": [2, 6, 6],
                                   "kernel": 3, "stride": 0}]))
    assert main(["bench", "--shapes", str(layers)]) == 2
    err = capsys.readouterr().err
    assert "layer 0 (x)" in err and "'stride'" in err and ">= 1" in err


def test_bench_set_and_shapes_together_are_refused(capsys, tmp_path):
    assert main(["bench", "--set", "smoke", "--shapes", str(tmp_path / "x.json")]) == 2
    assert "not both" in capsys.readouterr().err
