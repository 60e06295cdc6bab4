"""Vector-engine instructions of nkisim.isa_vector against numpy (Neuron docs, nki.isa: one page
per instruction; the numpy forms follow the docs' pseudo-code)."""
from __future__ import annotations

import numpy as np
import pytest

import conv3d_bwd.nkisim.isa as nisa
import conv3d_bwd.nkisim.language as nl
from conv3d_bwd import nkisim

from .helpers import on_chip, raises_rule

F32 = np.float32
RNG = np.random.default_rng(7)


def _tile(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype)


def _scan_ref(a, b, initial, op0, op1):
    out = np.empty_like(a)
    prev = np.broadcast_to(initial, (a.shape[0],)).astype(F32)
    for i in range(a.shape[1]):
        prev = op1(op0(a[:, i], prev), b[:, i]).astype(F32)
        out[:, i] = prev
    return out


def test_tensor_tensor_scan_is_a_cumulative_recurrence():
    a = RNG.uniform(0.5, 1.0, (8, 40)).astype(F32)
    b = RNG.standard_normal((8, 40)).astype(F32)
    init = RNG.standard_normal((8, 1)).astype(F32)

    def body(ta, tb, ti):
        dst = _tile((8, 40))
        nisa.tensor_tensor_scan(dst, ta, tb, ti, nl.multiply, nl.add)
        dst2 = _tile((8, 40))
        nisa.tensor_tensor_scan(dst2, ta, tb, 2.0, nl.maximum, nl.subtract)
        return dst, dst2
    out, out2 = on_chip(body, a, b, init)
    np.testing.assert_allclose(out, _scan_ref(a, b, init[:, 0], np.multiply, np.add), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out2, _scan_ref(a, b, F32(2.0), np.maximum, np.subtract), rtol=1e-6)


def test_scalar_tensor_tensor_and_reciprocal():
    x = RNG.standard_normal((16, 24)).astype(F32)
    y = RNG.standard_normal((16, 24)).astype(F32)
    s = RNG.standard_normal((16, 1)).astype(F32)

    def body(tx, ty, ts):
        a, b, r = _tile((16, 24)), _tile((16, 24)), _tile((16, 24))
        nisa.scalar_tensor_tensor(a, tx, nl.multiply, ts, nl.add, ty)
        nisa.scalar_tensor_tensor(b, tx, nl.subtract, 3.0, nl.subtract, ty, reverse0=True, reverse1=True)
        nisa.reciprocal(r, tx)
        return a, b, r
    a, b, r = on_chip(body, x, y, s)
    np.testing.assert_allclose(a, x * s + y, rtol=1e-6)
    np.testing.assert_allclose(b, y - (3.0 - x), rtol=1e-6)
    np.testing.assert_allclose(r, 1 / x, rtol=1e-6)


