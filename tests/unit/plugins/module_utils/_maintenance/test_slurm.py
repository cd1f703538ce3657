"""Our reason marker and the plan of slurm_node (plugins/module_utils/_maintenance/slurm.py); parsing is in _parsers/test_slurm.py."""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._maintenance.slurm import make_reason, plan, reason_owner
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.slurm import parse_show_node

from tests.conftest import OWN

SLURM = OWN / "slurm"


def fixture(name):
    return (SLURM / name).read_text()


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
