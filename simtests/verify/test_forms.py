"""verify.forms: instruction forms from traces, the evidence marking, and one real trace-only run."""
from __future__ import annotations

import json

import pytest

from conv3d_bwd.nkisim.trace import Access, Instr
from conv3d_bwd.verify.form_evidence import Evidence, FormRule, OperandRule, evidence_for
from conv3d_bwd.verify.forms import (
    DOC_BEGIN,
    DOC_END,
    Form,
    FormsError,
    FormTable,
    Geometry,
    OperandForm,
    build_table,
    contiguity_class,
    find_alternatives,
    generated_block,
    geometries,
    group_forms,
    instr_form,
    main,
    markdown_table,
    meets_hwdge_shape,
    not_shown_instructions,
    not_shown_table,
    partition_class,
    src_shape_pattern,
    write_doc,
)


def _sbuf(role, shape, dtype="bfloat16", partitions=None, run_bytes=None, write=False, itemsize=2):
    parts = shape[0] if partitions is None else partitions
    free = 1
    for n in shape[1:]:
        free *= n
    row = free * itemsize
    return Access(role, "sbuf", 1, dtype, tuple(shape), 0, parts, free, parts * row, (0, free),
                  row if run_bytes is None else run_bytes, write)


def _hbm(role, shape, dtype="bfloat16", run_bytes=None, write=False, itemsize=2):
    total = 1
    for n in shape:
        total *= n
    return Access(role, "shared_hbm", 2, dtype, tuple(shape), 0, 1, total, total * itemsize, (0, total),
                  total * itemsize if run_bytes is None else run_bytes, write)


def _psum(role, shape, dtype="float32", write=True):
    return Access(role, "psum", 3, dtype, tuple(shape), 0, shape[0], shape[1], shape[0] * shape[1] * 4,
                  (0, shape[1]), shape[1] * 4, write)


def _matmul(k, m, n, accumulate):
    return Instr("nc_matmul", "tensor", (_sbuf("stationary", (k, m)), _sbuf("moving", (k, n)),
                                         _psum("dst", (m, n))),
                 (("stationary_free", m), ("moving_free", n), ("contraction", k), ("fp32", False),
                  ("is_transpose", False), ("accumulate", accumulate)))


def _transpose(src_shape, src_buffer="hbm", dtype="bfloat16"):
    axes = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}[len(src_shape)]
    dst_shape = tuple(src_shape[a] for a in axes)
    src = _hbm("src", src_shape, dtype) if src_buffer == "hbm" else _sbuf("src", src_shape, dtype)
    return Instr("dma_transpose", "dma", (src, _sbuf("dst", dst_shape, dtype, write=True)),
                 (("dge_mode", "unknown"), ("axes", axes)))


# ------------------------------------------------------------------------------ classes


@pytest.mark.fast
@pytest.mark.parametrize(("parts", "expected"), [(1, "1"), (2, "<32"), (31, "<32"), (32, "<128"),
                                                  (127, "<128"), (128, "128")])
def test_partition_classes(parts, expected):
    assert partition_class(parts) == expected


@pytest.mark.fast
def test_contiguity_classes():
    assert contiguity_class(_sbuf("src", (4, 8))) == "whole"
    assert contiguity_class(_sbuf("src", (4, 8), run_bytes=2)) == "element"
    assert contiguity_class(_sbuf("src", (4, 8), run_bytes=8)) == "strided"
    assert contiguity_class(_hbm("src", (4, 1024))) == "whole"
    assert contiguity_class(_hbm("src", (4, 1024), run_bytes=2048)) == "run>=512B"
    assert contiguity_class(_hbm("src", (4, 1024), run_bytes=64)) == "run<512B"
    assert contiguity_class(_hbm("src", (4, 1024), run_bytes=2)) == "element"


