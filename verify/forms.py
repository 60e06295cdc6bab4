"""The instruction forms conv3d_bwd issues, derived from nkisim traces, with their evidence.

A *form* is what decides whether the hardware and the compiler accept an instruction, with the
sizes abstracted away: op, engine, per operand (buffer, rank, dtype, partition-count class,
contiguity of the innermost run) and the attributes that change the lowering (dge_mode, transpose
axes and source shape pattern, is_transpose, accumulate, ALU op, ...). The kernel runs trace-only
under nkisim with each plan forced; every traced instruction is reduced to its form and counted.
Each form is then marked from ``verify.form_evidence``: documented (the ``nki.isa`` API page
allows it), shown in AWS's kernels, or not shown (a risk on hardware).

    python -m conv3d_bwd.verify.forms [--set default|bench|all] [--json [PATH]] [--markdown PATH] [--doc PATH]
                           [--alternatives N]

Sets: ``default`` the fast subset of the default case matrix (planner picks; about a minute);
``bench`` the bench shapes' picks at LNC1 and LNC2; ``all`` every default case, the bench picks at
both LNC degrees and one candidate of every distinct code-path variant of the smoke shapes.
``--doc`` rewrites the generated block of a document (kernels/instruction-forms.md) and keeps the
prose around it; ``--alternatives N`` also searches the bench picks' candidates for variants that
issue fewer not-shown forms.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from conv3d_bwd.nkisim.dtypes import ITEMSIZE
from conv3d_bwd.nkisim.trace import HBM_BUFFERS, Access, Instr
from conv3d_bwd.verify.form_evidence import Evidence, FormRule, evidence_for

TARGET = "trn2"
NKI_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "tfloat32": "tf32",
               "int32": "i32", "uint32": "u32", "uint8": "u8", "int8": "i8"}
# A class boundary for HBM runs, not a hardware rule: in nkisim's DMA model a 512 B descriptor runs at
# about two thirds of the bandwidth (docs/nkisim-cost-model.md), longer runs approach it.
DMA_RUN_BYTES = 512
# attributes that change the lowering; sizes (moving_free, contraction, ...) are left out
FORM_ATTRS = ("dge_mode", "axes", "is_transpose", "accumulate", "op", "op0", "op1", "reduce_op",
              "reduce_cmd", "cmp_op", "src_shape", "hwdge_shape")
HWDGE_LEADING = (1, 2, 4, 8, 16)


class FormsError(ValueError):
    """A bad argument of the forms tool (names the argument, the value and the rule)."""


# ------------------------------------------------------------------------------ forms


@dataclass(frozen=True, order=True)
class OperandForm:
    """One operand of a form: where it lives and how it is laid out, sizes abstracted."""

    role: str
    buffer: str        # 'sbuf' | 'psum' | 'hbm'
    rank: int
    dtype: str
    partitions: str    # '1' | '<32' | '<128' | '128' (on chip); '-' for HBM
    contiguity: str    # 'whole' | 'element' | on chip 'strided' | HBM 'run>=512B' or 'run<512B'

    def text(self) -> str:
        dtype = DTYPE_SHORT.get(self.dtype, self.dtype)
        parts = "" if self.partitions == "-" else f" p{self.partitions}"
        return f"{self.role}: {self.buffer} r{self.rank} {dtype}{parts} {self.contiguity}"


@dataclass(frozen=True, order=True)
class Form:
    """One instruction form: op, engine, operands (in trace order) and lowering attributes."""

    op: str
    engine: str
    operands: tuple[OperandForm, ...]
    attrs: tuple[tuple[str, str], ...] = ()

    def attr(self, name: str) -> str | None:
        return dict(self.attrs).get(name)

    def operand(self, role: str) -> OperandForm | None:
        for o in self.operands:
            if o.role == role:
                return o
        return None

    def to_dict(self) -> dict:
        return {"op": self.op, "engine": self.engine,
                "operands": [{"role": o.role, "buffer": o.buffer, "rank": o.rank, "dtype": o.dtype,
                              "partitions": o.partitions, "contiguity": o.contiguity} for o in self.operands],
                "attrs": dict(self.attrs)}


def partition_class(partitions: int) -> str:
    """'1', '<32', '<128' or '128': the partition-count classes the engines' rules distinguish."""
    if partitions <= 1:
        return "1"
    if partitions < 32:
        return "<32"
    if partitions < 128:
        return "<128"
    return "128"


