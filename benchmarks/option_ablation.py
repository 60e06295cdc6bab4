"""What each plan option is worth on the broad set (the bench shapes and the real layers).

For every shape whose pick uses an option (a Plan field away from its neutral value), the best candidate
without it (the ``--top`` lowest estimates among the feasible candidates that leave the option neutral, each
traced under nkisim, trace-only) against the pick, in modelled time. An option's cost of removal is the
geometric mean over every shape and LNC degree of (best without it / pick), 1 where the pick does not use
it; options no pick uses cost 0. The project keeps an option only when removing it costs at least 2 % of
the geometric-mean efficiency (``docs/planner.md``).

    python benchmarks/option_ablation.py [--lnc 1 2] [--top 2] [--only REGEX] [--options a,b] [--jointly]
                                         [--json PATH]

``--jointly`` removes the listed options together (one row: what the set of them is worth).

Tracing is the slow part (minutes per LNC degree); the figures are the model's, not hardware's.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import MISSING, fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conv3d_bwd.kernels.plan import Plan, plan_conv3d_bwd
from conv3d_bwd.verify.bench import _model, select_shapes

# the plan's record fields (what it costs, its tables) are not options
NOT_OPTIONS = {"sbuf_bytes", "psum_banks", "estimated_us", "engine_us", "label", "candidates", "alternatives",
               "alternatives_lazy"}
# an option's neutral value, where the field's default is not it
NEUTRAL = {"dw_split": "positions"}


def options() -> dict[str, object]:
    """Every Plan field with a neutral value (the tilings and the problem have none), with that value."""
    return {f.name: NEUTRAL.get(f.name, f.default) for f in fields(Plan)
            if f.name not in NOT_OPTIONS and f.default is not MISSING}


def shapes(only: str | None):
    return [s for name in ("default", "realworld") for s in select_shapes(name, only)
            if s.name != "slowfast_fstem"]   # (its planning alone takes 16-28 s)


def ablate(shape, lnc: int, wanted: dict[str, dict[str, object]], top: int) -> dict[str, float | None]:
    """The pick's modelled us and, per group of options the pick uses, the best modelled us without them
    (None: no candidate leaves them all neutral)."""
    g = shape.geometry
    pick = plan_conv3d_bwd(g.dy_shape, g.x_shape, g.w_shape, stride=shape.stride, padding=shape.padding,
                           dilation=shape.dilation, dtype=shape.dtype, lnc=lnc, target="trn2")
    out: dict[str, float | None] = {"pick": _model(shape, pick, "trn2", lnc)["modelled_us"]}
    for name, group in wanted.items():
        if all(getattr(pick, n) == v for n, v in group.items()):
            continue
        rest = pick.feasible_candidates(where=lambda a, g=group: all(getattr(a, n) == v for n, v in g.items()))
        rest = rest[:top]
        out[name] = min(_model(shape, a, "trn2", lnc)["modelled_us"] for a in rest) if rest else None
        print(f"  {shape.name} LNC{lnc} {name}: {out[name] / out['pick'] if out[name] else 'no candidate'}",
              flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lnc", type=int, nargs="+", default=[1, 2], choices=(1, 2))
    ap.add_argument("--top", type=int, default=2, help="candidates without the option traced per shape")
    ap.add_argument("--only", help="shapes whose name matches this regular expression")
    ap.add_argument("--options", help="comma-separated Plan fields (default: every option)")
    ap.add_argument("--jointly", action="store_true", help="remove the --options together, as one group")
    ap.add_argument("--json", help="write the per-shape figures here")
    args = ap.parse_args(argv)
    every = options()
    names = args.options.split(",") if args.options else list(every)
    groups = [names] if args.jointly else [[n] for n in names]
    wanted = {"+".join(g): {n: every[n] for n in g} for g in groups}
    runs = {f"{s.name}/LNC{lnc}": ablate(s, lnc, wanted, args.top) for lnc in args.lnc for s in shapes(args.only)}
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    print(f"\n{'option':20s} {'picks':>5s} {'removal cost':>12s} {'worst':>6s} {'best':>6s}   "
          f"(over {len(runs)} picks; ratio = best without / pick, modelled)")
    for name in sorted(wanted, key=lambda n: -sum(math.log(r[n] / r["pick"]) for r in runs.values() if r.get(n))):
        ratios = [r[name] / r["pick"] for r in runs.values() if r.get(name)]
        lost = sum(1 for r in runs.values() if name in r and r[name] is None)
        cost = math.exp(sum(math.log(x) for x in ratios) / len(runs)) - 1.0
        worst = f"{max(ratios):6.3f}" if ratios else "     -"
        best = f"{min(ratios):6.3f}" if ratios else "     -"
        note = f"  ({lost} picks have no candidate without it)" if lost else ""
        print(f"{name:20s} {len(ratios) + lost:5d} {100 * cost:11.2f}% {worst} {best}{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
