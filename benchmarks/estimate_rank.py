"""How well the planner's estimate ranks ALL feasible candidates of the bench shapes.

For every feasible candidate of every bench shape the modelled time comes from nkisim (a trace-only run
of the candidate, as ``conv3d-bwd bench`` does), and the estimate from the planner *of this checkout*.
Because the modelled time depends only on the plan, the bench JSON of an earlier run can be reused
(``--from-json``: files written by ``conv3d-bwd bench --json``; candidates are matched by label) and
only the estimates are recomputed -- a change of the estimate is then judged in seconds.

Per shape it prints: candidates, Spearman rank correlation of estimate vs. modelled time, the mean and
worst |estimate error| over all candidates, the pick's estimate error, pick / best (the planner's pick
under this estimate, in modelled time, over the best candidate) and how many candidates the estimate
places within 5 % of its pick whose modelled time is > 10 % worse than the best ("near-tie traps").

    python benchmarks/estimate_rank.py --from-json DIR [--lnc 1] [--only REGEX]
    python benchmarks/estimate_rank.py --lnc 2 --only pointwise        # runs nkisim (slow)
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scipy.stats import spearmanr

from conv3d_bwd.kernels.plan import plan_conv3d_bwd
from conv3d_bwd.verify.bench import bench_shape, select_shapes


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); nan for fewer than 2 values or a constant list."""
    if len(a) < 2 or len(set(a)) < 2 or len(set(b)) < 2:
        return float("nan")
    return float(spearmanr(a, b).statistic)


def modelled_by_label(shape, lnc: int, json_dir: str | None, jobs: int) -> dict[str, float]:
    """label -> nkisim modelled us of every feasible candidate (from a bench JSON, else by running it)."""
    if json_dir:
        for path in sorted(glob.glob(str(Path(json_dir) / "*.json"))):
            try:
                records = json.loads(Path(path).read_text())
            except (OSError, ValueError):
                continue
            for r in records if isinstance(records, list) else []:
                if r.get("name") == shape.name and r.get("lnc") == lnc and r.get("candidates"):
                    return {c["label"]: c["modelled_us"] for c in r["candidates"] if c.get("modelled_us")}
        raise SystemExit(f"--from-json {json_dir}: no bench record of {shape.name} at lnc {lnc}")
    record = bench_shape(shape, "trn2", lnc, None, jobs)
    return {c["label"]: c["modelled_us"] for c in record["candidates"] if c.get("modelled_us")}


def shape_row(shape, lnc: int, modelled: dict[str, float]) -> dict:
    g = shape.geometry
    plan = plan_conv3d_bwd(g.dy_shape, g.x_shape, g.w_shape, stride=shape.stride, padding=shape.padding,
                           dilation=shape.dilation, dtype=shape.dtype, target="trn2", lnc=lnc)
    est = {q.label: q.estimated_us for q in plan.feasible_candidates()}
    labels = [lab for lab in est if lab in modelled]
    e = [est[lab] for lab in labels]
    m = [modelled[lab] for lab in labels]
    best = min(m)
    pick = min(labels, key=lambda lab: (round(est[lab], 6), lab))
    errs = [x / y - 1.0 for x, y in zip(e, m)]
    traps = sum(1 for lab in labels if est[lab] <= 1.05 * est[pick] and modelled[lab] > 1.10 * best)
    return {"name": shape.name, "lnc": lnc, "n": len(labels), "missing": len(est) - len(labels),
            "spearman": spearman(e, m), "mean_abs_err": sum(abs(x) for x in errs) / len(errs),
            "max_abs_err": max(abs(x) for x in errs), "pick_err": est[pick] / modelled[pick] - 1.0,
            "pick_over_best": modelled[pick] / best, "pick_us": modelled[pick], "best_us": best,
            "traps": traps, "pick": pick}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from-json", default=None, metavar="DIR", help="reuse the modelled times of bench JSON")
    ap.add_argument("--lnc", type=int, default=1, choices=(1, 2))
    ap.add_argument("--only", default=None, metavar="REGEX")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--verbose", action="store_true", help="also print each pick's label")
    args = ap.parse_args(argv)
    rows = []
    print(f"estimate vs nkisim over all feasible candidates, trn2 bf16, LNC{args.lnc}")
    print(f"{'shape':16s}{'cands':>6s}{'spearman':>9s}{'mean|err|':>10s}{'max|err|':>9s}"
          f"{'pick err':>9s}{'pick/best':>10s}{'traps':>6s}")
    for shape in select_shapes("default", args.only):
        r = shape_row(shape, args.lnc, modelled_by_label(shape, args.lnc, args.from_json, args.jobs))
        rows.append(r)
        print(f"{r['name']:16s}{r['n']:6d}{r['spearman']:9.3f}{r['mean_abs_err']:10.1%}{r['max_abs_err']:9.1%}"
              f"{r['pick_err']:+9.1%}{r['pick_over_best']:10.3f}{r['traps']:6d}")
        if args.verbose:
            print(f"    pick {r['pick']}  ({r['pick_us']:.1f} us, best {r['best_us']:.1f})")
    if rows:
        geo = math.exp(sum(math.log(r["pick_over_best"]) for r in rows) / len(rows))
        print(f"{'all':16s}{sum(r['n'] for r in rows):6d}{sum(r['spearman'] for r in rows) / len(rows):9.3f}"
              f"{sum(r['mean_abs_err'] for r in rows) / len(rows):10.1%}{max(r['max_abs_err'] for r in rows):9.1%}"
              f"{max(abs(r['pick_err']) for r in rows):9.1%}{geo:10.3f}  (means; worst |pick err|; "
              f"geomean pick/best)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
