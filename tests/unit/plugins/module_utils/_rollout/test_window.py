"""The sliding window's decisions (plugins/module_utils/_rollout/window.py): order, admission, stop, gate, merge.

Invariant 13 of the design: the rollout never waits while a node could be admitted within the budget and its domain
rules; invariant 1: never more out than the budget. Each case is one row.
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter import rollout_window as filters
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import window
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.plan import plan_waves

T1, T2 = "2026-12-05T19:00:00", "2026-12-05T21:30:00"

ORDER = [
    # hosts, job_ends, held, expected
    (["a", "b", "c"], {}, [], ["a", "b", "c"]),  # all idle: the inventory's order
    (["a", "b", "c"], {"a": T2, "b": T1}, [], ["c", "b", "a"]),  # idle first, then the first job to end
    (["a", "b", "c"], {"a": "Unknown", "b": T2}, [], ["c", "b", "a"]),  # a job without an end goes last
    (["a", "b", "c"], {"a": T1, "c": T1}, [], ["b", "a", "c"]),  # equal ends keep the given order
    (["a", "b", "c"], {"a": T1, "b": T2, "c": None}, ["b"], ["b", "c", "a"]),  # ours first, even busy (a resumed run)
    ([], {}, [], []),
]


@pytest.mark.parametrize(("hosts", "ends", "held", "expected"), ORDER)
def test_admission_order(hosts, ends, held, expected):
    assert window.admission_order(hosts, ends, held) == expected
    assert filters.admission_order(hosts, ends, held) == expected


DOMAINS = {"n1": {"rack": "r1"}, "n2": {"rack": "r1"}, "n3": {"rack": "r2"}, "n4": {"rack": "r2"}, "n5": {"rack": "r3"}}

ADMISSION = [
    # candidate, out, budget, spread_by, max_per_domain, admit, words in why
    ("n1", [], 1, [], 1, True, ""),
    ("n1", ["x"], 1, [], 1, False, "1 of the budget of 1"),  # someone else's drain holds the only slot
    # the stall: budget 3, a lost node and a person's drain hold 2: one more fits (a wave of 2 never did)
    ("n3", ["lost", "person"], 3, [], 1, True, ""),
    ("n4", ["lost", "person", "n3"], 3, [], 1, False, "no slot is free"),
    ("n1", ["n1", "x", "y"], 3, [], 1, True, ""),  # already out (our drain, an interrupted run): counted once
    ("n2", ["n1"], 3, ["rack"], 1, False, "rack r1 has 1 node(s) out already (n1)"),  # budget free, domain full
    ("n3", ["n1"], 3, ["rack"], 1, True, ""),  # another rack may go while r1's node is out: no head-of-line wait
    ("n2", ["n1"], 3, ["rack"], 2, True, ""),
    ("n5", ["person"], 3, ["rack"], 1, True, ""),  # a node of no known domain counts for the budget only
    ("n1", [], None, [], 1, True, ""),  # no budget
]


@pytest.mark.parametrize(("candidate", "out", "budget", "spread", "per", "admit", "why"), ADMISSION)
def test_admission(candidate, out, budget, spread, per, admit, why):
    verdict = window.admission(candidate, out, budget, DOMAINS, spread, per)
    assert verdict["admit"] is admit
    assert why in verdict["why"] and (verdict["why"] == "") is admit


def test_the_window_fills_every_free_slot_one_node_at_a_time():
    """Admitting the queue one by one never leaves a slot free while a node that fits waits, and never exceeds the budget."""
    out, queue, budget = {"lost", "person"}, ["n1", "n2", "n3", "n4", "n5"], 4
    admitted = []
    for node in queue:
        if window.admission(node, out, budget, DOMAINS, ["rack"], 1)["admit"]:
            out.add(node)
            admitted.append(node)
    assert admitted == ["n1", "n3"] and len(out) == budget


STOP = [
    # stop file present, failed, budget, earlier, expected words ('' = go on)
    (False, [], 0, "", ""),
    (False, ["a", "b"], 2, "", ""),
    (False, ["a", "b", "c"], 2, "", "the failure budget is spent: 3 nodes failed (a, b, c)"),
    (False, ["a", "a", "b"], 1, "", "2 nodes failed"),  # a node named twice counts once
    (True, ["a", "b", "c"], 2, "", "the stop file /s is present"),  # the stop file is said first
    (True, [], 0, "the canary failed", "the canary failed"),  # an earlier stop stays the reason
]


@pytest.mark.parametrize(("present", "failed", "budget", "earlier", "words"), STOP)
def test_stop_before_admission(present, failed, budget, earlier, words):
    reason = window.stop_before_admission(present, failed, budget, "/s", earlier)
    assert (words in reason) and (reason == "") == (words == "")
    assert filters.admission_stop(present, failed, budget, "/s", earlier) == reason


def test_admission_stop_names_the_filter_on_a_bad_budget():
    with pytest.raises(AnsibleFilterError, match="admission_stop"):
        filters.admission_stop(False, [], "two")


GATES = [
    # gate, size, failed, max %, stops
    (0, 1, [], 0, False),
    (0, 1, ["c"], 100, True),  # the canary: any failure
    (2, 4, ["a"], 25, False),  # 25 % of 4 is allowed
    (2, 4, ["a", "b"], 25, True),
    (3, 3, ["a"], 0, True),
]


@pytest.mark.parametrize(("gate", "size", "failed", "pct", "stops"), GATES)
def test_gate_verdict(gate, size, failed, pct, stops):
    assert bool(window.gate_verdict(gate, size, failed, pct)) is stops
    assert filters.gate_stop(failed, gate, size, pct) == window.gate_verdict(gate, size, failed, pct)


def test_gate_stop_says_the_canary_or_the_gate_and_its_share():
    assert window.gate_verdict(0, 1, ["c"], 100) == "the canary failed"
    assert window.gate_verdict(2, 4, ["a", "b"], 25) == "wave 2 failed on 2 of 4 nodes, more than gpufleet_wave_max_fail_percentage 25%"
    with pytest.raises(AnsibleFilterError, match="gate_stop"):
        filters.gate_stop(["a"], "two", 3)


def test_merge_gates_caps_their_number_and_says_so():
    gates, note = window.merge_gates([[i] for i in range(10)], max_gates=4)
    assert gates == [[0], [1], [2], [3, 4, 5, 6, 7, 8, 9]] and "waves 4 to 10 are one gate of 7 nodes" in note
    assert window.merge_gates([[1], [2]], max_gates=4) == ([[1], [2]], "")


@pytest.mark.parametrize(("forks", "budget", "waiters"), [(16, 3, 13), (4, 3, 1), (3, 3, 1), (5, 0, 5)])
def test_waiters_leave_a_fork_to_each_node_in_flight(forks, budget, waiters):
    assert window.waiters_allowed(forks, budget) == waiters == filters.admission_waiters(forks, budget)


def test_gates_are_sized_by_waves_alone_not_cut_to_the_budget_nor_spread():
    hosts = [f"h{i:02d}" for i in range(1, 14)]
    hostvars = {h: {"rack": f"r{i // 3}"} for i, h in enumerate(hosts)}
    barrier = plan_waves(hosts, hostvars, waves=[6], max_unavailable=2, pool_size=13, spread_by=["rack"], max_per_domain=1)
    gates = plan_waves(hosts, hostvars, waves=[6], max_unavailable=2, pool_size=13, spread_by=["rack"], max_per_domain=1, gates=True)
    assert max(map(len, barrier["waves"])) == 2  # the old waves: cut to the budget
    assert gates["waves"] == [hosts[1:7], hosts[7:13]] and gates["canary"] == ["h01"] and gates["budget"] == 2
    many = plan_waves(hosts, waves=[1], max_unavailable=2, pool_size=13, gates=True)
    assert len(many["waves"]) == window.MAX_GATES and len(many["waves"][-1]) == 5 and "one gate of 5 nodes" in many["notes"][-1]
