"""Running the programs of an LNC2 launch: two threads, one at a time, switching only at sendrecv.

Program 0 runs until it finishes or waits for data from program 1, then program 1 runs, and so
on. Only one thread ever runs, and it switches only at those points, so runs are deterministic.
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import numpy as np

from .errors import violation


class _Aborted(BaseException):
    """Raised in a waiting program when the other one failed."""


class LncExchange:
    """The baton between the programs and the sendrecv mailboxes."""

    def __init__(self, programs: int) -> None:
        self.cond = threading.Condition()
        self.turn = 0
        self.done = [False] * programs
        self.waiting: list[Callable[[], bool] | None] = [None] * programs
        self.failed = False
        self.mail: dict[tuple[int, int, object], deque] = {}

    # --- program lifecycle --------------------------------------------------------------------
    def run_program(self, pid: int, body: Callable[[], None], errors: list) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.turn == pid or self.failed)
        try:
            if not self.failed:
                body()
        except _Aborted:
            pass
        except BaseException as exc:  # noqa: BLE001 - re-raised by the launcher
            errors.append((pid, exc))
            with self.cond:
                self.failed = True
                self.cond.notify_all()
        finally:
            with self.cond:
                self.done[pid] = True
                self._pass_turn(pid)
                self.cond.notify_all()

    def _pass_turn(self, pid: int) -> None:
        other = 1 - pid
        if not self.done[other]:
            self.turn = other

    def _wait_until(self, pid: int, ready: Callable[[], bool], what: str, instr: str = "sendrecv",
                    operand: str = "src") -> None:
        with self.cond:
            while not ready():
                other = 1 - pid
                blocked = self.waiting[other]
                if self.done[other] or (blocked is not None and not blocked()):
                    state = "finished" if self.done[other] else "is waiting too"
                    raise violation(instr, operand, f"deadlock: program {pid} waits for {what}, but program "
                                    f"{other} {state}")
                self.waiting[pid] = ready
                self.turn = other
                self.cond.notify_all()
                self.cond.wait_for(lambda: self.turn == pid or self.failed)
                self.waiting[pid] = None
                if self.failed:
                    raise _Aborted()

    # --- sendrecv -------------------------------------------------------------------------------
    def sendrecv(self, pid: int, send_to: int, recv_from: int, pipe_id: object,
                 payload: np.ndarray | None, geometry: tuple[int, int]) -> np.ndarray | None:
        with self.cond:
            self.mail.setdefault((pid, send_to, pipe_id), deque()).append((payload, geometry))
        box = self.mail.setdefault((recv_from, pid, pipe_id), deque())
        self._wait_until(pid, lambda: bool(box), f"data from program {recv_from} on pipe {pipe_id!r}")
        data, geo = box.popleft()
        if geo != geometry:
            raise violation("sendrecv", "dst", f"receives {geo[0]}x{geo[1]} elements from program {recv_from} "
                            f"into {geometry[0]}x{geometry[1]}")
        return data


    def barrier(self, pid: int) -> None:
        """Wait until the other program reaches its matching core_barrier (the k-th pairs the k-th)."""
        with self.cond:
            self.mail.setdefault((pid, 1 - pid, _BARRIER), deque()).append(None)
        box = self.mail.setdefault((1 - pid, pid, _BARRIER), deque())
        self._wait_until(pid, lambda: bool(box), f"program {1 - pid} at core_barrier", "core_barrier", "data")
        box.popleft()


_BARRIER = object()   # the mailbox key of core_barrier (never a sendrecv pipe_id)


def run_programs(bodies: list[Callable[[], None]], exchange: LncExchange) -> None:
    """Run one body per program on its own thread, deterministically; re-raise the first failure."""
    errors: list = []
    threads = [threading.Thread(target=exchange.run_program, args=(pid, body, errors), name=f"nkisim-p{pid}")
               for pid, body in enumerate(bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0][1]
