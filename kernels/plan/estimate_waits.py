"""The waits at the edges of the estimate: the first loads before an engine can start, the last
stores after it ends, and the LNC2 exchange of dw's partials.
"""
from __future__ import annotations

from .. import dx_dpairs as dpairs
from ..costs import CostSheet, TargetFigures
from ..dw_head import head_wait_ns
from ..geometry import ConvGeom
from ..schedule import (
    PMAX,
    AxisBand,
    axis_bands,
    box_block_sizes,
    box_blocks,
    dw_x_fill,
    dx_packs,
    dx_phase_work,
    n_tiles,
    needs_stage,
    tile_sizes,
)
from ..spec.compose import dx_prefetched
from ..spec.dw_options import dw_head_split_on, dw_program_items, dw_tap_passes, dyt_box_dma_legal
from ..spec.dw_xs import dw_xs_bundles
from ..spec.dx_options import dx_last_by_blocks, dx_program_items, dx_t_active
from ..spec.record import DwMethod, Plan
from ..xt_rows import dyt_runs, xt_columns, xt_fill, xt_window
from .budget import _dx_dy_extent, _dx_t_copies


def _dw_exchange_ns(c: CostSheet, g: ConvGeom, hw: TargetFigures, co_t: int, n_co: int, half: int, width: int,
                    grp: int, fused: bool, deferred: bool = False) -> float:
    """The LNC2 positions split's reduce-scatter (mirrors DwState._exchange_halves): one sendrecv per
    C_out tile of ``half`` taps of fp32 partials, charged to the DMA (and, unfused, the in-place adds
    to VectorE); returns its exposed time. It is a rendezvous of both programs on the critical path:
    the PE (in order) waits for it and for the first add (fused: the first add-cast) before its dw^T
    transposes can go on. Deferred past dx (``dw_defer_finish``), only the first add is exposed: it
    waits for dx's last evictions on VectorE and the transposes wait for it."""
    nbytes = co_t * half * width * 4
    c.dma(nbytes, half * width * 4, n_co)
    add = half * width if not fused else min(grp, half) * width
    if not fused:
        c.compute("vector", add, 2, 1.0, n_co, op="tensor_tensor")
    if deferred:
        return (max(64.0, 2.0 * add) + 60.0) / hw.vector_ghz
    return 2 * hw.dma_fixed_ns + n_co * (_lone_dma_ns(hw, nbytes, half * width * 4, co_t) - hw.dma_fixed_ns) \
        + (1 if fused else n_co) * (max(64.0, 2.0 * add) + 60.0) / hw.vector_ghz


def _lone_dma_ns(hw: TargetFigures, nbytes: float, run_bytes: float, partitions: int) -> float:
    """One transfer alone on the queues (nkisim): start latency, then its bytes at the share of the
    16 DMA engines its partitions reach (ceil(P / 8) of them)."""
    return hw.lone_dma_ns(nbytes, run_bytes, partitions)


def _dx_tail_ns(g: ConvGeom, p: Plan, hw: TargetFigures, item: tuple) -> float:
    """The dx tail beyond the fill's DMA latency: the last block's store (``dx_last_by_blocks``, the last
    C_in tile's plane), else the last band's stores (``_dx_store_tail_ns``)."""
    _b, bd, bh = item
    work = dx_phase_work(g, (bd, bh, axis_bands(g.axes[2], g.axes[2].n)[0]))
    if not p.dx_transposed and not p.dx_dphase_pairs and dx_last_by_blocks(g, p, work):
        (_jd, _jh, _jw), (nd, nh, nw) = work[0].blocks[-1]
        ci = tile_sizes(g.c_in, p.dx_ci_tile)[-1]
        run = (nh * nw if nw == g.axes[2].n else nw) * g.dtype_bytes
        return _lone_dma_ns(hw, ci * nd * nh * nw * g.dtype_bytes, run, ci) - hw.dma_fixed_ns
    return _dx_store_tail_ns(g, hw, bd, bh, 2 * g.c_in if _dpair_one_store(g, p, item) else 0,
                             _dpair_last_rows(g, p, item))