def contiguity_class(access: Access) -> str:
    """How long the innermost contiguous run is against the whole access (per partition on chip)."""
    itemsize = ITEMSIZE.get(access.dtype, 1)
    hbm = access.buffer in HBM_BUFFERS
    whole = access.nbytes if hbm else access.free_elems * itemsize
    if access.contiguous_bytes >= whole:
        return "whole"
    if access.contiguous_bytes <= itemsize:
        return "element"
    if not hbm:   # the 512 B run threshold is a DMA matter; engines read a partition's row at any stride
        return "strided"
    return f"run>={DMA_RUN_BYTES}B" if access.contiguous_bytes >= DMA_RUN_BYTES else f"run<{DMA_RUN_BYTES}B"


def operand_form(access: Access) -> OperandForm:
    hbm = access.buffer in HBM_BUFFERS
    return OperandForm(access.role, "hbm" if hbm else access.buffer, len(access.shape), access.dtype,
                       "-" if hbm else partition_class(access.partitions), contiguity_class(access))


def src_shape_pattern(shape: Sequence[int]) -> str:
    """A dma_transpose source shape with the sizes abstracted: '1' for a unit dim, 'n' otherwise,
    the last dim split at 128 (the hardware-DGE limit), e.g. '[n,1,n<=128]'."""
    dims = ["1" if s == 1 else "n" for s in shape[:-1]]
    last = shape[-1]
    dims.append("1" if last == 1 else ("n<=128" if last <= 128 else "n>128"))
    return "[" + ",".join(dims) + "]"


def meets_hwdge_shape(shape: Sequence[int], itemsize: int) -> bool:
    """The nki.isa.dma_transpose page's hardware-DGE constraints: 2-D src.shape[0] == 16; 3-/4-D
    src.shape[0] in {1, 2, 4, 8, 16} with src.shape[0] * src.shape[-2] a multiple of 16;
    src.shape[-1] <= 128; a 2-byte dtype."""
    if itemsize != 2 or shape[-1] > 128:
        return False
    if len(shape) == 2:
        return shape[0] == 16
    return shape[0] in HWDGE_LEADING and (shape[0] * shape[-2]) % 16 == 0


def _attr_text(value: object) -> str:
    if isinstance(value, tuple):
        return "(" + ",".join(map(str, value)) + ")"
    return str(value)


def instr_form(instr: Instr) -> Form:
    """The form of one traced instruction."""
    attrs = {k: _attr_text(v) for k, v in instr.attrs if k in FORM_ATTRS}
    if instr.op == "dma_transpose":
        src = next(a for a in instr.accesses if a.role == "src")
        attrs["src_shape"] = src_shape_pattern(src.shape)
        attrs["hwdge_shape"] = str(meets_hwdge_shape(src.shape, ITEMSIZE.get(src.dtype, 0)))
    return Form(instr.op, instr.engine, tuple(operand_form(a) for a in instr.accesses),
                tuple(sorted(attrs.items())))


def group_forms(instrs: Iterable[Instr]) -> Counter[Form]:
    """Occurrences of each form in a sequence of instructions."""
    return Counter(instr_form(i) for i in instrs)


# ------------------------------------------------------------------------------ runs


