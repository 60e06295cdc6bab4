"""kernels.costs reads its hardware figures from nkisim's target tables: planner and emulator agree."""
from __future__ import annotations

import pytest

from conv3d_bwd.kernels.costs import TARGET_FIGURES, CostSheet
from conv3d_bwd.nkisim.cost import TARGETS, instr_timing
from conv3d_bwd.nkisim.targets import TARGETS as SPEC_TARGETS
from conv3d_bwd.nkisim.trace import Instr
from simtests.nkisim.helpers import acc


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_planner_figures_are_nkisim_figures(name):
    fig, hw = TARGET_FIGURES[name], TARGETS[name]
    assert (fig.tensor_ghz, fig.vector_ghz, fig.scalar_ghz, fig.gpsimd_ghz) == (
        hw.tensor_ghz, hw.vector_ghz, hw.scalar_ghz, hw.gpsimd_ghz)
    assert fig.dma_bytes_per_ns == hw.dma_bytes_per_ns and fig.dma_fixed_ns == hw.dma_fixed_ns
    assert (fig.vector_fast_modes, fig.scalar_small_speedup) == (hw.vector_fast_modes, hw.scalar_small_dtype_speedup)
    assert (fig.matmul_min_cycles, fig.matmul_issue_cycles, fig.min_ii_cycles) == (
        hw.matmul_min_cycles, hw.matmul_issue_cycles, hw.min_ii_cycles)
    assert (fig.access_overhead_cycles, fig.vector_overhead_cycles) == (hw.access_overhead_cycles, hw.vector_overhead_cycles)
    assert fig.dma_descriptor_overhead_bytes == hw.dma_descriptor_overhead_bytes
    assert fig.dma_transpose_efficiency == hw.dma_transpose_from_hbm_efficiency
    assert fig.dma_issue_ns == getattr(hw, f"{hw.unknown_copy_dge}_issue_ns")
    assert fig.sbuf_usable == SPEC_TARGETS[name].usable_sbuf_bytes


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_sheet_charges_what_nkisim_charges(name):
    """The same instruction costs the same in the planner's sheet and in nkisim's cost model."""
    sheet = CostSheet(TARGET_FIGURES[name])
    mm = Instr("nc_matmul", "tensor", (acc("dst", "psum", 1, "float32", (128, 512), write=True),
                                       acc("stationary", "sbuf", 2, "bfloat16", (128, 128)),
                                       acc("moving", "sbuf", 3, "bfloat16", (128, 512))),
               (("stationary_free", 128), ("moving_free", 512), ("contraction", 128), ("fp32", False)))
    sheet.matmul(128, 512, False)
    assert sheet.busy["tensor"] == pytest.approx(instr_timing(mm, name).occupancy_ns)
    copy = Instr("tensor_copy", "scalar", (acc("dst", "sbuf", 4, "float32", (128, 512), write=True),
                                           acc("src", "sbuf", 5, "float32", (128, 512))))
    sheet.compute("scalar", 512)
    assert sheet.busy["scalar"] == pytest.approx(instr_timing(copy, name).occupancy_ns)
    load = Instr("dma_copy", "dma", (acc("dst", "sbuf", 6, "bfloat16", (128, 2048), write=True),
                                     acc("src", "hbm", 7, "bfloat16", (128, 2048))))
    sheet.dma(128 * 4096, 4096)
    assert sheet.busy["dma"] == pytest.approx(instr_timing(load, name).occupancy_ns)


# (dst shape, src shape, from SBUF): full blocks, partial blocks in both axes, a 3-d destination, a source
# outside the hardware-DGE form (static queue), SBUF to SBUF
TRANSPOSE_CASES = [
    ((128, 128), (16, 128, 8), False),
    ((3, 16), (16, 3), False),
    ((64, 100), (4, 25, 64), False),
    ((96, 4, 40), (4, 40, 96), False),
    ((128, 64), (64, 128), False),
    ((32, 48), (16, 3, 32), True),
]


def _transpose_instr(dst_shape, src_shape, from_sbuf) -> Instr:
    return Instr("dma_transpose", "dma", (acc("dst", "sbuf", 1, "bfloat16", dst_shape, write=True),
                                          acc("src", "sbuf" if from_sbuf else "hbm", 2, "bfloat16", src_shape)))