def _dpair_one_store(g: ConvGeom, p: Plan, item: tuple) -> bool:
    """D-phase pairs: the band plane of ``item`` stores with one 128-partition DMA (``dx_dpairs.one_store``)."""
    if not p.dx_dphase_pairs:
        return False
    _b, bd, bh = item
    return dpairs.one_store(g, dpairs.band_halves(g, (bd, bh, axis_bands(g.axes[2], g.axes[2].n)[0])))


def _dpair_last_rows(g: ConvGeom, p: Plan, item: tuple) -> int:
    """D-phase pairs: the D rows per phase a program's last band stores one by one
    (``dx_dpairs.dpair_last_by_rows``), else 1 (one store)."""
    if not p.dx_dphase_pairs:
        return 1
    _b, bd, bh = item
    halves = dpairs.band_halves(g, (bd, bh, axis_bands(g.axes[2], g.axes[2].n)[0]))
    return halves[0][1] if dpairs.dpair_last_by_rows(g, halves) else 1


def _dx_store_tail_ns(g: ConvGeom, hw: TargetFigures, bd: AxisBand, bh: AxisBand, partitions: int = 0,
                      split: int = 1) -> float:
    """The last dx band's store after its last eviction, beyond the fill's DMA latency: one DMA per
    C_in tile (<= 128 partitions) sharing the bandwidth, each at its partitions' share of the DMA
    engines (down_s2: a 64-channel plane of 1 MB on half the engines, ~6 us after the PE is done)."""
    W = g.axes[2].n
    ds = g.dtype_bytes
    rows = (bd.i1 - bd.i0) * (bh.i1 - bh.i0)
    run = (rows * W if bh.i1 - bh.i0 == g.axes[1].n else (bh.i1 - bh.i0) * W) * ds
    tiles = tile_sizes(g.c_in, PMAX)
    eff = hw.descriptor_efficiency(run)
    total = g.c_in * rows * W * ds / (hw.dma_bytes_per_ns * eff)
    if partitions:   # one store of every channel on ``partitions`` partitions (D-phase pairs' one store;
        # ``split``: its D rows one by one, the last row's store is the tail)
        return _lone_dma_ns(hw, g.c_in * rows * W * ds / split, run, partitions) - hw.dma_fixed_ns
    slowest = max(_lone_dma_ns(hw, ci * rows * W * ds, run, ci) for ci in tiles) - hw.dma_fixed_ns
    return max(total, slowest)


def _dx_head_ns(g: ConvGeom, hw: TargetFigures, lo: list[int], hi: list[int], ext: list[int],
                valid: list[tuple[int, int]]) -> float:
    """dx runs first: how long its PE waits for the first dy band beyond the fill's DMA latency (every
    C_out tile, since a block's matmuls accumulate over all of them; one lone DMA each at the share of
    the 16 DMA engines its partitions reach), plus the staged placement of a padded band."""
    n = [hi[a] - lo[a] for a in range(3)]
    if min(n) <= 0:
        return 0.0
    ds = g.dtype_bytes
    elems = n[0] * n[1] * n[2]
    o = g.out_size
    run = n[2] * (n[1] * (n[0] if n[1] == o[1] else 1) if n[2] == o[2] else 1)
    staged = needs_stage(lo, hi, ext)
    ns = 0.0
    for co in tile_sizes(g.c_out, PMAX):
        ns += _lone_dma_ns(hw, co * elems * ds, (elems if staged else run) * ds, co) - hw.dma_fixed_ns
    if staged:   # the placement copy (VectorE, 4x mode for 2-byte SBUF->SBUF), per C_out tile
        sp = CostSheet(hw).copy_speedup("vector", ds == 2, False, True)
        ns += n_tiles(g.c_out, PMAX) * (max(64.0, elems / sp) + 60.0) / hw.vector_ghz
    return ns


