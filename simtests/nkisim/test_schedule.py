"""The dependency-aware schedule on hand-built traces."""
from __future__ import annotations

import pytest

from conv3d_bwd.nkisim.cost import CostModelError, get_target, instr_timing, summarize
from conv3d_bwd.nkisim.schedule import FluidBandwidth, schedule, schedule_programs
from conv3d_bwd.nkisim.trace import Instr, Trace

from .helpers import acc

T = "trn2"
MM_NS = (512 + 14) / 2.4          # occupancy of a full bf16 matmul (with the issue overhead)
MM_LAT = MM_NS + 64 / 2.4         # its latency
LOAD_OCC = 128 * 1024 / (368 * 1024 / (1024 + 150))  # 128 KiB bf16 load with 1 KiB rows
ISSUE = 600.0                     # a DMA's descriptor generation on its queue (trn2 central values)


def load(dst, src=100, pid=0, shape=(128, 512)):
    return Instr("dma_copy", "dma", (acc("dst", "sbuf", dst, shape=shape, write=True),
                                     acc("src", "hbm", src, shape=shape)), program_id=pid)


def store(dst, src, pid=0):
    return Instr("dma_copy", "dma", (acc("dst", "shared_hbm", dst, write=True),
                                     acc("src", "sbuf", src)), program_id=pid)


def mm(psum, stationary, moving, pid=0):
    return Instr("nc_matmul", "tensor", (acc("dst", "psum", psum, "float32", write=True),
                                         acc("stationary", "sbuf", stationary, shape=(128, 128)),
                                         acc("moving", "sbuf", moving)),
                 (("stationary_free", 128), ("moving_free", 512), ("contraction", 128),
                  ("fp32", False), ("is_transpose", False)), program_id=pid)


def evict(dst, psum, engine="vector", pid=0):
    return Instr("tensor_copy", engine, (acc("dst", "sbuf", dst, write=True),
                                         acc("src", "psum", psum, "float32")), program_id=pid)


def lat(instr):
    t = instr_timing(instr, T)
    return t.latency_ns


def test_independent_instructions_on_different_engines_overlap():
    a, b = mm(1, 2, 3), evict(4, 5)
    r = schedule([a, b], T, record=True)
    assert r.starts_ns[0] == (0.0, 0.0)
    assert r.makespan_ns == pytest.approx(max(lat(a), lat(b)))


def test_one_engine_runs_in_program_order():
    a, b = evict(4, 5), evict(6, 7)  # independent but both on VectorE
    r = schedule([a, b], T, record=True)
    occ = instr_timing(a, T).occupancy_ns
    assert r.starts_ns[0][1] == pytest.approx(occ)
    assert r.makespan_ns == pytest.approx(occ + lat(b))
    assert r.busy_ns["vector"] == pytest.approx(2 * occ)


def test_raw_chain_serialises():
    chain = [load(2), mm(3, 1, 2), evict(4, 3), store(200, 4)]
    r = schedule(chain, T, record=True)
    expected = sum(lat(i) for i in chain)
    assert r.makespan_ns == pytest.approx(expected)
    starts = r.starts_ns[0]
    assert starts[1] == pytest.approx(lat(chain[0]))
    assert starts[2] == pytest.approx(lat(chain[0]) + MM_LAT)


def test_war_on_a_reused_buffer_serialises():
    # the matmul reads buffer 2; the next load overwrites it and must wait for the read to finish
    r = schedule([mm(3, 1, 2), load(2)], T, record=True)
    assert r.starts_ns[0][1] == pytest.approx(MM_NS)
    # without the reuse the load starts at once
    r = schedule([mm(3, 1, 2), load(9)], T, record=True)
    assert r.starts_ns[0][1] == 0.0


def test_waw_waits_for_the_first_writer():
    r = schedule([evict(4, 5), evict(4, 6, engine="scalar")], T, record=True)
    assert r.starts_ns[0][1] == pytest.approx(lat(evict(4, 5)))


def test_matmuls_accumulating_into_one_bank_pipeline_back_to_back():
    group = [mm(3, 1, 2) for _ in range(4)]
    r = schedule(group, T, record=True)
    assert r.starts_ns[0] == pytest.approx((0.0, MM_NS, 2 * MM_NS, 3 * MM_NS))
    assert r.makespan_ns == pytest.approx(3 * MM_NS + MM_LAT)


