"""Parsing of scontrol/squeue output, our reason marker, and the plan (plugins/module_utils/_slurm.py)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._maintenance.slurm import (
    make_reason,
    parse_show_node,
    parse_show_nodes,
    parse_squeue,
    parse_state,
    plan,
    reason_owner,
)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError

from tests.conftest import OWN

SLURM = OWN / "slurm"


def fixture(name):
    return (SLURM / name).read_text()


# --- real scontrol show node output (Slurm 22.05.8, captured from the simulator) ----------------------

# file: (state, base, flags, not_responding, drain_state, reason, reason_user, cpu_alloc)
REAL_NODES = {
    "show_node_idle.txt": ("IDLE", "IDLE", [], False, None, None, None, 0),
    "show_node_mixed.txt": ("MIXED", "MIXED", [], False, None, None, None, 1),
    "show_node_mixed_not_responding.txt": ("MIXED+NOT_RESPONDING", "MIXED", [], True, None, None, None, 1),
    "show_node_idle_not_responding.txt": ("IDLE+NOT_RESPONDING", "IDLE", [], True, None, None, None, 0),
    "show_node_mixed_drain_ours.txt": (
        "MIXED+DRAIN", "MIXED", ["DRAIN"], False, "draining", "gpufleet:r-2026: driver upgrade a=b [x]", "root", 1,
    ),
    "show_node_multiline_mixed_drain.txt": (
        "MIXED+DRAIN", "MIXED", ["DRAIN"], False, "draining", "gpufleet:r-2026: driver upgrade a=b [x]", "root", 1,
    ),
    "show_node_idle_drain_others.txt": ("IDLE+DRAIN", "IDLE", ["DRAIN"], False, "drained", "hw ticket 123", "root", 0),
    "show_node_down_drain.txt": ("DOWN+DRAIN", "DOWN", ["DRAIN"], False, "drained", "rma: gpu 3", "root", 0),
    "show_node_down_not_responding.txt": ("DOWN+NOT_RESPONDING", "DOWN", [], True, None, "Not responding", "root", 0),
    "show_node_down_reboot_complete.txt": (
        "DOWN", "DOWN", [], False, None, "gpufleet:r9: reboot : reboot issued : reboot complete", "root", 0,
    ),
    "show_node_idle_drain_reboot_requested.txt": (
        "IDLE+DRAIN+REBOOT_REQUESTED", "IDLE", ["DRAIN", "REBOOT_REQUESTED"], False, "drained", "gpufleet:r9: reboot", "root", 0,
    ),
    "show_node_idle_drain_reboot_requested_not_responding.txt": (
        "IDLE+DRAIN+REBOOT_REQUESTED+NOT_RESPONDING", "IDLE", ["DRAIN", "REBOOT_REQUESTED"], True, "drained", "gpufleet:r9: reboot", "root", 0,
    ),
    "show_node_mixed_drain_reboot_requested.txt": (
        "MIXED+DRAIN+REBOOT_REQUESTED", "MIXED", ["DRAIN", "REBOOT_REQUESTED"], False, "draining", "gpufleet:r9: reboot", "root", 1,
    ),
    "show_node_down_drain_reboot_issued.txt": (
        "DOWN+DRAIN+REBOOT_ISSUED", "DOWN", ["DRAIN", "REBOOT_ISSUED"], False, "drained", "gpufleet:r9: reboot : reboot issued", "root", 0,
    ),
}


@pytest.mark.parametrize("name", sorted(REAL_NODES))
def test_real_scontrol_show_node(name):
    state, base, flags, not_responding, drain_state, reason, user, cpu_alloc = REAL_NODES[name]
    node = parse_show_node(fixture(name))
    assert node["state"] == state
    assert node["base_state"] == base
    assert node["flags"] == flags
    assert node["not_responding"] is not_responding
    assert node["drain_state"] == drain_state
    assert node["drain"] is ("DRAIN" in flags)
    assert node["down"] is (base == "DOWN")
    assert node["reason"] == reason
    assert node["reason_user"] == user
    assert node["cpu_alloc"] == cpu_alloc
    assert node["cpu_total"] == 4


def test_every_real_fixture_is_in_the_table():
    files = {p.name for p in SLURM.glob("show_node_*.txt")} - {"show_node_not_found.txt"}
    assert files == set(REAL_NODES)


def test_fields_with_spaces_and_reason_time():
    node = parse_show_node(fixture("show_node_mixed_drain_ours.txt"))
    assert node["name"] == "busy-01"
    assert node["fields"]["OS"] == "Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0"
    assert node["fields"]["NodeAddr"] == "127.0.50.1"
    assert node["fields"]["Version"] == "22.05.8"
    assert node["fields"]["AllocTRES"] == "cpu=1"
    # The "=" inside the reason does not become a field.
    assert "a" not in node["fields"]
    assert "Reason" not in node["fields"]
    assert node["reason_time"] == "2026-11-30T15:38:31"


def test_next_state_is_not_state():
    node = parse_show_node(fixture("show_node_mixed_drain_reboot_requested.txt"))
    assert node["fields"]["NextState"] == "DOWN"
    assert node["state"] == "MIXED+DRAIN+REBOOT_REQUESTED"


def test_not_found_output_is_a_parse_error():
    with pytest.raises(ParseError, match="no NodeName"):
        parse_show_node(fixture("show_node_not_found.txt"))


def test_several_records():
    text = fixture("show_node_idle.txt") + fixture("show_node_mixed.txt")
    assert [n["name"] for n in parse_show_nodes(text)] == ["idle-03", "busy-01"]
    with pytest.raises(ParseError, match="expected one node record, found 2"):
        parse_show_node(text)


# --- state strings -------------------------------------------------------------------------------------

STATES = [
    # state, base, flags, not_responding, drain_state
    ("IDLE", "IDLE", [], False, None),
    ("ALLOCATED", "ALLOCATED", [], False, None),
    ("IDLE+DRAIN", "IDLE", ["DRAIN"], False, "drained"),
    ("MIXED+DRAIN", "MIXED", ["DRAIN"], False, "draining"),
    ("ALLOCATED+DRAIN", "ALLOCATED", ["DRAIN"], False, "draining"),
    ("DOWN+DRAIN", "DOWN", ["DRAIN"], False, "drained"),
    ("IDLE+DRAIN+REBOOT_REQUESTED", "IDLE", ["DRAIN", "REBOOT_REQUESTED"], False, "drained"),
    ("IDLE+COMPLETING+DRAIN", "IDLE", ["COMPLETING", "DRAIN"], False, "draining"),
    ("IDLE*", "IDLE", [], True, None),
    ("DOWN*+DRAIN", "DOWN", ["DRAIN"], True, "drained"),
    ("MIXED+DRAIN*", "MIXED", ["DRAIN"], True, "draining"),
    ("ALLOC", "ALLOCATED", [], False, None),
    ("DRAINED", "IDLE", ["DRAIN"], False, "drained"),
    ("DRAINING", "ALLOCATED", ["DRAIN"], False, "draining"),
    ("idle+drain", "IDLE", ["DRAIN"], False, "drained"),
    ("IDLE+CLOUD+POWERED_DOWN", "IDLE", ["CLOUD", "POWERED_DOWN"], False, None),
]


@pytest.mark.parametrize(("state", "base", "flags", "not_responding", "expected_drain"), STATES, ids=[s[0] for s in STATES])
def test_state_forms(state, base, flags, not_responding, expected_drain):
    text = f"NodeName=n1 CPUAlloc=0 CPUTot=8 State={state} Partitions=gpu"
    node = parse_show_node(text)
    assert (node["base_state"], node["flags"], node["not_responding"]) == (base, flags, not_responding)
    assert node["drain_state"] == expected_drain


@pytest.mark.parametrize("state", ["", "BOGUS", "IDLE++DRAIN", "+DRAIN"])
def test_bad_state_is_a_parse_error(state):
    with pytest.raises(ParseError):
        parse_state(state)


def test_missing_state_is_a_parse_error():
    with pytest.raises(ParseError, match="no State= for node n1"):
        parse_show_node("NodeName=n1 CPUAlloc=0")


def test_reason_without_user_suffix():
    node = parse_show_node("NodeName=n1 State=IDLE+DRAIN Reason=maintenance window")
    assert node["reason"] == "maintenance window"
    assert node["reason_user"] is None


def test_reason_followed_by_other_fields():
    # Newer Slurm prints Comment=/Extra= after the reason.
    node = parse_show_node("NodeName=n1 State=IDLE+DRAIN Reason=ticket x=1 [alice@2025-01-02T03:04:05] Comment=rack 4")
    assert node["reason"] == "ticket x=1"
    assert node["reason_user"] == "alice"
    assert node["fields"]["Comment"] == "rack 4"


# --- squeue --------------------------------------------------------------------------------------------


def test_real_squeue():
    assert parse_squeue(fixture("squeue_busy.txt")) == [{"id": "1", "user": "root", "name": "sim-busy-01"}]


def test_squeue_job_name_with_commas_and_empty():
    assert parse_squeue("12_3,bob,train,a,b\n\n") == [{"id": "12_3", "user": "bob", "name": "train,a,b"}]
    assert parse_squeue("") == []
    with pytest.raises(ParseError, match="squeue"):
        parse_squeue("garbage")


# --- our marker ----------------------------------------------------------------------------------------


def test_make_reason_and_owner():
    assert make_reason("gpufleet", "r1", "driver upgrade") == "gpufleet:r1: driver upgrade"
    assert make_reason("gpufleet", None, "driver upgrade") == "gpufleet: driver upgrade"
    assert reason_owner("gpufleet:r1: driver upgrade", "gpufleet") == (True, "r1")
    assert reason_owner("gpufleet: driver upgrade", "gpufleet") == (True, None)
    assert reason_owner("gpufleet:r9: reboot : reboot issued : reboot complete", "gpufleet") == (True, "r9")
    assert reason_owner("hw ticket 123", "gpufleet") == (False, None)
    assert reason_owner("gpufleetx:r1: y", "gpufleet") == (False, None)
    assert reason_owner(None, "gpufleet") == (False, None)


# --- plan ----------------------------------------------------------------------------------------------


def node_from(name, ours=False):
    node = parse_show_node(fixture(name))
    node["ours"] = ours
    return node


def test_plan_drain():
    want = "gpufleet:r1: upgrade"
    assert plan(node_from("show_node_mixed.txt"), "drained", want, owned=False)["action"] == "drain"
    drained = node_from("show_node_mixed.txt")
    drained.update(flags=["DRAIN"], drain=True, reason=want)
    assert plan(drained, "drained", want, owned=True) == {"action": None, "drained_by_others": False, "note": None}
    # ours, another reason text: the reason is updated
    assert plan(drained, "drained", "gpufleet:r1: other", owned=True)["action"] == "drain"
    others = plan(node_from("show_node_idle_drain_others.txt"), "drained", want, owned=False)
    assert others["action"] is None and others["drained_by_others"] is True
    assert "hw ticket 123" in others["note"]
    down = plan(node_from("show_node_down_not_responding.txt"), "drained", want, owned=False)
    assert down["action"] is None and down["drained_by_others"] is True


def test_plan_resume():
    assert plan(node_from("show_node_mixed.txt"), "resumed", "", owned=False)["action"] is None
    assert plan(node_from("show_node_mixed_drain_ours.txt"), "resumed", "", owned=True)["action"] == "resume"
    refused = plan(node_from("show_node_idle_drain_others.txt"), "resumed", "", owned=False)
    assert refused["action"] is None and refused["drained_by_others"] is True
    assert "hw ticket 123" in refused["note"] and "not resumed" in refused["note"]
    forced = plan(node_from("show_node_idle_drain_others.txt"), "resumed", "", owned=False, force=True)
    assert forced["action"] == "resume" and forced["drained_by_others"] is True
    # our reboot left the node DOWN with our reason: resumed
    assert plan(node_from("show_node_down_reboot_complete.txt"), "resumed", "", owned=True)["action"] == "resume"


def test_plan_reboot():
    want = "gpufleet:r9: reboot"
    assert plan(node_from("show_node_mixed.txt"), "rebooted", want, owned=False)["action"] == "reboot"
    for name in ("show_node_mixed_drain_reboot_requested.txt", "show_node_down_drain_reboot_issued.txt", "show_node_down_reboot_complete.txt"):
        assert plan(node_from(name), "rebooted", want, owned=True)["action"] is None, name
    assert plan(node_from("show_node_idle_drain_others.txt"), "rebooted", want, owned=False)["drained_by_others"] is True
