"""Aggregations shared by the markdown and HTML writers (pure functions over records)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

STATUSES = ("PASS", "FAIL", "MISTRUSTED")


def number(value, default: float = 0.0) -> float:
    """A metric as float: JSON keeps inf/nan as strings."""
    if value is None:
        return default
    if isinstance(value, str):
        return float(value)
    return float(value)


def metric(record: dict, name: str, default: float = 0.0) -> float:
    metrics = record.get("metrics") or {}
    return number(metrics.get(name), default)


@dataclass(frozen=True)
class Row:
    """One line of a summary table: a label, counts and the worst figures."""

    label: str
    cases: int
    records: int
    passed: int
    failed: int
    mistrusted: int
    worst_bound_ratio: float
    max_ulp: int
    worst_accumulation_share: float = 0.0


def _rows(groups: dict[str, list[dict]]) -> list[Row]:
    rows = []
    for label, records in sorted(groups.items()):
        statuses = [r.get("status") for r in records]
        rows.append(Row(
            label=label,
            cases=len({r.get("case_id") for r in records}),
            records=len(records),
            passed=statuses.count("PASS"),
            failed=statuses.count("FAIL"),
            mistrusted=statuses.count("MISTRUSTED"),
            worst_bound_ratio=max((metric(r, "bound_ratio") for r in records), default=0.0),
            max_ulp=int(max((metric(r, "max_ulp") for r in records), default=0)),
            worst_accumulation_share=max((metric(r, "accumulation_share") for r in records),
                                         default=0.0),
        ))
    return rows


def by_key(records: list[dict], key) -> list[Row]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        groups[str(key(record))].append(record)
    return _rows(groups)


def by_group(records: list[dict]) -> list[Row]:
    return by_key(records, lambda r: r.get("group"))


def by_dtype_mode(records: list[dict]) -> list[Row]:
    return by_key(records, lambda r: f"{r.get('dtype')} {r.get('mode')} {r.get('grad')}")


def by_method(records: list[dict]) -> list[Row]:
    """One row per plan method (a record counts for every method its gradient used)."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        methods = record.get("methods") or ["(no plan)"]
        for method in methods:
            groups[method].append(record)
    return _rows(groups)


def worst(records: list[dict], n: int = 15) -> list[dict]:
    """The n records with the largest error/bound ratio (failures first)."""
    return sorted(records, key=lambda r: (r.get("status") != "FAIL", -metric(r, "bound_ratio")))[:n]


def worst_per_dtype(records: list[dict], n: int = 5, max_failures: int = 25) -> list[dict]:
    """Failures first (up to max_failures), then the n largest err/bound per dtype and mode.

    One global ranking would show only bf16: a correctly rounded bf16 or fp16 output scores up to
    0.5 whatever the accumulation did, which buries the fp32 results, the only ones where the
    accumulation term of the bound is what is measured.
    """
    def ratio_order(r):
        return (-metric(r, "bound_ratio"), str(r.get("case_id")), str(r.get("grad")))

    chosen = sorted(failures(records), key=ratio_order)[:max_failures]
    taken = {id(r) for r in chosen}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for record in records:
        if id(record) not in taken and metric(record, "bound_ratio") > 0:
            groups[(str(record.get("dtype")), str(record.get("mode")))].append(record)
    for key in sorted(groups):
        chosen += sorted(groups[key], key=ratio_order)[:n]
    return chosen


def failures(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("status") == "FAIL"]


def mistrusted(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("status") == "MISTRUSTED"]


def totals(records: list[dict]) -> dict[str, int]:
    counts = {status: 0 for status in STATUSES}
    for record in records:
        counts[record.get("status", "FAIL")] = counts.get(record.get("status", "FAIL"), 0) + 1
    counts["records"] = len(records)
    counts["cases"] = len({(r.get("case_id"), r.get("mode"), r.get("seed")) for r in records})
    return counts


