"""dx's options: when each applies and the items, filter groups and stores it implies."""
from __future__ import annotations

from .. import dx_dpairs as dpairs
from ..geometry import ConvGeom
from ..schedule import PMAX, axis_bands, n_tiles
from .items import _split, dx_items
from .psum import PSUM_BANK_BYTES
from .record import DbMethod, DxMethod, Plan, Strategy


def filters_by_dma(g: ConvGeom, p: Plan) -> bool:
    """dx filters transposed by dma_transpose (2-byte dtypes, NC-v3+) instead of on the PE."""
    return g.dtype_bytes == 2 and p.target != "trn1"


def dpairs_illegal(g: ConvGeom, p: Plan) -> str:
    """'' when ``dx_dphase_pairs`` can run: phase gather, stride 2 along D, C_in <= 64 in one tile,
    no region packing, dx^T, toeplitz or C_in-outer groups."""
    why = dpairs.dpairs_domain(g)
    if why:
        return why
    if p.dx_method is not DxMethod.PHASE_GATHER or p.dx_regions != 1 or p.dx_transposed or p.dx_ci_outer \
            or p.dx_ci_tile < g.c_in:
        return "needs dx:phase_gather with one C_in tile, no regions, dx^T or C_in-outer groups"
    return ""


def _dpair_slot_count(g: ConvGeom, p: Plan) -> int:
    """The stationary slots of the D-phase pairs over every band of the plan's dx items."""
    w_band = axis_bands(g.axes[2], g.axes[2].n)[0]
    return dpairs.dpair_slot_count(g, sorted({(bd, bh, w_band) for _b, bd, bh in dx_items(g, p)},
                                             key=lambda t: (t[0].i0, t[1].i0)))


def dx_ci_split_legal(g: ConvGeom, p: Plan) -> bool:
    """LNC2 dx split by C_in groups: per gradient with dw (db folds in dw, so no dx band feeds
    another section), C_in-outer gather dx with at least two groups. Each program runs every
    (batch, band) item for its half of the C_in tiles: it loads only its half of the filters."""
    return (p.lnc == 2 and p.compute_dx and p.compute_dw and p.strategy is Strategy.PER_GRADIENT
            and p.dx_ci_outer and p.dx_regions == 1 and p.dx_method is not DxMethod.TOEPLITZ
            and not dx_t_active(p) and n_tiles(g.c_in, p.dx_ci_tile) >= 2 and not p.dw_interleave)


def dx_program_items(g: ConvGeom, p: Plan, pid: int) -> list:
    """The dx (batch, band) items program ``pid`` runs: every item under the C_in split, else its half.
    D-phase pairs at LNC2: the items band-major (each program's half alternates batches), because a
    band's two half-plane stores (64 partitions, half the DMA engines each) are ordered after every
    earlier store of the same batch (their element spans interleave in dx); stores of two batches
    overlap, so a program's store chain is not one batch's whole dx (down_s2: 4 x 2.9 us)."""
    if dx_ci_split_on(g, p):
        return dx_items(g, p)
    items = dx_items(g, p)
    if p.lnc == 2 and p.dx_dphase_pairs:
        items = sorted(items, key=lambda it: (it[1].i0, it[2].i0, it[0]))
    return _split(items, p.lnc, pid)


def dx_ci_split_on(g: ConvGeom, p: Plan) -> bool:
    """The plan asks for the LNC2 C_in split of dx and the geometry allows it (else the item split)."""
    return p.dx_ci_split and dx_ci_split_legal(g, p)


W_BAND_METHODS = (DxMethod.GEMM, DxMethod.GATHER_S1, DxMethod.PHASE_GATHER)


def dx_w_band_legal(g: ConvGeom, p: Plan) -> bool:
    """``Plan.dx_w_band``: the gather (``nki_dx.run_dx``, one band per plane, no dx^T, no D-phase pairs) may
    split each dx band's W input columns into bands, each loading the dy columns its inputs read (the
    halo of the kernel's W reach), so that a band whose whole-row dy buffer does not fit SBUF still runs.
    Not where another section reads dx's dy loads (shared dy, db folded on them) or paces dx
    (dw-interleaved, an early first band)."""
    return bool(p.compute_dx and p.dx_method in W_BAND_METHODS and 0 < p.dx_w_band < g.axes[2].n
                and p.dx_regions == 1 and not p.dx_transposed and not p.dx_dphase_pairs
                and p.strategy is Strategy.PER_GRADIENT
                and not (p.compute_db and p.db_method is DbMethod.FOLD and not p.compute_dw)
                and not (p.dx_prefetch or p.dw_interleave or p.dx_band_early))


def dx_w_bands(g: ConvGeom, p: Plan) -> tuple:
    """The W bands (``schedule.AxisBand``) of every dx band: bands of ``dx_w_band`` columns where legal, else
    one over the whole axis."""
    ax = g.axes[2]
    return axis_bands(ax, p.dx_w_band if dx_w_band_legal(g, p) else ax.n)


