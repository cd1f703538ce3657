# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The sliding-window ideal of a rollout whose nodes' jobs end at different times, and a rollout's ratio to it (private).

The ideal: each node's measured service time (its own work once its jobs ended) list-scheduled on ``slots`` slots, no
node starting before it is ready (the end of its last job; the rollout's start for an idle node), the nodes taken in
the order they become ready (ties: the order given). No controller overhead, no wait for a slot that is free. A
rollout that takes 1.0x this kept every slot busy whenever a ready node waited; barrier waves pay for their slowest
node's job in every wave. Pure: bench/bench_window_ratio.py computes both from a rollout's evidence.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping


class IdealError(ValueError):
    """Input the ideal cannot use; the message names the node or argument."""


def _time(value, field, negative=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise IdealError(f"{field} must be a number of seconds, not {type(value).__name__}")
    if value < 0 and not negative:
        raise IdealError(f"{field} is {value}: a duration cannot be negative")
    return float(value)


def window_schedule(service_times, ready_times, slots, start=None):
    """``{node: (start, end)}`` of the ideal (see the module's docstring); ``start``: the rollout's start (default: the first ready)."""
    if not isinstance(service_times, Mapping) or not isinstance(ready_times, Mapping):
        raise IdealError("service_times and ready_times must be mappings of node: seconds")
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise IdealError(f"slots must be a whole number of at least 1 (the budget), got {slots!r}")
    service = {node: _time(seconds, f"service_times[{node}]") for node, seconds in service_times.items()}
    ready = {}
    for node in service:
        if node not in ready_times:
            raise IdealError(f"ready_times has no time for {node}: give when its last job ended (the rollout's start for an idle node)")
        ready[node] = _time(ready_times[node], f"ready_times[{node}]", negative=True)  # relative times may be negative
    if not service:
        return {}
    origin = min(ready.values()) if start is None else _time(start, "start", negative=True)
    free = [origin] * slots
    position = {node: index for index, node in enumerate(service)}
    schedule = {}
    for node in sorted(service, key=lambda n: (ready[n], position[n])):
        begin = max(heapq.heappop(free), ready[node])
        schedule[node] = (begin, begin + service[node])
        heapq.heappush(free, begin + service[node])
    return schedule


def window_ideal(service_times, ready_times, slots, start=None):
    """The ideal makespan in seconds: from ``start`` (default: the first ready time) to the last node's end."""
    schedule = window_schedule(service_times, ready_times, slots, start)
    if not schedule:
        return 0.0
    origin = min(ready_times[n] for n in schedule) if start is None else start
    return max(span[1] for span in schedule.values()) - origin


def ratio(actual_makespan, ideal):
    """``actual / ideal`` (1.0: as good as the ideal); IdealError when the ideal is not positive or the actual negative."""
    actual = _time(actual_makespan, "actual_makespan")
    ideal = _time(ideal, "ideal")
    if ideal == 0:
        raise IdealError("ideal is 0: no node has a measured service time, so there is no ratio to give")
    return actual / ideal
