"""Our reason marker, whose a node's state is (judge), and the plan of slurm_node (plugins/module_utils/_maintenance/slurm.py).

Parsing is tested in tests/unit/plugins/module_utils/_parsers/test_slurm.py.
"""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._maintenance.slurm import (
    judge,
    make_reason,
    plan,
    reason_owner,
    split_reason,
)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.slurm import parse_show_node

from tests.conftest import OWN

SLURM = OWN / "slurm"
ROOT = {"root", "0"}


def fixture(name):
    return (SLURM / name).read_text()


def users(slurm_user=frozenset()):
    """The users() callback of judge: root runs the task; SlurmUser counts only for a reason with a reboot note."""
    return lambda parts, user: ROOT | (set(slurm_user) if parts["notes"] else set())


# --- our marker ----------------------------------------------------------------------------------------


def test_make_reason():
    assert make_reason("gpufleet", "r1", "driver upgrade") == "gpufleet:r1: driver upgrade"


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("gpufleet:r1: driver upgrade", {"rollout_id": "r1", "text": "driver upgrade", "notes": []}),
        ("gpufleet:r9: reboot : reboot issued : reboot complete", {"rollout_id": "r9", "text": "reboot", "notes": ["reboot issued", "reboot complete"]}),
        ("gpufleet:r9: reboot : reboot timed out", {"rollout_id": "r9", "text": "reboot", "notes": ["reboot timed out"]}),
        ("gpufleet:r-2026: driver upgrade a=b [x]", {"rollout_id": "r-2026", "text": "driver upgrade a=b [x]", "notes": []}),
        # merely starting with the marker is not our form
        ("gpufleet: driver upgrade", None),
        ("gpufleet:r1 hold for bob", None),
        ("gpufleet:r1:driver upgrade", None),
        ("gpufleet:r1: ", None),
        ("gpufleet:r1: upgrade\nkeep out, bob", None),
        ("gpufleetx:r1: y", None),
        ("xgpufleet:r1: y", None),
        ("hw ticket 123", None),
        (None, None),
    ],
)
def test_split_reason(reason, expected):
    assert split_reason(reason, "gpufleet") == expected
    assert reason_owner(reason, "gpufleet") == ((True, expected["rollout_id"]) if expected else (False, None))


def test_owner_tag_is_matched_literally():
    assert split_reason("fleet.ctl:r1: x", "fleet.ctl")["rollout_id"] == "r1"
    assert split_reason("fleetxctl:r1: x", "fleet.ctl") is None


# --- judge: whose the node's state is -------------------------------------------------------------------


def node_from(name):
    return parse_show_node(fixture(name))


def state(text, reason=None, user="root"):
    tail = f" Reason={reason} [{user}@2026-11-30T15:38:31]" if reason is not None else ""
    return parse_show_node(fixture("show_node_idle.txt").rstrip("\n").replace(" State=IDLE ", f" State={text} ") + tail + "\n")