@dataclass(frozen=True)
class Geometry:
    """One conv3d_bwd problem to trace (layouts as in the kernel)."""

    name: str
    dy_shape: tuple[int, ...]
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    stride: tuple[int, int, int] = (1, 1, 1)
    padding: tuple[int, ...] = (0,) * 6
    dilation: tuple[int, int, int] = (1, 1, 1)
    dtype: str = "bf16"
    lnc: int = 1
    grads: tuple[str, ...] = ("dx", "dw", "db")
    candidates: bool = False   # trace one plan per distinct code-path variant, not only the pick


def _from_case(case) -> Geometry:
    return Geometry(case.id, case.dy_shape, case.x_shape, case.w_shape, case.stride, case.padding,
                    case.dilation, case.dtype, case.lnc, case.grads)


def _from_bench(shape, lnc: int, candidates: bool = False) -> Geometry:
    g = shape.geometry
    return Geometry(f"{shape.name}-lnc{lnc}", g.dy_shape, g.x_shape, g.w_shape, shape.stride, shape.padding,
                    shape.dilation, shape.dtype, lnc, candidates=candidates)


def geometries(set_name: str) -> tuple[Geometry, ...]:
    """The geometries of a named set (see the module docstring)."""
    from conv3d_bwd.verify.bench import BENCH_SHAPES, SMOKE_SHAPES
    from conv3d_bwd.verify.cases import CASE_SETS

    bench = tuple(_from_bench(s, lnc) for lnc in (1, 2) for s in BENCH_SHAPES)
    if set_name == "default":
        return tuple(_from_case(c) for c in CASE_SETS["fast"])
    if set_name == "bench":
        return bench
    if set_name == "all":
        return (tuple(_from_case(c) for c in CASE_SETS["default"]) + bench
                + tuple(_from_bench(s, 1, candidates=True) for s in SMOKE_SHAPES))
    raise FormsError(f"set: {set_name!r} is not one of {', '.join(FORM_SETS)}")


FORM_SETS = ("default", "bench", "all")


def plan_variant_key(plan) -> tuple:
    """The methods and the non-numeric plan switches: plans equal here run the same code paths."""
    flags = tuple(sorted((k, v) for k, v in plan.tiles().items() if isinstance(v, (bool, str))))
    return tuple(sorted(plan.methods())), flags


def _plans(geom: Geometry) -> list[tuple[object, str]]:
    from conv3d_bwd.kernels.plan import plan_conv3d_bwd

    pick = plan_conv3d_bwd(geom.dy_shape, geom.x_shape, geom.w_shape, stride=geom.stride,
                           padding=geom.padding, dilation=geom.dilation, dtype=geom.dtype, target=TARGET,
                           lnc=geom.lnc, compute_dx="dx" in geom.grads, compute_dw="dw" in geom.grads,
                           compute_db="db" in geom.grads)
    plans = [(pick, "pick")]
    if geom.candidates:
        seen = {plan_variant_key(pick)}
        for cand in pick.feasible_candidates():
            key = plan_variant_key(cand)
            if key not in seen:
                seen.add(key)
                plans.append((cand, "candidate"))
    return plans


@dataclass(frozen=True)
class TraceRun:
    """One trace-only run: its instructions and nkisim's modelled time."""

    instrs: list[Instr]
    modelled_us: float | None


def trace_plan(geom: Geometry, plan) -> TraceRun:
    """The instructions (and modelled time) of one trace-only run of conv3d_bwd with ``plan`` forced."""
    from conv3d_bwd.nkisim.binding import ensure_nki

    ensure_nki(prefer="nkisim")
    from conv3d_bwd import nkisim
    from conv3d_bwd.kernels import conv3d_bwd
    from conv3d_bwd.kernels.plan import forced_plan

    dtype = NKI_DTYPES[geom.dtype]
    specs = [nkisim.TensorSpec(s, dtype) for s in (geom.dy_shape, geom.x_shape, geom.w_shape)]
    with forced_plan(plan):
        result = nkisim.run(conv3d_bwd, *specs, stride=geom.stride, padding=geom.padding,
                            dilation=geom.dilation, compute_dx="dx" in geom.grads,
                            compute_dw="dw" in geom.grads, compute_db="db" in geom.grads,
                            lnc=geom.lnc, target=TARGET, trace_only=True)
    summary = result.summary
    return TraceRun(result.trace.instrs, getattr(summary, "modelled_us", None) if summary else None)