@pytest.mark.fast
def test_src_shape_pattern_and_hwdge_limits():
    assert src_shape_pattern((64, 1, 1, 128)) == "[n,1,1,n<=128]"
    assert src_shape_pattern((8, 200)) == "[n,n>128]"
    # nki.isa.dma_transpose, hardware DGE: 2-D shape[0] == 16; 3-/4-D shape[0] in {1,2,4,8,16}
    # with shape[0]*shape[-2] % 16 == 0; shape[-1] <= 128; 2-byte dtype
    assert meets_hwdge_shape((16, 128), 2)
    assert not meets_hwdge_shape((32, 128), 2)
    assert meets_hwdge_shape((8, 1, 2, 64), 2)
    assert not meets_hwdge_shape((8, 1, 3, 64), 2)
    assert not meets_hwdge_shape((32, 1, 1, 64), 2)
    assert not meets_hwdge_shape((16, 1, 1, 256), 2)
    assert not meets_hwdge_shape((16, 128), 4)


# ------------------------------------------------------------------------------ grouping


@pytest.mark.fast
def test_grouping_of_a_hand_made_trace():
    trace = [
        _matmul(128, 128, 512, False), _matmul(128, 128, 512, True), _matmul(128, 128, 256, True),
        _matmul(16, 128, 512, False),                      # fewer partitions: another form
        _transpose((64, 1, 1, 100)), _transpose((32, 1, 1, 120)),   # one form: sizes abstracted
        _transpose((64, 128)),
        Instr("memset", "gpsimd", (_sbuf("dst", (128, 4, 4), write=True),)),
        Instr("memset", "gpsimd", (_sbuf("dst", (128, 4, 4), write=True),)),
    ]
    counts = group_forms(trace)
    assert sum(counts.values()) == len(trace)
    assert len(counts) == 6
    by_key = {(f.op, f.attr("accumulate"), f.operand("stationary").partitions if f.op == "nc_matmul" else
               f.attr("src_shape")): n for f, n in counts.items()}
    assert by_key[("nc_matmul", "True", "128")] == 2
    assert by_key[("nc_matmul", "False", "128")] == 1
    assert by_key[("nc_matmul", "False", "<32")] == 1
    assert by_key[("dma_transpose", None, "[n,1,1,n<=128]")] == 2
    assert by_key[("dma_transpose", None, "[n,n<=128]")] == 1
    assert by_key[("memset", None, None)] == 2
    matmul = instr_form(trace[0])
    assert matmul.attrs == (("accumulate", "False"), ("is_transpose", "False"))   # sizes are not form
    assert matmul.operand("dst") == OperandForm("dst", "psum", 2, "float32", "128", "whole")
    assert instr_form(trace[6]).attr("hwdge_shape") == "False"
    assert instr_form(Instr("dma_copy", "dma", (_hbm("src", (4, 4)), _sbuf("dst", (4, 4))))).operand(
        "src").buffer == "hbm"   # shared_hbm and private_hbm are HBM


@pytest.mark.fast
def test_table_counts_traces_and_picks():
    table = FormTable()
    table.add_trace("a", "pick", [_matmul(128, 128, 512, None)] * 3)
    table.add_trace("b", "candidate", [_matmul(128, 128, 512, None), _transpose((16, 128))])
    records = {r.form.op: r for r in table.sorted_records()}
    assert (records["nc_matmul"].count, records["nc_matmul"].traces, records["nc_matmul"].in_pick) == (4, 2, True)
    assert (records["dma_transpose"].count, records["dma_transpose"].in_pick) == (1, False)
    assert table.ops() == {"nc_matmul", "dma_transpose"}
    text = markdown_table(table)
    assert text.count("\n| nc_matmul |") == 1 and text.count("\n| dma_transpose |") == 1
    assert json.loads(json.dumps(table.to_dict()))["forms"][0]["count"] in (1, 4)


# ------------------------------------------------------------------------------ evidence


