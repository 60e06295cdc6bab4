"""LNC2 x-stationary exchange of dw's fp32 partials (``DwState._send_xacc``): with one C_in tile each
program sends only the window of ceil(n/2) chunks covering the other's share (both windows the same
size), else the whole accumulator. Bit-exact under nkisim on exact inputs (forced plans: odd and even
chunk counts, two C_in tiles)."""
from __future__ import annotations

import pytest

from conv3d_bwd.kernels.plan import Strategy
from conv3d_bwd.kernels.spec.dw_xs import dw_xs_chunks, xs_exchange_window

from .support import run_and_compare


def test_the_window_covers_the_other_programs_share():
    """Program 0 adds chunks [0, per), program 1 [per, n) (``_finish_xs``): program 0 receives [0, per),
    program 1 [n - per, n), which holds [per, n); one window per program, the same size."""
    for n in range(2, 30):
        total, per = xs_exchange_window(n, 1)
        assert total == n and per == -(-n // 2) and n - per <= per
    assert xs_exchange_window(14, 2) is None   # two C_in tiles: not contiguous, the whole accumulator
    assert xs_exchange_window(1, 1) is None


def _xs_row(split, n_odd=None, chosen=None):
    """Edit: the best-estimated row-mode x-stationary candidate with LNC2 ``split``; ``n_odd``: require an
    odd (True) or even (False) number of chunks."""
    def pick(p):
        alts = p.feasible_candidates(where=lambda a: a.dw_x_stationary and a.strategy is Strategy.PER_GRADIENT
                                     and (a.dw_split == split) and (a.dw_method.name == 'ROW_PACK'))
        assert alts, p.explain()
        q = min(alts, key=lambda a: a.estimated_us)
        if n_odd is not None:
            n = len(dw_xs_chunks(q.geometry(), q, (0, q.geometry().taps)))
            assert n % 2 == int(n_odd), n
        if chosen is not None:
            chosen.append(q)
        return q
    return pick


GEOMS = [   # (geometry, odd number of chunks or None: not checked)
    pytest.param({"batch": 2, "c_in": 64, "c_out": 9, "size": (4, 6, 5), "kernel": (1, 3, 3),
                  "padding": (0, 0, 1, 1, 1, 1)}, True, id="ci64-k133-odd"),
    pytest.param({"batch": 2, "c_in": 64, "c_out": 130, "size": (4, 8, 6), "kernel": (3, 3, 3), "stride": (2, 2, 2),
                  "padding": (1,) * 6}, False, id="ci64-k333-s2-co130-even"),
    pytest.param({"batch": 1, "c_in": 130, "c_out": 6, "size": (2, 3, 4), "kernel": (3, 3, 3),
                  "padding": (1,) * 6}, None, id="ci130-two-tiles"),
]


@pytest.mark.parametrize("geom, odd", GEOMS)
def test_xs_exchange_window_is_exact(geom, odd):
    chosen = []
    res = run_and_compare(**geom, lnc=2, plan_edit=_xs_row("positions", odd, chosen))
    # one C_in tile: each program sends ceil(n/2) of its n chunks (C_out columns each), else all of them
    widths = sorted(a.shape[1] for i in res.trace if i.op == "sendrecv" for a in i.accesses
                    if a.role == "src" and len(a.shape) == 2 and a.shape[1] > 1)
    q = chosen[-1]
    n = len(dw_xs_chunks(q.geometry(), q, (0, q.geometry().taps)))
    n_ci = -(-geom["c_in"] // q.dw_ci_tile)
    co = geom["c_out"]
    assert widths == 2 * [(-(-n // 2) if n_ci == 1 else n * n_ci) * co]


@pytest.mark.parametrize("grads", [("dw",), ("dw", "db"), ("dx", "dw")])
def test_xs_exchange_window_gradient_subsets(grads):
    run_and_compare(**GEOMS[0].values[0], lnc=2, grads=grads, dtype="fp16", plan_edit=_xs_row("positions"))