def plan_traits(plan) -> frozenset[str]:
    """The plan's methods and the switches it turns on (bool fields that are True, string fields)."""
    traits = set(plan.methods())
    for key, value in plan.tiles().items():
        if value is True:
            traits.add(key)
        elif isinstance(value, str):
            traits.add(f"{key}={value}")
    traits.add(f"dtype={plan.dtype}")
    traits.add(f"lnc={plan.lnc}")
    return frozenset(traits)


# ------------------------------------------------------------------------------ the table


@dataclass
class FormRecord:
    """One observed form: how often, in how many traces, from picks or only candidates, evidence."""

    form: Form
    count: int = 0
    traces: int = 0
    in_pick: bool = False
    evidence: Evidence = Evidence.NOT_SHOWN
    rule: FormRule | None = None
    examples: list[str] = field(default_factory=list)
    traits: frozenset[str] | None = None   # plan traits common to every trace that issued the form

    def to_dict(self) -> dict:
        return {**self.form.to_dict(), "count": self.count, "traces": self.traces,
                "in_pick": self.in_pick, "evidence": self.evidence.value,
                "source": self.rule.source if self.rule else None,
                "rule_note": self.rule.note if self.rule else None, "examples": self.examples,
                "traits": sorted(self.traits or ())}


@dataclass
class FormTable:
    """Every form of the traced runs, with the runs that produced them."""

    records: dict[Form, FormRecord] = field(default_factory=dict)
    runs: list[dict] = field(default_factory=list)

    def add_trace(self, label: str, source: str, instrs: Sequence[Instr],
                  traits: frozenset[str] = frozenset()) -> Counter[Form]:
        counts = group_forms(instrs)
        for form, n in counts.items():
            rec = self.records.get(form)
            if rec is None:
                rec = self.records[form] = FormRecord(form)
                rec.evidence, rec.rule = evidence_for(form)
            rec.traits = traits if rec.traits is None else rec.traits & traits
            rec.count += n
            rec.traces += 1
            rec.in_pick = rec.in_pick or source == "pick"
            if len(rec.examples) < 2 and label not in rec.examples:
                rec.examples.append(label)
        self.runs.append({"label": label, "source": source, "instructions": len(instrs), "forms": len(counts),
                          "traits": sorted(traits)})
        return counts

    def common_traits(self) -> frozenset[str]:
        """The traits every traced plan has (they explain no form)."""
        sets = [frozenset(r["traits"]) for r in self.runs]
        return frozenset.intersection(*sets) if sets else frozenset()

    def not_shown(self) -> list[FormRecord]:
        return [r for r in self.sorted_records() if r.evidence is Evidence.NOT_SHOWN]

    def sorted_records(self) -> list[FormRecord]:
        return sorted(self.records.values(), key=lambda r: (r.form.op, r.form.engine, -r.count, r.form))

    def ops(self) -> set[str]:
        return {f.op for f in self.records}

    def to_dict(self) -> dict:
        return {"target": TARGET, "runs": self.runs, "forms": [r.to_dict() for r in self.sorted_records()]}


def build_table(geoms: Sequence[Geometry], log: Callable[[str], None] | None = None) -> FormTable:
    """Plan and trace every geometry (and, where asked, its candidate variants); group the forms."""
    table = FormTable()
    for geom in geoms:
        start = time.perf_counter()
        plans = _plans(geom)
        for i, (plan, source) in enumerate(plans):
            label = geom.name if source == "pick" else f"{geom.name}#{i}"
            table.add_trace(label, source, trace_plan(geom, plan).instrs, plan_traits(plan))
        if log:
            log(f"  {geom.name}: {len(plans)} plan(s), {time.perf_counter() - start:.1f} s")
    return table