def test_disjoint_partitions_or_spans_of_one_storage_do_not_depend():
    write_top = Instr("memset", "gpsimd", (acc("dst", "sbuf", 7, shape=(64, 512), write=True),))
    read_bottom = Instr("tensor_copy", "vector", (
        acc("dst", "sbuf", 8, write=True, shape=(64, 512)),
        acc("src", "sbuf", 7, shape=(64, 512), pstart=64)))
    read_top = Instr("tensor_copy", "vector", (
        acc("dst", "sbuf", 9, write=True, shape=(64, 512)),
        acc("src", "sbuf", 7, shape=(64, 512), pstart=0)))
    r = schedule([write_top, read_bottom], T, record=True)
    assert r.starts_ns[0][1] == 0.0
    r = schedule([write_top, read_top], T, record=True)
    assert r.starts_ns[0][1] == pytest.approx(lat(write_top))
    left = Instr("memset", "gpsimd", (acc("dst", "sbuf", 7, shape=(128, 256), write=True, span=(0, 256)),))
    right = Instr("tensor_copy", "vector", (
        acc("dst", "sbuf", 8, write=True, shape=(128, 256)),
        acc("src", "sbuf", 7, shape=(128, 256), span=(256, 512))))
    assert schedule([left, right], T, record=True).starts_ns[0][1] == 0.0


def _pipeline(buffers: int, tiles: int = 8) -> list[Instr]:
    out = []
    for i in range(tiles):
        buf = 10 + i % buffers
        bank = 50 + i % 2
        out += [load(buf, src=100 + i), mm(bank, 1, buf), evict(60 + i % 2, bank), store(300 + i, 60 + i % 2)]
    return out


def test_double_buffering_overlaps_loads_with_compute():
    single = schedule(_pipeline(1), T).makespan_ns
    double = schedule(_pipeline(2), T).makespan_ns
    quad = schedule(_pipeline(4), T).makespan_ns
    # single buffering: every load waits for the previous matmul, so each tile pays the full load
    assert single >= 8 * (1300 + LOAD_OCC + MM_NS)
    # double buffering hides the loads' start latency; what is left is mostly the one software-DGE queue
    # making the 16 transfers' descriptors in turn
    assert double < 0.85 * single
    assert double >= 16 * ISSUE
    assert quad < double
    # never faster than moving the bytes: 8 loads + 8 stores of 128 KiB through 368 GB/s
    assert quad > 16 * LOAD_OCC


def test_dma_queue_issues_in_turn_and_start_latencies_overlap():
    small = [load(10 + i, shape=(128, 8)) for i in range(16)]
    r = schedule(small, T, record=True)
    t = instr_timing(small[0], T)
    assert t.queue == "swdge"
    # one queue: descriptors are made one after the other; the fixed latency of each overlaps the rest
    assert r.starts_ns[0] == pytest.approx(tuple(i * ISSUE for i in range(16)))
    assert r.makespan_ns == pytest.approx(15 * ISSUE + 1300 + t.occupancy_ns)
    assert r.queue_busy_ns == pytest.approx({"swdge": 16 * ISSUE})
    assert r.lanes[0] == ("dma:swdge",) * 16
    # software DGE takes GpSimd time per instruction
    assert r.busy_ns["gpsimd"] == pytest.approx(16 * get_target(T).swdge_gpsimd_ns)


def test_two_hardware_dges_halve_the_issue_time():
    hw = [Instr("dma_copy", "dma", load(10 + i, shape=(128, 8)).accesses, (("dge_mode", "hwdge"),))
          for i in range(16)]
    r = schedule(hw, T, record=True)
    assert set(r.lanes[0]) == {"dma:hwdge.act", "dma:hwdge.sp"}
    assert r.queue_busy_ns == pytest.approx({"hwdge.act": 8 * ISSUE, "hwdge.sp": 8 * ISSUE})
    occ = instr_timing(hw[0], T).occupancy_ns
    assert r.makespan_ns == pytest.approx(7 * ISSUE + 1300 + 2 * occ)   # the last two share the bandwidth


def test_dma_bandwidth_is_shared_by_concurrent_transfers():
    four = [load(10 + i, shape=(128, 4096)) for i in range(4)]   # 1 MiB each: longer than the issue
    occ = instr_timing(four[0], T).occupancy_ns
    r = schedule(four, T)
    assert r.makespan_ns == pytest.approx(1300 + 4 * occ, rel=0.02)
    assert r.busy_ns["dma"] == pytest.approx(4 * occ)


