"""Per-target hardware facts for the emulator's rules and capacities, and the target chosen from the environment."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from .errors import NkiUsageError

TARGET_ENV = "NEURON_PLATFORM_TARGET_OVERRIDE"
_ALIASES = {"trn1": "trn1", "inf2": "trn1", "gen2": "trn1",
            "trn2": "trn2", "gen3": "trn2",
            "trn3": "trn3", "gen4": "trn3"}


@dataclass(frozen=True)
class TargetSpec:
    """What the emulator's rules and capacities depend on, for one NeuronCore generation."""

    name: str                     # trn1 | trn2 | trn3
    nc_version: str               # gen2 | gen3 | gen4
    sbuf_partition_bytes: int     # physical SBUF per partition
    usable_sbuf_bytes: int        # tile_size.total_available_sbuf_size (per partition)
    psum_partition_bytes: int = 16 * 1024
    psum_bank_bytes: int = 2048
    pmax: int = 128
    generation: int = field(init=False)   # 2, 3, 4 from nc_version (a field: rules read it per instruction)

    def __post_init__(self) -> None:
        object.__setattr__(self, "generation", int(self.nc_version[-1]))

    @property
    def psum_banks(self) -> int:
        return self.psum_partition_bytes // self.psum_bank_bytes


# Physical SBUF per partition: the architecture guides' 24 MiB (trn1), 28 MiB (trn2), 32 MiB (trn3) over 128
# partitions. Usable: 212,984 on trn2 matches nki-library's 224*1024-16384-8-256; the trn1/trn3 usable sizes
# are not published (unverified figures; they bound the emulator's capacity check, not the cost model).
TARGETS: dict[str, TargetSpec] = {
    "trn1": TargetSpec("trn1", "gen2", 192 * 1024, 180_224),
    "trn2": TargetSpec("trn2", "gen3", 224 * 1024, 212_984),
    "trn3": TargetSpec("trn3", "gen4", 256 * 1024, 245_752),
}


def resolve_target(name: object) -> TargetSpec:
    """The spec for a target name or alias (trn1/inf2/gen2, trn2/gen3, trn3/gen4)."""
    if isinstance(name, TargetSpec):
        return name
    key = _ALIASES.get(str(name).strip().lower()) if isinstance(name, str) else None
    if key is None:
        raise NkiUsageError(f"target: {name!r} is not a known target (expected one of {sorted(_ALIASES)})")
    return TARGETS[key]


def target_from_env(default: str = "trn3") -> TargetSpec:
    """The target named by NEURON_PLATFORM_TARGET_OVERRIDE; unset means ``default`` (trn3, like nki)."""
    value = os.environ.get(TARGET_ENV, "").strip()
    return resolve_target(value or default)
