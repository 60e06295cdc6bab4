"""``conv3d-bwd plan``'s table: the candidates sorted by the planner's estimate, the pick marked.

By default the ``top`` feasible candidates (the pick always among the rows shown) and a closing
line with the pick and its gap to the runner-up; ``show_all`` lists every candidate, the rejected
ones last with their reason. Numbers come first on a line and the (long) label last, so the
columns line up whatever the label's length.
"""
from __future__ import annotations

DEFAULT_TOP = 10


def _ranked(plan) -> tuple[list, list]:
    """(feasible candidates by estimate, rejected candidates) of the plan's table."""
    plan.feasible_candidates()   # (a pruned pick estimates the rest: the table ranks every candidate)
    feasible = [c for c in plan.candidates if c.feasible and c.estimated_us is not None]
    feasible.sort(key=lambda c: (c.estimated_us, c.label))
    chosen = {id(c) for c in feasible}
    rejected = [c for c in plan.candidates if id(c) not in chosen]
    return feasible, rejected


def runner_up_gap(plan) -> tuple[float, object] | None:
    """(relative gap of the best other feasible candidate's estimate over the pick's, that
    candidate), or None when the pick has no rival."""
    feasible, _ = _ranked(plan)
    others = [c for c in feasible if c.label != plan.label]
    if not others or not plan.estimated_us:
        return None
    best = others[0]
    return best.estimated_us / plan.estimated_us - 1.0, best


def _header(plan) -> str:
    g = plan.geometry()
    grads = ",".join(n for n, on in (("dx", plan.compute_dx), ("dw", plan.compute_dw),
                                     ("db", plan.compute_db)) if on)
    return (f"conv3d_bwd plan: B={g.batch} C_in={g.c_in} C_out={g.c_out} in={g.in_size} "
            f"k={g.kernel} stride={plan.stride} pad={plan.padding} dil={plan.dilation} "
            f"{plan.dtype} {plan.target} lnc={plan.lnc} grads={grads}")


def format_plan(plan, top: int = DEFAULT_TOP, show_all: bool = False) -> str:
    """The plan table (see the module docstring)."""
    feasible, rejected = _ranked(plan)
    shown = feasible if show_all else feasible[:top]
    if not show_all and all(c.label != plan.label for c in shown):
        shown += [c for c in feasible if c.label == plan.label]  # the pick is always shown
    rank = {id(c): i + 1 for i, c in enumerate(feasible)}
    lines = [_header(plan),
             f"  {'rank':>4} {'est us':>10} {'vs pick':>8} {'SBUF B':>9} {'banks':>5}  candidate"]
    for c in shown:
        mark = "*" if c.label == plan.label else " "
        gap = f"{c.estimated_us / plan.estimated_us - 1:+8.1%}" if plan.estimated_us else f"{'-':>8}"
        lines.append(f"{mark} {rank[id(c)]:>4} {c.estimated_us:10.2f} {gap} "
                     f"{c.sbuf_bytes:9d} {c.psum_banks:5d}  {c.label}")
    if show_all and rejected:
        lines.append(f"  rejected ({len(rejected)}):")
        lines += [f"  {'':>4} {'-':>10} {'':>8} {c.sbuf_bytes:9d} {c.psum_banks:5d}  {c.label}: "
                  f"{c.reason}" for c in rejected]
    engines = ", ".join(f"{e} {u:.2f}" for e, u in plan.engine_us)
    lines.append(f"pick (*): {plan.label}")
    lines.append(f"  {plan.estimated_us:.2f} us estimated (busy us per engine: {engines})")
    gap = runner_up_gap(plan)
    lines.append("  runner-up: none (the only feasible candidate)" if gap is None else
                 f"  runner-up: {gap[1].estimated_us:.2f} us ({gap[0]:+.1%} over the pick): {gap[1].label}")
    if not show_all:
        lines.append(f"shown: {len(shown)} of {len(feasible)} feasible candidates by estimate "
                     f"({len(rejected)} rejected); --all lists them all, the rejected ones with "
                     "their reasons")
    return "\n".join(lines)
