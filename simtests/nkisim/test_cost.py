"""Cost figures against cycle counts computed by hand from the figures in docs/nkisim-cost-model.md."""
from __future__ import annotations

import pytest

from conv3d_bwd.nkisim.cost import (
    ASSUMPTIONS,
    TARGETS,
    CostModelError,
    HardwareTarget,
    get_target,
    instr_cost_ns,
    instr_timing,
    matmul_flops,
)
from conv3d_bwd.nkisim.trace import Instr

from .helpers import acc

MM_ISSUE = 14          # TensorE issue overhead per instruction (cycles)
VEC_OVERHEAD = 144     # VectorE fixed overhead (cycles)
ACCESS = 60            # ScalarE / GpSimd access overhead (cycles)
C0 = 150               # DMA descriptor overhead (bytes)


def matmul(k=128, m=128, n=512, dtype="bfloat16", transpose=False, attrs=True) -> Instr:
    accesses = (acc("dst", "psum", 3, "float32", (m, n), write=True),
                acc("stationary", "sbuf", 1, dtype, (k, m)),
                acc("moving", "sbuf", 2, dtype, (k, n)))
    a = (("stationary_free", m), ("moving_free", n), ("contraction", k),
         ("fp32", dtype == "float32"), ("is_transpose", transpose)) if attrs else ()
    return Instr("nc_matmul", "tensor", accesses, a)


# ---------------------------------------------------------------------------- TensorE


def test_full_bf16_matmul_is_512_cycles_at_2_4_ghz():
    # [128,128]x[128,512] bf16 = max(min(64,128), 512) = 512 cycles + 14 issue = 0.2192 us at 2.4 GHz
    assert instr_cost_ns(matmul(), "trn2") == pytest.approx((512 + MM_ISSUE) / 2.4)
    assert instr_cost_ns(matmul(), "trn2") == pytest.approx(219.167, abs=1e-3)
    assert instr_cost_ns(matmul(), "trn3") == pytest.approx((512 + MM_ISSUE) / 2.4)
    assert instr_cost_ns(matmul(), "trn1") == pytest.approx((512 + MM_ISSUE) / 2.8)


def test_fp32_matmul_costs_four_times():
    assert instr_cost_ns(matmul(dtype="float32"), "trn2") == pytest.approx((4 * 512 + MM_ISSUE) / 2.4)


def test_small_moving_clamps_to_64_cycles_and_small_stationary_lowers_the_clamp():
    assert instr_cost_ns(matmul(n=32), "trn2") == pytest.approx((64 + MM_ISSUE) / 2.4)       # max(min(64,128),32)
    assert instr_cost_ns(matmul(m=16, n=32), "trn2") == pytest.approx((32 + MM_ISSUE) / 2.4)  # max(min(64,16),32)
    assert instr_cost_ns(matmul(m=16, n=8), "trn2") == pytest.approx((16 + MM_ISSUE) / 2.4)   # max(min(64,16),8)
    assert instr_cost_ns(matmul(n=100), "trn2") == pytest.approx((100 + MM_ISSUE) / 2.4)


def test_dims_come_from_the_accesses_when_attrs_are_missing():
    assert instr_cost_ns(matmul(m=64, n=200, attrs=False), "trn2") == pytest.approx((200 + MM_ISSUE) / 2.4)
    assert instr_cost_ns(matmul(dtype="float32", n=128, attrs=False), "trn2") == pytest.approx(
        (4 * 128 + MM_ISSUE) / 2.4)


def test_transposes_cost_like_matmuls_but_count_no_flops():
    t = matmul(m=128, n=128, transpose=True)
    assert instr_cost_ns(t, "trn2") == pytest.approx((128 + MM_ISSUE) / 2.4)
    assert matmul_flops(t) == 0
    # nc_transpose of data [128, 64]: stationary = data (M = 64), moving = identity (N = 128)
    nt = Instr("nc_transpose", "tensor", (acc("dst", "psum", 5, "bfloat16", (64, 128), write=True),
                                           acc("data", "sbuf", 6, "bfloat16", (128, 64))))
    assert instr_cost_ns(nt, "trn2") == pytest.approx((128 + MM_ISSUE) / 2.4)
    assert matmul_flops(nt) == 0


def test_matmul_flops_and_latency_exceeds_occupancy():
    assert matmul_flops(matmul(k=64, m=96, n=300)) == 2 * 64 * 96 * 300
    t = instr_timing(matmul(), "trn2")
    assert t.engine == "tensor"
    assert t.latency_ns == pytest.approx((512 + MM_ISSUE + 64) / 2.4)  # + MM_INIT_LATENCY pipeline fill


