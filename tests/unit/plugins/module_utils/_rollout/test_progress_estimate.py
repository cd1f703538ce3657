"""Where a rollout is (plugins/module_utils/_rollout/progress.py): counts, failures against the budget, why nodes wait,
the time left from the service times measured so far (issue 22: progress people can follow). Each case is one row."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import progress as _progress

T = 1_764_590_000.0
ORDER = ["n1", "n2", "n3", "n4", "n5", "n6"]


def node(result="not_started", phase=None, started=None, service_s=None):
    return {"result": result, "phase": phase, "started": started, "service_s": service_s}


def fleet(**states):
    """Every node of ORDER queued, but those given."""
    return {n: states.get(n, node()) for n in ORDER}


COUNTS = [
    # nodes, waiting, expected (done, in_flight, waiting, queued, deferred, out_of_service)
    (fleet(), None, (0, 0, 0, 6, 0, 0)),
    (fleet(n1=node("upgraded"), n2=node("unchanged"), n3=node(phase="drain")), None, (2, 1, 0, 3, 0, 1)),
    # the admission phase, or the caller's word, makes a node waiting; a preflight alone is queued
    (fleet(n4=node(phase="admission"), n5=node(phase="preflight")), {"n6": "no slot"}, (0, 0, 2, 4, 0, 0)),
    # a node left drained is done and out of service; a rolled-back one is done and back in service
    (fleet(n1=node("failed_drained"), n2=node("rolled_back"), n3=node(phase="rollback")), None, (2, 1, 0, 3, 0, 2)),
    (fleet(n1=node("deferred"), n2=node("skipped")), None, (1, 0, 0, 4, 1, 0)),
    # a finished node named as waiting is done (its result is the truth)
    (fleet(n1=node("upgraded")), ["n1"], (1, 0, 0, 5, 0, 0)),
]


@pytest.mark.parametrize(("nodes", "waiting", "expected"), COUNTS)
def test_counts(nodes, waiting, expected):
    p = _progress.progress(ORDER, nodes, 3, 1, waiting=waiting)
    assert (p["done"], p["in_flight"], p["waiting"], p["queued"], p["deferred"], p["out_of_service"]) == expected
    assert p["done"] + p["in_flight"] + p["waiting"] + p["queued"] + p["deferred"] == p["total"] == 6
    assert p["in_service"] == 6 - p["out_of_service"]


FAILURES = [
    # nodes, lost, budget, failures, spent
    (fleet(), [], 0, 0, False),
    (fleet(n1=node("rolled_back"), n2=node("failed_drained")), [], 2, 2, False),
    (fleet(n1=node("rolled_back"), n2=node("failed_drained")), ["n3"], 2, 3, True),  # a lost node counts
    (fleet(n1=node("rolled_back")), ["n1"], 0, 1, True),  # named twice, counted once
]


@pytest.mark.parametrize(("nodes", "lost", "budget", "failures", "spent"), FAILURES)
def test_failures_against_the_budget(nodes, lost, budget, failures, spent):
    p = _progress.progress(ORDER, nodes, 3, budget, failed=lost)
    assert (p["failures"], p["budget_spent"]) == (failures, spent)
    assert f"failures {failures} of budget {budget}" in p["line"] and ("SPENT" in p["line"]) is spent


MEASURED = {"n1": node("upgraded", "resume", T, 60.0), "n2": node("upgraded", "resume", T, 120.0)}

TIME_LEFT = [
    # nodes, slots, others_out, now, expected seconds left (None: unknown), words in the line
    # nothing measured yet: unknown, never a made-up number
    (fleet(), 3, 0, None, None, "time left unknown (no node's service time is measured yet)"),
    (fleet(n1=node("upgraded", service_s=None)), 3, 0, None, None, "unknown"),
    # an unchanged or skipped node did no work: its time is no measure
    (fleet(n1=node("unchanged", service_s=5.0), n2=node("skipped", service_s=5.0)), 3, 0, None, None, "unknown"),
    # mean 90 s, 4 queued on 3 slots: two rounds
    (fleet(**MEASURED), 3, 0, None, 180.0, "time left about 3m 00s"),
    # a person's drain holds one slot: 4 nodes on 2 slots
    (fleet(**MEASURED), 3, 1, None, 180.0, "1 held by others"),
    (fleet(**MEASURED), 2, 1, None, 360.0, "time left about 6m 00s"),
    # a node in flight for 30 s of the mean 90: 60 s left on its slot; 3 queued on 3 slots (2 free now, 1 after it)
    (fleet(**MEASURED, n3=node(phase="driver", started=T)), 3, 0, T + 30, 150.0, "about 2m 30s"),
    # without now the node in flight counts a whole mean
    (fleet(**MEASURED, n3=node(phase="driver", started=T)), 3, 0, None, 180.0, "about 3m 00s"),
    # a node's clock ahead of the controller's: no time spent yet, not a negative one
    (fleet(**MEASURED, n3=node(phase="driver", started=T + 100)), 3, 0, T, 180.0, "about 3m 00s"),
    # a node in flight past the mean: its slot is taken as free now
    (fleet(**MEASURED, n3=node(phase="driver", started=T)), 3, 0, T + 500, 90.0, "about 1m 30s"),
    # nodes left drained hold the slots: nothing can go
    (fleet(**MEASURED, n3=node("failed_drained", service_s=90.0), n4=node("failed_drained", service_s=90.0)), 2, 0, None, None,
     "no slot of the budget of 2 is free for the 2 nodes still to go"),
    # every node done: nothing left
    ({n: node("upgraded", service_s=10.0) for n in ORDER}, 3, 0, None, 0.0, "nothing left to do"),
    # deferred nodes are not scheduled by this run
    ({**{n: node("deferred") for n in ORDER}, **MEASURED}, 3, 0, None, 0.0, "nothing left to do"),
]


@pytest.mark.parametrize(("nodes", "slots", "others", "now", "left", "words"), TIME_LEFT)
def test_time_left(nodes, slots, others, now, left, words):
    p = _progress.progress(ORDER, nodes, slots, 1, others_out=others, now=now)
    assert p["time_left_s"] == left
    assert (p["time_left"] == "unknown") is (left is None)
    assert words in p["line"]


def test_the_time_left_with_more_nodes_in_flight_than_slots():
    """A drain that came after the nodes went out: the first of them to end frees no slot, the next ones do."""
    assert _progress.time_left([10.0, 20.0, 30.0], 1, 100.0, 2) == 120.0
    assert _progress.time_left([10.0, 20.0, 30.0], 0, 100.0, 2) == 30.0
    assert _progress.time_left([], 2, 100.0, 0) is None


def test_why_nodes_wait_is_said_and_a_long_reason_cut():
    why = "3 of the budget of 3 nodes are out of service (a, b, c): no slot is free"
    p = _progress.progress(ORDER, fleet(n4=node(phase="admission")), 3, 1, waiting={"n5": why, "n6": "x" * 500}, rollout_id="r-1")
    assert p["waiting_why"] == {"n4": "asks for a slot", "n5": why, "n6": "x" * _progress.WHY_MAX}
    assert p["line"].startswith("rollout r-1: 0/6 done, 0 out for the rollout, 3 waiting for a slot, 3 queued")
    assert "n4 waits: asks for a slot; n5 waits: 3 of the budget" in p["line"] and "(and 1 more)" in p["line"]


def test_the_line_names_the_results():
    p = _progress.progress(ORDER, fleet(n1=node("upgraded"), n2=node("upgraded"), n3=node("rolled_back")), 3, 2)
    assert "3/6 done (2 upgraded, 1 rolled back)" in p["line"]
    assert p["results"] == {"upgraded": 2, "rolled_back": 1} and p["nodes"]["done"] == ["n1", "n2", "n3"]


BAD = [
    # order, nodes, kwargs, words of the error
    (["n1"], {}, {}, "nodes has no state for n1, which is in the plan's order"),
    (["n1", "n1"], {"n1": node()}, {}, "order names n1 twice"),
    ("n1", {"n1": node()}, {}, "order must be a list"),
    (["n1"], {"n1": node("done")}, {}, "nodes.n1.result is 'done': one of not_started"),
    (["n1"], {"n1": node(phase="reboot")}, {}, "nodes.n1.phase is 'reboot'"),
    (["n1"], {"n1": node(started=-5)}, {}, "nodes.n1.started is -5: a time cannot be negative"),
    (["n1"], {"n1": node("upgraded", service_s=-1.0)}, {}, "nodes.n1.service_s is -1.0"),
    (["n1"], {"n1": node("upgraded", service_s="60")}, {}, "nodes.n1.service_s must be a number"),
    (["n1"], {"n1": node("upgraded", service_s=float("nan"))}, {}, "nodes.n1.service_s must be a number"),
    (["n1"], {"n1": "upgraded"}, {}, "nodes.n1 must be a mapping"),
    (["n1"], {"n1": node()}, {"waiting": {"n9": "?"}}, "waiting names 'n9', which is not in the plan's order"),
    (["n1"], {"n1": node()}, {"slots": 0}, "slots (gpufleet_max_unavailable as a count) must be a whole number from 1"),
    (["n1"], {"n1": node()}, {"failure_budget": -1}, "failure_budget (gpufleet_failure_budget) must be a whole number from 0"),
    (["n1"], {"n1": node()}, {"others_out": True}, "others_out must be a whole number"),
    (["n1"], {"n1": node()}, {"now": -1}, "now is -1"),
    (["n1"], {"n1": node()}, {"failed": "n1"}, "failed must be a list"),
]


@pytest.mark.parametrize(("order", "nodes", "kwargs", "words"), BAD)
def test_bad_input_is_refused_naming_the_node_and_field(order, nodes, kwargs, words):
    args = {"slots": 3, "failure_budget": 1, **kwargs}
    with pytest.raises(_progress.ProgressError) as caught:
        _progress.progress(order, nodes, **args)
    assert words in str(caught.value)


def test_counts_given_as_text_are_read():
    """Templated values may arrive as text on older ansible-core: digits only."""
    p = _progress.progress(["n1"], {"n1": node()}, "3", "0", others_out="1")
    assert (p["slots"], p["failure_budget"], p["others_out"]) == (3, 0, 1)


def test_slots_held_by_others_are_not_claimed_when_not_known():
    """Slurm not read: the line says nothing of others' slots (never '0 held by others'), the time left assumes none."""
    p = _progress.progress(ORDER, fleet(**MEASURED), 3, 1)
    assert p["others_out"] is None and "held by others" not in p["line"] and p["time_left_s"] == 180.0