def test_transfers_ready_later_do_not_block_earlier_ready_ones():
    # a store that must wait for a long compute chain does not hold back an independent load
    chain = [evict(70 + i, 80 + i) for i in range(20)]
    late_store = store(400, 70 + 19)
    early_load = load(11)
    r = schedule([*chain, late_store, early_load], T, record=True)
    assert r.starts_ns[0][-1] == 0.0
    assert r.ends_ns[0][-1] == pytest.approx(1300 + LOAD_OCC, rel=0.02)


def test_many_accesses_to_one_storage_keep_correct_dependencies():
    # 200 reads of disjoint slices of one resident tile, then a write over all of it
    reads = [Instr("tensor_copy", "scalar", (
        acc("dst", "sbuf", 1000 + i, write=True, shape=(128, 4)),
        acc("src", "sbuf", 7, shape=(128, 4), span=(4 * i, 4 * i + 4)))) for i in range(200)]
    overwrite = Instr("memset", "gpsimd", (acc("dst", "sbuf", 7, shape=(128, 800), write=True),))
    r = schedule([*reads, overwrite], T, record=True)
    last_read_end = r.starts_ns[0][199] + instr_timing(reads[-1], T).occupancy_ns
    assert r.starts_ns[0][-1] >= last_read_end - 1e-6


def test_fluid_bandwidth_fills_and_shares():
    bw = FluidBandwidth(bin_ns=100)
    assert bw.place(0, 250) == pytest.approx(250)
    assert bw.place(0, 100) == pytest.approx(350)      # queued behind the first
    half = FluidBandwidth(bin_ns=100)
    assert half.place(0, 100, rate=0.5) == pytest.approx(200)
    assert half.place(0, 100, rate=0.5) == pytest.approx(200)  # uses the other half
    assert half.place(0, 50) == pytest.approx(250)
    assert FluidBandwidth().place(42, 0) == 42


# ------------------------------------------------------------------------------ LNC2


def test_lnc2_makespan_is_the_later_core():
    core0 = [mm(3, 1, 2, pid=0) for _ in range(4)]
    core1 = [mm(3, 1, 2, pid=1) for _ in range(2)]
    r = schedule_programs([core0, core1], T)
    assert r.core_makespan_ns == pytest.approx((3 * MM_NS + MM_LAT, MM_NS + MM_LAT))
    assert r.makespan_ns == pytest.approx(3 * MM_NS + MM_LAT)
    assert r.busy_ns["tensor"] == pytest.approx(6 * MM_NS)


def _sendrecv(pid, src, dst):
    return Instr("sendrecv", "dma", (acc("dst", "sbuf", dst, write=True, shape=(128, 64)),
                                     acc("src", "sbuf", src, shape=(128, 64))), program_id=pid)


def test_sendrecv_waits_for_the_peer():
    core0 = [evict(4, 5, pid=0) for _ in range(10)] + [_sendrecv(0, 4, 6)]
    core1 = [_sendrecv(1, 8, 9), evict(10, 9, pid=1)]
    r = schedule_programs([core0, core1], T, record=True)
    core0_ready = r.ends_ns[0][9]
    assert r.starts_ns[1][0] == pytest.approx(core0_ready)
    assert r.starts_ns[0][10] == pytest.approx(core0_ready)
    assert r.starts_ns[1][1] >= r.ends_ns[1][0]


def test_summarize_splits_by_program_id_or_by_trace():
    tagged = Trace()
    for instr in [mm(3, 1, 2, pid=0), mm(3, 1, 2, pid=1), mm(3, 1, 2, pid=1)]:
        tagged.record(instr)
    s = summarize(tagged, T, lnc=2)
    assert len(s.core_us) == 2
    assert s.modelled_us == pytest.approx((MM_NS + MM_LAT) / 1000)
    assert s.tensor_util == pytest.approx(3 * MM_NS / (2 * (MM_NS + MM_LAT)))
    t0, t1 = Trace(), Trace()
    t0.record(mm(3, 1, 2))
    t1.record(mm(3, 1, 2))
    t1.record(mm(3, 1, 2))
    s2 = summarize([t0, t1], T, lnc=2)
    assert s2.core_us == pytest.approx(s.core_us)