def _dw_head_ns(g: ConvGeom, p: Plan, hw: TargetFigures, pid: int = 0) -> float:
    """Per-gradient dw (it runs first): how long program 0's PE waits before its first dw matmul, beyond
    the fill's DMA latency: the first box's dy (the whole box of C_out tile 0, on which the dy^T transposes
    start) and then ``_dw_first_x_wait_ns``. Large when a box is big (temporal_k311's 16x16-row boxes)."""
    first = _dw_first_box(g, p, pid)
    if first is None:
        return 0.0
    if dw_head_split_on(g, p):   # the PE trails the column pieces of the first dy^T and x^T
        return _dw_head_split_ns(g, p, hw, pid, first)
    dy_ns = _dw_first_dyt_dma_ns(g, hw, first, p) if p.dw_dyt_dma else _dw_first_dy_ns(g, hw, first)
    return max(0.0, dy_ns - hw.dma_fixed_ns) + _dw_first_x_wait_ns(g, p, hw, pid)


def _dw_head_split_ns(g: ConvGeom, p: Plan, hw: TargetFigures, pid: int, first: tuple) -> float:
    """``dw_head_split``: dw_head.head_wait_ns for the program's first row chunk and taps."""
    (d0, d1), (h0, h1) = first
    (_sd, _sh, _z), (cd, ch, _one) = box_blocks((0, 0, 0), (d1 - d0, h1 - h0, 1), PMAX)[0]
    span = dw_tap_passes(g, p, pid)[0]
    wo = g.axes[2].o
    a, e = xt_window(g, 0, wo)
    ci = min(p.dw_ci_tile, p.dw_ci_range, g.c_in)
    return head_wait_ns(g, hw, (d0, h0, cd, ch), span, wo, e - a, ci)


def _dw_first_dyt_dma_ns(g: ConvGeom, hw: TargetFigures, box: tuple[tuple[int, int], tuple[int, int]],
                         p: Plan | None = None) -> float:
    """``dw_dyt_dma``: the first row chunk's dy^T (C_out tile 0) by dma_transpose, alone on the queues
    (its rows' share of the DMA engines, the slowest run); box mode: the first position tile's, every
    C_out tile (a matmul step takes all of them), one transfer per d plane."""
    (d0, d1), (h0, h1) = box
    if p is not None and dyt_box_dma_legal(g, p):
        (nd, nh, nw), _cnt = box_block_sizes((0, 0, 0), (d1 - d0, h1 - h0, g.axes[2].o), PMAX)[0]
        # per d plane and C_out tile a [nh*nw, co] transpose, all in flight on the shared bandwidth
        return hw.dma_fixed_ns + nd * sum(hw.transpose_ns((nh * nw, co), g.dtype_bytes)
                                          for co in tile_sizes(g.c_out, PMAX))
    (_sd, _sh, _z), (cd, ch, _one) = box_blocks((0, 0, 0), (d1 - d0, h1 - h0, 1), PMAX)[0]
    co_t = min(PMAX, g.c_out)
    runs = dyt_runs(g.axes[1].o, d0, h0, cd, ch)
    return hw.dma_fixed_ns + sum(hw.transpose_ns((n, g.axes[2].o, co_t), g.dtype_bytes) for _p, _r, n in runs)


def _dw_first_box(g: ConvGeom, p: Plan, pid: int = 0) -> tuple[tuple[int, int], tuple[int, int]] | None:
    items = [it for it in dw_program_items(g, p, pid) if it[1][1] > it[1][0] and it[2][1] > it[2][0]]
    return (items[0][1], items[0][2]) if items else None


def _dw_first_dy_ns(g: ConvGeom, hw: TargetFigures, box: tuple[tuple[int, int], tuple[int, int]]) -> float:
    """The first dw box's dy load (C_out tile 0), alone on the queues."""
    (d0, d1), (h0, h1) = box
    wo = g.axes[2].o
    co_t = min(PMAX, g.c_out)
    rows = (d1 - d0) * (h1 - h0)
    run = (rows if h1 - h0 == g.axes[1].o else 1) * wo * g.dtype_bytes
    return _lone_dma_ns(hw, co_t * rows * wo * g.dtype_bytes, run, co_t)


