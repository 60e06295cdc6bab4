"""The plan record: the method enums, one candidate line, and ``Plan`` (the kernel follows it field by field)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from ..geometry import ConvGeom, validate


class Strategy(str, Enum):
    SHARED_DY = "shared_dy"        # one dy band load serves dx, dw and db
    PER_GRADIENT = "per_gradient"  # each gradient streams dy itself


class DxMethod(str, Enum):
    GEMM = "gemm"                  # 1x1x1, unit stride, no padding: plain GEMM over C_out
    GATHER_S1 = "gather_s1"        # stride 1: implicit GEMM over shifted dy windows, one PSUM bank
    PHASE_GATHER = "phase_gather"  # stride > 1: per-phase gather (sub-pixel decomposition)
    TOEPLITZ = "toeplitz"          # tiny C_in: U_d x U_h output positions on M, block-Toeplitz filters
    S2D_GEMM = "s2d_gemm"          # stride == kernel, no padding: one GEMM over patches (methods/s2d_gemm)


class DwMethod(str, Enum):
    GEMM = "gemm"                  # 1x1x1, unit stride, no padding: plain GEMM over positions
    TAP_GEMM = "tap_gemm"          # one tap per matmul, positions on partitions (PE transposes)
    TAP_PACK = "tap_pack"          # several taps' x windows side by side on the moving axis
    ROW_PACK = "row_pack"          # (d, h) rows on partitions; kw taps are free offsets of one x^T
    DMA_GEMM = "dma_gemm"          # 1x1x1 GEMM with dy^T and x^T brought by DMA transposes (2-byte dtypes)
    S2D_GEMM = "s2d_gemm"          # stride == kernel, no padding: one GEMM over patches (methods/s2d_gemm)
    SMALL_EXTENT = "small_extent"  # few positions: every position resident, one PSUM group per output tile
    KD_MOVING = "kd_moving"        # small channels: kd taps x C_out on the moving axis (methods/dw_kd_moving)


class DbMethod(str, Enum):
    FOLD = "fold"                  # reduce the dy already in SBUF for dx or dw
    STANDALONE = "standalone"      # its own pass over dy


def all_method_names() -> set[str]:
    """Every strategy and method name the planner can choose."""
    names = {f"strategy:{s.value}" for s in Strategy}
    names |= {f"dx:{m.value}" for m in DxMethod}
    names |= {f"dw:{m.value}" for m in DwMethod}
    names |= {f"db:{m.value}" for m in DbMethod}
    return names


@dataclass(frozen=True)
class Candidate:
    """One line of the planner's table: a described candidate and its fate."""

    label: str
    feasible: bool
    reason: str                  # why rejected, or '' when feasible
    estimated_us: float | None
    sbuf_bytes: int
    psum_banks: int


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def replace(obj, /, **changes):
    """``dataclasses.replace`` for the planner's frozen records (no ``__post_init__``, no init-less fields):
    a copy of the instance dict with ``changes``. Planning makes ~10^4 plan variants per problem and
    the stdlib version re-runs ``__init__`` over every field of each."""
    names = _FIELD_NAMES.get(type(obj))
    if names is None:
        names = _FIELD_NAMES[type(obj)] = frozenset(f.name for f in dataclasses.fields(obj))
    if not changes.keys() <= names:
        raise TypeError(f"{type(obj).__name__} has no field(s) {sorted(changes.keys() - names)}")
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    new.__dict__.update(changes)
    return new


