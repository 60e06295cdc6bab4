"""Speed of the nkisim emulator.

A stream of [128x128] x [128x512] bf16 matmuls, each with its load (dma_copy HBM->SBUF), its
eviction (tensor_copy PSUM->SBUF) and its store (dma_copy SBUF->HBM): four instructions per tile.
Prints instructions per second in trace-only mode and in full mode, next to the bare numpy
arithmetic that full mode performs (the same copies, casts and fp32 matmuls, without the
emulator). Targets: >= 20,000 instructions/s trace-only; full mode within 2x of bare numpy.

    python benchmarks/bench_nkisim.py [--tiles 500] [--repeat 3] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

BF16 = ml_dtypes.bfloat16
K, M, N = 128, 128, 512
INSTRS_PER_TILE = 4


@nkisim.jit
def matmul_stream(w, x):
    """out[t] = bf16(w.T @ x[t]) for every tile t, one load/matmul/evict/store per tile."""
    tiles = x.shape[0]
    out = nl.ndarray((tiles, M, N), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    w_sb = nl.ndarray((K, M), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=w_sb, src=w)
    for t in nl.affine_range(tiles):
        x_sb = nl.ndarray((K, N), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_sb, src=x[t])
        acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=w_sb, moving=x_sb)
        y_sb = nl.ndarray((M, N), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=y_sb, src=acc)
        nisa.dma_copy(dst=out[t], src=y_sb)
    return out


def bare_numpy(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The arithmetic full mode performs, without the emulator: copies, fp32 matmul, bf16 casts."""
    tiles = x.shape[0]
    out = np.empty((tiles, M, N), BF16)
    w_sb = w.copy()
    w32 = w_sb.astype(np.float32)
    for t in range(tiles):
        x_sb = x[t].copy()                                   # load
        acc = w32.T @ x_sb.astype(np.float32)                # matmul, fp32 accumulation
        y_sb = acc.astype(BF16)                              # eviction with the cast
        out[t] = y_sb                                        # store
    return out


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _profile(fn, top: int, instrs: int) -> str:
    """cProfile of one run: time per source file (us per instruction), then the top functions."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    stats = pstats.Stats(prof)
    by_file: dict[str, float] = {}
    for (filename, _, func), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "/nkisim/" in filename:
            key = "nkisim/" + Path(filename).name
        elif filename == "~":
            key = f"builtin {func.split(' of ')[0].strip('<>')}"[:48]
        else:
            key = Path(filename).parent.name + "/" + Path(filename).name
        by_file[key] = by_file.get(key, 0.0) + tottime
    total = sum(by_file.values())
    lines = [f"  {'where':<50}{'us/instr':>10}{'share':>8}"]
    for key, secs in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {key:<50}{secs / instrs * 1e6:>10.2f}{secs / total:>8.1%}")
    lines.append(f"  {'total (under the profiler)':<50}{total / instrs * 1e6:>10.2f}")
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(top)
    return "\n".join(lines) + "\n" + out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, default=500, help="matmul tiles in the stream")
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode; the best counts")
    parser.add_argument("--target", default="trn2")
    parser.add_argument("--profile", action="store_true", help="print cProfile of both modes")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    w = rng.standard_normal((K, M)).astype(BF16)
    x = rng.standard_normal((args.tiles, K, N)).astype(BF16)
    instrs = 1 + INSTRS_PER_TILE * args.tiles

    def trace_only():
        return nkisim.run(matmul_stream, nkisim.TensorSpec(w.shape, "bfloat16"),
                          nkisim.TensorSpec(x.shape, "bfloat16"), target=args.target, trace_only=True)

    def full():
        return nkisim.run(matmul_stream, w, x, target=args.target)

    # correctness first: a benchmark of a wrong emulator means nothing
    result = full()
    expected = bare_numpy(w, x)
    if len(result.trace.instrs) != instrs:
        print(f"warning: trace has {len(result.trace.instrs)} instructions, expected {instrs}")
    if not np.array_equal(np.asarray(result.outputs).view(np.uint16), expected.view(np.uint16)):
        print("ERROR: full-mode output differs from the bare numpy arithmetic")
        return 1

    t_trace = _best(trace_only, args.repeat)
    t_full = _best(full, args.repeat)
    t_numpy = _best(lambda: bare_numpy(w, x), args.repeat)
    summary = trace_only().summary

    print(f"nkisim speed: {args.tiles} tiles x {INSTRS_PER_TILE} instructions + 1 = {instrs} "
          f"instructions, target {args.target}, best of {args.repeat}")
    print(f"  {'mode':<12}{'seconds':>10}{'instr/s':>12}{'us/instr':>10}")
    for name, secs in (("trace-only", t_trace), ("full", t_full), ("bare numpy", t_numpy)):
        print(f"  {name:<12}{secs:>10.3f}{instrs / secs:>12,.0f}{secs / instrs * 1e6:>10.1f}")
    ratio = t_full / t_numpy
    print(f"  trace-only target >= 20,000 instr/s: {'met' if instrs / t_trace >= 20_000 else 'NOT met'}"
          f" ({instrs / t_trace:,.0f})")
    print(f"  full / bare numpy = {ratio:.2f}x, target <= 2x: {'met' if ratio <= 2.0 else 'NOT met'}")
    print()
    print(summary.format())

    if args.profile:
        print("\n--- profile: trace-only ---")
        print(_profile(trace_only, 20, instrs))
        print("--- profile: full ---")
        print(_profile(full, 20, instrs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