def phase(name, start, end, status="ok"):
    return {"name": name, "start": T + start, "end": None if end is None else T + end, "status": status, "detail": None}


NODE_STATES = [
    # result, phases, expected {result, phase, started, service_s}
    (None, None, {"result": "not_started", "phase": None, "started": None, "service_s": None}),
    (None, [phase("preflight", 0, 1)], {"result": "not_started", "phase": "preflight", "started": None, "service_s": None}),
    # in flight: the open phase, no service time yet
    (None, [phase("preflight", 0, 1), phase("drain", 5, 20), phase("driver", 20, None, "started")],
     {"result": "not_started", "phase": "driver", "started": T + 5, "service_s": None}),
    # upgraded: its own work (driver 40 + activate 30 + validate 10 + resume 1), not its drain nor its soak
    ("upgraded", [phase("preflight", 0, 1), phase("drain", 5, 20), phase("driver", 20, 60), phase("activate", 60, 90),
                  phase("validate", 90, 100), phase("resume", 100, 101), phase("soak", 101, 160)],
     {"result": "upgraded", "phase": "soak", "started": T + 5, "service_s": 81.0}),
    # skipped after its drain: no work measured
    ("skipped", [phase("drain", 5, 20, "skipped")], {"result": "skipped", "phase": "drain", "started": T + 5, "service_s": None}),
]