def test_peak_flops_follow_the_clock():
    assert TARGETS["trn2"].tensor_peak_flops() == pytest.approx(78.64e12, rel=1e-3)   # doc: 79
    assert TARGETS["trn1"].tensor_peak_flops() == pytest.approx(91.75e12, rel=1e-3)   # doc: ~92
    assert TARGETS["trn2"].tensor_peak_flops(fp32=True) == pytest.approx(19.66e12, rel=1e-3)  # 20


# ---------------------------------------------------------------- Vector / Scalar / GpSimd


def _copy(engine="vector", src_buf="psum", src_dtype="float32", dst_dtype="bfloat16", free=512,
          op="tensor_copy", contig=None):
    return Instr(op, engine, (acc("dst", "sbuf", 10, dst_dtype, (128, free), write=True),
                              acc("src", src_buf, 11, src_dtype, (128, free), contig=contig)))


def test_eviction_psum_to_sbuf_trn1_is_n_cycles_plus_fixed_overhead():
    # trn1: no fast modes: 512 + 144 cycles at 1.12 GHz
    assert instr_cost_ns(_copy(), "trn1") == pytest.approx((512 + VEC_OVERHEAD) / 1.12)


def test_trn2_vector_fast_modes():
    # one side PSUM: 2x -> 256 + 60 cycles at 0.96 GHz
    assert instr_cost_ns(_copy(), "trn2") == pytest.approx((256 + VEC_OVERHEAD) / 0.96)
    # bf16 SBUF -> SBUF contiguous: 4x -> 128 + overhead
    sb = _copy(src_buf="sbuf", src_dtype="bfloat16")
    assert instr_cost_ns(sb, "trn2") == pytest.approx((128 + VEC_OVERHEAD) / 0.96)
    # bf16 SBUF -> SBUF strided source (2-byte runs): 2x
    strided = _copy(src_buf="sbuf", src_dtype="bfloat16", contig=2)
    assert instr_cost_ns(strided, "trn2") == pytest.approx((256 + VEC_OVERHEAD) / 0.96)
    # fp32 SBUF -> SBUF: no fast mode
    f32 = _copy(src_buf="sbuf", src_dtype="float32", dst_dtype="float32")
    assert instr_cost_ns(f32, "trn2") == pytest.approx((512 + VEC_OVERHEAD) / 0.96)


def test_two_tensor_inputs_cost_double_and_per_partition_scalars_do_not_stream():
    tt = Instr("tensor_tensor", "vector", (acc("dst", "sbuf", 1, "float32", write=True),
                                            acc("data1", "sbuf", 2, "float32"),
                                            acc("data2", "psum", 3, "float32")))
    assert instr_cost_ns(tt, "trn2") == pytest.approx((1024 + VEC_OVERHEAD) / 0.96)
    tt_bf16 = Instr("tensor_tensor", "vector", (acc("dst", "sbuf", 1, "bfloat16", write=True),
                                                 acc("data1", "sbuf", 2, "bfloat16"),
                                                 acc("data2", "sbuf", 3, "bfloat16")))
    assert instr_cost_ns(tt_bf16, "trn2") == pytest.approx((512 + VEC_OVERHEAD) / 0.96)  # 2x mode
    ts = Instr("tensor_scalar", "vector", (acc("dst", "sbuf", 1, "float32", write=True),
                                            acc("data", "psum", 2, "float32"),
                                            acc("operand0", "sbuf", 3, "float32", (128, 1))))
    assert instr_cost_ns(ts, "trn1") == pytest.approx((512 + VEC_OVERHEAD) / 1.12)


def test_small_tiles_pay_min_ii():
    tiny = _copy(free=8)
    assert instr_cost_ns(tiny, "trn2") == pytest.approx((64 + VEC_OVERHEAD) / 0.96)
    t = instr_timing(tiny, "trn2")
    # perf guide: dependent tiny instructions start 264 cycles apart; 64 + 144 are in the occupancy
    assert t.latency_ns == pytest.approx(264 / 0.96)
    act = instr_timing(_copy(engine="scalar", op="activation", free=1), "trn2")
    assert act.latency_ns == pytest.approx(264 / 1.2)


def test_scalar_and_gpsimd_clocks():
    act = _copy(engine="scalar", op="activation")
    assert instr_cost_ns(act, "trn2") == pytest.approx((512 + 60) / 1.2)
    assert instr_cost_ns(act, "trn1") == pytest.approx((512 + 60) / 1.4)
    assert instr_cost_ns(act, "trn3") == pytest.approx((256 + 60) / 1.2)  # 256 bf16 per cycle
    gp = Instr("memset", "gpsimd", (acc("dst", "sbuf", 1, "float32", (128, 1024), write=True),))
    assert instr_cost_ns(gp, "trn2") == pytest.approx((1024 + 60) / 1.2)


# ------------------------------------------------------------------------------- DMA


