"""The report's plots as base64 PNG strings (matplotlib, imported lazily; None without it)."""
from __future__ import annotations

import base64
import io
from collections import defaultdict

from reference.tolerance import C_DEFAULT, DTYPE_INFO, U_FP32, ULP_HISTOGRAM_EDGES
from verify.report import summary as S

DTYPE_COLORS = {"bf16": "tab:blue", "fp16": "tab:orange", "fp32": "tab:green"}


def matplotlib_missing() -> str | None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    _pyplot().close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def error_vs_k(records: list[dict]) -> str:
    """max |err|/sum|a||b| and err/bound against K, with the bound drawn in."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    ks = [r.get("K") or 1 for r in records]
    k_lo, k_hi = max(1, min(ks, default=1)), max(2, max(ks, default=2))
    grid = [k_lo * (k_hi / k_lo) ** (i / 50) for i in range(51)]
    for dtype in sorted({r.get("dtype") for r in records}):
        chosen = [r for r in records if r.get("dtype") == dtype and r.get("metrics")]
        pts = [(r["K"], S.metric(r, "max_norm_err")) for r in chosen if S.metric(r, "max_norm_err") > 0]
        color = DTYPE_COLORS.get(dtype, "gray")
        if pts:
            left.scatter(*zip(*pts), s=14, color=color, label=f"{dtype} (nonzero errors)")
        u_out = DTYPE_INFO[dtype].unit_roundoff if dtype in DTYPE_INFO else 0.0
        left.plot(grid, [C_DEFAULT * k ** 0.5 * U_FP32 + 2 * u_out for k in grid], "--", color=color,
                  linewidth=1, label=f"bound/sum|ab| <= 4 sqrt(K) u32 + 2 u_{dtype}")
        ratio_pts = [(r["K"], S.metric(r, "bound_ratio")) for r in chosen if S.metric(r, "bound_ratio") > 0]
        exact_zero = len(chosen) - len(ratio_pts)
        if ratio_pts:
            right.scatter(*zip(*ratio_pts), s=14, color=color,
                          label=f"{dtype} ({exact_zero} results with zero error not drawn)")
    left.plot(grid, [C_DEFAULT * k ** 0.5 * U_FP32 for k in grid], "k-", linewidth=1.5,
              label="accumulation term 4 sqrt(K) u_fp32")
    left.set(xscale="log", yscale="log", xlabel="K (accumulation length, max per gradient)",
             ylabel="max |err| / sum|a||b|", title="Normalised error against K")
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
    right.axhline(1.0, color="red", linewidth=1.5, label="bound (fail above)")
    right.set(xscale="log", yscale="log", xlabel="K", ylabel="max err / bound",
              title="Error as a share of the bound")
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=1)
    return _png(fig)


def ulp_distribution(records: list[dict]) -> str:
    """Histogram of per-element ULP distances, summed over records, per dtype."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    totals: dict[str, list[int]] = defaultdict(lambda: [0] * len(ULP_HISTOGRAM_EDGES))
    for record in records:
        hist = (record.get("metrics") or {}).get("ulp_histogram")
        if hist:
            row = totals[record.get("dtype")]
            for i, count in enumerate(hist):
                row[i] += int(count)
    labels = [str(e) for e in ULP_HISTOGRAM_EDGES[:-1]] + [f">={ULP_HISTOGRAM_EDGES[-1]}"]
    width = 0.8 / max(1, len(totals))
    for i, (dtype, counts) in enumerate(sorted(totals.items())):
        xs = [j + i * width for j in range(len(counts))]
        heights = [c if c > 0 else float("nan") for c in counts]  # an empty bin draws no bar
        ax.bar(xs, heights, width=width, color=DTYPE_COLORS.get(dtype, "gray"), label=dtype)
    ax.set_xticks([j + width * (len(totals) - 1) / 2 for j in range(len(labels))], labels)
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.5)
    ax.set(xlabel="ULP distance from the oracle rounded to the output dtype",
           ylabel="elements", title="ULP error distribution per dtype (all elements)")
    ax.legend()
    return _png(fig)


def worst_per_method(records: list[dict]) -> str:
    """Worst err/bound per plan method, with the pass line."""
    plt = _pyplot()
    rows = S.by_method(records)
    fig, ax = plt.subplots(figsize=(7, 0.35 * max(4, len(rows)) + 1))
    labels = [r.label for r in rows]
    values = [max(r.worst_bound_ratio, 1e-12) for r in rows]
    colors = ["tab:red" if r.failed else "tab:blue" for r in rows]
    ax.barh(labels, values, color=colors)
    ax.axvline(1.0, color="red", linewidth=1.5)
    ax.set(xscale="log", xlabel="worst err / bound (red line: the bound)",
           title="Worst case per plan method")
    return _png(fig)


def all_plots(records: list[dict]) -> dict[str, str]:
    """{title: base64 PNG} for the HTML page; empty when there is nothing to draw."""
    judged = [r for r in records if r.get("metrics")]
    if not judged:
        return {}
    return {
        "Error against accumulation length K": error_vs_k(judged),
        "ULP error distribution per dtype": ulp_distribution(judged),
        "Worst cases per method": worst_per_method(judged),
    }