@pytest.mark.fast
def test_evidence_of_known_forms():
    assert evidence_for(instr_form(_matmul(128, 128, 512, True)))[0] is Evidence.DOCUMENTED
    fp32_dst_bf16 = Form("nc_matmul", "tensor", (OperandForm("stationary", "sbuf", 2, "bfloat16", "128", "whole"),
                                                 OperandForm("moving", "sbuf", 2, "bfloat16", "128", "whole"),
                                                 OperandForm("dst", "psum", 2, "bfloat16", "128", "whole")),
                         (("accumulate", "None"), ("is_transpose", "False")))
    assert evidence_for(fp32_dst_bf16)[0] is Evidence.NOT_SHOWN     # bf16 PSUM output: NC-v4 only
    documented, rule = evidence_for(instr_form(_transpose((16, 128))))
    assert documented is Evidence.DOCUMENTED and "dma_transpose" in rule.source
    shown, rule = evidence_for(instr_form(_transpose((64, 1, 1, 128))))
    assert shown is Evidence.SHOWN and "nki-library" in rule.source
    strided = Instr("dma_transpose", "dma", (_hbm("src", (64, 1, 1, 128), run_bytes=2),
                                            _sbuf("dst", (128, 1, 1, 64), write=True)),
                    (("dge_mode", "unknown"), ("axes", (3, 1, 2, 0))))
    assert evidence_for(instr_form(strided))[0] is Evidence.NOT_SHOWN   # AWS's sources read whole rows
    two_d, rule = evidence_for(instr_form(_transpose((64, 128))))   # the Trainium2 guide: any 2-D tile
    assert two_d is Evidence.DOCUMENTED and "Trainium2" in rule.source
    assert evidence_for(instr_form(_transpose((64, 2, 100))))[0] is Evidence.NOT_SHOWN   # 3-D, no hwdge shape
    assert evidence_for(instr_form(_transpose((64, 1, 128), src_buffer="sbuf")))[0] is Evidence.NOT_SHOWN
    psum_on_gpsimd = Form("memset", "gpsimd", (OperandForm("dst", "psum", 2, "float32", "128", "whole"),))
    assert evidence_for(psum_on_gpsimd)[0] is Evidence.NOT_SHOWN

    def copy(dge_mode, to_sbuf=True):
        ends = (_hbm("src", (31, 3, 64)), _sbuf("dst", (31, 3, 64), write=True)) if to_sbuf else \
            (_sbuf("src", (31, 3, 64)), _hbm("dst", (31, 3, 64), write=True))
        return instr_form(Instr("dma_copy", "dma", ends, (("dge_mode", dge_mode),)))
    hw_copy, rule = evidence_for(copy("hwdge"))   # the DGE reference page: hardware-DGE copy HBM -> SBUF
    assert hw_copy is Evidence.DOCUMENTED and "DGE" in rule.source
    assert evidence_for(copy("hwdge", to_sbuf=False))[0] is Evidence.NOT_SHOWN   # a store: no page shows it
    assert evidence_for(copy("swdge"))[0] is Evidence.NOT_SHOWN


@pytest.mark.fast
def test_rule_matching_constrains_only_what_it_names():
    rule = FormRule("tensor_copy", Evidence.SHOWN, "somewhere", None,
                    (OperandRule("src", frozenset({"psum"})),), (("op", frozenset({"add"})),))
    form = Form("tensor_copy", "vector", (OperandForm("src", "psum", 3, "float32", "<32", "strided"),),
                (("op", "add"),))
    assert rule.matches(form)
    assert not rule.matches(Form("tensor_copy", "vector", form.operands, (("op", "max"),)))
    assert not rule.matches(Form("tensor_copy", "vector", (), (("op", "add"),)))   # no src operand
    assert evidence_for(form, [rule]) == (Evidence.SHOWN, rule)