# ------------------------------------------------------------------------------ alternatives


@dataclass(frozen=True)
class Alternative:
    """For one planner pick that issues not-shown forms: the candidate variant (of those tried, cheapest
    estimate first) with the fewest not-shown instructions, and both modelled times."""

    geometry: str
    pick_us: float | None
    pick_not_shown: int
    tried: int
    best_label: str | None = None
    best_us: float | None = None
    best_not_shown: int | None = None
    best_traits_added: tuple[str, ...] = ()
    best_traits_dropped: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def not_shown_instructions(instrs: Iterable[Instr]) -> int:
    """How many of the instructions have a form no public source shows."""
    verdicts: dict[Form, bool] = {}
    total = 0
    for instr in instrs:
        form = instr_form(instr)
        risky = verdicts.get(form)
        if risky is None:
            risky = verdicts[form] = evidence_for(form)[0] is Evidence.NOT_SHOWN
        total += risky
    return total


# The plan switches that choose how a transpose or a reduction is done: a DMA transpose or the PE,
# db on ScalarE or the PE. Every not-shown form of the kernel comes with one of them on.
TRANSPORT_SWITCHES = ("dw_xt_dma", "dw_dyt_dma", "dw_xt_copy", "dw_head_split", "dx_transposed", "pw_db_scalar",
                      "pw_dyt_dma")


def transport_key(plan) -> tuple:
    """The plan's methods and transport switches (how its transposes and db reductions are done)."""
    tiles = plan.tiles()
    return tuple(sorted(plan.methods())), tuple(bool(tiles.get(name)) for name in TRANSPORT_SWITCHES)


def find_alternatives(geoms: Sequence[Geometry], variants: int,
                      log: Callable[[str], None] | None = None) -> list[Alternative]:
    """Per geometry whose pick issues not-shown forms, trace the cheapest candidate (planner estimate)
    of up to ``variants`` other settings of the methods and transport switches, and keep the one with
    the fewest not-shown instructions (ties: the lower modelled time)."""
    out = []
    for geom in geoms:
        (pick, _), = _plans(replace(geom, candidates=False))
        first = trace_plan(geom, pick)
        risky = not_shown_instructions(first.instrs)
        if risky == 0:
            out.append(Alternative(geom.name, first.modelled_us, 0, 0))
            continue
        seen = {transport_key(pick)}
        best = None
        tried = 0
        for cand in pick.feasible_candidates():
            key = transport_key(cand)
            if key in seen:
                continue
            seen.add(key)
            tried += 1
            run = trace_plan(geom, cand)
            score = (not_shown_instructions(run.instrs), run.modelled_us or float("inf"))
            if best is None or score < best[0]:
                best = (score, cand, run)
            if score[0] == 0 or tried >= variants:
                break
        if best is None:
            out.append(Alternative(geom.name, first.modelled_us, risky, tried))
        else:
            (count, _), cand, run = best
            mine, theirs = plan_traits(pick), plan_traits(cand)
            out.append(Alternative(geom.name, first.modelled_us, risky, tried, cand.label, run.modelled_us, count,
                                   tuple(sorted(theirs - mine)), tuple(sorted(mine - theirs))))
        if log:
            a = out[-1]
            log(f"  {geom.name}: pick {a.pick_not_shown} not-shown instrs; best of {a.tried} variants "
                f"{a.best_not_shown} ({a.best_us} us vs {a.pick_us} us)")
    return out


# ------------------------------------------------------------------------------ output


