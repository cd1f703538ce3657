# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What every gpu_validate check returns, and how results add up to a verdict (private).

A check result is a plain dict ``{"name", "status", "observed", "expected", "message"}``;
``status`` is one of :data:`STATUSES`. ``observed`` and ``expected`` are small JSON-able values
(numbers, strings, short lists or dicts) that a report can print side by side.
"""

from __future__ import annotations

PASS = "pass"  # noqa: S105 - a check status, not a password
FAIL = "fail"
WARN = "warn"
SKIP = "skip"
STATUSES = (PASS, FAIL, WARN, SKIP)
# Worst first decides the overall status; skips never change it.
_RANK = {FAIL: 3, WARN: 2, PASS: 1, SKIP: 0}


def check_result(name, status, observed=None, expected=None, message=""):
    if status not in STATUSES:
        raise ValueError(f"gpu_validate: unknown check status {status!r}")
    return {"name": name, "status": status, "observed": observed, "expected": expected, "message": message}


def overall_status(checks):
    """``fail`` if any check failed, else ``warn`` if any warned, else ``pass`` (also when all were skipped)."""
    worst = PASS
    for check in checks:
        if _RANK[check["status"]] > _RANK[worst]:
            worst = check["status"]
    return worst


def summarize(checks):
    """``{status: count}`` for every status, zeros included."""
    counts = dict.fromkeys(STATUSES, 0)
    for check in checks:
        counts[check["status"]] += 1
    return counts


__all__ = ["FAIL", "PASS", "SKIP", "STATUSES", "WARN", "check_result", "overall_status", "summarize"]
