"""``nki.collectives`` for one rank: the names, signatures and rules of the Neuron docs, run where the
single-rank result is defined.

Source: the Neuron docs' ``nki.collectives`` reference (``nki/api/nki.collectives.rst`` and its stubs
``nki/api/nki/collectives/__init__.py``: ``all_reduce``, ``all_gather``, ``all_gather_v``, ``reduce_scatter``,
``all_to_all``, ``all_to_all_v``, ``collective_permute``, ``collective_permute_implicit``,
``collective_permute_implicit_reduce``, ``collective_permute_implicit_current_processing_rank_id``, ``rank_id``,
``ReplicaGroup``).

nkisim runs one kernel launch: one rank, rank 0 (an LNC2 launch is one logical core, so one rank: the docs
count ranks per logical core, "each rank-list must have exactly 4 ranks (intra-chip)" under LNC=2). A
collective whose replica group holds only this rank has a defined result: all_reduce, all_gather,
reduce_scatter and all_to_all over one rank copy each source to its destination; a ring of one
(``collective_permute_implicit``) sends to itself; ``collective_permute_implicit_reduce`` delivers
``op(srcs0, srcs1)``; the rank id is 0. A group naming any other rank needs ranks nkisim does not run: an
``NkiUsageError``. ``all_gather_v`` and ``all_to_all_v`` need several ranks by their own documented limits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .context import current_core
from .errors import NkiUsageError, violation
from .isa_core import F32, access, tensor, write
from .isa_register import VirtualRegister
from .language import NKIObject
from .memory import SBUF
from .ops import as_op
from .tensor import NkiTensor
from .trace import Instr

RANK = 0   # the one rank nkisim emulates
_REDUCE_OPS = frozenset({"add", "minimum", "maximum"})   # "nl.add, nl.minimum, or nl.maximum"
_MAX_CHANNELS = 4   # "The maximum number of channels is 4"

__all__ = ["ReplicaGroup", "all_gather", "all_gather_v", "all_reduce", "all_to_all", "all_to_all_v",
           "collective_permute", "collective_permute_implicit", "collective_permute_implicit_current_processing_rank_id",
           "collective_permute_implicit_reduce", "rank_id", "reduce_scatter"]


@dataclass
class ReplicaGroup(NKIObject):
    """The ranks a collective runs on, as a list of rank lists (AWS's kernels pass it positionally:
    ``ReplicaGroup([[0, 1, 2, 3]])``). "Sub-groups represented by lists of ranks should not have any
    overlap." The docs do not name the field; nkisim calls it ``rank_lists``."""

    rank_lists: Any = None

    def __post_init__(self) -> None:
        try:
            lists = [[int(r) for r in ranks] for ranks in self.rank_lists]
        except TypeError:
            raise NkiUsageError(f"ReplicaGroup: {self.rank_lists!r} must be a list of rank lists") from None
        flat = [r for ranks in lists for r in ranks]
        if not lists or any(not ranks for ranks in lists):
            raise NkiUsageError(f"ReplicaGroup: {self.rank_lists!r} needs at least one non-empty rank list")
        if len(flat) != len(set(flat)) or any(r < 0 for r in flat):
            raise NkiUsageError(f"ReplicaGroup: {lists}: rank lists must not overlap (and ranks are >= 0)")
        self.rank_lists = lists


def _own_list(ins: str, group: object) -> list[int]:
    """This rank's list of ``group``: it must be this rank alone (the only one nkisim runs)."""
    if not isinstance(group, ReplicaGroup):
        raise violation(ins, "replica_group", f"must be an nki.collectives.ReplicaGroup, got {type(group).__name__}")
    others = sorted({r for ranks in group.rank_lists for r in ranks} - {RANK})
    if others:
        raise NkiUsageError(f"{ins}: argument 'replica_group': {group.rank_lists} names rank(s) {others}; nkisim "
                            f"runs one rank (rank {RANK}), so only a group of that rank alone has a result here")
    return [RANK]