@pytest.mark.parametrize(("result", "phases", "expected"), NODE_STATES)
def test_node_state_from_the_phases(result, phases, expected):
    assert _progress.node_state(result, phases) == expected


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (59.6, "1m 00s"), (250, "4m 10s"), (3900, "1h 05m")])
def test_duration_text(seconds, text):
    assert _progress.duration_text(seconds) == text


UNAVAILABLE = [
    # Slurm's out-of-service nodes, names {inventory: slurm}, slots held by others
    ([], None, 0),
    (["n3", "person-01"], None, 1),  # n3 is ours in flight
    ([{"node": "slurm-n3", "state": "DRAIN"}, {"node": "person-01"}, {"node": "lost-02"}], {"n3": "slurm-n3"}, 2),
    (["slurm-n1", "n3"], {"n1": "slurm-n1"}, 0),  # n1 left drained by the rollout: ours, not another's
    (["n4", "n4"], None, 1),  # a node named twice holds one slot
]


@pytest.mark.parametrize(("unavailable", "names", "others"), UNAVAILABLE)
def test_slots_held_by_others_from_slurms_view(unavailable, names, others):
    nodes = fleet(n1=node("failed_drained"), n3=node(phase="driver"))
    p = _progress.progress(ORDER, nodes, 4, 1, unavailable=unavailable, names=names)
    assert p["others_out"] == others and p["free_slots"] == max(0, 4 - others - 2)


def test_a_bad_unavailable_entry_is_named():
    with pytest.raises(_progress.ProgressError, match=r"unavailable\[1\] must be a Slurm node name"):
        _progress.progress(ORDER, fleet(), 3, 1, unavailable=["a", {"state": "DRAIN"}])
