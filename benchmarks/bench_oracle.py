"""Time the float64 oracle against PyTorch CPU conv3d backward, and measure the oracle's peak memory.

Run from the repo root: ``python benchmarks/bench_oracle.py [--repeats N]`` (torch==2.13.0 installed).
Targets (issue 2): oracle <= 1.0x torch float64 time, <= 2.5x torch float32 time, and peak extra
memory <= 4x the bytes of the oracle's float64 inputs and outputs. All three gradients everywhere.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference import ConvGeometry, conv3d_bwd_ref


@dataclass(frozen=True)
class Shape:
    name: str
    geometry: ConvGeometry


SHAPES = (
    Shape("B2 C64 8x32x32 k3 p1", ConvGeometry(2, 64, 64, (8, 32, 32), (3, 3, 3), padding=(1,) * 6)),
    Shape("B1 C128 4x32x32 k3 p1", ConvGeometry(1, 128, 128, (4, 32, 32), (3, 3, 3), padding=(1,) * 6)),
)


def median_seconds(fn, repeats: int) -> float:
    # Let the other library's idle worker threads (OpenMP, OpenBLAS) stop spinning before we time:
    # on 2 cores a spinning pool halves the speed of the one being measured.
    time.sleep(1.0)
    fn()  # warm-up: first-touch page faults and BLAS thread start-up are not the steady state
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def torch_backward(torch, g: ConvGeometry, dy, x, w, dtype):
    """All three gradients through autograd on torch's CPU conv3d (symmetric padding in these shapes)."""
    xt = torch.tensor(x, dtype=dtype, requires_grad=True)
    # torch's weight layout is [C_out, C_in, K_d, K_h, K_w].
    wt = torch.tensor(w.transpose(4, 3, 0, 1, 2).copy(), dtype=dtype, requires_grad=True)
    bt = torch.zeros(g.c_out, dtype=dtype, requires_grad=True)
    dyt = torch.tensor(dy, dtype=dtype)
    pad = g.padding[0::2]
    assert pad == g.padding[1::2], "bench shapes use symmetric padding"

    def run():
        y = torch.nn.functional.conv3d(xt, wt, bt, stride=g.stride, padding=pad, dilation=g.dilation)
        return torch.autograd.grad(y, (xt, wt, bt), dyt)

    return run


def peak_extra_bytes(fn) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    result = fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del result
    return peak - base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("bench_oracle: torch is not installed (pip install torch==2.13.0)")

    print(f"numpy {np.__version__}, torch {torch.__version__}, torch threads {torch.get_num_threads()}, "
          f"median of {args.repeats} repeats")
    header = (f"{'shape':24} {'oracle f64':>11} {'torch f64':>10} {'torch f32':>10} "
              f"{'/f64':>6} {'/f32':>6} {'peak MiB':>9} {'io MiB':>7} {'peak/io':>8}")
    print(header)
    verdicts = []
    for shape in SHAPES:
        g = shape.geometry
        rng = np.random.default_rng(0)
        x = rng.standard_normal(g.x_shape)
        w = rng.standard_normal(g.w_shape)
        dy = rng.standard_normal(g.dy_shape)
        oracle = functools.partial(conv3d_bwd_ref, dy, x, w, g.stride, g.padding, g.dilation)

        t_oracle = median_seconds(oracle, args.repeats)
        t_f64 = median_seconds(torch_backward(torch, g, dy, x, w, torch.float64), args.repeats)
        t_f32 = median_seconds(torch_backward(torch, g, dy, x, w, torch.float32), args.repeats)
        peak = peak_extra_bytes(oracle)
        # float64 inputs (dy, x, w) and outputs (dx, dw, db)
        io = 8 * sum(int(np.prod(s)) for s in (g.dy_shape, g.x_shape, g.w_shape, g.dx_shape, g.dw_shape,
                                                 g.db_shape))
        r64, r32, rmem = t_oracle / t_f64, t_oracle / t_f32, peak / io
        print(f"{shape.name:24} {t_oracle * 1e3:9.1f}ms {t_f64 * 1e3:8.1f}ms {t_f32 * 1e3:8.1f}ms "
              f"{r64:6.2f} {r32:6.2f} {peak / 2**20:9.1f} {io / 2**20:7.1f} {rmem:8.2f}")
        verdicts.append((shape.name, r64 <= 1.0, r32 <= 2.5, rmem <= 4.0))
    print("targets: oracle/f64 <= 1.0, oracle/f32 <= 2.5, peak/io <= 4.0")
    for name, ok64, ok32, okmem in verdicts:
        status = ", ".join(f"{label} {'met' if ok else 'MISSED'}"
                           for label, ok in (("f64", ok64), ("f32", ok32), ("memory", okmem)))
        print(f"  {name}: {status}")


if __name__ == "__main__":
    main()
