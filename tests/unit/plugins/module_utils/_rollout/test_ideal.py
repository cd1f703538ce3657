"""The sliding-window ideal of a rollout whose jobs end at different times (plugins/module_utils/_rollout/ideal.py), issue 22:
each node's service time list-scheduled on the budget's slots from the end of its job, in the order the nodes become ready."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import ideal as _ideal

# The issue's shape: 12 nodes, a budget of 3, one long job among every three nodes in plan order (n01, n04, n07, n10
# run a job to 240 s), 22 s of each node's own work.
NODES = [f"n{i:02d}" for i in range(1, 13)]
LONG = {"n01", "n04", "n07", "n10"}
ISSUE_SERVICE = dict.fromkeys(NODES, 22.0)
ISSUE_READY = {n: 240.0 if n in LONG else 0.0 for n in NODES}

IDEAL = [
    # service, ready, slots, start, expected makespan
    ({}, {}, 3, None, 0.0),
    ({"a": 10, "b": 20, "c": 30}, dict.fromkeys("abc", 0), 1, None, 60.0),  # one slot: one after another
    ({"a": 10, "b": 20, "c": 30}, dict.fromkeys("abc", 0), 3, None, 30.0),  # a slot each: the longest
    ({"a": 10, "b": 10}, {"a": 0, "b": 100}, 1, None, 110.0),  # b is not ready before its job ends: the slot idles
    ({"a": 10, "b": 10}, {"a": 50, "b": 60}, 2, 0.0, 70.0),  # measured from the rollout's start, not the first ready
    ({"a": 10, "b": 10}, {"a": 5, "b": 0}, 1, None, 20.0),  # taken in order of ready time (as given, a then b: 25 s)
    # the issue's shape: the 8 idle nodes on 3 slots by 66 s, the 4 long-job nodes from 240 s: 3 at once, then 1 (284 s)
    (ISSUE_SERVICE, ISSUE_READY, 3, None, 284.0),
    # with one slot per node of a wave: nothing waits but the jobs
    (ISSUE_SERVICE, ISSUE_READY, 12, None, 262.0),
]


@pytest.mark.parametrize(("service", "ready", "slots", "start", "makespan"), IDEAL)
def test_window_ideal(service, ready, slots, start, makespan):
    assert _ideal.window_ideal(service, ready, slots, start) == makespan


def test_the_issues_shape_schedules_idle_nodes_first_and_never_more_than_the_slots():
    schedule = _ideal.window_schedule(ISSUE_SERVICE, ISSUE_READY, 3)
    assert schedule["n02"] == (0.0, 22.0) and schedule["n12"] == (44.0, 66.0)
    assert [schedule[n] for n in ("n01", "n04", "n07", "n10")] == [(240.0, 262.0)] * 3 + [(262.0, 284.0)]
    for t in (0.0, 21.0, 44.0, 240.0, 262.0):
        assert sum(1 for begin, end in schedule.values() if begin <= t < end) <= 3
    for node, span in schedule.items():
        assert span[0] >= ISSUE_READY[node]


def test_barrier_waves_of_the_issues_shape_take_longer_than_the_ideal():
    """Waves of 3 in plan order, each a barrier: wave 1 waits for n01's job (262 s), the next three take 22 s each."""
    waves = [NODES[i:i + 3] for i in range(0, 12, 3)]
    end = 0.0
    for wave in waves:
        end = max(max(end, ISSUE_READY[n]) + ISSUE_SERVICE[n] for n in wave)
    assert end == 328.0
    assert _ideal.ratio(end, _ideal.window_ideal(ISSUE_SERVICE, ISSUE_READY, 3)) == pytest.approx(1.155, abs=1e-3)


RATIO = [(284.0, 284.0, 1.0), (355.0, 284.0, 1.25), (0.0, 10.0, 0.0)]


@pytest.mark.parametrize(("actual", "ideal", "expected"), RATIO)
def test_ratio(actual, ideal, expected):
    assert _ideal.ratio(actual, ideal) == pytest.approx(expected)


BAD = [
    # call, words of the error
    (lambda: _ideal.window_ideal({"a": -1}, {"a": 0}, 1), "service_times[a] is -1"),
    (lambda: _ideal.window_ideal({"a": "10"}, {"a": 0}, 1), "service_times[a] must be a number"),
    (lambda: _ideal.window_ideal({"a": 10}, {}, 1), "ready_times has no time for a"),
    (lambda: _ideal.window_ideal({"a": 10}, {"a": None}, 1), "ready_times[a] must be a number"),
    (lambda: _ideal.window_ideal({"a": 10}, {"a": 0}, 0), "slots must be a whole number of at least 1"),
    (lambda: _ideal.window_ideal([10], {"a": 0}, 1), "service_times and ready_times must be mappings"),
    (lambda: _ideal.ratio(10, 0), "ideal is 0"),
    (lambda: _ideal.ratio(-1, 10), "actual_makespan is -1"),
]


@pytest.mark.parametrize(("call", "words"), BAD)
def test_bad_input_is_refused_naming_it(call, words):
    with pytest.raises(_ideal.IdealError) as caught:
        call()
    assert words in str(caught.value)