def _tensors(ins: str, role: str, value: object, count: int | None = None) -> list[NkiTensor]:
    if not isinstance(value, (list, tuple)) or not value:
        raise violation(ins, role, f"must be a non-empty list of tensors, got {value!r}")
    if count is not None and len(value) != count:
        raise violation(ins, role, f"{len(value)} tensors: exactly {count} supported")
    return [tensor(ins, f"{role}[{i}]", t) for i, t in enumerate(value)]


def _memory(ins: str, tensors: list[tuple[str, NkiTensor]], hbm_only: bool, coalesced: bool) -> None:
    """"Tensors can reside on either HBM or SBUF. However, mixing memory spaces is not supported ...
    Coalesced collective communication (multiple tensors) is only supported when tensors are on HBM."""
    kinds = {("sbuf" if t.storage.buffer == SBUF else "hbm" if t.storage.buffer.endswith("hbm") else t.storage.buffer)
             for _, t in tensors}
    if "psum" in kinds:
        role = next(r for r, t in tensors if t.storage.buffer == "psum")
        raise violation(ins, role, "must be in HBM or SBUF, got psum")
    if hbm_only and kinds != {"hbm"}:
        role = next(r for r, t in tensors if t.storage.buffer == SBUF)
        raise violation(ins, role, "must be in HBM (SBUF is not supported for this collective)")
    if len(kinds) > 1:
        raise violation(ins, tensors[-1][0], "all tensors must be on HBM or all on SBUF (no mixing)")
    if coalesced and kinds == {"sbuf"}:
        raise violation(ins, tensors[0][0], "several tensors (coalesced) are supported only on HBM")


def _priority(ins: str, priority: object) -> None:
    if priority is not None and priority not in (0, 1, 2, 3):
        raise violation(ins, "priority", f"{priority!r} must be 0-3 or None")


def _reduce_op(ins: str, op: object) -> Any:
    o = as_op(op, ins, "op", 2)
    if o.name not in _REDUCE_OPS:
        raise violation(ins, "op", f"{o.name}: the reduction must be nl.add, nl.minimum or nl.maximum")
    return o


def _copy(ins: str, pairs: list[tuple[NkiTensor, NkiTensor]], extra: tuple = ()) -> None:
    """Each (src, dst) pair: dst = src (the single-rank result); traced as one DMA-engine instruction."""
    core = current_core()
    accesses = []
    for i, (src, dst) in enumerate(pairs):
        _same_layout(ins, i, src, dst)
        if not core.trace_only:
            write(dst, np.asarray(src.array()))
        accesses += [access(src, "srcs", False), access(dst, "dsts", True)]
    core.record(Instr(ins, "dma", tuple(accesses), (("ranks", 1), *extra), core.program_id))


def _same_layout(ins: str, i: int, src: NkiTensor, dst: NkiTensor) -> None:
    if src.dtype != dst.dtype:
        raise NkiUsageError(f"{ins}: dsts[{i}] dtype {dst.dtype} differs from srcs[{i}] {src.dtype}: a converting "
                            "collective is not documented, so not emulated")
    if src.size != dst.size:
        raise violation(ins, f"dsts[{i}]", f"{dst.size} elements {dst.shape}: over one rank it receives the "
                        f"{src.size} elements {src.shape} of srcs[{i}]")


def _collective_dim(ins: str, dim: object, tensors: list[NkiTensor]) -> None:
    on_sbuf = tensors[0].storage.buffer == SBUF
    allowed = (0, 1) if on_sbuf and ins == "all_gather" else (0,)
    if dim not in allowed:
        raise violation(ins, "collective_dim", f"{dim!r}: only {' or '.join(map(str, allowed))} supported for "
                        f"{'SBUF' if on_sbuf else 'HBM'} tensors")


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None) -> None:
    """All-reduce over ``replica_group`` with ``op``; over one rank each dst receives its src."""
    ins = "all_reduce"
    s, d = _tensors(ins, "srcs", srcs), _tensors(ins, "dsts", dsts, len(srcs))
    _memory(ins, [*(("srcs", t) for t in s), *(("dsts", t) for t in d)], False, len(s) > 1)
    o = _reduce_op(ins, op)
    _priority(ins, priority)
    _own_list(ins, replica_group)
    _copy(ins, list(zip(s, d)), (("op", o.name),))