def test_tensor_scalar_reduce_accumulates_across_calls():
    x = RNG.standard_normal((8, 32)).astype(F32)
    init = RNG.standard_normal((8, 1)).astype(F32)

    def body(tx, ti):
        d = _tile((8, 32))
        first, total, loaded, negmax = _tile((8, 1)), _tile((8, 1)), _tile((8, 1)), _tile((8, 1))
        nisa.tensor_scalar_reduce(d, tx, nl.multiply, 2.0, nl.add, first)
        nisa.tensor_scalar_reduce(d, tx, nl.multiply, 2.0, nl.add, total, reduce_cmd=nisa.reduce_cmd.reduce)
        nisa.tensor_scalar_reduce(d, tx, nl.add, 1.0, nl.add, loaded, reduce_cmd=nisa.reduce_cmd.load_reduce,
                                  reduce_init=ti)
        nisa.tensor_scalar_reduce(d, tx, nl.abs, None, nl.maximum, negmax, reduce_res_negate=True)
        return d, first, total, loaded, negmax
    d, first, total, loaded, negmax = on_chip(body, x, init)
    np.testing.assert_allclose(d, np.abs(x))
    np.testing.assert_allclose(first[:, 0], (2 * x).sum(1), rtol=1e-5)
    np.testing.assert_allclose(total[:, 0], 2 * (2 * x).sum(1), rtol=1e-5)
    np.testing.assert_allclose(loaded[:, 0], init[:, 0] + (x + 1).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(negmax[:, 0], -np.abs(x).max(1))


def test_activation_reduce_is_activation_with_reset_reduce():
    x = RNG.standard_normal((8, 16)).astype(F32)

    def body(tx):
        d, r = _tile((8, 16)), _tile((8, 1))
        nisa.activation_reduce(d, nl.exp, tx, nl.add, r, scale=0.5)
        return d, r
    d, r = on_chip(body, x)
    np.testing.assert_allclose(d, np.exp(0.5 * x), rtol=1e-6)
    np.testing.assert_allclose(r[:, 0], np.exp(0.5 * x).sum(1), rtol=1e-5)


def test_tensor_copy_predicated_keeps_dst_where_false():
    x = RNG.standard_normal((8, 16)).astype(F32)
    pred = RNG.random((8, 16)) < 0.5   # a bool predicate, as in the docs' example (stored as uint8)

    def body(tx, tp):
        d, e = _tile((8, 16)), _tile((8, 16))
        nisa.memset(d, -1.0)
        nisa.tensor_copy_predicated(d, tx, tp)
        nisa.memset(e, -1.0)
        nisa.tensor_copy_predicated(e, 7.0, tp, reverse_pred=True)
        return d, e
    d, e = on_chip(body, x, pred)
    np.testing.assert_array_equal(d, np.where(pred != 0, x, -1))
    np.testing.assert_array_equal(e, np.where(pred == 0, 7, -1))


def test_range_select_matches_the_docs_numpy():
    x = RNG.standard_normal((8, 32)).astype(F32)
    lo = RNG.integers(0, 10, (8, 1)).astype(F32)
    hi = lo + RNG.integers(1, 20, (8, 1)).astype(F32)

    def body(tx, tlo, thi):
        d, r = _tile((8, 32)), _tile((8, 1))
        nisa.range_select(d, tx, nl.greater_equal, nl.less, tlo, thi, reduce_res=r, range_start=2)
        return d, r
    d, r = on_chip(body, x, lo, hi)
    idx = 2 + np.arange(32, dtype=F32)
    mask = (idx >= lo) & (idx < hi)
    expect = np.where(mask, x, np.finfo(F32).min)
    np.testing.assert_array_equal(d, expect)
    np.testing.assert_array_equal(r[:, 0], expect.max(1))


def test_bn_stats_then_bn_aggr_give_mean_and_variance():
    x = RNG.standard_normal((16, 700)).astype(F32)

    def body(tx):
        stats = _tile((16, 12))
        nisa.bn_stats(stats[:, 0:6], tx[:, 0:512])
        nisa.bn_stats(stats[:, 6:12], tx[:, 512:700])
        mv = _tile((16, 2))
        nisa.bn_aggr(mv, stats)
        return stats, mv
    stats, mv = on_chip(body, x)
    even = x[:, 0:512:2]
    np.testing.assert_allclose(stats[:, 0], 256)
    np.testing.assert_allclose(stats[:, 1], even.mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats[:, 2], even.var(1) * 256, rtol=1e-4)
    np.testing.assert_allclose(mv[:, 0], x.mean(1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(mv[:, 1], x.var(1), rtol=1e-4)


def test_nc_stream_shuffle_moves_partitions_within_quadrants():
    x = RNG.standard_normal((64, 8)).astype(F32)
    mask = [(i + 5) % 32 for i in range(32)]
    mask[3] = 255

    def body(tx):
        d = _tile((64, 8))
        nisa.memset(d, 0.0)
        nisa.nc_stream_shuffle(d, tx, mask)
        return d
    d = on_chip(body, x)
    for p in range(64):
        q, i = divmod(p, 32)
        expect = np.zeros(8, F32) if mask[i] == 255 else x[q * 32 + mask[i]]
        np.testing.assert_array_equal(d[p], expect)


def _rule(body, target="trn2"):
    def kernel():
        body()
    nkisim.run(kernel, target=target)


@pytest.mark.parametrize("body,ins,operand,rule", [
    (lambda: nisa.tensor_tensor_scan(_tile((8, 4)), nl.ndarray((8, 4), nl.float32, buffer=nl.psum),
                                     nl.ndarray((8, 4), nl.float32, buffer=nl.psum), 0.0, nl.add, nl.add),
     "tensor_tensor_scan", "data1", "cannot both be in PSUM"),
    (lambda: nisa.scalar_tensor_tensor(_tile((8, 4), nl.int32), _tile((8, 4), nl.int32), nl.bitwise_and, 1,
                                       nl.add, _tile((8, 4), nl.int32)),
     "scalar_tensor_tensor", "op0", "bitvec operator"),
    (lambda: nisa.tensor_scalar_reduce(_tile((8, 4)), _tile((8, 4)), nl.add, 1.0, nl.add, _tile((8, 1)),
                                       reduce_cmd=nisa.reduce_cmd.load_reduce),
     "tensor_scalar_reduce", "reduce_init", "exactly when reduce_cmd is load_reduce"),
    (lambda: nisa.tensor_copy_predicated(_tile((8, 4)), _tile((8, 4)), _tile((8, 4))),
     "tensor_copy_predicated", "predicate", "must be uint8, uint16 or uint32"),
    (lambda: nisa.range_select(_tile((8, 4)), _tile((8, 4)), nl.add, nl.less, _tile((8, 1)), _tile((8, 1))),
     "range_select", "comp_op0", "must be nl.equal"),
    (lambda: nisa.range_select(_tile((8, 4)), _tile((8, 4)), nl.less, nl.less, _tile((8, 1)), _tile((8, 1)),
                               on_false_value=0.0),
     "range_select", "on_false_value", "must be FP32_MIN"),
    (lambda: nisa.bn_stats(_tile((8, 6)), _tile((8, 600))), "bn_stats", "data", "exceed nl.tile_size.bn_stats_fmax"),
    (lambda: nisa.bn_aggr(_tile((8, 2)), _tile((8, 7))), "bn_aggr", "data", "a multiple of 3"),
    (lambda: nisa.nc_stream_shuffle(_tile((32, 4)), _tile((32, 4)), [0] * 31), "nc_stream_shuffle",
     "shuffle_mask", "32 entries"),
    (lambda: nisa.nc_stream_shuffle(_tile((64, 4))[16:48], _tile((32, 4)), [0] * 32), "nc_stream_shuffle",
     "dst", "start partition 16"),
])
def test_documented_operand_rules(body, ins, operand, rule):
    with raises_rule(ins, operand, rule):
        _rule(body)


def test_range_select_needs_trn2():
    with raises_rule("range_select", "dst", "needs NC-v3"):
        _rule(lambda: nisa.range_select(_tile((8, 4)), _tile((8, 4)), nl.less, nl.less, _tile((8, 1)),
                                        _tile((8, 1))), target="trn1")


def test_trace_records_one_vector_instruction_with_both_outputs():
    def kernel():
        d, r = _tile((8, 4)), _tile((8, 1))
        nisa.memset(d, 1.0)
        nisa.tensor_scalar_reduce(d, d, nl.add, 1.0, nl.add, r)
    r = nkisim.run(kernel, trace_only=True)
    last = r.trace.instrs[-1]
    assert (last.op, last.engine) == ("tensor_scalar_reduce", "vector")
    assert [a.role for a in last.accesses if a.write] == ["dst", "reduce_res"]
    # costed by the generic per-engine rule (free size on the Vector engine)
    assert r.summary.instr_counts["tensor_scalar_reduce"] == 1 and r.summary.engine_busy_us["vector"] > 0


def test_nc_stream_shuffle_broadcasts_one_partition_and_shifts_in_place():
    # the docs' examples: broadcast one partition to 32; rotate each quadrant by one, in place
    one = RNG.standard_normal((1, 16)).astype(F32)
    x = RNG.standard_normal((64, 16)).astype(F32)

    def body(t1, tx):
        b = _tile((32, 16))
        nisa.nc_stream_shuffle(b, t1, [0] * 32)
        nisa.nc_stream_shuffle(tx, tx, [(i - 1) % 32 for i in range(32)])
        return b, tx
    b, shifted = on_chip(body, one, x)
    np.testing.assert_array_equal(b, np.repeat(one, 32, axis=0))
    expect = np.concatenate([x[[(i - 1) % 32 + q * 32 for i in range(32)]] for q in range(2)])
    np.testing.assert_array_equal(shifted, expect)