@pytest.mark.fast
def test_not_shown_counts_and_traits():
    risky = _transpose((64, 1, 100), src_buffer="sbuf")   # 3-D SBUF to SBUF: no public source shows it
    fine = _transpose((16, 128))
    assert not_shown_instructions([risky, fine, risky]) == 2
    table = FormTable()
    table.add_trace("a", "pick", [risky, fine], frozenset({"dw:row_pack", "dw_xt_dma", "dtype=bf16"}))
    table.add_trace("b", "pick", [risky], frozenset({"dw:row_pack", "dtype=bf16"}))
    table.add_trace("c", "pick", [fine], frozenset({"dx:gemm", "dtype=bf16"}))
    (record,) = table.not_shown()
    assert record.traits == {"dw:row_pack", "dtype=bf16"}
    assert table.common_traits() == {"dtype=bf16"}
    row = not_shown_table(table).splitlines()[2]
    assert row.endswith("| dw:row_pack |")       # the trait every traced plan has is left out


@pytest.mark.fast
def test_doc_block_is_replaced_and_prose_kept(tmp_path):
    table = FormTable()
    table.add_trace("a", "pick", [_transpose((64, 1, 100), src_buffer="sbuf"), _matmul(128, 128, 512, None)])
    doc = tmp_path / "forms.md"
    doc.write_text(f"# Title\n\nprose before\n\n{DOC_BEGIN}\nold table\n{DOC_END}\n\nprose after\n")
    write_doc(str(doc), generated_block(table, "default", None))
    text = doc.read_text()
    assert "prose before" in text and "prose after" in text and "old table" not in text
    assert text.count(DOC_BEGIN) == 1 and text.count(DOC_END) == 1
    assert "1 not shown" in text and "| dma_transpose |" in text
    write_doc(str(doc), generated_block(table, "default", None))   # idempotent
    assert doc.read_text() == text
    bare = tmp_path / "bare.md"
    bare.write_text("# no markers\n")
    with pytest.raises(FormsError, match="no '<!-- verify.forms"):
        write_doc(str(bare), "x")


# ------------------------------------------------------------------------------ a real run


@pytest.mark.fast
def test_a_real_trace_gives_a_table_of_every_traced_op():
    from conv3d_bwd.verify.forms import _plans, trace_plan

    geom = Geometry("tiny", (1, 8, 2, 4, 4), (1, 4, 2, 4, 4), (1, 3, 3, 4, 8), padding=(0, 0, 1, 1, 1, 1))
    (plan, _), = _plans(geom)
    instrs = trace_plan(geom, plan).instrs
    table = build_table([geom])
    assert table.records
    assert table.ops() == {i.op for i in instrs}
    assert sum(r.count for r in table.records.values()) == len(instrs)
    assert all(r.in_pick and r.traces == 1 for r in table.records.values())


@pytest.mark.fast
def test_sets_and_bad_set():
    assert geometries("default") and all(not g.candidates for g in geometries("default"))
    assert {g.lnc for g in geometries("bench")} == {1, 2}
    assert any(g.candidates for g in geometries("all"))
    with pytest.raises(FormsError, match="set: 'nope'"):
        geometries("nope")
    with pytest.raises(SystemExit):
        main(["--set", "nope"])


@pytest.mark.fast
def test_alternatives_of_a_tiny_pick():
    geom = Geometry("tiny", (1, 8, 2, 4, 4), (1, 4, 2, 4, 4), (1, 3, 3, 4, 8), padding=(0, 0, 1, 1, 1, 1))
    (alt,) = find_alternatives([geom], variants=2)
    assert alt.pick_us and alt.pick_us > 0
    if alt.pick_not_shown:
        assert 1 <= alt.tried <= 2 and alt.best_not_shown is not None and alt.best_us > 0
    else:
        assert alt.tried == 0 and alt.best_label is None


@pytest.mark.fast
def test_transport_switches_are_plan_fields():
    from conv3d_bwd.verify.forms import TRANSPORT_SWITCHES, _plans

    geom = Geometry("tiny", (1, 8, 2, 4, 4), (1, 4, 2, 4, 4), (1, 3, 3, 4, 8), padding=(0, 0, 1, 1, 1, 1))
    (plan, _), = _plans(geom)
    assert set(TRANSPORT_SWITCHES) <= set(plan.tiles())   # a renamed switch would silently read as off
