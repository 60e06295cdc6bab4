"""Four float32 matmul kernels with the loop and load structure of the four profiled versions in the Neuron
tutorial "Introduction to NKI Kernel Optimization" (``nki/guides/tutorials/kernel-optimization.rst``).

They are the project's own kernels, written from the tutorial's description of each version: what is
loaded where, how big each DMA is, and what runs on which engine. They compute ``lhsT.T @ rhs`` (lhsT
``[K, M]``, rhs ``[K, N]``, result ``[M, N]`` in HBM) and exist to hold nkisim's cost model to the
published hardware totals (:mod:`nkisim.calibration.published`).

- ``tiled``: every matmul loads its own two tiles just before it (``[128, 128]`` and ``[128, 512]``).
- ``hoisted``: one M tile's K column of lhsT is loaded once per M tile, one N tile's K column of rhs once
  per (M, N) tile.
- ``free_blocked``: as ``hoisted`` over blocks of 2 M tiles and 2 N tiles (the rhs columns of a block are
  loaded one after the other, each right before its matmuls: a whole block's do not fit SBUF).
- ``all_blocked``: blocks of M tiles, 2 N tiles and 8 K tiles; partial sums accumulate in SBUF
  (VectorE adds), loads are ``[128, 128 * block_m]`` / ``[128, 1024]`` rows, stores ``[128, 1024]``. The
  tutorial blocks 16 M tiles; its live tiles then fill 229,376 B per partition (the whole physical 224 KiB),
  more than the 212,984 B nkisim lets a kernel use, so the default here is 8 M tiles (loads of 4 KiB per
  partition, still in the saturating range of the DMA overview's curve).
"""
from __future__ import annotations

from conv3d_bwd.nkisim import isa as nisa
from conv3d_bwd.nkisim import language as nl

TILE_K = 128   # partitions (contraction)
TILE_M = 128   # stationary free size
TILE_N = 512   # moving free size


def _check(lhsT, rhs, block_m: int = 1, block_n: int = 1, block_k: int = 1) -> tuple[int, int, int]:
    k, m = lhsT.shape
    k2, n = rhs.shape
    if k != k2:
        raise ValueError(f"rhs: contraction {k2} must equal lhsT's {k}")
    for name, size, step in (("M", m, TILE_M * block_m), ("N", n, TILE_N * block_n), ("K", k, TILE_K * block_k)):
        if size % step:
            raise ValueError(f"{name}={size} must be a multiple of {step}")
    return k, m, n


def _store_tile(result, acc, m0: int, n0: int) -> None:
    """PSUM -> SBUF copy (VectorE), then SBUF -> HBM."""
    out = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out, src=acc)
    nisa.dma_copy(dst=result[m0:m0 + TILE_M, n0:n0 + TILE_N], src=out)