def _dw_first_x_wait_ns(g: ConvGeom, p: Plan, hw: TargetFigures, pid: int = 0) -> float:
    """Per-gradient dw: how long program 0's PE waits for the x of its first box and C_in tile after that
    box's dy has landed and been transposed: an x band (staged: plus the VectorE placement) or, with
    ``xT dma``, the transfers of its first x^T tile (x-stationary: bundle) -- no x band is loaded then.
    A lone DMA gets ceil(P/8) of the 16 DMA engines. Large when one box spans the whole x at few
    partitions (down_s2: C_in 64, stride 2), small elsewhere: the busy-time sum misses it."""
    first = _dw_first_box(g, p, pid)
    if first is None:
        return 0.0
    (d0, d1), (h0, h1) = first
    ds = g.dtype_bytes
    wo = g.axes[2].o
    n_co = n_tiles(g.c_out, PMAX)
    co_t = min(PMAX, g.c_out)
    dy_ns = _dw_first_dyt_dma_ns(g, hw, first, p) if p.dw_dyt_dma else _dw_first_dy_ns(g, hw, first)
    pe = CostSheet(hw)   # the dy^T transposes of the first box (row mode: its first <= 128-row chunk)
    ci = min(p.dw_ci_tile, p.dw_ci_range, g.c_in)
    if p.dw_method is DwMethod.ROW_PACK:
        (_sd, _sh, _z), (cd, ch, _one) = box_blocks((0, 0, 0), (d1 - d0, h1 - h0, 1), PMAX)[0]
        if not p.dw_dyt_dma:
            pe.transpose(co_t, cd * ch, g.dtype == "fp32", wo * n_co)
        d1, h1 = d0 + cd, h0 + ch
    else:
        for (nd, nh, nw), cnt in box_block_sizes((0, 0, 0), (d1 - d0, h1 - h0, wo), PMAX):
            if not p.dw_dyt_dma:   # (box-mode dyT dma: no PE transposes)
                pe.transpose(co_t, nd * nh * nw, g.dtype == "fp32", n_co * cnt)
    if p.dw_xt_dma and p.dw_method is DwMethod.ROW_PACK:
        x_ns = _first_xt_tile_ns(g, p, hw, ci, (d0, h0, d1 - d0, h1 - h0))
    else:
        _x0, ext, lo, hi = dw_x_fill(g, (d0, d1), (h0, h1))
        if any(h <= lo_ for lo_, h in zip(lo, hi)):
            return 0.0
        n = [hi[a] - lo[a] for a in range(3)]
        elems = n[0] * n[1] * n[2]
        x_run = n[2] * (n[1] * (n[0] if n[1] == g.axes[1].n else 1) if n[2] == g.axes[2].n else 1)
        staged = needs_stage(lo, hi, ext)
        x_ns = _lone_dma_ns(hw, ci * elems * ds, (elems if staged else x_run) * ds, ci)
        if staged:   # the placement copy (VectorE, 4x mode for 2-byte SBUF->SBUF)
            sp = CostSheet(hw).copy_speedup("vector", ds == 2, False, True)
            x_ns += (max(64.0, elems / sp) + 60.0) / hw.vector_ghz
    return max(0.0, x_ns - dy_ns - pe.busy["tensor"])


def _first_xt_tile_ns(g: ConvGeom, p: Plan, hw: TargetFigures, ci: int, chunk: tuple[int, int, int, int]) -> float:
    """``xT dma``: the first x^T tile of a row chunk (x-stationary: the first bundle of (kd, kh) pairs)
    lands after the DMA latency and its slowest transfer (dma_transpose at 90 %, at its rows' share of
    the DMA engines), all of its transfers sharing the bandwidth."""
    kw_n = g.kernel[2]
    pairs = dw_xs_bundles(g, p, (0, g.taps))[0][1] if p.dw_x_stationary else 1
    _xw, lo, hi = xt_columns(g)
    total = 0.0   # the tile's transposes in flight together on the shared bandwidth, by whole blocks
    for q in range(pairs):
        kd, kh, _kw = g.tap_coords(q * kw_n)
        for run in xt_fill(g, *chunk, kd, kh).transposes:
            total += hw.transpose_ns((run.rows, hi - lo, ci), g.dtype_bytes)
    return hw.dma_fixed_ns + total


