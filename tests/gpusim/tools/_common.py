"""Shared helpers of the simulated tools."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from .. import state as st

TYPE_CHECKING = False  # typing is not imported at run time: 4 ms of every simulated tool's start-up
if TYPE_CHECKING:
    from typing import Any, Callable


class ToolExit(Exception):
    """Stop a tool with an exit code (stdout/stderr already written)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def node_dir() -> Path:
    return st.node_dir_from_env()


def load() -> dict[str, Any]:
    return st.load(node_dir())


def update(fn: Callable[[dict[str, Any]], Any]) -> Any:
    return st.update(node_dir(), fn)


def out(text: str = "", end: str = "\n") -> None:
    sys.stdout.write(text + end)


def err(text: str = "", end: str = "\n") -> None:
    sys.stderr.write(text + end)


def fail(text: str, code: int, stream: str = "err") -> None:
    (err if stream == "err" else out)(text)
    raise ToolExit(code)


def scaled_sleep(seconds: float) -> None:
    """Sleep a simulated duration (already scaled by the fleet spec's timing)."""
    seconds = float(seconds or 0)
    if os.environ.get("GPUSIM_NO_SLEEP"):
        return
    if seconds > 0:
        time.sleep(seconds)


def hostname(state: dict[str, Any]) -> str:
    return state.get("name") or os.uname().nodename