def tiled(lhsT, rhs):
    """Each matmul right after the loads of its two tiles."""
    k, m, n = _check(lhsT, rhs)
    result = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    for mi in nl.affine_range(m // TILE_M):
        for ni in nl.affine_range(n // TILE_N):
            acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(k // TILE_K):
                a = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                k0 = ki * TILE_K
                nisa.dma_copy(dst=a, src=lhsT[k0:k0 + TILE_K, mi * TILE_M:(mi + 1) * TILE_M])
                nisa.dma_copy(dst=b, src=rhs[k0:k0 + TILE_K, ni * TILE_N:(ni + 1) * TILE_N])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            _store_tile(result, acc, mi * TILE_M, ni * TILE_N)
    return result


def _load_column(src, col0: int, width: int, k: int) -> list:
    """The K tiles ``src[k0:k0+128, col0:col0+width]`` as separate SBUF tiles, one DMA each."""
    tiles = []
    for ki in nl.affine_range(k // TILE_K):
        t = nl.ndarray((TILE_K, width), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=src[ki * TILE_K:(ki + 1) * TILE_K, col0:col0 + width])
        tiles.append(t)
    return tiles


def _free_blocks(lhsT, rhs, block_m: int, block_n: int):
    k, m, n = _check(lhsT, rhs, block_m, block_n)
    result = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    for mb in nl.affine_range(m // (TILE_M * block_m)):
        a_cols = [_load_column(lhsT, (mb * block_m + i) * TILE_M, TILE_M, k) for i in range(block_m)]
        for nb in nl.affine_range(n // (TILE_N * block_n)):
            # one rhs column at a time: a whole block of them (2 x 64 x 2 KiB per partition) does not fit
            # SBUF next to the lhsT block, so the N tile loop is the outer one (the same loads, reordered)
            for j in range(block_n):
                b_col = _load_column(rhs, (nb * block_n + j) * TILE_N, TILE_N, k)
                for i in range(block_m):
                    acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                    for a, b in zip(a_cols[i], b_col):
                        nisa.nc_matmul(dst=acc, stationary=a, moving=b)
                    _store_tile(result, acc, (mb * block_m + i) * TILE_M, (nb * block_n + j) * TILE_N)
                del b_col
    return result


def hoisted(lhsT, rhs):
    """Loads hoisted out of the K loop: a K column of lhsT per M tile, of rhs per (M, N) tile."""
    return _free_blocks(lhsT, rhs, 1, 1)


def free_blocked(lhsT, rhs):
    """``hoisted`` over blocks of 2 M tiles x 2 N tiles."""
    return _free_blocks(lhsT, rhs, 2, 2)


def all_blocked(lhsT, rhs, block_m: int = 8, block_n: int = 2, block_k: int = 8):
    """Blocks in M, N and K; each K block's partial products are added into SBUF accumulators."""
    k, m, n = _check(lhsT, rhs, block_m, block_n, block_k)
    width_m, width_n, depth = TILE_M * block_m, TILE_N * block_n, TILE_K * block_k
    result = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    for nb in nl.affine_range(n // width_n):
        sums = {}
        for mb in range(m // width_m):
            for i in range(block_m):
                for j in range(block_n):
                    s = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.memset(dst=s, value=0.0)
                    sums[mb, i, j] = s
        for kb in nl.sequential_range(k // depth):
            b_rows = []
            for r in range(block_k):
                k0 = (kb * block_k + r) * TILE_K
                t = nl.ndarray((TILE_K, width_n), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=rhs[k0:k0 + TILE_K, nb * width_n:(nb + 1) * width_n])
                b_rows.append(t)
            for mb in nl.affine_range(m // width_m):
                a_rows = []
                for r in range(block_k):
                    k0 = (kb * block_k + r) * TILE_K
                    t = nl.ndarray((TILE_K, width_m), dtype=lhsT.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=t, src=lhsT[k0:k0 + TILE_K, mb * width_m:(mb + 1) * width_m])
                    a_rows.append(t)
                for j in range(block_n):
                    for i in range(block_m):
                        acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                        for a, b in zip(a_rows, b_rows):
                            nisa.nc_matmul(dst=acc, stationary=a[:, i * TILE_M:(i + 1) * TILE_M],
                                           moving=b[:, j * TILE_N:(j + 1) * TILE_N])
                        s = sums[mb, i, j]
                        nisa.tensor_tensor(dst=s, data1=s, data2=acc, op=nl.add)
        for mb in nl.affine_range(m // width_m):
            for i in range(block_m):
                packed = nl.ndarray((TILE_M, width_n), dtype=nl.float32, buffer=nl.sbuf)
                for j in range(block_n):
                    nisa.tensor_copy(dst=packed[:, j * TILE_N:(j + 1) * TILE_N], src=sums[mb, i, j])
                m0 = (mb * block_m + i) * TILE_M
                nisa.dma_copy(dst=result[m0:m0 + TILE_M, nb * width_n:(nb + 1) * width_n], src=packed)
    return result


VERSIONS = {"tiled": tiled, "hoisted": hoisted, "free_blocked": free_blocked, "all_blocked": all_blocked}