def _load(shape=(128, 512), dtype="bfloat16", contig=None, op="dma_copy", src_buf="hbm"):
    return Instr(op, "dma", (acc("dst", "sbuf", 20, dtype, shape, write=True),
                             acc("src", src_buf, 21, dtype, shape, contig=contig)))


def test_dma_fixed_cost_plus_bytes_over_bandwidth():
    # 128 x 512 bf16 = 128 KiB, 1 KiB contiguous per row: efficiency 1024 / (1024 + 150)
    nbytes = 128 * 512 * 2
    eff = 1024 / (1024 + C0)
    expected = 1300 + nbytes / (368 * eff)
    assert instr_cost_ns(_load(), "trn2") == pytest.approx(expected)
    t = instr_timing(_load(), "trn2")
    assert (t.dma_fixed_ns, t.dma_rate) == (1300, 1.0)
    assert t.occupancy_ns == pytest.approx(nbytes / (368 * eff))
    assert instr_cost_ns(_load(), "trn1") == pytest.approx(1300 + nbytes / (272 * eff))
    assert instr_cost_ns(_load(), "trn3") == pytest.approx(1300 + nbytes / (528 * eff))


def test_dma_small_runs_lose_efficiency():
    big = instr_timing(_load((128, 2048)), "trn2")          # 4 KiB rows: 4096 / 4246
    assert big.occupancy_ns == pytest.approx(128 * 4096 / (368 * 4096 / (4096 + C0)))
    small = instr_timing(_load((128, 512), contig=64), "trn2")  # 64 B runs: 64 / 214
    assert small.occupancy_ns == pytest.approx(128 * 1024 / (368 * 64 / (64 + C0)))


def test_dma_with_few_partitions_uses_few_engines():
    t = instr_timing(_load((32, 512)), "trn2")  # 32 partitions -> 4 of 16 engines
    assert t.dma_rate == pytest.approx(0.25)
    occupancy = 32 * 1024 / (368 * 1024 / (1024 + C0))
    assert t.occupancy_ns == pytest.approx(occupancy)
    assert instr_cost_ns(_load((32, 512)), "trn2") == pytest.approx(1300 + 4 * occupancy)


def test_dma_transpose_is_charged_by_whole_128x16_blocks():
    # a full [128, 512] bf16 destination is 32 whole blocks: its own bytes at 90 % (from HBM) / 50 % (SBUF)
    t = instr_timing(_load(op="dma_transpose"), "trn2")
    assert t.occupancy_ns == pytest.approx(128 * 1024 / (368 * 0.9))
    assert t.dma_rate == 1.0
    t = instr_timing(_load(op="dma_transpose", src_buf="sbuf"), "trn2")
    assert t.occupancy_ns == pytest.approx(128 * 1024 / (368 * 0.5))
    # [8, 20] destination: one partition block x ceil(20 / 16) = 2 blocks of 128 x 16 x 2 B
    part = instr_timing(_load((8, 20), op="dma_transpose"), "trn2")
    assert part.occupancy_ns == pytest.approx(2 * 4096 / (368 * 0.9))


def _dma(op="dma_copy", mode="unknown", engine="unknown", src_shape=(128, 512)):
    dst_shape = tuple(reversed(src_shape)) if op == "dma_transpose" else src_shape
    return Instr(op, "dma", (acc("dst", "sbuf", 20, "bfloat16", dst_shape, write=True),
                             acc("src", "hbm", 21, "bfloat16", src_shape)),
                 (("dge_mode", mode), ("engine", engine)))


def test_dma_queue_and_issue_time_follow_the_dge_mode():
    hw = TARGETS["trn2"]
    hwdge = instr_timing(_dma(mode="hwdge", engine="scalar"), hw)
    assert (hwdge.queue, hwdge.issue_ns, hwdge.gpsimd_ns) == ("hwdge.act", 600.0, 0.0)
    assert instr_timing(_dma(mode="hwdge", engine="sync"), hw).queue == "hwdge.sp"
    assert instr_timing(_dma(mode="hwdge"), hw).queue == "hwdge"
    sw = instr_timing(_dma(mode="swdge"), hw)
    assert (sw.queue, sw.issue_ns, sw.gpsimd_ns) == ("swdge", hw.swdge_issue_ns, hw.swdge_gpsimd_ns)
    static = instr_timing(_dma(mode="none"), hw)
    assert (static.queue, static.issue_ns) == ("static", hw.static_issue_ns)
    # unknown: a copy takes the assumed compiler choice; a transpose the hardware DGE only in its form
    assert instr_timing(_dma(), hw).queue == hw.unknown_copy_dge
    assert instr_timing(_dma("dma_transpose", src_shape=(16, 128)), hw).queue == "hwdge"
    assert instr_timing(_dma("dma_transpose", src_shape=(64, 128)), hw).queue == "static"
    # no hardware DGE before NC-v3
    assert instr_timing(_dma(mode="hwdge"), "trn1").queue == "swdge"


