"""What the Neuron documentation and AWS's own NKI kernels show of each instruction form.

Written by reading, not derived: each ``FormRule`` is a set of forms one source shows, with the
source named (the ``nki.isa`` API page of the op in the Neuron documentation, or a file of AWS's
public kernel repositories aws-neuron/nki-library and aws-neuron/nki-samples). A field left
``None`` is not constrained by the rule. ``evidence_for`` marks a form with the strongest evidence
that matches: documented, else shown in AWS kernels, else not shown (a risk on hardware: no public
source says the compiler and the hardware accept that form).

What counts as documented: the API page (or the architecture guide) states the form's buffers,
dtypes, engine and attributes as allowed, and, where the page describes a lowering with its own
limits, the form meets them. ``dma_transpose`` is the one op where that matters: its API page
describes the direct (non-indirect) transpose only as the hardware-DGE lowering, with its shape
limits; the Trainium2 architecture guide adds 2-D transposes (HBM to SBUF, SBUF to SBUF) of any
tile size. A 3-D or 4-D direct transpose outside the hardware-DGE limits is allowed by the
signature, but no lowering of it is described, so it counts only if AWS's kernels show it.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conv3d_bwd.verify.forms import Form, OperandForm


class Evidence(str, Enum):
    DOCUMENTED = "documented"
    SHOWN = "shown in AWS kernels"
    NOT_SHOWN = "not shown"


def _set(values: Iterable | None) -> frozenset | None:
    return None if values is None else frozenset(values)


@dataclass(frozen=True)
class OperandRule:
    """Constraints on the operand with this role (None: any)."""

    role: str
    buffers: frozenset[str] | None = None
    dtypes: frozenset[str] | None = None
    ranks: frozenset[int] | None = None
    partitions: frozenset[str] | None = None
    contiguity: frozenset[str] | None = None

    def matches(self, operand: OperandForm) -> bool:
        return all(allowed is None or value in allowed for allowed, value in (
            (self.buffers, operand.buffer), (self.dtypes, operand.dtype), (self.ranks, operand.rank),
            (self.partitions, operand.partitions), (self.contiguity, operand.contiguity)))


@dataclass(frozen=True)
class FormRule:
    """A set of forms one public source shows."""

    op: str
    kind: Evidence
    source: str
    engines: frozenset[str] | None = None
    operands: tuple[OperandRule, ...] = ()
    attrs: tuple[tuple[str, frozenset[str]], ...] = ()
    note: str = ""

    def matches(self, form: Form) -> bool:
        if form.op != self.op or (self.engines is not None and form.engine not in self.engines):
            return False
        for rule in self.operands:
            operand = form.operand(rule.role)
            if operand is None or not rule.matches(operand):
                return False
        return all(form.attr(name) in allowed for name, allowed in self.attrs)


def _op(role: str, buffers=None, dtypes=None, ranks=None, partitions=None, contiguity=None) -> OperandRule:
    return OperandRule(role, _set(buffers), _set(dtypes), _set(ranks), _set(partitions), _set(contiguity))


def _attrs(**allowed: Iterable[str]) -> tuple[tuple[str, frozenset[str]], ...]:
    return tuple(sorted((name, frozenset(values)) for name, values in allowed.items()))


def _page(op: str) -> str:
    return f"Neuron docs: nki.isa.{op} API page (nki/api/generated/nki.isa.{op})"


def _library(path: str) -> str:
    return f"aws-neuron/nki-library: src/nkilib_src/nkilib/{path}"


_TRN2_GUIDE = "Neuron docs: Trainium2 architecture guide, DMA Transpose (nki/guides/architecture/trainium2_arch)"
_DGE_PAGE = ("Neuron docs: Descriptor Generation Engine (DGE) Reference, 'hwdge --- hardware DGE' and "
             "'Hardware DGE copy' (nki/deep-dives/nki-dge)")

ON_CHIP = ("sbuf", "psum")
DMA_MEMORY = ("hbm", "sbuf")
MATMUL_INPUTS = ("bfloat16", "float16", "float8_e4m3", "float8_e5m2")
FP32_INPUTS = ("float32", "tfloat32")
TWO_BYTE = ("bfloat16", "float16")
RUNS = ("whole", "strided", "run>=512B", "run<512B")   # a contiguous innermost run (not element-strided)
FLOATS = ("bfloat16", "float16", "float32")

RULES: tuple[FormRule, ...] = (
    # --- TensorE ------------------------------------------------------------------------------
    FormRule("nc_matmul", Evidence.DOCUMENTED, _page("nc_matmul"), frozenset({"tensor"}),
             (_op("stationary", ["sbuf"], MATMUL_INPUTS), _op("moving", ["sbuf"], MATMUL_INPUTS),
              _op("dst", ["psum"], ["float32"])),
             _attrs(is_transpose=["False"], accumulate=["None", "True", "False"]),
             "inputs in SBUF, dst fp32 in PSUM; partition (contraction) <= 128, stationary free <= 128, "
             "moving free <= 512 (NC-v2/v3); accumulate None/True/False"),
    FormRule("nc_matmul", Evidence.DOCUMENTED, _page("nc_matmul"), frozenset({"tensor"}),
             (_op("stationary", ["sbuf"], FP32_INPUTS), _op("moving", ["sbuf"], FP32_INPUTS),
              _op("dst", ["psum"], ["float32"])),
             _attrs(is_transpose=["False"], accumulate=["None", "True", "False"]),
             "fp32/tf32 inputs: both inputs must be fp32/tf32"),
    FormRule("nc_transpose", Evidence.DOCUMENTED, _page("nc_transpose"), frozenset({"tensor"}),
             (_op("data", ["sbuf"]), _op("dst", ["psum"])), (),
             "TensorE transpose: data in SBUF, dst in PSUM of the same dtype, input <= [128, 128]; "
             "free axes are flattened"),
    FormRule("nc_transpose", Evidence.DOCUMENTED, _page("nc_transpose"), frozenset({"vector"}),
             (_op("data", ON_CHIP), _op("dst", ON_CHIP)), (),
             "VectorE transpose: SBUF or PSUM, input <= [32, 32]"),
    # --- DMA ----------------------------------------------------------------------------------
    FormRule("dma_copy", Evidence.DOCUMENTED, _page("dma_copy"), frozenset({"dma"}),
             (_op("src", DMA_MEMORY), _op("dst", DMA_MEMORY)), _attrs(dge_mode=["unknown"]),
             "src and dst in HBM or SBUF, any dtypes (cast through fp32), equal element counts; "
             "dge_mode unknown lets the compiler choose"),
    FormRule("dma_copy", Evidence.DOCUMENTED, _DGE_PAGE, frozenset({"dma"}),
             (_op("src", ["hbm"]), _op("dst", ["sbuf"])), _attrs(dge_mode=["hwdge"]),
             "hardware-DGE copy HBM -> SBUF (NeuronCore-v3+), triggered by the Sync or Scalar engine "
             "(engine=sync / scalar); the page states no shape limit for copies (only for transposes) and "
             "the dma_copy API page documents both arguments"),
    FormRule("dma_transpose", Evidence.DOCUMENTED, _page("dma_transpose"), frozenset({"dma"}),
             (_op("src", DMA_MEMORY, TWO_BYTE), _op("dst", ["sbuf"], TWO_BYTE)),
             _attrs(dge_mode=["unknown", "hwdge"], hwdge_shape=["True"],
                    axes=["(1,0)", "(2,1,0)", "(3,1,2,0)"]),
             "direct transpose within the hardware-DGE limits: 2-D src.shape[0] == 16, 3-/4-D "
             "src.shape[0] in {1,2,4,8,16} and src.shape[0]*src.shape[-2] % 16 == 0, src.shape[-1] <= 128, "
             "2-byte dtype; src in HBM or SBUF, dst in SBUF"),
    FormRule("dma_transpose", Evidence.DOCUMENTED, _TRN2_GUIDE, frozenset({"dma"}),
             (_op("src", DMA_MEMORY, TWO_BYTE, [2]), _op("dst", ["sbuf"], TWO_BYTE, [2])),
             _attrs(dge_mode=["unknown"], axes=["(1,0)"]),
             "2-D HBM-to-SBUF ([512, 128] -> [128, 512]) and SBUF-to-SBUF ([128, 128]) transposes with the "
             "compiler's DGE choice; other tile sizes work 'at the cost of DMA performance' (multiples of 128 "
             "partitions and 16 contiguous elements are a performance, not a functionality, requirement)"),
    FormRule("dma_transpose", Evidence.SHOWN, _library("core/attention/attention_cte.py"), frozenset({"dma"}),
             (_op("src", ["hbm"], TWO_BYTE, [4], contiguity=RUNS), _op("dst", ["sbuf"], TWO_BYTE, [4])),
             _attrs(dge_mode=["unknown"], axes=["(3,1,2,0)"], src_shape=["[n,1,1,n<=128]", "[n,1,1,n>128]"]),
             "a 2-D transpose of q / k tiles from HBM written as 4-D [rows, 1, 1, cols] by .ap(), reading "
             "contiguous rows (also "
             "core/subkernels/norm_tkg_utils.py, core/qkv/qkv_tkg_mx_impl.py, experimental/collectives/fgcc.py)"),
    FormRule("dma_transpose", Evidence.SHOWN, _library("core/qkv/qkv_cte.py"), frozenset({"dma"}),
             (_op("src", ["hbm"], TWO_BYTE, [4], contiguity=RUNS), _op("dst", ["sbuf"], TWO_BYTE, [4])),
             _attrs(dge_mode=["unknown"], axes=["(3,1,2,0)"], src_shape=["[n,1,n,n<=128]"]),
             "4-D [rows, 1, sub-tiles, 128] from HBM: several 128-column sub-tiles in one transfer"),
    FormRule("dma_transpose", Evidence.SHOWN, _library("core/attention/attention_cte.py"), frozenset({"dma"}),
             (_op("src", ["sbuf"], TWO_BYTE, [4], contiguity=RUNS), _op("dst", ["sbuf"], TWO_BYTE, [4])),
             _attrs(dge_mode=["unknown"], axes=["(3,1,2,0)"],
                    src_shape=["[n,1,n,n<=128]", "[n,1,1,n<=128]"]),
             "SBUF to SBUF 4-D transposes of the exp tiles ([p, 1, sub-tiles, 128] and a [p, 1, 1, rest] tail)"),
    FormRule("sendrecv", Evidence.DOCUMENTED, _page("sendrecv"), frozenset({"dma"}),
             (_op("src", ["sbuf"]), _op("dst", ["sbuf"])), (),
             "NC-v3+ with LNC=2; src and dst in SBUF, same dtype, shape and layout"),
    # --- Vector / Scalar / GpSimd ----------------------------------------------------------------
    FormRule("memset", Evidence.DOCUMENTED, _page("memset"), frozenset({"vector", "gpsimd"}),
             (_op("dst", ["sbuf"]),), (), "any NKI dtype, Vector or GpSimd engine"),
    FormRule("memset", Evidence.DOCUMENTED, _page("memset"), frozenset({"vector"}),
             (_op("dst", ["psum"]),), (), "PSUM only from the Vector engine (GpSimd cannot access PSUM)"),
    FormRule("tensor_copy", Evidence.DOCUMENTED, _page("tensor_copy"), frozenset({"vector", "scalar"}),
             (_op("src", ON_CHIP), _op("dst", ON_CHIP)), (),
             "Vector or Scalar (NC-v3+) engine, SBUF or PSUM, dtype conversion through fp32"),
    FormRule("tensor_copy", Evidence.DOCUMENTED, _page("tensor_copy"), frozenset({"gpsimd"}),
             (_op("src", ["sbuf"]), _op("dst", ["sbuf"])), (), "GpSimd engine: SBUF only"),
    FormRule("tensor_tensor", Evidence.DOCUMENTED, _page("tensor_tensor"), frozenset({"vector"}),
             (_op("data1", ["sbuf"]), _op("data2", ON_CHIP), _op("dst", ON_CHIP)), (),
             "data1 in SBUF, data2 in SBUF or PSUM (not both in PSUM), dst in SBUF or PSUM; float math in fp32"),
    FormRule("tensor_tensor", Evidence.DOCUMENTED, _page("tensor_tensor"), frozenset({"vector"}),
             (_op("data1", ["psum"]), _op("data2", ["sbuf"]), _op("dst", ON_CHIP)), (),
             "data1 in PSUM with data2 in SBUF"),
    FormRule("tensor_tensor", Evidence.DOCUMENTED, _page("tensor_tensor"), frozenset({"gpsimd"}),
             (_op("data1", ["sbuf"]), _op("data2", ["sbuf"]), _op("dst", ["sbuf"])), (),
             "GpSimd engine: SBUF operands only"),
    FormRule("tensor_reduce", Evidence.DOCUMENTED, _page("tensor_reduce"), frozenset({"vector"}),
             (_op("data", ON_CHIP), _op("dst", ON_CHIP)), (),
             "Vector engine, SBUF or PSUM, trailing free axes, any dtype (fp32 math)"),
    FormRule("activation", Evidence.DOCUMENTED, _page("activation"), frozenset({"scalar"}),
             (_op("data", ON_CHIP), _op("dst", ON_CHIP)),
             _attrs(reduce_cmd=["idle", "reset", "reduce", "reset_reduce"]),
             "Scalar engine, data and dst in SBUF or PSUM, any dtype; reduce_op add with reduce_cmd"),
)


def evidence_for(form: Form, rules: Iterable[FormRule] = RULES) -> tuple[Evidence, FormRule | None]:
    """The strongest evidence for ``form`` and the rule that gives it (None when not shown)."""
    best: tuple[Evidence, FormRule | None] = (Evidence.NOT_SHOWN, None)
    for rule in rules:
        if rule.matches(form):
            if rule.kind is Evidence.DOCUMENTED:
                return rule.kind, rule
            if best[1] is None:
                best = (rule.kind, rule)
    return best