def failure_text(record: dict) -> str:
    """Why a record failed: the error, or the verdict's reason and where its worst element is."""
    if record.get("error"):
        return str(record["error"])
    metrics = record.get("metrics") or {}
    reason = str(metrics.get("reason") or "")
    index = metrics.get("worst_index")
    if index is None or "worst_got" not in metrics:
        return reason
    return (f"{reason}; worst {record.get('grad')}[{', '.join(map(str, index))}]: got "
            f"{number(metrics.get('worst_got')):.6g}, ref {number(metrics.get('worst_ref')):.6g}, "
            f"bound {number(metrics.get('worst_bound')):.3g}")


def repro_command(record: dict) -> str:
    """The ``conv3d-bwd check`` command that reruns one record's case, mode and seed."""
    geo = record.get("geometry") or {}
    if not geo:
        return ""

    def csv(key: str) -> str:
        return ",".join(str(v) for v in geo.get(key, ()))

    return (f"conv3d-bwd check --batch {geo.get('batch')} --channels {geo.get('c_in')},"
            f"{geo.get('c_out')} --input {csv('input')} --kernel {csv('kernel')} --stride "
            f"{csv('stride')} --padding {csv('padding')} --dilation {csv('dilation')} --dtype "
            f"{geo.get('dtype')} --grads {csv('grads')} --lnc {geo.get('lnc')} --mode "
            f"{record.get('mode')} --seed {record.get('seed')} --backend {record.get('backend')} "
            f"--target {record.get('target', 'trn2')}")


# ------------------------------------------------------------------------ table columns and notes

ROW_HEADER = ("cases", "records", "pass", "fail", "mistrusted", "worst err/bound", "worst acc share")

ACC_SHARE_NOTE = ("acc share: the error beyond one output ULP as a share of the accumulation "
                  "allowance 4 sqrt(K) u_fp32 sum|a||b| (max over elements; <= 1 is within the "
                  "bound, 0 means every element is within one output ULP). err/bound of a correctly "
                  "rounded bf16/fp16 result is up to 0.5 whatever the accumulation did; the share "
                  "shows the margin left on the accumulation itself.")
K_NOTE = ("K terms: products the geometry sums into the element (the accumulation length, the same "
          "in both modes); K nonzero: those with both factors nonzero, what the bound uses "
          "(exact mode's sparse integer inputs have fewer; stat mode's dense inputs have all).")
ZEROS_NOTE = ("zeros: share of zero reference elements among those the geometry reaches (elements "
              "no term reaches, e.g. dx positions a stride skips, are left out): the share the "
              "MISTRUSTED rule (> 30%) uses.")
ULP_NOTE = ("max ULP: the largest distance in representable steps of the output dtype from the "
            "oracle rounded to it, over all elements; it grows large (thousands and more) where "
            "|ref| is much smaller than sum|a||b| (cancellation), where the allowed fp32 "
            "accumulation error spans many output ULPs. err/bound is the verdict.")


def row_cells(row: Row) -> tuple:
    return (row.label, row.cases, row.records, row.passed, row.failed, row.mistrusted,
            f"{row.worst_bound_ratio:.3g}", fmt_share(row.worst_accumulation_share))


def fmt_share(value: float) -> str:
    return "0" if value == 0 else f"{value:.3g}"


def k_cells(record: dict) -> tuple[str, str]:
    """(K terms, K nonzero) of a record ('' where unknown)."""
    terms, nonzero = record.get("K_structural"), record.get("K")
    return ("" if terms in (None, 0) else str(terms)), ("" if nonzero is None else str(nonzero))


def zeros_cell(record: dict) -> str:
    return f"{metric(record, 'reachable_zero_share'):.0%}"


WORST_HEADER = ("case", "grad", "mode", "K terms", "K nonzero", "err/bound", "acc share", "max abs",
                "err/max|ref|", "err/sum|ab|", "zeros", "status", "rerun")


def worst_cells(record: dict) -> tuple:
    return (record.get("case_id"), record.get("grad"), record.get("mode"), *k_cells(record),
            f"{metric(record, 'bound_ratio'):.3g}", fmt_share(metric(record, "accumulation_share")),
            f"{metric(record, 'max_abs'):.3g}", f"{metric(record, 'max_range_rel'):.3g}",
            f"{metric(record, 'max_norm_err'):.3g}", zeros_cell(record), record.get("status"),
            repro_command(record))