def test_bound_moves_every_assumption_to_one_end():
    hw = TARGETS["trn2"]
    low, high = hw.bound("optimistic"), hw.bound("pessimistic")
    for name, a in ASSUMPTIONS.items():
        assert getattr(low, name) == a.ends[0] and getattr(high, name) == a.ends[1], name
    assert low.dma_fixed_ns == high.dma_fixed_ns == hw.dma_fixed_ns   # sourced figures do not move
    assert instr_cost_ns(matmul(), low) < instr_cost_ns(matmul(), hw) < instr_cost_ns(matmul(), high)
    with pytest.raises(CostModelError, match=r"end='middle'"):
        hw.bound("middle")


# ------------------------------------------------------------------------------ errors


def test_targets_and_aliases():
    assert get_target("gen3") is TARGETS["trn2"]
    assert get_target("TRN1") is TARGETS["trn1"]
    assert isinstance(get_target(TARGETS["trn3"]), HardwareTarget)

    class Spec:
        name = "trn3"
    assert get_target(Spec()) is TARGETS["trn3"]


def test_bad_target_names_the_argument():
    with pytest.raises(CostModelError, match=r"target='trn9'.*trn1"):
        instr_cost_ns(matmul(), "trn9")
    assert issubclass(CostModelError, ValueError)


def test_unknown_engine_is_an_error():
    with pytest.raises(CostModelError, match=r"instr.engine='warp'"):
        instr_cost_ns(Instr("tensor_copy", "warp", ()), "trn2")


def test_calibration_factors_scale_one_engine():
    cal = TARGETS["trn2"].calibrated({"tensor": 1.25, "dma": 2.0})
    assert cal.name == "trn2" and TARGETS["trn2"].engine_factors == ()
    assert instr_cost_ns(matmul(), cal) == pytest.approx(1.25 * (512 + MM_ISSUE) / 2.4)
    assert instr_cost_ns(_copy(), cal) == pytest.approx(instr_cost_ns(_copy(), "trn2"))
    nbytes = 128 * 512 * 2
    assert instr_cost_ns(_load(), cal) == pytest.approx(1300 + 2.0 * nbytes / (368 * 1024 / (1024 + C0)))
    assert cal.calibrated({"vector": 0.5}).engine_factors == (("dma", 2.0), ("tensor", 1.25),
                                                               ("vector", 0.5))
    with pytest.raises(CostModelError, match=r"factors\['warp'\]"):
        TARGETS["trn2"].calibrated({"warp": 1.0})
    with pytest.raises(CostModelError, match=r"factors\['dma'\]=0"):
        TARGETS["trn2"].calibrated({"dma": 0})


def test_dma_issue_routes_by_mode_trigger_and_transpose_form():
    """The pure routing the planner shares: hand-checked against the DGE reference's rules."""
    from conv3d_bwd.nkisim.cost import dma_issue

    trn2, trn1 = TARGETS["trn2"], TARGETS["trn1"]
    assert dma_issue("dma_copy", trn2) == ("swdge", 600.0, 100.0)            # the compiler's default: software DGE
    assert dma_issue("dma_copy", trn2, "hwdge", "scalar") == ("hwdge.act", 600.0, 0.0)
    assert dma_issue("dma_copy", trn2, "hwdge", "sync") == ("hwdge.sp", 600.0, 0.0)
    assert dma_issue("dma_transpose", trn2, src_shape=(16, 128), itemsize=2).queue == "hwdge"
    assert dma_issue("dma_transpose", trn2, src_shape=(128, 128), itemsize=2) == ("static", 300.0, 0.0)
    assert dma_issue("dma_transpose", trn1, src_shape=(16, 128), itemsize=2).queue == "static"   # no hwdge
    assert dma_issue("dma_copy", trn1, "hwdge").queue == "swdge"
    assert dma_issue("sendrecv", trn2).queue == "sendrecv"


def test_transpose_charge_is_whole_blocks_of_the_destination():
    from conv3d_bwd.nkisim.cost import dma_transpose_ns, transpose_block_bytes

    hw = TARGETS["trn2"]
    assert transpose_block_bytes((31, 2, 64, 3), 2, hw) == 2 * 64 * 4096       # 128 blocks of 4 KiB
    assert transpose_block_bytes((128, 17), 4, hw) == 2 * 128 * 16 * 4
    assert dma_transpose_ns((128, 16), 2, hw) == pytest.approx(4096 / (368 * 0.9))
    assert dma_transpose_ns((128, 16), 2, hw, from_sbuf=True) == pytest.approx(4096 / (368 * 0.5))