def _attrs_text(form: Form) -> str:
    return ", ".join(f"{k}={v}" for k, v in form.attrs) or "-"


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(table: FormTable) -> str:
    """The forms as a Markdown table (one row per form), grouped by op."""
    lines = ["| op | engine | operands | attributes | count | traces | in a pick | evidence | source |",
             "|---|---|---|---|---:|---:|---|---|---|"]
    for r in table.sorted_records():
        f = r.form
        operands = "<br>".join(o.text() for o in f.operands)
        source = f"`{r.rule.source}`" if r.rule else "-"
        lines.append(f"| {f.op} | {f.engine} | {_escape(operands)} | {_escape(_attrs_text(f))} | {r.count} | "
                     f"{r.traces} | {'yes' if r.in_pick else 'no'} | {r.evidence.value} | {_escape(source)} |")
    return "\n".join(lines)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def op_summary(table: FormTable) -> str:
    """Per op and engine: forms and instructions by evidence."""
    rows: dict[tuple[str, str], dict[Evidence, list[int]]] = {}
    for r in table.records.values():
        cell = rows.setdefault((r.form.op, r.form.engine), {e: [0, 0] for e in Evidence})[r.evidence]
        cell[0] += 1
        cell[1] += r.count
    lines = ["| op | engine | " + " | ".join(f"{e.value}: forms (instructions)" for e in Evidence) + " |",
             "|---|---|" + "---:|" * len(Evidence)]
    for (op, engine), cells in sorted(rows.items()):
        lines.append(f"| {op} | {engine} | " + " | ".join(f"{cells[e][0]} ({cells[e][1]})" for e in Evidence) + " |")
    return "\n".join(lines)


def not_shown_table(table: FormTable) -> str:
    """The not-shown forms with the plan traits every trace that issued them had."""
    common = table.common_traits()
    lines = ["| op | operands | attributes | count | traces | in a pick | always with |",
             "|---|---|---|---:|---:|---|---|"]
    for r in table.not_shown():
        f = r.form
        traits = ", ".join(sorted((r.traits or frozenset()) - common)) or "-"
        lines.append(f"| {f.op} | {_escape('<br>'.join(o.text() for o in f.operands))} | "
                     f"{_escape(_attrs_text(f))} | {r.count} | {r.traces} | {'yes' if r.in_pick else 'no'} | "
                     f"{_escape(traits)} |")
    return "\n".join(lines)


def alternatives_table(alternatives: Sequence[Alternative]) -> str:
    lines = [("| geometry | pick: modelled us | pick: not-shown instrs | switch settings tried | best: not-shown "
             "instrs | its modelled us | its switches on / off (vs the pick) |"),
             "|---|---:|---:|---:|---:|---:|---|"]
    for a in alternatives:
        diff = ", ".join([f"+{t}" for t in a.best_traits_added] + [f"-{t}" for t in a.best_traits_dropped]) or "-"
        lines.append(f"| {a.geometry} | {_us(a.pick_us)} | {a.pick_not_shown} | {a.tried} | "
                     f"{'-' if a.best_not_shown is None else a.best_not_shown} | {_us(a.best_us)} | {_escape(diff)} |")
    return "\n".join(lines)


DOC_BEGIN = "<!-- verify.forms: generated tables begin (python -m conv3d_bwd.verify.forms --doc) -->"
DOC_END = "<!-- verify.forms: generated tables end -->"


def generated_block(table: FormTable, set_name: str, alternatives: Sequence[Alternative] | None) -> str:
    parts = [DOC_BEGIN, "", f"Set `{set_name}`, target {TARGET}: " + summary_lines(table)[0] + ".", "",
             "### By op", "", op_summary(table), "",
             "### Not-shown forms (a risk on hardware)", "",
             ("`always with`: the plan methods and switches that every trace issuing the form had (beyond "
             "those every traced plan had)."), "", not_shown_table(table), ""]
    if alternatives is not None:
        parts += ["### Alternatives the planner has (measured)", "",
                  ("Per bench pick (LNC1) that issues not-shown forms: for up to `--alternatives` other settings of the "
                   "methods and the plan switches that choose DMA transposes or ScalarE reductions ("
                   + ", ".join(f"`{n}`" for n in TRANSPORT_SWITCHES)
                   + "), the cheapest candidate by the planner's estimate is traced; the table gives the one "
                   "with the fewest not-shown instructions, and nkisim's modelled time of both."), "", alternatives_table(alternatives), ""]
    parts += ["### Every form", "", markdown_table(table), "", DOC_END]
    return "\n".join(parts)


