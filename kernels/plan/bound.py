"""A lower bound on a candidate's estimate, cheaper than the estimate: the search estimates candidates in
order of increasing bound and stops where the next bound exceeds the best estimate found (``search.py``).

Why it is a lower bound (``costs.compose_ns``, ``costs.section_ns``, ``estimate._estimate``):

- under LNC2 the estimate is the later program's composed time, so at least program 0's;
- ``compose_ns`` never lowers its running total: it starts from the fill (>= 0), adds each lead's
  ``section_ns`` of its compute and each body's ``section_ns`` (a body begins no sooner than the total so
  far and ends ``t`` later), and ``section_ns`` is at least the busiest engine of what it is given (with a
  flow-shop makespan, at least the busiest compute engine); a body's busy time only gains the trails'
  compute. So the estimate is at least the sum, over the lead and body sections (every section but the
  trails, ``TRAIL_SECTIONS``), of their PE busy time;
- that PE busy time is the sum of what dx's sections and dw's and db's sections charge
  (``estimate._estimate_sheet`` charges them in separate blocks, each to its own sections; merged bodies
  add them). The bound takes each part from the estimate's own sheet of a reduced plan: dx's from the plan
  without dw and db (dw's fields set to neutral values), dw's and db's from the plan without dx (dx's own
  tiling fields set to neutral values; the dx flags dw's loops read are kept). Each part is memoized by its
  reduced plan (every field), so candidates that differ only in the other gradient's choices share it.

The last step assumes dx's PE work does not depend on dw's choices nor dw's on dx's tiling, as the
estimate charges them; ``simtests/kernels/plan/test_bound.py`` checks bound <= estimate on every candidate
of varied geometries, and the search falls back to estimating every candidate of a problem where an
estimated candidate comes in under its bound (``search.BOUND_MISSES``).

Only per-gradient plans of the streaming methods get a bound; shared dy (one body of dx and dw),
dw:kd_moving (its own composition) and s2d_gemm get 0 and are always estimated.
"""
from __future__ import annotations

import dataclasses

from ..costs import COMPUTE, LEAD_SECTIONS, TRAIL_SECTIONS, TargetFigures
from ..geometry import ConvGeom
from ..spec.record import DwMethod, Plan, Strategy, replace
from .estimate import _estimate_sheet

# the fields the planner fills in after the estimate: never part of a reduced plan's memo key
_RESULT_FIELDS = frozenset({"sbuf_bytes", "psum_banks", "estimated_us", "engine_us", "label", "candidates",
                            "alternatives", "alternatives_lazy"})
# dx fields dw's loops read (``estimate._DW_BOX_FIELDS``): kept in dw's reduced plan
_DX_FLAGS_DW_READS = frozenset({"dx_prefetch"})
# neutral values of the fields without a default
_NEUTRAL = {"dw_method": None, "dw_band": (1, 1), "dw_ci_tile": 1, "dw_tap_group": 1, "dw_co_chunk": 1,
            "dw_ci_range": 0, "dx_method": None, "dx_band": (1, 1), "dx_ci_tile": 1, "dx_ci_outer": False}


def _neutral(prefix: str, keep: frozenset[str] = frozenset()) -> dict:
    """Every field named ``prefix...`` (but ``keep``) at its default or neutral value."""
    out = {}
    for f in dataclasses.fields(Plan):
        if f.name.startswith(prefix) and f.name not in keep:
            out[f.name] = _NEUTRAL[f.name] if f.default is dataclasses.MISSING else f.default
    return out


_DW_NEUTRAL = _neutral("dw_")
_DX_NEUTRAL = {**_neutral("dx_", _DX_FLAGS_DW_READS), "filters_first": False}


def bounded(p: Plan) -> bool:
    """Whether ``lower_bound_us`` may be above 0 for ``p``."""
    return not p.s2d_group


def dx_part(p: Plan) -> Plan:
    """The plan without dw and db: dx's sections as the full plan charges them."""
    return replace(p, compute_dw=False, compute_db=False, db_method=None, db_ones=False,
                   **{**_DW_NEUTRAL, "dw_ci_range": p.x_shape[1]})


def dw_part(p: Plan) -> Plan:
    """The plan without dx: dw's and db's sections as the full plan charges them."""
    return replace(p, compute_dx=False, **_DX_NEUTRAL)


def _key(q: Plan) -> tuple:
    return tuple((k, v) for k, v in q.__dict__.items() if k not in _RESULT_FIELDS)


def _part(g: ConvGeom, q: Plan, hw: TargetFigures, memo: dict) -> tuple[dict[str, dict[str, float]], frozenset]:
    """Program 0's busy ns per section and engine of ``q``'s sheet, and its sections with a flow shop
    (memoized per reduced plan)."""
    key = ("bound_part", _key(q))
    if key not in memo:
        c, _fill = _estimate_sheet(g, q, hw, 0, memo=memo)
        memo[key] = (c.section_busy(), frozenset(k for k, v in c.flow.items() if v > 0.0))
    return memo[key]


def _sections_ns(secs: dict[str, dict[str, float]], flows: frozenset, pe_only: frozenset = frozenset()) -> float:
    """The least ``compose_ns`` charges the sections: a lead its busiest compute engine, a body its busiest
    engine (compute only where a flow-shop makespan stands for its DMA's hold; ``pe_only``: the PE's);
    trails nothing."""
    ns = 0.0
    for name, busy in secs.items():
        if name in TRAIL_SECTIONS:
            continue
        engines = (("tensor",) if name in pe_only else COMPUTE if name in LEAD_SECTIONS or name in flows
                   else busy.keys())
        ns += max([0.0, *(busy.get(e, 0.0) for e in engines)])
    return ns


def lower_bound_us(g: ConvGeom, p: Plan, hw: TargetFigures, memo: dict, dw: bool = True) -> float:
    """A lower bound on ``estimate._estimate(g, p, hw)[0]`` (see the module docstring); 0 when unbounded.
    ``dw=False``: dx's part alone, a lower bound too (dw's sections only add busy time), and cheaper: a
    problem has fewer dx choices than dw choices."""
    if not bounded(p):
        return 0.0
    secs: dict[str, dict[str, float]] = {}
    flows: set[str] = set()
    if p.dw_interleave:   # dx's body is then a DMA -> PE flow shop (estimate._interleaved_flow)
        flows.add("dx")
    # (dx's LNC2 C_in split needs dw beside it: without, the programs split dx's items instead, another
    # share of the work; dx:early band moves the first band's placement from VectorE to GpSimd: PE only)
    parts = [dx_part(p)] if p.compute_dx and not p.dx_ci_split else []
    pe_only = {"dx"} if p.dx_band_early else set()
    if dw and (p.compute_dw or p.compute_db) and p.dw_method is not DwMethod.KD_MOVING \
            and p.strategy is Strategy.PER_GRADIENT:
        parts.append(dw_part(p))
    for q in parts:
        part, part_flows = _part(g, q, hw, memo)
        flows |= part_flows
        for name, busy in part.items():
            into = secs.setdefault(name, {})
            for e, v in busy.items():
                into[e] = into.get(e, 0.0) + v
    if p.compute_dx and p.compute_dw and p.dw_interleave and "dx" in secs:
        # one body of dx and dw's boxes (``estimate._sections``): its DMA is not its parts' sum
        # (``CostSheet.merged_dma_ns``), so only the compute engines' work adds up
        flows.add("dx")
        for e, v in secs.pop("dw", {}).items():
            secs["dx"][e] = secs["dx"].get(e, 0.0) + v
    return _sections_ns(secs, frozenset(flows), frozenset(pe_only)) / 1000.0