@pytest.mark.parametrize("name", sorted(TARGETS))
@pytest.mark.parametrize("dst_shape,src_shape,from_sbuf", TRANSPOSE_CASES)
def test_sheet_charges_dma_transpose_as_nkisim(name, dst_shape, src_shape, from_sbuf):
    """A dma_transpose's charge is nkisim's: whole destination blocks at the transpose efficiency, and its
    descriptor generation on the queue nkisim routes it to."""
    sheet = CostSheet(TARGET_FIGURES[name])
    timing = instr_timing(_transpose_instr(dst_shape, src_shape, from_sbuf), name)
    ns = sheet.dma_transpose(dst_shape, 2, from_sbuf=from_sbuf, count=3, src_shape=src_shape)
    share = TARGETS[name].hwdge_queues if timing.queue == "hwdge" else 1
    assert ns == pytest.approx(3 * timing.occupancy_ns)
    assert sheet.busy["dma"] == pytest.approx(ns)
    assert sheet.queue_issue == {timing.queue: pytest.approx(3 * timing.issue_ns)}
    assert sheet.dma_ns() == pytest.approx(max(3 * timing.occupancy_ns, 3 * timing.issue_ns / share))
    assert sheet.counts == {"dma_transpose": 3}


def test_transpose_blocks_not_bytes():
    """A [3, 16] destination fills 3 of a block's 128 partitions and pays for the whole block."""
    from conv3d_bwd.nkisim.cost import transpose_block_bytes

    hw = TARGETS["trn2"]
    assert transpose_block_bytes((3, 16), 2, hw) == 128 * 16 * 2
    assert transpose_block_bytes((130, 2, 17), 2, hw) == 2 * 2 * 2 * 128 * 16 * 2
    sheet = CostSheet(TARGET_FIGURES["trn2"])
    sheet.dma_transpose((128, 4, 128), 2)
    assert sheet.busy["dma"] == pytest.approx(128 * 512 * 2 / (hw.dma_bytes_per_ns * 0.9))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_sheet_books_copies_on_nkisims_queue(name):
    """dma_copy with the compiler's DGE mode goes where nkisim sends it (software DGE, with its GpSimd time)."""
    load = Instr("dma_copy", "dma", (acc("dst", "sbuf", 6, "bfloat16", (128, 64), write=True),
                                     acc("src", "hbm", 7, "bfloat16", (128, 64))))
    timing = instr_timing(load, name)
    sheet = CostSheet(TARGET_FIGURES[name])
    sheet.dma(128 * 128, 128, count=5)
    assert sheet.queue_issue == {timing.queue: pytest.approx(5 * timing.issue_ns)}
    assert sheet.dge_gpsimd_ns == pytest.approx(5 * timing.gpsimd_ns)
    # the bandwidth takes the bytes only, as nkisim's does; a small copy is issue-bound on its queue: the
    # queue's descriptor generation is the sheet's DMA time
    assert sheet.busy["dma"] == pytest.approx(5 * timing.occupancy_ns)
    assert timing.occupancy_ns < timing.issue_ns
    assert sheet.dma_ns() == pytest.approx(5 * timing.issue_ns)


def test_section_dma_takes_its_queue_floor():
    """A section of many small transposes on one queue lasts the queue's issue time, not their bandwidth; the
    copies' software-DGE queue runs beside it."""
    sheet = CostSheet(TARGET_FIGURES["trn2"])
    sheet.section("a")
    sheet.dma_transpose((128, 16), 2, count=10, src_shape=(128, 128))   # not the hwdge form: static queue
    sheet.dma(128 * 64, 64, count=2)
    sheet.section("b")
    sheet.dma(128 * 4096, 4096)
    secs = sheet.section_busy()
    hw = TARGETS["trn2"]
    assert secs["a"]["dma"] == pytest.approx(10 * hw.static_issue_ns)
    assert secs["b"]["dma"] == pytest.approx(sheet.busy["dma"] - sheet.sections["a"]["dma"])