@dataclass(frozen=True)
class Plan:
    """A complete, executable plan: the kernel follows it field by field."""

    # the problem
    dy_shape: tuple[int, ...]
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    stride: tuple[int, int, int]
    padding: tuple[int, ...]
    dilation: tuple[int, int, int]
    dtype: str
    target: str
    lnc: int
    compute_dx: bool
    compute_dw: bool
    compute_db: bool
    # the choices
    strategy: Strategy
    dx_method: DxMethod | None
    dw_method: DwMethod | None
    db_method: DbMethod | None
    dx_band: tuple[int, int]          # input rows per band (D, H), whole W rows
    dw_band: tuple[int, int]          # output rows per band (D, H) when dw streams dy itself
    dx_ci_tile: int
    dx_ci_outer: bool                 # filters one C_in tile at a time (dy reloaded per tile)
    dw_ci_tile: int
    dw_tap_group: int                 # taps side by side on the matmul's moving axis
    dw_co_chunk: int                  # C_out tiles whose PSUM accumulators are live together
    dw_ci_range: int                  # C_in channels whose fp32 accumulators live at once (dy streamed per range)
    dy_bufs: int                      # dy band buffers (prefetch depth)
    dw_tap_range: int = 0             # taps whose fp32 accumulators live at once (0: all; dy, x streamed per pass)
    dx_regions: int = 1               # dx bands stacked on the partitions (block-diagonal filters)
    filters_first: bool = False       # dx's first filter group loads before dw runs (per-gradient)
    dw_split: str = "positions"       # LNC2 dw split: "positions" (partials combined), "taps", "channels"
    dw_x_stationary: bool = False     # dw with x^T stationary (taps x ci on M), dy^T moving: dw[(tap, ci), co]
    dx_transposed: bool = False       # dx^T: positions on the stationary side (nki_dx_t, stride 1)
    dx_pair_copies: int = 0           # dx^T: shifted dy copies pairing taps on K (C_out <= 64)
    dx_prefetch: bool = False         # dx^T: the first band (and its copies) loads during dw's last row chunk
    dx_toeplitz: tuple[int, int] = (1, 1)   # dx:toeplitz: phase positions (U_d, U_h) stacked on M
    dx_toeplitz_pair: int = -1        # dx:toeplitz: axis (0 d, 1 h) whose offset pairs share K = 2 C_out; -1 none
    dx_toeplitz_merge: tuple[bool, bool] = (False, False)   # dx:toeplitz: the axis' stride phases share M
    dx_toeplitz_w: int = 0            # dx:toeplitz: U_w w positions on M, one PSUM quadrant each (0: none)
    dx_toeplitz_quad: bool = False    # dx:toeplitz: with K pairs along d, the h offset pairs too (K = 4 C_out)
    dw_xt_dma: bool = False           # row-mode dw x^T by dma_transpose from HBM (2-byte, NC-v3+)
    dx_dphase_pairs: bool = False     # dx:phase_gather with the two D stride phases on M (dx_dpairs)
    dw_interleave: bool = False       # per gradient: dw's boxes issued between dx's items (dx:toeplitz)
    db_ones: bool = False             # db:fold inside dw's x-stationary matmuls (a ones slot on M; db_ones_chunk)
    dw_dyt_dma: bool = False          # row-mode per-gradient dw: dy^T by dma_transpose from HBM (no dy box, no PE)
    dx_ci_split: bool = False         # LNC2 dx split by C_in groups (ci-outer): every item, half the filters
    dx_band_early: bool = False       # LNC2: dx's first dy band loads before dw's last finish (its stores)
    pw_db_scalar: bool = False        # db by ScalarE activation reduces of dy (shared-dy pointwise: not PE ones-matmuls;
                                      # per gradient: on dx's bands, not VectorE tensor_reduce)
    pw_dyt_dma: int = 0               # shared-dy pointwise: one dy^T sub-tile in N by dma_transpose (0: all on the PE)
    dw_xt_copy: bool = False          # x-stationary xT dma: channel-major x^T tiles by plain dma_copy (no transpose)
    dw_head_split: bool = False       # dw's first row pass: dy^T and the first x^T by column pieces (dw_head)
    s2d_group: int = 0                # s2d_gemm: row tiles resident together (0: another method)
    dw_w_band: int = 0                # box-mode per-gradient dw: W output columns per box (0: whole rows)
    dx_w_band: int = 0                # gather dx: W input columns per band (0: whole rows)
    dx_co_chunk: int = 0              # gather dx: C_out tiles per chunk, chunks outside the tap loops (0: all)
    dx_dy_clip: bool = False          # gather dx: dy band buffers hold only the rows live taps read (dead taps skipped)
    dw_co_pass: int = 0               # box-mode per-gradient dw: C_out tiles per pass (dy, x^T streamed per pass; 0: all)
    # what it costs
    sbuf_bytes: int = 0
    psum_banks: int = 0
    estimated_us: float = 0.0
    engine_us: tuple[tuple[str, float], ...] = ()
    label: str = ""
    candidates: tuple[Candidate, ...] = field(default=(), compare=False, repr=False)
    alternatives: tuple[Plan, ...] = field(default=(), compare=False, repr=False)
    # the planner's pick when its search estimated only the candidates that could win (``plan/bound.py``):
    # ``feasible_candidates`` estimates the others on first call
    alternatives_lazy: bool = field(default=False, compare=False, repr=False)

    # --- derived ---------------------------------------------------------------------------
    def geometry(self) -> ConvGeom:
        return validate(self.dy_shape, self.x_shape, self.w_shape, self.stride, self.padding,
                        self.dilation, self.dtype)

    def methods(self) -> set[str]:
        out = {f"strategy:{self.strategy.value}"}
        if self.dx_method is not None:
            out.add(f"dx:{self.dx_method.value}")
        if self.dw_method is not None:
            out.add(f"dw:{self.dw_method.value}")
        if self.db_method is not None:
            out.add(f"db:{self.db_method.value}")
        return out

    def feasible_candidates(self, where: Callable[[Plan], bool] | None = None) -> tuple[Plan, ...]:
        """Every feasible alternative (the pick included), each a full Plan, estimated, cheapest first (ties
        by label). A pruned pick's are estimated on the first call and kept, their estimates written into its
        candidate table (``plan/search.every_alternative``). ``where``: only the alternatives it holds for; a
        pruned pick estimates only those (the predicate reads a candidate's fields and label, not its
        estimate)."""
        if self.alternatives_lazy and not self.alternatives:
            from ..plan.search import every_alternative  # (the planner imports this module)
            if where is not None:
                return every_alternative(self, where)
            object.__setattr__(self, "alternatives", every_alternative(self))
            # (the candidate table gains the estimates just made)
            object.__setattr__(self, "candidates", self.alternatives[0].candidates)
        every = self.alternatives or (self,)
        return every if where is None else tuple(a for a in every if where(a))

    def tiles(self) -> dict:
        return {"dx_band": list(self.dx_band), "dw_band": list(self.dw_band), "dx_ci_tile": self.dx_ci_tile,
                "dx_ci_outer": self.dx_ci_outer, "dw_ci_tile": self.dw_ci_tile,
                "dw_tap_group": self.dw_tap_group, "dw_co_chunk": self.dw_co_chunk, "dy_bufs": self.dy_bufs,
                "dw_ci_range": self.dw_ci_range, "dw_tap_range": self.dw_tap_range, "dx_regions": self.dx_regions,
                "filters_first": self.filters_first, "dw_split": self.dw_split,
                "dw_x_stationary": self.dw_x_stationary, "dx_transposed": self.dx_transposed, "dx_pair_copies": self.dx_pair_copies, "dx_prefetch": self.dx_prefetch, "dx_toeplitz": list(self.dx_toeplitz), "dx_toeplitz_pair": self.dx_toeplitz_pair,
                "dx_toeplitz_merge": list(self.dx_toeplitz_merge), "dx_toeplitz_w": self.dx_toeplitz_w,
                "dx_toeplitz_quad": self.dx_toeplitz_quad,
                "dw_xt_dma": self.dw_xt_dma,
                "dx_dphase_pairs": self.dx_dphase_pairs, "dw_interleave": self.dw_interleave,
                "dx_ci_split": self.dx_ci_split, "dx_band_early": self.dx_band_early,
                "pw_db_scalar": self.pw_db_scalar, "pw_dyt_dma": self.pw_dyt_dma, "dw_xt_copy": self.dw_xt_copy,
                "db_ones": self.db_ones, "dw_dyt_dma": self.dw_dyt_dma,
                "dw_head_split": self.dw_head_split, "s2d_group": self.s2d_group,
                "dw_w_band": self.dw_w_band, "dx_w_band": self.dx_w_band, "dx_co_chunk": self.dx_co_chunk,
                "dw_co_pass": self.dw_co_pass, "dx_dy_clip": self.dx_dy_clip}

    def to_dict(self) -> dict:
        """JSON-ready: strategy, methods, tiles, estimated_us, candidates."""
        return {
            "strategy": self.strategy.value,
            "methods": sorted(self.methods()),
            "dx": self.dx_method.value if self.dx_method else None,
            "dw": self.dw_method.value if self.dw_method else None,
            "db": self.db_method.value if self.db_method else None,
            "tiles": self.tiles(),
            "label": self.label,
            "estimated_us": self.estimated_us,
            "engine_us": dict(self.engine_us),
            "sbuf_bytes": self.sbuf_bytes,
            "psum_banks": self.psum_banks,
            "target": self.target, "lnc": self.lnc, "dtype": self.dtype,
            "candidates": [
                {"label": c.label, "feasible": c.feasible, "reason": c.reason, "estimated_us": c.estimated_us,
                 "sbuf_bytes": c.sbuf_bytes, "psum_banks": c.psum_banks} for c in self.candidates],
        }

    def explain(self) -> str:
        """A readable table of the candidates, why each was rejected or what it costs, and the pick."""
        g = self.geometry()
        head = (f"conv3d_bwd plan: B={g.batch} C_in={g.c_in} C_out={g.c_out} in={g.in_size} "
                f"k={g.kernel} stride={self.stride} pad={self.padding} dil={self.dilation} "
                f"{self.dtype} {self.target} lnc={self.lnc} grads="
                + ",".join(n for n, on in (("dx", self.compute_dx), ("dw", self.compute_dw),
                                           ("db", self.compute_db)) if on))
        # the label column is as wide as the longest label, so the other columns line up
        lw = max([77] + [len(c.label) for c in self.candidates])
        lines = [head, f"{'candidate':<{lw + 1}} {'est us':>10} {'SBUF B':>8} {'banks':>5}  status"]
        for c in self.candidates:
            est = f"{c.estimated_us:10.2f}" if c.estimated_us is not None else f"{'-':>10}"
            status = (c.reason or "ok") if c.feasible else f"rejected: {c.reason}"
            mark = "*" if c.label == self.label else " "
            lines.append(f"{mark}{c.label:<{lw}} {est} {c.sbuf_bytes:8d} {c.psum_banks:5d}  {status}")
        lines.append(f"pick: {self.label}  ({self.estimated_us:.2f} us estimated; "
                     + ", ".join(f"{e} {u:.2f}" for e, u in self.engine_us) + ")")
        return "\n".join(lines)