def test_summary_fields():
    trace = Trace()
    for instr in [load(2), mm(3, 1, 2), mm(3, 1, 2), evict(4, 3), store(200, 4),
                  mm(5, 1, 2, pid=0)]:
        trace.record(instr)
    s = summarize(trace, T, peaks={"sbuf_bytes_per_partition": 4096, "psum_banks": 2})
    assert s.instr_counts == {"dma_copy": 2, "nc_matmul": 3, "tensor_copy": 1}
    assert s.matmul_flops == 3 * 2 * 128 * 128 * 512
    assert s.hbm_read_bytes == 128 * 1024 and s.hbm_write_bytes == 128 * 1024
    assert s.engine_busy_us["tensor"] == pytest.approx(3 * MM_NS / 1000)
    assert s.tensor_util == pytest.approx(s.engine_busy_us["tensor"] / s.modelled_us)
    assert (s.peak_sbuf_bytes_per_partition, s.peak_psum_banks) == (4096, 2)
    assert (s.target, s.lnc, s.instructions) == ("trn2", 1, 6)
    d = s.to_dict()
    assert set(d) >= {"modelled_us", "engine_busy_us", "tensor_util", "hbm_read_bytes",
                      "hbm_write_bytes", "instr_counts", "matmul_flops",
                      "peak_sbuf_bytes_per_partition", "peak_psum_banks", "target", "lnc"}
    text = s.format()
    assert "modelled time" in text and "tensor" in text and "nc_matmul 3" in text
    assert f"{s.modelled_us:.3f}" in text


def test_summarize_rejects_bad_lnc_and_handles_an_empty_trace():
    with pytest.raises(CostModelError, match="lnc=3"):
        summarize(Trace(), T, lnc=3)
    s = summarize(Trace(), T)
    assert s.modelled_us == 0.0 and s.tensor_util == 0.0 and s.instr_counts == {}


def test_stalls_name_the_engine_waited_for():
    chain = [load(2), mm(3, 1, 2), evict(4, 3)]
    r = schedule(chain, T)
    assert r.stalls_ns["tensor"] == pytest.approx({"dma": lat(chain[0])})
    # idle time is charged to the producer that cleared last (the matmul), from the engine's free time
    assert r.stalls_ns["vector"] == pytest.approx({"tensor": lat(chain[0]) + MM_LAT})
    assert "dma" not in r.stalls_ns  # the load waited for nothing
    s = summarize(chain, T)
    assert s.stall_us["tensor"]["dma"] == pytest.approx(lat(chain[0]) / 1000)
    assert "tensor idle, waiting for: dma" in s.format()
    assert s.to_dict()["stall_us"]["vector"] == pytest.approx({"tensor": (lat(chain[0]) + MM_LAT) / 1000})


def test_busy_time_by_op_separates_transposes():
    t = Instr("nc_matmul", "tensor", mm(7, 1, 2).accesses,
              (("stationary_free", 128), ("moving_free", 128), ("contraction", 128), ("fp32", False),
               ("is_transpose", True)))
    s = summarize([mm(3, 1, 2), mm(3, 1, 2), t, load(9)], T)
    assert s.op_busy_us["nc_matmul"] == pytest.approx(2 * MM_NS / 1000)
    assert s.op_busy_us["nc_matmul[transpose]"] == pytest.approx((128 + 14) / 2.4 / 1000)
    assert s.op_busy_us["dma_copy"] == pytest.approx(LOAD_OCC / 1000)
    assert s.instr_counts["nc_matmul"] == 3
    assert f"busy us by op: nc_matmul {2 * MM_NS / 1000:.3f}, dma_copy {LOAD_OCC / 1000:.3f}" in s.format()


def test_fluid_bandwidth_forgets_old_bins_without_changing_later_placements():
    kept, pruned = FluidBandwidth(bin_ns=100), FluidBandwidth(bin_ns=100)
    for k in range(50):
        assert kept.place(k * 80.0, 90.0) == pytest.approx(pruned.place(k * 80.0, 90.0))
    pruned.forget_before(3000.0)
    assert len(pruned) < len(kept)
    for t0 in (3000.0, 3500.0, 4200.0, 9000.0):
        assert pruned.place(t0, 250.0, 0.5) == pytest.approx(kept.place(t0, 250.0, 0.5))
