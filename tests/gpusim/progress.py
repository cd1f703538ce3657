"""Waiting by progress, not by the clock: the simulator's bring-up waits for what it waits for.

A boot, a daemon's start or a Slurm registration on a loaded 2-core machine can take many times what it takes on an
idle one; a wall-clock limit sized for the idle machine kills work that was still moving (a clean-clone CI run of
2026-12-04 lost a whole test file to a node's boot script killed at 30 s while another fleet booted beside it).
`wait` keeps waiting as long as the thing waited for shows progress (its log grows, the set of nodes still missing
shrinks), and gives up only after `stall` seconds without any, with a message that says what was still missing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Hashable


class Stalled(RuntimeError):
    """Nothing moved for `stall` seconds; the message says what was waited for and what was still missing."""


def wait(done: Callable[[], bool], *, progress: Callable[[], Hashable], stall: float, what: str,
         missing: Callable[[], str] = lambda: "", interval: float = 0.1, clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep) -> float:
    """Call done() every `interval` seconds until it is true; return the seconds waited.

    progress() returns a token that changes whenever the work moves (a log's size, the number of nodes left); each
    change restarts the stall clock. After `stall` seconds without a change, raise Stalled naming `what` and
    missing() (the state of what is still missing: a log's last lines, the nodes not yet registered).
    """
    if stall <= 0:
        raise ValueError(f"stall must be positive, got {stall!r}")
    start = last_move = clock()
    token = progress()
    while not done():
        now = clock()
        seen = progress()
        if seen != token:
            token, last_move = seen, now
        elif now - last_move > stall:
            detail = missing()
            raise Stalled(f"gpusim: {what}: no progress for {stall:g}s (waited {now - start:.0f}s in all)"
                          + (f"; {detail}" if detail else ""))
        sleep(interval)
    return clock() - start


def size(path: Path) -> int:
    """A file's size (-1 when it does not exist): the progress of a process that writes its log as it goes."""
    try:
        return path.stat().st_size
    except OSError:
        return -1


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log ('' when there is none), for a message that says where a process stopped."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