JUDGED = [
    # (node, rollout, hold)
    (state("IDLE"), "r1", "in_service"),
    (state("MIXED+NOT_RESPONDING"), "r1", "in_service"),
    (state("IDLE+DRAIN", "gpufleet:r1: driver upgrade"), "r1", "ours"),
    (state("MIXED+DRAIN", "gpufleet:r1: driver upgrade"), "r1", "ours"),
    (state("DOWN+DRAIN", "gpufleet:r1: driver upgrade"), "r1", "ours"),
    (node_from("show_node_idle_drain_reboot_requested.txt"), "r9", "ours"),
    (node_from("show_node_down_drain_reboot_issued.txt"), "r9", "ours"),
    (node_from("show_node_down_reboot_complete.txt"), "r9", "ours"),
    # the same, another rollout
    (node_from("show_node_down_reboot_complete.txt"), "r1", "others"),
    (state("IDLE+DRAIN", "gpufleet:r1: driver upgrade"), "r2", "others"),
    (node_from("show_node_idle_drain_others.txt"), "r1", "others"),
    (node_from("show_node_down_drain.txt"), "r1", "others"),
    (node_from("show_node_down_not_responding.txt"), "r1", "others"),
    (node_from("show_node_idle_fail.txt"), "r1", "others"),
    (node_from("show_node_mixed_fail.txt"), "r1", "others"),
    (node_from("show_node_down_admin.txt"), "r1", "others"),
    (node_from("show_node_idle_drain_multiline_reason.txt"), "r1", "others"),
    (state("IDLE+FAIL", "gpufleet:r1: driver upgrade"), "r1", "others"),
    (state("DOWN", "gpufleet:r1: driver upgrade"), "r1", "others"),
    (state("DOWN", "gpufleet:r1: reboot : reboot issued : reboot timed out"), "r1", "others"),
    (state("IDLE+DRAIN", "gpufleet:r1: driver upgrade", user="alice"), "r1", "others"),
    (state("IDLE+DRAIN"), "r1", "others"),
    (state("FUTURE"), "r1", "others"),
    (state("UNKNOWN+NOT_RESPONDING"), "r1", "others"),
    # a reason left on an in-service node: not held, but a drain would overwrite it
    (state("IDLE+POWERED_DOWN", "power saving, ops", user="admin"), "r1", "others"),
    (state("IDLE", "gpufleet:r1: driver upgrade"), "r1", "in_service"),
]


@pytest.mark.parametrize(("node", "rollout", "hold"), JUDGED, ids=[f"{n['state']}-{n['reason']}-{r}" for n, r, _hold in JUDGED])
def test_judge(node, rollout, hold):
    verdict = judge(node, "gpufleet", rollout, users())
    assert verdict["hold"] == hold
    assert (verdict["why"] is None) is (hold != "others")


def test_reboot_notes_set_by_slurm_user_are_ours_only_with_a_note():
    done = state("DOWN", "gpufleet:r9: reboot : reboot issued : reboot complete", user="slurm")
    assert judge(done, "gpufleet", "r9", users({"slurm", "64030"}))["hold"] == "ours"
    assert judge(done, "gpufleet", "r9", users())["hold"] == "others"
    # SlurmUser does not make a plain drain ours: Slurm never writes our marker without a reboot note
    drained = state("IDLE+DRAIN", "gpufleet:r9: reboot", user="slurm")
    assert judge(drained, "gpufleet", "r9", users({"slurm", "64030"}))["hold"] == "others"


def test_why_names_what_is_not_ours():
    assert "names rollout r-OTHER, not r1" in judge(state("IDLE+DRAIN", "gpufleet:r-OTHER: x"), "gpufleet", "r1", users())["why"]
    assert "set by alice" in judge(state("IDLE+DRAIN", "gpufleet:r1: x", user="alice"), "gpufleet", "r1", users())["why"]
    assert "FAIL flag" in judge(node_from("show_node_idle_fail.txt"), "gpufleet", "r1", users())["why"]
    assert "timed out" in judge(state("DOWN", "gpufleet:r1: x : reboot timed out"), "gpufleet", "r1", users())["why"]


# --- plan ----------------------------------------------------------------------------------------------


def judged(node, rollout="r1"):
    verdict = judge(node, "gpufleet", rollout, users())
    return dict(node, hold=verdict["hold"], hold_why=verdict["why"])


def test_plan_drain():
    want = "gpufleet:r1: upgrade"
    assert plan(judged(node_from("show_node_mixed.txt")), "drained", want)["action"] == "drain"
    assert plan(judged(state("IDLE+DRAIN", want)), "drained", want) == {"action": None, "drained_by_others": False, "note": None}
    # ours, another reason text: the reason is updated
    assert plan(judged(state("IDLE+DRAIN", want)), "drained", "gpufleet:r1: other")["action"] == "drain"
    others = plan(judged(node_from("show_node_idle_drain_others.txt")), "drained", want)
    assert others["action"] is None and others["drained_by_others"] is True
    assert "hw ticket 123" in others["note"]
    for name in ("show_node_down_not_responding.txt", "show_node_idle_fail.txt", "show_node_mixed_fail.txt", "show_node_down_admin.txt"):
        down = plan(judged(node_from(name)), "drained", want)
        assert down["action"] is None and down["drained_by_others"] is True, name


