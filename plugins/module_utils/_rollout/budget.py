# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The unavailability budget of a rollout: ``gpufleet_max_unavailable`` resolved against the pool (private).

Shared by the wave plan filter (a wave never holds more nodes than the budget) and slurm_capacity
(the unavailable nodes read from Slurm plus the wave's never exceed it).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

_COUNT = re.compile(r"[1-9][0-9]{0,6}")
_PERCENT = re.compile(r"(?P<pct>[1-9][0-9]{0,2})%")
MAX_COUNT = 10_000_000


class BudgetError(GpufleetError, ValueError):
    """A budget, size or count that cannot be used; the message names the argument and what to write instead."""


def whole_count(value, name, low=1, high=MAX_COUNT):
    """``value`` as an int when it is a whole number (or its decimal string) in ``low..high``; BudgetError otherwise.

    A bool is refused (``true`` is no count); a string must be digits only (``"4\\n"`` is refused).
    """
    if isinstance(value, str) and _COUNT.fullmatch(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BudgetError(f"{name} must be a whole number from {low} to {high}, got {value!r}", argument=name)
    return value


def percent(value):
    """The N of a string ``"N%"`` (1..100), or None when ``value`` is not of that form at all."""
    if not isinstance(value, str):
        return None
    match = _PERCENT.fullmatch(value)
    if not match:
        return None
    return int(match.group("pct"))


def max_unavailable_count(spec, pool_size, name="max_unavailable"):
    """How many nodes of a pool of ``pool_size`` may be unavailable at once: ``4`` -> 4, ``"10%"`` -> floor, at least 1.

    Refuses 0, negatives, bools, floats, ``"0%"``, ``"150%"``, ``"10%\\n"``, ``"10 %"``, ``"2.5%"`` and a
    ``pool_size`` that is not a whole number of at least 1 (BudgetError naming the argument).
    """
    pool = whole_count(pool_size, "pool_size")
    pct = percent(spec)
    if pct is not None:
        if pct > 100:
            raise BudgetError(f"{name} {spec!r} is more than 100%: give a percentage from 1% to 100% or a count", argument=name)
        return max(1, pool * pct // 100)
    if isinstance(spec, str) and not _COUNT.fullmatch(spec):
        raise BudgetError(
            f"{name} {spec!r} is neither a count (4) nor a percentage of the pool (\"10%\"): write a whole number of at least 1 "
            "or N% with N from 1 to 100, nothing else (no space, sign, decimal point or newline)",
            argument=name,
        )
    try:
        return whole_count(spec, name)
    except BudgetError:
        raise BudgetError(
            f"{name} must be a count of at least 1 (4) or a percentage from 1% to 100% (\"10%\"), got {spec!r}: "
            "0 would let no node be taken out, and a rollout that may take none out cannot run",
            argument=name,
        ) from None