def _shared_region_fills(g: ConvGeom, p: Plan, items: list, fills: list) -> dict[int, bool]:
    """Item index -> whether it pays the memsets and placement, for the region packs whose loads
    share them (mirrors DyBands.load_regions / nki_common.packed_fill_shared); others are absent."""
    out: dict[int, bool] = {}
    if p.dx_regions <= 1 or g.c_out * p.dx_regions != PMAX:
        return out
    index = {id(item): i for i, item in enumerate(items)}
    for pack in dx_packs(g, items, p.dx_regions):
        idx = [index[id(item)] for item in pack]
        fs = [fills[i] for i in idx]
        if len(pack) != p.dx_regions or any(f is None for f in fs):
            continue
        lo0, hi0 = fs[0][0], fs[0][1]
        if all(f[0] == lo0 and f[1] == hi0 for f in fs) and all(h > l_ for l_, h in zip(lo0, hi0)):
            out.update({i: k == 0 for k, i in enumerate(idx)})
    return out


def _first_band_staged(g: ConvGeom, p: Plan) -> bool:
    """Whether program 0's first dx band is loaded through a staging tile (placed by a compute engine)."""
    items = dx_program_items(g, p, 0)
    if not items:
        return False
    _b, bd, bh = items[0]
    bands3 = (bd, bh, axis_bands(g.axes[2], g.axes[2].n)[0])
    ext = [b_.extent for b_ in bands3]
    if min(ext) <= 0:
        return False
    valid = [(max(b_.q0, 0), min(b_.q1, g.out_size[a])) for a, b_ in enumerate(bands3)]
    lo = [max(v0 - b_.q0, 0) for (v0, _v), b_ in zip(valid, bands3)]
    hi = [max(lo[a], valid[a][1] - bands3[a].q0) for a in range(3)]
    return not any(h_ <= l_ for l_, h_ in zip(lo, hi)) and needs_stage(lo, hi, ext)


def _first_band_placement(g: ConvGeom, hw: TargetFigures, fills: list) -> tuple[float, float] | None:
    """The staged placement of the first dx band (one C_out tile): ns on VectorE (2x/4x copy modes) and on
    GpSimd; None when the band is not staged."""
    f = fills[0] if fills else None
    if f is None:
        return None
    lo, hi, ext, _valid = f
    if any(h_ <= l_ for l_, h_ in zip(lo, hi)) or not needs_stage(lo, hi, ext):
        return None
    elems = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2])
    vec, gps = CostSheet(hw), CostSheet(hw)
    vec.compute("vector", elems, 1, vec.copy_speedup("vector", g.dtype_bytes == 2, False, True), 1, op="tensor_copy")
    gps.compute("gpsimd", elems, 1, 1.0, 1, op="tensor_copy")
    return vec.busy["vector"], gps.busy["gpsimd"]


def _dx_t_fill_ns(g: ConvGeom, p: Plan, hw: TargetFigures, items: list) -> float:
    """The first band's shifted copies, which no earlier band's matmuls hide (later bands are made
    one band ahead): copy bytes at the full DMA bandwidth (two half-range transfers per copy)."""
    if not items or not dx_t_active(p):
        return 0.0
    _b, bd, bh = items[0]
    ext = _dx_dy_extent(g, p.dx_band)
    used = bd.extent * ext[1] * ext[2]
    n_copies = _dx_t_copies(g, p)
    nbytes = sum(g.c_out * used * g.dtype_bytes * (2 if k else 1) for k in range(n_copies))
    if dx_prefetched(p):
        # loaded during dw's last row chunk, whose DMA queues are busy with dw's own x^T transfers
        # (row-mode dw is DMA-heavy): the band's load and copies lengthen dw by their DMA time
        o = g.out_size
        rows = [max(0, min(b_.q1, o[a]) - max(b_.q0, 0)) for a, b_ in enumerate((bd, bh))]
        load = g.c_out * rows[0] * rows[1] * g.axes[2].o * g.dtype_bytes
        return (nbytes + load) / hw.dma_bytes_per_ns
    return nbytes / hw.dma_bytes_per_ns + (hw.dma_fixed_ns if n_copies else 0.0)