def write_doc(path: str, block: str) -> None:
    """Replace the generated block of the document at ``path`` (the prose around it is kept)."""
    try:
        with open(path) as fh:
            text = fh.read()
    except FileNotFoundError:
        text = f"# Instruction forms of conv3d_bwd\n\n{DOC_BEGIN}\n{DOC_END}\n"
    start, end = text.find(DOC_BEGIN), text.find(DOC_END)
    if start < 0 or end < start:
        raise FormsError(f"doc: {path} has no '{DOC_BEGIN}' ... '{DOC_END}' block to replace")
    with open(path, "w") as fh:
        fh.write(text[:start] + block + text[end + len(DOC_END):])


def summary_lines(table: FormTable) -> list[str]:
    by_evidence = Counter(r.evidence for r in table.records.values())
    picks = sum(1 for r in table.runs if r["source"] == "pick")
    return [f"{len(table.runs)} traces ({picks} planner picks), {sum(r['instructions'] for r in table.runs)} "
            f"instructions, {len(table.records)} forms of {len(table.ops())} ops: "
            + ", ".join(f"{by_evidence.get(e, 0)} {e.value}" for e in Evidence)]


def text_report(table: FormTable) -> str:
    rows = []
    for r in table.sorted_records():
        f = r.form
        rows.append(f"{f.op:<14} {f.engine:<7} {r.count:>7} {r.traces:>5} {'pick' if r.in_pick else 'cand':<4} "
                    f"{r.evidence.value:<22} {' | '.join(o.text() for o in f.operands)}  [{_attrs_text(f)}]")
    return "\n".join(rows + summary_lines(table))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conv3d_bwd.verify.forms", description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", default="default", choices=FORM_SETS, help="which geometries to trace")
    parser.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                        help="write the table as JSON (to stdout without a PATH)")
    parser.add_argument("--markdown", default=None, metavar="PATH", help="write the Markdown table to PATH")
    parser.add_argument("--doc", default=None, metavar="PATH",
                        help="replace the generated block of the document PATH (e.g. kernels/instruction-forms.md)")
    parser.add_argument("--alternatives", type=int, default=0, metavar="N",
                        help="for the bench shapes' LNC1 picks, trace the cheapest candidate of up to N other settings "
                             "of the methods and transport switches each and report the one with the fewest "
                             "not-shown instructions (0: off)")
    args = parser.parse_args(argv)
    if args.alternatives < 0:
        parser.error(f"--alternatives: {args.alternatives} must be >= 0")
    geoms = geometries(args.set)
    start = time.perf_counter()
    to_stderr = args.json == "-"

    def log(message: str) -> None:
        print(message, file=sys.stderr if to_stderr else sys.stdout, flush=True)

    table = build_table(geoms, log=log)
    alternatives = None
    if args.alternatives:
        alternatives = find_alternatives([g for g in geometries("bench") if g.lnc == 1], args.alternatives, log)
    elapsed = time.perf_counter() - start
    record = {**table.to_dict(), "set": args.set, "seconds": elapsed,
              "alternatives": None if alternatives is None else [a.to_dict() for a in alternatives]}
    if args.json == "-":
        json.dump(record, sys.stdout, indent=1)
        print()
    else:
        print(text_report(table))
        if alternatives is not None:
            print(alternatives_table(alternatives))
        print(f"{elapsed:.1f} s")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(record, fh, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(markdown_table(table) + "\n")
    if args.doc:
        write_doc(args.doc, generated_block(table, args.set, alternatives))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