def test_merged_sections_take_each_queue_once():
    """Two sections run as one body (dw's boxes between dx's items): their bandwidth adds up, and each queue's
    descriptor generation is a floor of the whole, not of each part (copies on the software DGE and
    transposes on the static queue generate descriptors side by side)."""
    sheet = CostSheet(TARGET_FIGURES["trn2"])
    sheet.section("dx")
    sheet.dma(128 * 64, 64, count=10)   # issue-bound copies (software DGE)
    sheet.section("dw")
    sheet.dma_transpose((128, 16), 2, count=10, src_shape=(128, 128))   # issue-bound transposes (static queue)
    secs = sheet.section_busy()
    merged = sheet.merged_dma_ns(("dx", "dw"))
    floors = sheet.queue_times()
    longest = max(ns for per in floors.values() for ns in per.values())
    assert merged == pytest.approx(max(sheet.busy["dma"], longest))
    assert merged < secs["dx"]["dma"] + secs["dw"]["dma"]
    sheet.section("dx")   # the same queue in both: its issue adds up
    sheet.dma(128 * 64, 64, count=10)
    sheet.section_busy()
    assert sheet.merged_dma_ns(("dx", "dw")) == pytest.approx(sheet.queue_times()["dx"]["swdge"])


def _store(storage: int, parts: int, elems: int, hbm_span: tuple[int, int]) -> Instr:
    """An SBUF -> HBM store of ``parts`` partitions x ``elems`` bf16 elements into HBM tensor ``storage``."""
    return Instr("dma_copy", "dma", (acc("src", "sbuf", 100 + storage, "bfloat16", (parts, elems)),
                                     acc("dst", "hbm", storage, "bfloat16", (parts * elems,), write=True,
                                         span=hbm_span)))


@pytest.mark.parametrize("parts", [8, 30, 128])
def test_a_lone_transfer_takes_nkisims_time_at_its_partitions_share(parts):
    """``lone_dma_ns``: start latency, then the bytes at ceil(P / 8) of the 16 DMA engines, as nkisim
    schedules one transfer alone."""
    from conv3d_bwd.nkisim.schedule import schedule

    hw = TARGET_FIGURES["trn2"]
    elems = 4096
    got = schedule([_store(1, parts, elems, (0, parts * elems))], "trn2").makespan_ns
    assert hw.lone_dma_ns(parts * elems * 2, elems * 2, parts) == pytest.approx(got, rel=0.01)


def test_serial_stores_take_their_lone_times_one_after_another():
    """Stores whose HBM spans overlap wait for one another in nkisim; the sheet's ``serial`` stores make their
    section's DMA at least the sum of their lone times (8 partitions: 1/16 of the bandwidth each)."""
    from conv3d_bwd.nkisim.schedule import schedule

    hw = TARGET_FIGURES["trn2"]
    parts, elems = 8, 4096
    # three stores of one channel-major output: each spans the rows of every channel it writes
    stores = [_store(1, parts, elems, (k * 64, k * 64 + (parts - 1) * 10_000 + 64)) for k in range(3)]
    traced = schedule(stores, "trn2").makespan_ns
    lone = hw.lone_dma_ns(parts * elems * 2, elems * 2, parts)
    assert traced == pytest.approx(3 * lone, rel=0.02)
    sheet = CostSheet(hw)
    sheet.section("dx")
    sheet.dma(parts * elems * 2, elems * 2, count=3, serial=parts)
    assert sheet.serial_floors() == {"dx": pytest.approx(3 * lone)}
    # (their busy DMA stays bandwidth time, which the few partitions do not reach)
    assert sheet.section_busy()["dx"]["dma"] < lone


def test_ahead_loads_leave_their_sections_queue_floor_for_the_chain():
    """Loads charged under ``ahead`` (dx's filters) are booked per queue apart, and their descriptor generation
    is not a floor of their section's DMA (compose_ns chains them per queue instead)."""
    hw = TARGET_FIGURES["trn2"]
    sheet = CostSheet(hw)
    sheet.section("dx_filters")
    with sheet.ahead():
        sheet.dma_transpose((128, 128), 2, count=20, src_shape=(128, 128))   # static queue
    sheet.section("dx")
    sheet.dma_transpose((128, 128), 2, count=20, src_shape=(128, 128))       # the same, not ahead
    secs = sheet.section_busy()
    static = TARGETS["trn2"].static_issue_ns
    assert sheet.ahead_queues() == {"dx_filters": {"static": pytest.approx(20 * static)}}
    assert sheet.queue_times()["dx"] == {"static": pytest.approx(20 * static)}
    assert secs["dx_filters"]["dma"] == pytest.approx(sheet.sections["dx_filters"]["dma"])   # bandwidth only
    assert secs["dx_filters"]["dma"] < 20 * static
    assert secs["dx"]["dma"] == pytest.approx(20 * static)