def all_gather(srcs, dsts, replica_group, collective_dim, priority=None, name=None) -> None:
    """All-gather along ``collective_dim``; over one rank the concatenation is the src itself."""
    ins = "all_gather"
    s, d = _tensors(ins, "srcs", srcs), _tensors(ins, "dsts", dsts, len(srcs))
    _memory(ins, [*(("srcs", t) for t in s), *(("dsts", t) for t in d)], False, len(s) > 1)
    _collective_dim(ins, collective_dim, s)
    _priority(ins, priority)
    _own_list(ins, replica_group)
    _copy(ins, list(zip(s, d)))


def reduce_scatter(srcs, dsts, replica_group, collective_dim, op, priority=None, name=None) -> None:
    """Reduce then scatter along ``collective_dim``; over one rank each dst receives its whole src."""
    ins = "reduce_scatter"
    s, d = _tensors(ins, "srcs", srcs), _tensors(ins, "dsts", dsts, len(srcs))
    _memory(ins, [*(("srcs", t) for t in s), *(("dsts", t) for t in d)], False, len(s) > 1)
    _collective_dim(ins, collective_dim, s)
    o = _reduce_op(ins, op)
    _priority(ins, priority)
    _own_list(ins, replica_group)
    _copy(ins, list(zip(s, d)), (("op", o.name),))


def all_to_all(srcs, dsts, replica_group, collective_dim, priority=None, name=None) -> None:
    """All-to-all along ``collective_dim`` (HBM only); over one rank each dst receives its src."""
    ins = "all_to_all"
    s, d = _tensors(ins, "srcs", srcs), _tensors(ins, "dsts", dsts, len(srcs))
    _memory(ins, [*(("srcs", t) for t in s), *(("dsts", t) for t in d)], True, len(s) > 1)
    _collective_dim(ins, collective_dim, s)
    _priority(ins, priority)
    _own_list(ins, replica_group)
    _copy(ins, list(zip(s, d)))


def all_gather_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None) -> None:
    """Not emulated: its documented limits ("Only LNC=2 is supported. Each rank-list must have exactly 4
    ranks") need four ranks, and nkisim runs one."""
    raise NkiUsageError("all_gather_v: needs rank lists of exactly 4 ranks (nki.collectives.all_gather_v, 'Current "
                        "limitations'); nkisim runs one rank")


def all_to_all_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None) -> None:
    """Not emulated: the docs restrict it to several devices (NeuronSwitch: LNC=2 and more than one
    device; otherwise inter-node replica groups), and nkisim runs one rank."""
    raise NkiUsageError("all_to_all_v: needs ranks on several devices (nki.collectives.all_to_all_v, 'Current "
                        "restrictions'); nkisim runs one rank")


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None) -> None:
    """Send along explicit (source, target) pairs (HBM, one tensor each); over one rank only (0, 0) exists:
    dst receives src, and without that pair dst is left as it is."""
    ins = "collective_permute"
    s, d = _tensors(ins, "srcs", srcs, 1), _tensors(ins, "dsts", dsts, 1)
    _memory(ins, [("srcs", s[0]), ("dsts", d[0])], True, False)
    _priority(ins, priority)
    try:
        pairs = [(int(a), int(b)) for a, b in source_target_pairs]
    except (TypeError, ValueError):
        raise violation(ins, "source_target_pairs", f"{source_target_pairs!r} must be (source, target) rank "
                        "pairs") from None
    others = sorted({r for pair in pairs for r in pair} - {RANK})
    if others:
        raise NkiUsageError(f"{ins}: argument 'source_target_pairs': {pairs} names rank(s) {others}; nkisim runs one "
                            f"rank (rank {RANK})")
    if (RANK, RANK) in pairs:
        _copy(ins, [(s[0], d[0])])