def test_plan_resume():
    assert plan(judged(node_from("show_node_mixed.txt")), "resumed", None)["action"] is None
    assert plan(judged(node_from("show_node_mixed_drain_ours.txt"), "r-2026"), "resumed", None)["action"] == "resume"
    refused = plan(judged(node_from("show_node_idle_drain_others.txt")), "resumed", None)
    assert refused["action"] is None and refused["drained_by_others"] is True
    assert "hw ticket 123" in refused["note"] and "not resumed" in refused["note"]
    forced = plan(judged(node_from("show_node_idle_drain_others.txt")), "resumed", None, force=True)
    assert forced["action"] == "resume" and forced["drained_by_others"] is True
    # our reboot left the node DOWN with our reason: resumed
    assert plan(judged(node_from("show_node_down_reboot_complete.txt"), "r9"), "resumed", None)["action"] == "resume"
    # FAIL with any reason: not resumed (State=RESUME would clear FAIL)
    assert plan(judged(node_from("show_node_idle_fail.txt")), "resumed", None)["action"] is None


def test_plan_reboot():
    want = "gpufleet:r9: reboot"
    assert plan(judged(node_from("show_node_mixed.txt"), "r9"), "rebooted", want)["action"] == "reboot"
    for name in ("show_node_mixed_drain_reboot_requested.txt", "show_node_down_drain_reboot_issued.txt", "show_node_down_reboot_complete.txt"):
        assert plan(judged(node_from(name), "r9"), "rebooted", want)["action"] is None, name
    for name in ("show_node_idle_drain_others.txt", "show_node_idle_fail.txt", "show_node_down_admin.txt"):
        assert plan(judged(node_from(name), "r9"), "rebooted", want)["drained_by_others"] is True, name


def test_plan_reboot_matches_the_reason_exactly_not_as_a_prefix():
    pending = judged(state("IDLE+DRAIN+REBOOT_REQUESTED", "gpufleet:r1: driver 570"))
    assert plan(pending, "rebooted", "gpufleet:r1: driver 570")["action"] is None
    # "gpufleet:r1: driver" is a prefix of the pending reason, not the same reboot
    assert plan(pending, "rebooted", "gpufleet:r1: driver")["action"] == "reboot"
    done = judged(state("DOWN", "gpufleet:r1: driver : reboot issued : reboot complete"))
    assert plan(done, "rebooted", "gpufleet:r1: driver")["action"] is None
    assert plan(done, "rebooted", "gpufleet:r1: drive")["action"] == "reboot"


def test_plan_drain_after_our_reboot_keeps_slurms_notes():
    """Slurm ends our reboot (nextstate=DOWN) with DRAIN cleared: with ReturnToService=2 the node would go back into service
    at its next answer. drained sets the drain again and keeps the reason with Slurm's notes, so the reboot stays done."""
    want = "gpufleet:r1: driver"
    done = judged(state("DOWN", f"{want} : reboot issued : reboot complete"))
    step = plan(done, "drained", want)
    assert step["action"] == "drain" and step["reason"] == f"{want} : reboot issued : reboot complete", step
    # Drained again (by us, notes kept): nothing more to do, and the reboot is still the one asked.
    again = judged(state("DOWN+DRAIN", f"{want} : reboot issued : reboot complete"))
    assert again["hold"] == "ours"
    assert plan(again, "drained", want)["action"] is None
    assert plan(again, "rebooted", want)["action"] is None
    # Another reason of ours: a plain drain with the new reason (the notes belong to the other reboot).
    assert plan(done, "drained", "gpufleet:r1: held")["reason"] == "gpufleet:r1: held"
    # A DOWN of someone else is never drained over.
    assert plan(judged(state("DOWN", "gpufleet:r1: x : reboot timed out")), "drained", want)["action"] is None
