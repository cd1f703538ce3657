# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one clock of the rollout's modules (private): epoch seconds from ``time.time()`` and a sleep.

Code takes ``clock=None`` and uses :data:`SYSTEM` then; tests replace ``SYSTEM`` (or pass a clock)
with a fake whose ``sleep`` advances ``now``, so no unit test sleeps.
"""

from __future__ import annotations

import time


class Clock:
    """Wall-clock time (the state file's times are epoch seconds, read on other hosts too)."""

    def now(self):
        return time.time()

    def sleep(self, seconds):
        if seconds > 0:
            time.sleep(seconds)


SYSTEM = Clock()


def get(clock=None):
    """``clock``, or the system clock as it is now (looked up at call time, so that a test's replacement counts)."""
    return clock if clock is not None else SYSTEM