def _channels(ins: str, role: str, by_channel: object, channel_ids: object) -> list[NkiTensor]:
    if not isinstance(by_channel, (list, tuple)) or not by_channel:
        raise violation(ins, role, f"must be a non-empty list of per-channel tensor lists, got {by_channel!r}")
    ids = list(channel_ids) if isinstance(channel_ids, (list, tuple)) else None
    if ids is None or ids != list(range(len(ids))) or not ids:
        raise violation(ins, "channel_ids", f"{channel_ids!r} must be consecutive integers starting from 0")
    if len(ids) > _MAX_CHANNELS:
        raise violation(ins, "channel_ids", f"{len(ids)} channels: at most {_MAX_CHANNELS}")
    if len(by_channel) != len(ids):
        raise violation(ins, role, f"{len(by_channel)} channels, channel_ids has {len(ids)}")
    return [_tensors(ins, f"{role}[{c}]", inner, 1)[0] for c, inner in enumerate(by_channel)]


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group, channel_ids=(0,), priority=None,
                                name=None) -> None:
    """Ring send to the successor, receive from the predecessor; a ring of one rank is itself."""
    ins = "collective_permute_implicit"
    s = _channels(ins, "srcs_by_channel", srcs_by_channel, channel_ids)
    d = _channels(ins, "dsts_by_channel", dsts_by_channel, channel_ids)
    _priority(ins, priority)
    _own_list(ins, replica_group)
    _copy(ins, list(zip(s, d)))


def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel, replica_group, op,
                                       channel_ids=(0,), priority=None, name=None) -> None:
    """Each rank sends ``op(srcs0, srcs1)`` to its successor; a ring of one receives its own result."""
    ins = "collective_permute_implicit_reduce"
    s0 = _channels(ins, "srcs0_by_channel", srcs0_by_channel, channel_ids)
    s1 = _channels(ins, "srcs1_by_channel", srcs1_by_channel, channel_ids)
    d = _channels(ins, "dsts_by_channel", dsts_by_channel, channel_ids)
    o = _reduce_op(ins, op)
    _priority(ins, priority)
    _own_list(ins, replica_group)
    core = current_core()
    accesses = []
    for i, (a, b, out) in enumerate(zip(s0, s1, d)):
        _same_layout(ins, i, a, out)
        _same_layout(ins, i, b, out)
        if not core.trace_only:
            va = np.asarray(a.array()).astype(F32).reshape(-1)
            vb = np.asarray(b.array()).astype(F32).reshape(-1)
            write(out, o.fn(va, vb))
        accesses += [access(a, "srcs0", False), access(b, "srcs1", False), access(out, "dsts", True)]
    core.record(Instr(ins, "dma", tuple(accesses), (("ranks", 1), ("op", o.name)), core.program_id))


def collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group, channel_id=0,
                                                           name=None) -> VirtualRegister:
    """The rank whose data the ring step processes: at iteration 0 the caller's own, later its
    predecessors'; in a ring of one always rank 0. A scalar register."""
    ins = "collective_permute_implicit_current_processing_rank_id"
    current_core()
    if not isinstance(channel_id, int) or not 0 <= channel_id < _MAX_CHANNELS:
        raise violation(ins, "channel_id", f"{channel_id!r} must be 0 to {_MAX_CHANNELS - 1}")
    _own_list(ins, replica_group)
    return VirtualRegister(RANK)


def rank_id(name=None) -> VirtualRegister:
    """The rank id of the current rank: 0 (nkisim runs one rank). A register, as the docs return today."""
    current_core()
    return VirtualRegister(RANK)
