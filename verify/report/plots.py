"""The report's plots as base64 PNG strings (matplotlib, imported lazily; None without it)."""
from __future__ import annotations

import base64
import io
from collections import defaultdict

from conv3d_bwd.reference.tolerance import C_DEFAULT, DTYPE_INFO, U_FP32, ULP_HISTOGRAM_EDGES
from conv3d_bwd.verify.report import summary as S

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
    """Share of elements at 0, 1, 2, 3, >= 4 ULPs from the rounded oracle, per dtype, stat mode.

    Stat mode only: exact mode must be all zeros, so mixing it in would only dilute the shares (its
    elements off by any ULP are counted in the title). Shares, not counts, so that dtypes with
    different case counts compare; the legend gives each dtype's element count.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    totals: dict[str, list[int]] = defaultdict(lambda: [0] * len(ULP_HISTOGRAM_EDGES))
    exact_total, exact_off = 0, 0
    for record in records:
        hist = (record.get("metrics") or {}).get("ulp_histogram")
        if not hist:
            continue
        if record.get("mode") == "exact":
            exact_total += sum(int(c) for c in hist)
            exact_off += sum(int(c) for c in hist[1:])
            continue
        row = totals[record.get("dtype")]
        for i, count in enumerate(hist):
            row[i] += int(count)
    labels = [str(e) for e in ULP_HISTOGRAM_EDGES[:-1]] + [f">={ULP_HISTOGRAM_EDGES[-1]}"]
    width = 0.8 / max(1, len(totals))
    smallest = 1.0
    for i, (dtype, counts) in enumerate(sorted(totals.items())):
        n = sum(counts) or 1
        smallest = min(smallest, 1.0 / n)
        xs = [j + i * width for j in range(len(counts))]
        shares = [c / n if c > 0 else float("nan") for c in counts]  # an empty bin draws no bar
        bars = ax.bar(xs, shares, width=width, color=DTYPE_COLORS.get(dtype, "gray"),
                      label=f"{dtype} ({n:,} elements)")
        for bar, count in zip(bars, counts):
            if count:
                ax.annotate(f"{count:,}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=6, rotation=90,
                            xytext=(0, 2), textcoords="offset points")
    ax.set_xticks([j + width * (len(totals) - 1) / 2 for j in range(len(labels))], labels)
    ax.set_yscale("log")
    ax.set_ylim(bottom=smallest / 2, top=60.0)  # room above the full bars for their labels
    exact_note = (f"exact mode: {exact_off:,} of {exact_total:,} elements off by >= 1 ULP"
                  if exact_total else "no exact-mode results")
    ax.set(xlabel="ULP distance from the oracle rounded to the output dtype (bar labels: elements)",
           ylabel="share of elements",
           title=f"ULP distance per dtype, stat mode\n({exact_note})")
    if totals:
        ax.legend(fontsize=8, loc="upper right")
    else:
        ax.text(0.5, 0.5, "no stat-mode results", ha="center", transform=ax.transAxes)
    return _png(fig)


def _method_dtype_worst(records: list[dict]) -> dict[str, dict[str, tuple[float, bool]]]:
    """{method: {dtype: (worst err/bound over its stat records, any record of it failed)}}."""
    table: dict[str, dict[str, tuple[float, bool]]] = defaultdict(dict)
    for record in records:
        failed = record.get("status") == "FAIL"
        ratio = S.metric(record, "bound_ratio") if record.get("mode") == "stat" or failed else 0.0
        for method in record.get("methods") or ["(no plan)"]:
            old_ratio, old_failed = table[method].get(record.get("dtype"), (0.0, False))
            table[method][record.get("dtype")] = (max(old_ratio, ratio), old_failed or failed)
    return table


def worst_per_method(records: list[dict]) -> str:
    """Worst err/bound per plan method and dtype (dots on a log axis), with the pass line.

    A dot per dtype, not one bar per method: the worst of a method is almost always a bf16 result
    near 0.5 (correct rounding), which says nothing about its fp32 accumulation.
    """
    plt = _pyplot()
    table = _method_dtype_worst(records)
    methods = sorted(table, reverse=True)  # sorted top to bottom
    dtypes = sorted({d for row in table.values() for d in row})
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * max(4, len(methods)) + 1.4))
    values = [v for row in table.values() for v, _ in row.values() if v > 0]
    lo = min([*values, 0.5]) / 3
    hi = max([*values, 1.0]) * 3
    offsets = {d: (i - (len(dtypes) - 1) / 2) * 0.18 for i, d in enumerate(dtypes)}
    for dtype in dtypes:
        ys, xs, fail_ys, fail_xs = [], [], [], []
        for y, method in enumerate(methods):
            if dtype not in table[method]:
                continue
            ratio, failed = table[method][dtype]
            x = ratio if ratio > 0 else lo * 1.2  # nothing measurable (e.g. exact only): left edge
            (fail_ys if failed else ys).append(y + offsets[dtype])
            (fail_xs if failed else xs).append(x)
        color = DTYPE_COLORS.get(dtype, "gray")
        ax.scatter(xs, ys, s=22, color=color, label=dtype, zorder=3)
        if fail_xs:
            ax.scatter(fail_xs, fail_ys, s=60, marker="X", color=color, edgecolors="red",
                       linewidths=1.2, zorder=4)
    ax.axvline(1.0, color="red", linewidth=1.5, label="bound (fail above)")
    ax.axvline(0.5, color="gray", linewidth=1, linestyle="--", label="correct rounding (0.5)")
    ax.set_yticks(range(len(methods)), methods)
    ax.set_ylim(-0.6, len(methods) - 0.4)
    ax.grid(axis="y", color="#eee")
    ax.set(xscale="log", xlim=(lo, hi), xlabel="worst err / bound in stat mode (X: a failure)",
           title="Worst case per plan method and dtype")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=5)
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