def dx_w_cols(g: ConvGeom, p: Plan) -> int:
    """W input columns of dx's widest W band (0 when not banded: whole rows)."""
    return p.dx_w_band if dx_w_band_legal(g, p) else 0


def dx_co_chunk_legal(g: ConvGeom, p: Plan) -> bool:
    """``Plan.dx_co_chunk``: the gather (``nki_dx.run_dx``) may run C_out in chunks of tiles, outside its tap
    loops: per band, each chunk's dy band and filters are loaded, its PSUM sums over the chunk's C_out tiles
    and taps are added into an fp32 accumulator of the dx band, and the last chunk's sum rounds once into
    the plane. For a dy band (or filters) of every C_out tile that does not fit SBUF even one W column
    wide. The same sections as W bands (no other section reads or paces dx's loads), and the filters load
    inside dx (not before dw)."""
    return bool(p.compute_dx and p.dx_method in W_BAND_METHODS and 0 < p.dx_co_chunk < n_tiles(g.c_out, PMAX)
                and p.dx_regions == 1 and not p.dx_transposed and not p.dx_dphase_pairs
                and p.strategy is Strategy.PER_GRADIENT and not p.filters_first
                and not (p.compute_db and p.db_method is DbMethod.FOLD and not p.compute_dw)
                and not (p.dx_prefetch or p.dw_interleave or p.dx_band_early))


def dx_dy_clip_legal(g: ConvGeom, p: Plan) -> bool:
    """``Plan.dx_dy_clip``: the gather (``nki_dx.run_dx``) may hold in each dy band buffer only the rows its live
    taps read (``schedule.live_phase_work``: a tap whose window misses dy is skipped) and the rows the band
    owns, for a band whose virtual rows (the kernel's whole reach, zeros beyond dy) do not fit SBUF. No other
    section reads dx's band (no dw or db on its loads, no prefetch or early band, dw-interleaving), and one
    band per plane."""
    return bool(p.dx_dy_clip and p.compute_dx and p.dx_method in W_BAND_METHODS and p.dx_regions == 1
                and not p.dx_transposed and not p.dx_dphase_pairs and p.strategy is Strategy.PER_GRADIENT
                and not (p.compute_db and p.db_method is DbMethod.FOLD and not p.compute_dw)
                and not (p.dx_prefetch or p.dw_interleave or p.dx_band_early))


def dx_co_chunks(g: ConvGeom, p: Plan) -> list[tuple[int, int]]:
    """[t0, t1) ranges of C_out tiles that gather dx accumulates in PSUM together: chunks of ``dx_co_chunk``
    tiles where legal (the last one a remainder), else one over every tile."""
    n = n_tiles(g.c_out, PMAX)
    step = p.dx_co_chunk if dx_co_chunk_legal(g, p) else n
    return [(t, min(n, t + step)) for t in range(0, n, step)]


def dx_co_resident(g: ConvGeom, p: Plan) -> int:
    """C_out tiles whose dy band and filters gather dx holds at once (a chunk's, else all of them)."""
    return max(t1 - t0 for t0, t1 in dx_co_chunks(g, p))


def filter_group(g: ConvGeom, p: Plan) -> int:
    """Taps whose filter transposes share one PSUM bank (dtype-sized PSUM tiles); the staging tile
    [ci, taps, C_out] stays <= 8 KiB per partition."""
    per = p.dx_ci_tile * g.dtype_bytes
    return max(1, min(g.taps, PSUM_BANK_BYTES // per, 8192 // (g.c_out * g.dtype_bytes)))


_filter_group = filter_group


def dx_last_by_blocks(g: ConvGeom, p: Plan, work: tuple) -> bool:
    """Gather dx (``nki_dx.run_dx``): the program's last plane is stored block by block, each block right
    after its eviction, so the kernel's dx tail is the last block's store, not the plane's (vae3d: 128 of
    512 KB). Unit strides (a block is a box of the plane
    and of dx), one band per plane (no regions), a band of one phase with taps and more than one block."""
    return (p.dx_regions == 1 and all(a.s == 1 for a in g.axes) and len(work) == 1 and bool(work[0].taps)
            and len(work[0].blocks) > 1)


def dx_t_active(p: Plan) -> bool:
    """The plan runs dx^T: its flag, without the options dx^T does not combine with (region packing,
    C_in-outer filter groups: a plan edited to those runs the classic gather; dx:toeplitz, which a plan
    edited to it runs instead -- its ``band prefetch`` flag then falls away too)."""
    return (p.dx_transposed and p.dx_regions == 1 and not p.dx_ci_outer
            and p.dx_method is not DxMethod.TOEPLITZ)
