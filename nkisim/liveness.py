"""PSUM liveness in program order: a tile is dead after its last use, as the compiler's allocator sees it.

nkisim frees an allocation when Python drops its last view (``memory.OnChipTracker``). A kernel that keeps
used-up PSUM tiles in a list (AWS's moe_cte fills the eight banks with lists of tiles whose results it has
already copied out) holds them alive in Python, while the NKI compiler, which allocates from the liveness of
each tile in the traced program, reuses their banks. Such a run fails with a PSUM capacity error at the first
use of a tile that found no room.

``kernel.execute`` then runs the kernel twice more: a *recording* run places every PSUM tile (a tile with no
room goes to a virtual bank past the real ones, so the run completes) and notes, per tile, the last operand
access; the *live* run frees each tile's banks right after that access and never places a tile the program
does not use. The second run enforces the real capacity: if the tiles that are live at the same time in
program order need more than the eight banks, its error stands. Tiles are matched between runs by the order
in which a program allocates them, which the same kernel on the same inputs repeats.
"""
from __future__ import annotations

from .memory import Storage


class PsumLiveness:
    """One program's PSUM liveness state: the recording of last uses, or their application."""

    def __init__(self, last_use: dict[int, int] | None) -> None:
        self.recording = last_use is None
        self.last_use: dict[int, int] = {} if last_use is None else last_use
        self.uses = 0            # operand accesses of PSUM tiles so far, in program order
        self.allocations = 0     # PSUM tiles allocated so far: a tile's ordinal

    def allocated(self, st: Storage) -> bool:
        """Number the tile; False when the live run knows it is never used (it then takes no bank)."""
        st.ordinal = self.allocations
        self.allocations += 1
        return self.recording or st.ordinal in self.last_use

    def used(self, st: Storage) -> bool:
        """Count one access; True when the live run has reached the tile's last use (its banks can go)."""
        self.uses += 1
        if self.recording:
            self.last_use[st.ordinal] = self.uses
            return False
        return self.last_use.get(st.ordinal) == self.uses
