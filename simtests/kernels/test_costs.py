"""kernels.costs reads its hardware figures from nkisim's target tables: planner and emulator agree."""
from __future__ import annotations

import pytest

from kernels.costs import TARGET_FIGURES, CostSheet
from nkisim.cost import TARGETS, instr_timing
from nkisim.targets import TARGETS as SPEC_TARGETS
from nkisim.trace import Instr
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