ALL_HEADER = ("case", "grad", "mode", "seed", "K terms", "K nonzero", "err/bound", "acc share",
              "max ULP", "zeros", "modelled us", "status")


def all_cells(record: dict) -> tuple:
    modelled = record.get("modelled_us")
    return (record.get("case_id"), record.get("grad"), record.get("mode"), record.get("seed"),
            *k_cells(record), f"{metric(record, 'bound_ratio'):.3g}",
            fmt_share(metric(record, "accumulation_share")), int(metric(record, "max_ulp")),
            zeros_cell(record), "" if modelled is None else f"{float(modelled):.1f}",
            record.get("status"))


# ------------------------------------------------------------------------------ performance

@dataclass(frozen=True)
class PerfRow:
    """One case's modelled performance (from its first record that has a modelled time)."""

    case_id: str
    modelled_us: float
    band: tuple[float, float] | None
    estimated_us: float | None
    roofline_us: float | None
    efficiency: float | None
    tensor_util: float | None
    timeline: str | None




def band(performance: dict) -> tuple[float, float] | None:
    """The modelled time's uncertainty band (``modelled_band_us``) of a record's performance fields."""
    pair = performance.get("modelled_band_us")
    return (float(pair[0]), float(pair[1])) if pair else None


def performance_rows(records: list[dict]) -> list[PerfRow]:
    """One row per case run that has a modelled time, in record order."""
    rows: dict[str, PerfRow] = {}
    for record in records:
        case_id = str(record.get("case_id"))
        if case_id in rows or record.get("modelled_us") is None:
            continue
        perf = record.get("performance") or {}
        plan = record.get("plan") or {}
        rows[case_id] = PerfRow(
            case_id=case_id, modelled_us=float(record["modelled_us"]), band=band(perf),
            estimated_us=_maybe_float(plan.get("estimated_us")),
            roofline_us=_maybe_float(perf.get("roofline_us")),
            efficiency=_maybe_float(perf.get("efficiency")),
            tensor_util=_maybe_float(perf.get("tensor_util")),
            timeline=next((r.get("timeline") for r in records
                           if r.get("case_id") == case_id and r.get("timeline")), None))
    return list(rows.values())


def _maybe_float(value) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


PERF_HEADER = ("case", "modelled us", "band us", "planner estimate us", "est err", "roofline us",
               "efficiency", "TensorE util")

PERF_NOTE = ("Modelled on nkisim's cost model (not measured). Estimate: the planner's own figure "
             "for its pick (est err = estimate / modelled - 1). Efficiency: roofline / modelled, "
             "where the roofline is max(useful FLOPs / TensorE peak, compulsory HBM bytes / DMA "
             "bandwidth) for the gradients the case computes. These cases are small correctness "
             "geometries, so low efficiency is expected; the bench measures performance.")


def perf_cells(row: PerfRow) -> tuple:
    def f(value, spec):
        return "" if value is None else format(value, spec)

    est_err = (row.estimated_us / row.modelled_us - 1.0
               if row.estimated_us is not None and row.modelled_us else None)
    return (row.case_id, f"{row.modelled_us:.2f}",
            "" if row.band is None else f"{row.band[0]:.2f} .. {row.band[1]:.2f}",
            f(row.estimated_us, ".2f"), f(est_err, "+.0%"), f(row.roofline_us, ".2f"),
            f(row.efficiency, ".3f"), f(row.tensor_util, ".1%"))


def perf_table(rows: list[PerfRow]) -> tuple[tuple[str, ...], list[tuple]]:
    """(header, cells) of the performance table; the band column only when some case has one."""
    cells = [perf_cells(r) for r in rows]
    if any(r.band is not None for r in rows):
        return PERF_HEADER, cells
    drop = PERF_HEADER.index("band us")
    return (PERF_HEADER[:drop] + PERF_HEADER[drop + 1:],
            [c[:drop] + c[drop + 1:] for c in cells])
