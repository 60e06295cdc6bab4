"""Time the float64 oracle against PyTorch CPU conv3d backward, and measure the oracle's peak memory.

Run from the repo root: ``python benchmarks/bench_oracle.py [--repeats N]`` (needs torch==2.13.0).
Targets: oracle <= 1.0x torch float64 time, <= 2.5x torch float32 time, and peak extra
memory <= 4x the bytes of the oracle's float64 inputs and outputs. All three gradients everywhere.

Torch is timed two ways: ``bwd``, its conv3d backward alone (``autograd.grad`` on a retained graph:
dx, dw, db, the "conv3d backward time" of the targets), and ``f+b``, forward plus backward (what this
script timed before; the forward is about a third of it, so its ratios are the lenient ones). The
verdicts are on ``bwd``; the ``f+b`` ratios are printed for comparison with earlier figures.

The three contenders are timed round-robin (oracle, torch f64, torch f32, oracle, ...), each call
after a short pause, so that a load change on a shared machine hits all three alike and one
library's spinning worker threads do not slow the next one down. Reported: median (and min).

OpenBLAS's kernels follow ``OPENBLAS_CORETYPE`` when it is set (this workplace sets ``Haswell``:
256-bit kernels, about half the float64 GEMM speed of ``SkylakeX`` on an AVX-512 CPU, while torch's
MKL/oneDNN ignore it). The first line printed says which is in effect; to compare, run e.g.
``OPENBLAS_CORETYPE=SkylakeX python benchmarks/bench_oracle.py`` (only on a CPU with AVX-512).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def timed(fn) -> float:
    # Let the previous library's idle worker threads (OpenMP, OpenBLAS) stop spinning: on 2 cores a
    # spinning pool halves the speed of the one being measured.
    time.sleep(0.3)
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def torch_backward(torch, geometry, dy, x, w, dtype, with_forward):
    """All three gradients through autograd on torch's CPU conv3d (symmetric padding in these shapes).

    ``with_forward``: each call runs the forward too; otherwise the graph is built once and retained.
    """
    xt = torch.tensor(x, dtype=dtype, requires_grad=True)
    # torch's weight layout is [C_out, C_in, K_d, K_h, K_w].
    wt = torch.tensor(w.transpose(4, 3, 0, 1, 2).copy(), dtype=dtype, requires_grad=True)
    bt = torch.zeros(geometry.c_out, dtype=dtype, requires_grad=True)
    dyt = torch.tensor(dy, dtype=dtype)
    pad = geometry.padding[0::2]
    if pad != geometry.padding[1::2]:
        raise ValueError("bench shapes use symmetric padding")

    def forward():
        return torch.nn.functional.conv3d(xt, wt, bt, stride=geometry.stride, padding=pad,
                                          dilation=geometry.dilation)

    if with_forward:
        return lambda: torch.autograd.grad(forward(), (xt, wt, bt), dyt)
    y = forward()
    return lambda: torch.autograd.grad(y, (xt, wt, bt), dyt, retain_graph=True)


def peak_extra_bytes(fn) -> int:
    """Peak bytes that ``fn`` allocates through tracemalloc (numpy reports its buffers to it)."""
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    result = fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del result
    return peak - base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for OpenBLAS and torch (default: the libraries' own choice); "
                        "1 gives steadier figures on a loaded machine")
    args = parser.parse_args()
    if args.threads is not None:  # before numpy and torch load their thread pools
        for name in THREAD_VARIABLES:
            os.environ[name] = str(args.threads)

    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from conv3d_bwd.reference import ConvGeometry, conv3d_bwd_ref

    blas_note = f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset: detected)')}"

    try:
        import torch
    except ImportError:
        sys.exit("bench_oracle: torch is not installed (pip install torch==2.13.0)")
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    shapes = (
        ("B2 C64 8x32x32 k3 p1", ConvGeometry(2, 64, 64, (8, 32, 32), (3, 3, 3), padding=(1,) * 6)),
        ("B1 C128 4x32x32 k3 p1", ConvGeometry(1, 128, 128, (4, 32, 32), (3, 3, 3), padding=(1,) * 6)),
    )
    print(f"numpy {np.__version__}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"{os.cpu_count()} CPUs; {blas_note}; OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}")
    print(f"median (min) of {args.repeats} round-robin repeats; all three gradients; ratio = oracle / torch; "
          f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"{'shape':22} {'oracle f64 ms':>15} {'torch f64 bwd':>15} {'torch f32 bwd':>15} "
          f"{'/f64 bwd':>11} {'/f32 bwd':>11} {'/f64 f+b':>8} {'/f32 f+b':>8} {'peak MiB':>9} {'io MiB':>7} "
          f"{'peak/io':>7}")
    verdicts = []
    for name, g in shapes:
        rng = np.random.default_rng(0)
        x = rng.standard_normal(g.x_shape)
        w = rng.standard_normal(g.w_shape)
        dy = rng.standard_normal(g.dy_shape)
        contenders = {
            "oracle": functools.partial(conv3d_bwd_ref, dy, x, w, g.stride, g.padding, g.dilation),
            "f64": torch_backward(torch, g, dy, x, w, torch.float64, with_forward=False),
            "f32": torch_backward(torch, g, dy, x, w, torch.float32, with_forward=False),
            "f64 f+b": torch_backward(torch, g, dy, x, w, torch.float64, with_forward=True),
            "f32 f+b": torch_backward(torch, g, dy, x, w, torch.float32, with_forward=True),
        }
        times = {key: [] for key in contenders}
        for fn in contenders.values():
            timed(fn)  # warm-up: first-touch page faults, BLAS/OpenMP thread start-up
        for _ in range(args.repeats):
            for key, fn in contenders.items():
                times[key].append(timed(fn))
        med = {key: statistics.median(v) for key, v in times.items()}
        low = {key: min(v) for key, v in times.items()}
        peak = peak_extra_bytes(contenders["oracle"])
        # float64 inputs (dy, x, w) and outputs (dx, dw, db)
        shapes_io = (g.dy_shape, g.x_shape, g.w_shape, g.dx_shape, g.dw_shape, g.db_shape)
        io = 8 * sum(int(np.prod(s)) for s in shapes_io)
        r64, r32, rmem = med["oracle"] / med["f64"], med["oracle"] / med["f32"], peak / io
        cells = [f"{med[k] * 1e3:6.1f} ({low[k] * 1e3:5.1f})" for k in ("oracle", "f64", "f32")]
        print(f"{name:22} {cells[0]:>15} {cells[1]:>15} {cells[2]:>15} "
              f"{r64:5.2f} ({low['oracle'] / low['f64']:4.2f}) {r32:5.2f} ({low['oracle'] / low['f32']:4.2f}) "
              f"{med['oracle'] / med['f64 f+b']:8.2f} {med['oracle'] / med['f32 f+b']:8.2f} "
              f"{peak / 2**20:9.1f} {io / 2**20:7.1f} {rmem:7.2f}")
        verdicts.append((name, r64 <= 1.0, r32 <= 2.5, rmem <= 4.0))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("targets (on medians, torch backward alone): oracle/f64 <= 1.0, oracle/f32 <= 2.5, peak/io <= 4.0")
    for name, ok64, ok32, okmem in verdicts:
        status = ", ".join(f"{label} {'met' if ok else 'MISSED'}"
                           for label, ok in (("f64", ok64), ("f32", ok32), ("memory", okmem)))
        print(f"  {name}: {status}")


if __name__ == "__main__":
    main()
