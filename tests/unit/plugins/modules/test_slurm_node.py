"""gpufleet.lifecycle.slurm_node with recorded scontrol/squeue calls."""

from __future__ import annotations

import re

import pytest
from ansible.module_utils import basic
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._maintenance import slurm as _slurm
from ansible_collections.gpufleet.lifecycle.plugins.modules import slurm_node

from tests.conftest import OWN

SCONTROL = "/usr/bin/scontrol"
SQUEUE = "/usr/bin/squeue"
OURS = "gpufleet:r1: driver upgrade"


def node_text(name="busy-01", state="MIXED", reason=None, user="root"):
    """A real `scontrol show node -o` line (Slurm 22.05.8) with the state and reason changed."""
    text = (OWN / "slurm" / "show_node_mixed.txt").read_text().strip()
    text = text.replace("NodeName=busy-01 ", f"NodeName={name} ")
    text = re.sub(r" State=\S+", f" State={state}", text)
    if reason is not None:
        text += f" Reason={reason} [{user}@2026-11-30T15:38:31]"
    return text + "\n"


def show(name="busy-01"):
    return [SCONTROL, "show", "node", "-o", name]


def squeue(name="busy-01"):
    return [SQUEUE, "-w", name, "-h", "-o", "%i,%u,%j"]


def update(*args, name="busy-01"):
    return [SCONTROL, "update", f"NodeName={name}", *args]


class FakeTime:
    """Stands for the time module inside _slurm: sleeping advances the clock."""

    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def slurm(commands, monkeypatch):
    commands.tool("scontrol")
    commands.tool("squeue")
    commands.on(squeue(), stdout="1,alice,train-llm\n")
    fake_time = FakeTime()
    monkeypatch.setattr(_slurm, "time", fake_time)
    commands.time = fake_time
    commands.warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, text: commands.warnings.append(text))
    # The module runs as root here: a reason Slurm says root set can be ours.
    monkeypatch.setattr(_slurm, "current_user", lambda: {"name": "root", "uid": "0"}, raising=False)
    return commands


def sequence(commands, monkeypatch, argv, outputs):
    """Answer argv with each output in turn (the last one repeats); other commands from the table."""
    queue = list(outputs)
    original = commands.run_command

    def run_command(module, args, **kwargs):
        seconds, rest = commands.split_timeout(args)
        if list(rest) == argv:
            commands.calls.append({"argv": list(rest), "cmd": list(args), "timeout": seconds, "environ_update": kwargs.get("environ_update"), "kwargs": kwargs})
            return 0, (queue.pop(0) if len(queue) > 1 else queue[0]), ""
        return original(module, args, **kwargs)

    monkeypatch.setattr(commands, "run_command", run_command)


def argvs(commands):
    return [call["argv"] for call in commands.calls]


# --- drained -------------------------------------------------------------------------------------------


def test_drain_runs_scontrol_update_with_our_reason(slurm, run_module, monkeypatch):
    sequence(slurm, monkeypatch, show(), [node_text(), node_text(), node_text(state="MIXED+DRAIN", reason=OURS)])
    slurm.on(update("State=DRAIN", f"Reason={OURS}"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "drained", "reason": "driver upgrade", "rollout_id": "r1"})
    assert not result.get("failed"), result
    # read, read again right before the update, update, read after
    assert argvs(slurm) == [show(), squeue(), show(), update("State=DRAIN", "Reason=gpufleet:r1: driver upgrade"), show(), squeue()]
    assert all(call["environ_update"]["LC_ALL"] == "C" for call in slurm.calls)
    # the reason's [user@time] is read in ISO form, whatever SLURM_TIME_FORMAT the login shell sets
    assert all(call["environ_update"]["SLURM_TIME_FORMAT"] == "standard" for call in slurm.calls if call["argv"][0] == SCONTROL)
    assert result["changed"] is True
    assert result["action"] == "drain"
    assert result["drained_by_others"] is False
    assert result["reason"] == "gpufleet:r1: driver upgrade"
    assert result["before"]["state"] == "MIXED"
    assert result["after"]["drain_state"] == "draining"
    assert result["after"]["ours"] is True and result["after"]["rollout_id"] == "r1"
    assert result["after"]["jobs"] == [{"id": "1", "user": "alice", "name": "train-llm"}]
    assert result["diff"] == {
        "before": {"state": "MIXED", "reason": None},
        "after": {"state": "MIXED+DRAIN", "reason": "gpufleet:r1: driver upgrade"},
    }


def test_drain_with_another_owner_tag(slurm, run_module, monkeypatch):
    sequence(slurm, monkeypatch, show(), [node_text(), node_text(), node_text(state="MIXED+DRAIN", reason="fleetctl:r1: fw")])
    slurm.on(update("State=DRAIN", "Reason=fleetctl:r1: fw"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "drained", "reason": "fw", "owner_tag": "fleetctl", "rollout_id": "r1"})
    assert update("State=DRAIN", "Reason=fleetctl:r1: fw") in argvs(slurm)
    assert result["changed"] is True


def test_drain_check_mode_predicts_and_runs_no_update(slurm, run_module):
    slurm.on(show(), stdout=node_text())
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "drained", "reason": "driver upgrade", "rollout_id": "r1", "wait": True},
                        check_mode=True)
    assert argvs(slurm) == [show(), squeue()]
    assert result["changed"] is True
    assert result["after"] == result["before"]
    assert result["diff"]["after"] == {"state": "MIXED+DRAIN", "reason": OURS}
    assert slurm.time.sleeps == []


def test_drain_already_ours_is_idempotent(slurm, run_module):
    slurm.on(show(), stdout=node_text(state="IDLE+DRAIN", reason=OURS))
    for check in (False, True):
        slurm.calls.clear()
        result = run_module(slurm_node.main, {"node": "busy-01", "state": "drained", "reason": "driver upgrade", "rollout_id": "r1"},
                            check_mode=check)
        assert result["changed"] is False
        assert result["action"] is None
        assert all(call["argv"][1] != "update" for call in slurm.calls)


def test_drain_ours_with_other_text_updates_the_reason(slurm, run_module, monkeypatch):
    sequence(slurm, monkeypatch, show(), [node_text(state="IDLE+DRAIN", reason="gpufleet:r1: old")] * 2 + [node_text(state="IDLE+DRAIN", reason=OURS)])
    slurm.on(update("State=DRAIN", f"Reason={OURS}"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "drained", "reason": "driver upgrade", "rollout_id": "r1"})
    assert result["changed"] is True
    assert result["diff"]["before"]["reason"] == "gpufleet:r1: old"


@pytest.mark.parametrize(
    ("state", "reason"),
    [("IDLE+DRAIN", "hw ticket 123"), ("DOWN+NOT_RESPONDING", "Not responding"), ("MIXED+DRAIN", "gpufleet:r0: failed rollout")],
)
def test_drain_keeps_someone_elses_drain(slurm, run_module, state, reason):
    slurm.on(show(), stdout=node_text(state=state, reason=reason, user="admin"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "drained", "reason": "driver upgrade", "rollout_id": "r1", "wait": True})
    assert not result.get("failed"), result
    assert argvs(slurm) == [show(), squeue(), show(), squeue()]  # no update, no wait
    assert result["changed"] is False
    assert result["drained_by_others"] is True
    assert result["before"]["reason"] == reason
    assert result["before"]["reason_user"] == "admin"
    assert result["after"]["reason"] == reason
    assert any(reason in w for w in slurm.warnings)
    # the caller sees how far their drain is and what still runs there
    assert result["drain_state"] == {"IDLE+DRAIN": "drained", "DOWN+NOT_RESPONDING": None, "MIXED+DRAIN": "draining"}[state]
    assert result["jobs"] == [{"id": "1", "user": "alice", "name": "train-llm"}]


def test_drain_backs_off_when_someone_else_drains_between_read_and_update(slurm, run_module, monkeypatch):
    admin = node_text(state="MIXED+DRAIN", reason="hw ticket 456", user="admin")
    sequence(slurm, monkeypatch, show(), [node_text(), admin])
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "drained", "reason": "driver upgrade", "rollout_id": "r1", "wait": True})
    assert not result.get("failed"), result
    # read, read again (their drain is there now), no update, no wait, read after
    assert argvs(slurm) == [show(), squeue(), show(), show(), squeue()]
    assert result["changed"] is False
    assert result["action"] is None
    assert result["drained_by_others"] is True
    assert result["after"]["reason"] == "hw ticket 456"
    assert result["drain_state"] == "draining"
    assert result["jobs"] == [{"id": "1", "user": "alice", "name": "train-llm"}]
    assert slurm.time.sleeps == []
    assert any("hw ticket 456" in w and "admin" in w and "nothing was changed" in w for w in slurm.warnings)


def test_resume_backs_off_when_someone_else_drains_between_read_and_update(slurm, run_module, monkeypatch):
    admin = node_text(state="IDLE+DRAIN", reason="hw ticket 456", user="admin")
    sequence(slurm, monkeypatch, show(), [node_text(state="IDLE+DRAIN", reason=OURS), admin])
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r1"})
    assert argvs(slurm) == [show(), squeue(), show(), show(), squeue()]
    assert result["changed"] is False
    assert result["drained_by_others"] is True
    assert "drain_state" not in result  # only with state=drained


def test_reboot_backs_off_when_someone_else_drains_between_read_and_reboot(slurm, run_module, monkeypatch):
    sequence(slurm, monkeypatch, show(), [node_text(), node_text(state="MIXED+DRAIN", reason="hw ticket 456", user="admin")])
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "rebooted", "reason": "driver 570", "rollout_id": "r1"})
    assert not any(argv[1] == "reboot" for argv in argvs(slurm))
    assert result["changed"] is False
    assert result["drained_by_others"] is True


def test_drain_of_our_own_node_returns_no_drain_state(slurm, run_module, monkeypatch):
    sequence(slurm, monkeypatch, show(), [node_text(), node_text(), node_text(state="MIXED+DRAIN", reason=OURS)])
    slurm.on(update("State=DRAIN", f"Reason={OURS}"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "drained", "reason": "driver upgrade", "rollout_id": "r1"})
    assert "drain_state" not in result and "jobs" not in result


def test_wait_polls_until_drained(slurm, run_module, monkeypatch):
    draining = node_text(state="MIXED+DRAIN", reason=OURS)
    sequence(slurm, monkeypatch, show(), [node_text(), node_text(), draining, draining, node_text(state="IDLE+COMPLETING+DRAIN", reason=OURS),
                                          node_text(state="IDLE+DRAIN", reason=OURS)])
    slurm.on(update("State=DRAIN", f"Reason={OURS}"))
    args = {"node": "busy-01", "state": "drained", "reason": "driver upgrade", "rollout_id": "r1", "wait": True, "poll_interval": 7}
    result = run_module(slurm_node.main, args)
    assert not result.get("failed"), result
    assert argvs(slurm) == [show(), squeue(), show(), update("State=DRAIN", f"Reason={OURS}"), show(), show(), show(), show(), show(), squeue()]
    assert slurm.time.sleeps == [7, 7, 7]
    assert result["waited_s"] == 21
    assert result["after"]["drain_state"] == "drained"
    assert result["changed"] is True


def test_wait_timeout_fails_with_jobs_and_keeps_the_drain(slurm, run_module, monkeypatch):
    draining = node_text(state="MIXED+DRAIN", reason=OURS)
    sequence(slurm, monkeypatch, show(), [node_text(), node_text(), draining])
    slurm.on(update("State=DRAIN", f"Reason={OURS}"))
    args = {"node": "busy-01", "state": "drained", "reason": "driver upgrade", "rollout_id": "r1", "wait": True, "timeout": 30, "poll_interval": 10}
    result = run_module(slurm_node.main, args)
    assert result["failed"] is True
    assert "still draining after 30 s" in result["msg"]
    assert "1 (alice, train-llm)" in result["msg"]
    assert result["jobs"] == [{"id": "1", "user": "alice", "name": "train-llm"}]
    assert result["after"]["state"] == "MIXED+DRAIN"
    assert result["changed"] is True
    assert sum(slurm.time.sleeps) == 30
    assert not any("State=RESUME" in call["argv"] for call in slurm.calls)


def test_wait_fails_when_someone_resumes_the_node_meanwhile(slurm, run_module, monkeypatch):
    sequence(slurm, monkeypatch, show(), [node_text(), node_text(), node_text(state="MIXED+DRAIN", reason=OURS), node_text()])
    slurm.on(update("State=DRAIN", f"Reason={OURS}"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "drained", "reason": "driver upgrade", "rollout_id": "r1", "wait": True,
                                          "poll_interval": 1})
    assert result["failed"] is True
    assert "lost its drain" in result["msg"]


# --- resumed -------------------------------------------------------------------------------------------


def test_resume_our_drain(slurm, run_module, monkeypatch):
    sequence(slurm, monkeypatch, show(), [node_text(state="IDLE+DRAIN", reason=OURS), node_text(state="IDLE+DRAIN", reason=OURS),
                                          node_text(state="IDLE+NOT_RESPONDING")])
    slurm.on(update("State=RESUME"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r1"})
    assert argvs(slurm) == [show(), squeue(), show(), update("State=RESUME"), show(), squeue()]
    assert result["changed"] is True
    assert result["drained_by_others"] is False
    assert result["diff"] == {"before": {"state": "IDLE+DRAIN", "reason": OURS}, "after": {"state": "IDLE+NOT_RESPONDING", "reason": None}}


@pytest.mark.parametrize("state", ["resumed", "drained", "rebooted"])
def test_no_rollout_id_is_refused_before_any_command(slurm, run_module, state):
    # resumed without rollout_id used to resume a node drained by another rollout (gpufleet:r-OTHER: ...)
    slurm.on(show(), stdout=node_text(state="IDLE+DRAIN", reason="gpufleet:r-OTHER: driver upgrade"))
    args = {"node": "busy-01", "state": state}
    if state != "resumed":
        args["reason"] = "driver upgrade"
    result = run_module(slurm_node.main, args)
    assert result["failed"] is True
    assert result["msg"].startswith("rollout_id is required")
    assert slurm.calls == []


def test_our_reboot_completed_is_resumed(slurm, run_module, monkeypatch):
    sequence(slurm, monkeypatch, show(), [node_text(state="DOWN", reason="gpufleet:r9: reboot : reboot issued : reboot complete")] * 2 + [node_text()])
    slurm.on(update("State=RESUME"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r9"})
    assert update("State=RESUME") in argvs(slurm)
    assert result["changed"] is True
    assert result["drained_by_others"] is False


def test_our_reboot_completed_is_resumed_when_slurm_user_set_the_reason(slurm, run_module, monkeypatch):
    # Slurm appends "reboot complete" as SlurmUser (slurm on a real cluster), not as us: asked once.
    done = node_text(state="DOWN", reason="gpufleet:r9: reboot : reboot issued : reboot complete", user="slurm")
    sequence(slurm, monkeypatch, show(), [done, done, node_text()])
    slurm.on([SCONTROL, "show", "config"], stdout="SlurmUser               = slurm(64030)\nSlurmdUser              = root(0)\n")
    slurm.on(update("State=RESUME"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r9"})
    assert result["changed"] is True, result
    assert argvs(slurm).count([SCONTROL, "show", "config"]) == 1


def test_our_drain_on_a_node_that_went_down_is_resumed(slurm, run_module, monkeypatch):
    # drained by us, then slurmd stopped answering (the upgrade's reboot): Slurm keeps our reason
    sequence(slurm, monkeypatch, show(), [node_text(state="DOWN+DRAIN", reason=OURS)] * 2 + [node_text(state="IDLE")])
    slurm.on(update("State=RESUME"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r1"})
    assert result["changed"] is True
    assert result["drained_by_others"] is False


NOT_OURS = [
    # (state, reason, user, what the warning names)
    ("IDLE+DRAIN", "gpufleet:r-OTHER: driver upgrade", "root", "rollout r-OTHER"),
    ("IDLE+DRAIN", "gpufleet:r10: driver upgrade", "root", "rollout r10"),
    ("IDLE+DRAIN", "gpufleet: driver upgrade", "root", "marker gpufleet:r1:"),
    ("IDLE+DRAIN", "gpufleet:r1 hold for bob", "root", "marker gpufleet:r1:"),
    ("IDLE+DRAIN", "gpufleet:r1:driver upgrade", "root", "marker gpufleet:r1:"),
    ("IDLE+DRAIN", "gpufleetx:r1: driver upgrade", "root", "marker gpufleet:r1:"),
    # our marker and rollout, but a person set it (Slurm says who)
    ("IDLE+DRAIN", OURS, "alice", "set by alice"),
    # FAIL: neither we nor our reboot set it; State=DRAIN would replace it, State=RESUME clear it
    ("IDLE+FAIL", "psu alarm, do not touch", "admin", "FAIL"),
    ("IDLE+FAIL", OURS, "root", "FAIL"),
    ("MIXED+DRAIN+FAIL", OURS, "root", "FAIL"),
    # DOWN that our reboot did not leave
    ("DOWN", "bad dimm, ticket 77", "admin", "DOWN"),
    ("DOWN", OURS, "root", "DOWN"),
    ("DOWN", "gpufleet:r1: driver upgrade : reboot timed out", "root", "DOWN"),
    ("DOWN+NOT_RESPONDING", "Not responding", "slurm", "DOWN"),
    # an AC power cycle (or any reboot Slurm did not ask for) of a node nobody drained, ReturnToService=1: Slurm's own DOWN
    ("DOWN", "Node unexpectedly rebooted", "slurm", "marker gpufleet:r1:"),
    ("DOWN+DRAIN", "Node unexpectedly rebooted", "slurm", "marker gpufleet:r1:"),
    # not yet a usable node
    ("FUTURE", None, None, "FUTURE"),
    ("UNKNOWN+NOT_RESPONDING", None, None, "UNKNOWN"),
]


@pytest.mark.parametrize(("state", "reason", "user", "why"), NOT_OURS, ids=[f"{n[0]}-{n[1]}-{n[2]}" for n in NOT_OURS])
def test_resume_leaves_every_state_we_did_not_set_alone(slurm, run_module, state, reason, user, why):
    slurm.on(show(), stdout=node_text(state=state, reason=reason, user=user))
    slurm.on([SCONTROL, "show", "config"], stdout="SlurmUser               = slurm(64030)\n")
    for check in (False, True):
        slurm.calls.clear()
        slurm.warnings.clear()
        result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r1"}, check_mode=check)
        assert not result.get("failed"), result
        assert result["changed"] is False
        assert result["action"] is None
        assert result["drained_by_others"] is True
        assert result["after"]["reason"] == reason
        assert not any(argv[1] == "update" for argv in argvs(slurm))
        assert any("not resumed" in w and why in w for w in slurm.warnings), slurm.warnings


@pytest.mark.parametrize(("state", "reason", "user", "why"), NOT_OURS, ids=[f"{n[0]}-{n[1]}-{n[2]}" for n in NOT_OURS])
def test_drain_and_reboot_leave_every_state_we_did_not_set_alone(slurm, run_module, state, reason, user, why):
    slurm.on(show(), stdout=node_text(state=state, reason=reason, user=user))
    slurm.on([SCONTROL, "show", "config"], stdout="SlurmUser               = slurm(64030)\n")
    for desired in ("drained", "rebooted"):
        slurm.calls.clear()
        slurm.warnings.clear()
        result = run_module(slurm_node.main, {"node": "busy-01", "state": desired, "reason": "driver upgrade", "rollout_id": "r1", "wait": True})
        assert not result.get("failed"), result
        assert result["changed"] is False, desired
        assert result["drained_by_others"] is True
        assert result["after"]["reason"] == reason
        assert not any(argv[1] in ("update", "reboot") for argv in argvs(slurm))
        assert any(why in w for w in slurm.warnings), slurm.warnings


def test_in_service_node_with_someone_elses_reason_is_not_drained_over(slurm, run_module):
    # a reason survives on a powered-down node: a drain would replace it
    slurm.on(show(), stdout=node_text(state="IDLE+POWERED_DOWN", reason="power saving, ops", user="admin"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "drained", "reason": "driver upgrade", "rollout_id": "r1"})
    assert result["changed"] is False
    assert result["drained_by_others"] is True
    assert not any(argv[1] == "update" for argv in argvs(slurm))
    assert any("power saving, ops" in w for w in slurm.warnings)


@pytest.mark.parametrize(("state", "reason"), [("IDLE+DRAIN", "hw ticket 123"), ("DOWN+DRAIN", "gpufleet:r0: failed"), ("DOWN", "Not responding")])
def test_resume_never_touches_someone_elses_drain(slurm, run_module, state, reason):
    slurm.on(show(), stdout=node_text(state=state, reason=reason, user="admin"))
    for check in (False, True):
        slurm.calls.clear()
        slurm.warnings.clear()
        result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r1"}, check_mode=check)
        assert argvs(slurm) == [show(), squeue()] + ([] if check else [show(), squeue()])
        assert result["changed"] is False
        assert result["drained_by_others"] is True
        assert result["after"]["reason"] == reason
        assert any(reason in w and "not resumed" in w for w in slurm.warnings)


def test_resume_force_resumes_someone_elses_drain_with_a_warning(slurm, run_module, monkeypatch):
    sequence(slurm, monkeypatch, show(), [node_text(state="IDLE+DRAIN", reason="hw ticket 123")] * 2 + [node_text(state="IDLE")])
    slurm.on(update("State=RESUME"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "force": True, "rollout_id": "r1"})
    assert update("State=RESUME") in argvs(slurm)
    assert result["changed"] is True
    assert result["drained_by_others"] is True
    assert any("force" in w for w in slurm.warnings)


def test_force_resume_without_rollout_id_says_why_the_drain_is_not_ours(slurm, run_module, monkeypatch):
    sequence(slurm, monkeypatch, show(), [node_text(state="IDLE+DRAIN", reason=OURS)] * 2 + [node_text(state="IDLE")])
    slurm.on(update("State=RESUME"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "force": True})
    assert update("State=RESUME") in argvs(slurm)
    assert result["drained_by_others"] is True
    assert result["before"]["hold_why"] == f"its reason {OURS!r} cannot be ours: no rollout_id was given"
    assert any("force" in w and "no rollout_id was given" in w for w in slurm.warnings)


@pytest.mark.parametrize("state", ["IDLE", "MIXED", "ALLOCATED", "IDLE+NOT_RESPONDING"])
def test_resume_in_service_node_is_idempotent(slurm, run_module, state):
    slurm.on(show(), stdout=node_text(state=state))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r1"})
    assert result["changed"] is False
    assert result["drained_by_others"] is False
    assert all(call["argv"][1] != "update" for call in slurm.calls)


def test_resume_check_mode(slurm, run_module):
    slurm.on(show(), stdout=node_text(state="MIXED+DRAIN", reason=OURS))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r1"}, check_mode=True)
    assert argvs(slurm) == [show(), squeue()]
    assert result["changed"] is True
    assert result["diff"]["after"] == {"state": "MIXED", "reason": None}


# --- rebooted ------------------------------------------------------------------------------------------


def test_reboot_asap_next_state_down(slurm, run_module, monkeypatch):
    reason = "gpufleet:r1: driver 570"
    sequence(slurm, monkeypatch, show(), [node_text(), node_text(), node_text(state="MIXED+DRAIN+REBOOT_REQUESTED", reason=reason)])
    slurm.on([SCONTROL, "reboot", "ASAP", "nextstate=DOWN", f"reason={reason}", "busy-01"])
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "rebooted", "reason": "driver 570", "rollout_id": "r1"})
    assert argvs(slurm)[2:4] == [show(), [SCONTROL, "reboot", "ASAP", "nextstate=DOWN", f"reason={reason}", "busy-01"]]
    assert result["changed"] is True
    # asked again while the reboot is pending: nothing to do
    slurm.calls.clear()
    sequence(slurm, monkeypatch, show(), [node_text(state="MIXED+DRAIN+REBOOT_REQUESTED", reason=reason)])
    again = run_module(slurm_node.main, {"node": "busy-01", "state": "rebooted", "reason": "driver 570", "rollout_id": "r1"})
    assert again["changed"] is False
    assert argvs(slurm) == [show(), squeue(), show(), squeue()]


def test_a_node_rebooting_itself_does_not_race_the_reboot_with_a_read(slurm, run_module, monkeypatch):
    # An idle node reboots as soon as scontrol asks: one more scontrol after the request could be cut off with the
    # task's connection. The node's own reboot request is the last command; the diff shows the predicted state.
    reason = "gpufleet:r1: driver 570"
    monkeypatch.setattr(slurm_node.socket, "gethostname", lambda: "busy-01.cluster.example")
    sequence(slurm, monkeypatch, show(), [node_text(), node_text()])
    reboot = [SCONTROL, "reboot", "ASAP", "nextstate=DOWN", f"reason={reason}", "busy-01"]
    slurm.on(reboot)
    result = run_module(slurm_node.main, {"state": "rebooted", "reason": "driver 570", "rollout_id": "r1"})
    assert result["changed"] is True
    assert argvs(slurm)[-1] == reboot
    assert result["diff"]["after"]["state"] == "MIXED+DRAIN+REBOOT_REQUESTED"
    assert any("asked Slurm to reboot itself" in w and "delegated" in w for w in slurm.warnings), slurm.warnings
    # from another host the node is read after the request, and nobody is warned
    slurm.calls.clear()
    slurm.warnings.clear()
    monkeypatch.setattr(slurm_node.socket, "gethostname", lambda: "login-01")
    sequence(slurm, monkeypatch, show(), [node_text(), node_text(), node_text(state="MIXED+DRAIN+REBOOT_REQUESTED", reason=reason)])
    other = run_module(slurm_node.main, {"node": "busy-01", "state": "rebooted", "reason": "driver 570", "rollout_id": "r1"})
    assert argvs(slurm)[-2:] == [show(), squeue()]
    assert other["after"]["state"] == "MIXED+DRAIN+REBOOT_REQUESTED" or "REBOOT_REQUESTED" in other["after"]["flags"]
    assert slurm.warnings == []


# --- errors and defaults -------------------------------------------------------------------------------


def test_unknown_node_fails_clearly(slurm, run_module):
    slurm.on(show("nosuch"), rc=1, stdout=(OWN / "slurm" / "show_node_not_found.txt").read_text())
    result = run_module(slurm_node.main, {"node": "nosuch", "state": "drained", "reason": "x", "rollout_id": "r1"})
    assert result["failed"] is True
    assert result["msg"].startswith("Slurm does not know node nosuch: check NodeName")
    assert result["rc"] == 1


def test_scontrol_failure_is_reported(slurm, run_module):
    slurm.on(show(), rc=1, stderr="slurm_load_node error: Unable to contact slurm controller (connect failure)")
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r1"})
    assert result["failed"] is True
    assert "Unable to contact slurm controller" in result["msg"]


def test_node_defaults_to_the_short_hostname(slurm, run_module, monkeypatch):
    monkeypatch.setattr(slurm_node.socket, "gethostname", lambda: "idle-07.cluster.example")
    slurm.on(show("idle-07"), stdout=node_text(name="idle-07", state="IDLE"))
    slurm.on(squeue("idle-07"))
    result = run_module(slurm_node.main, {"state": "resumed", "rollout_id": "r1"})
    assert result["node"] == "idle-07"
    assert argvs(slurm)[0] == show("idle-07")


def test_without_squeue_jobs_are_none(commands, run_module):
    commands.tool("scontrol")
    commands.on(show(), stdout=node_text(state="IDLE"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r1"})
    assert result["before"]["jobs"] is None


def test_calls_run_under_coreutils_timeout_when_present(slurm, run_module):
    slurm.tool("timeout")
    slurm.on(["/usr/bin/timeout", "--kill-after=10", "60", *show()], stdout=node_text(state="IDLE"))
    slurm.on(["/usr/bin/timeout", "--kill-after=10", "60", *squeue()])
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r1"})
    assert result["changed"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"state": "drained", "rollout_id": "r1"}, "reason"),
        ({"state": "drained", "reason": "x", "rollout_id": "r 1; rm"}, "rollout_id"),
        ({"state": "drained", "reason": "x", "rollout_id": "r1", "owner_tag": "a:b"}, "owner_tag"),
        # "$" matched before a trailing newline: full-match checks only.
        ({"state": "drained", "reason": "x", "rollout_id": "r1\n"}, "rollout_id"),
        ({"state": "resumed", "rollout_id": "r1\n"}, "rollout_id"),
        ({"state": "drained", "reason": "x", "rollout_id": "r1", "owner_tag": "gpufleet\n"}, "owner_tag"),
        ({"state": "drained", "reason": "x", "rollout_id": "r1", "owner_tag": "gpu fleet"}, "owner_tag"),
        ({"state": "drained", "reason": "line one\nline two", "rollout_id": "r1"}, "reason"),
        ({"state": "drained", "reason": "   ", "rollout_id": "r1"}, "reason"),
        ({"state": "rebooted", "reason": "tab\there", "rollout_id": "r1"}, "reason"),
        ({"node": "gpu[01-04]", "state": "drained", "reason": "x", "rollout_id": "r1"}, "node"),
        ({"node": "busy-01\n", "state": "drained", "reason": "x", "rollout_id": "r1"}, "node"),
        ({"node": "busy-01,busy-02", "state": "resumed", "rollout_id": "r1"}, "node"),
    ],
)
def test_bad_arguments(slurm, run_module, args, message):
    result = run_module(slurm_node.main, {"node": "busy-01", **args})
    assert result["failed"] is True
    assert message in result["msg"]
    assert "Traceback" not in result["msg"]
    assert slurm.calls == []


@pytest.mark.parametrize(
    ("option", "value", "limits"),
    [
        ("poll_interval", -5, "from 1 to 3600"),
        ("poll_interval", 0, "from 1 to 3600"),
        ("poll_interval", 3601, "from 1 to 3600"),
        ("timeout", 0, "from 1 to 86400"),
        ("timeout", -1, "from 1 to 86400"),
        ("timeout", 86401, "from 1 to 86400"),
    ],
)
def test_out_of_range_numbers_are_refused_before_any_command(slurm, run_module, option, value, limits):
    # poll_interval -5 used to drain the node and then raise ValueError in time.sleep; 0 spun scontrol.
    args = {"node": "busy-01", "state": "drained", "reason": "x", "rollout_id": "r1", "wait": True, option: value}
    result = run_module(slurm_node.main, args)
    assert result["failed"] is True
    assert result["msg"].startswith(f"{option} must be")
    assert limits in result["msg"] and repr(value) in result["msg"]
    assert slurm.calls == []


def test_numbers_are_checked_even_without_wait(slurm, run_module):
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r1", "poll_interval": 0})
    assert result["failed"] is True
    assert "poll_interval" in result["msg"]
    assert slurm.calls == []


@pytest.mark.parametrize(
    ("shown", "message"),
    [
        # a cut-off answer used to read as "in service" and got drained over someone's drain
        (node_text(state="IDLE+DRAIN", reason="hw ticket 123").split(" ThreadsPerCore=")[0] + " Threa\n", "cut off"),
        (node_text(state="IDLE+DRAIN+BOGUS_FLAG", reason="hw ticket 123"), "unknown state flag 'BOGUS_FLAG'"),
        (node_text(state="idle+drain", reason="hw ticket 123"), "State='idle+drain'"),
    ],
)
def test_unreadable_state_fails_and_changes_nothing(slurm, run_module, shown, message):
    slurm.on(show(), stdout=shown)
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "drained", "reason": "driver upgrade", "rollout_id": "r1"})
    assert result["failed"] is True
    assert message in result["msg"]
    assert result["changed"] is False
    assert argvs(slurm) == [show()]


FAKE_SCONTROL = """#!/bin/sh
# Stands for scontrol: records each argument of an update on its own line, answers show node from files.
dir=$(dirname "$0")
case "$1" in
  show) if [ -e "$dir/updated" ]; then cat "$dir/after.txt"; else cat "$dir/before.txt"; fi ;;
  update) for arg in "$@"; do printf '%s\\n' "$arg"; done > "$dir/updated" ;;
  *) exit 2 ;;
esac
"""


def test_reason_with_dollar_and_tilde_reaches_scontrol_as_written(run_module, tmp_path, monkeypatch):
    # Not the recording fake: _tools.run_process itself runs a script under coreutils timeout, so a "$HOME" or "~"
    # that anything expanded (as run_command does unless told not to) would show in what scontrol received.
    monkeypatch.setenv("HOME", "/root-home-that-must-not-appear")
    monkeypatch.setattr(_slurm, "current_user", lambda: {"name": "root", "uid": "0"})
    reason = "keep $HOME and ~ and ${USER} as written"
    ours = f"gpufleet:r1: {reason}"
    (tmp_path / "before.txt").write_text(node_text(state="IDLE"))
    (tmp_path / "after.txt").write_text(node_text(state="IDLE+DRAIN", reason=ours))
    script = tmp_path / "scontrol"
    script.write_text(FAKE_SCONTROL)
    script.chmod(0o755)
    squeue_script = tmp_path / "squeue"
    squeue_script.write_text("#!/bin/sh\nexit 0\n")
    squeue_script.chmod(0o755)
    args = {"node": "busy-01", "state": "drained", "reason": reason, "rollout_id": "r1",
            "scontrol_path": str(script), "squeue_path": str(squeue_script)}
    result = run_module(slurm_node.main, args)
    assert not result.get("failed"), result
    received = (tmp_path / "updated").read_text().splitlines()
    assert received == ["update", "NodeName=busy-01", "State=DRAIN", f"Reason={ours}"]
    assert result["after"]["reason"] == ours
    assert result["changed"] is True


def test_boot_time_is_returned_as_slurm_prints_it(slurm, run_module):
    # a caller that power-cycled the node outside Slurm waits for a new BootTime (the rollout's activation)
    slurm.on(show(), stdout=node_text(state="IDLE+DRAIN", reason=OURS))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "drained", "reason": "driver upgrade", "rollout_id": "r1"},
                        check_mode=True)
    assert result["before"]["boot_time"] == "2026-11-30T15:38:18"
    assert result["after"]["boot_time"] == "2026-11-30T15:38:18"


@pytest.mark.parametrize(("boot", "expected"), [("None", None), ("Unknown", None), (None, None)])
def test_no_boot_time_is_none(slurm, run_module, boot, expected):
    text = node_text(state="IDLE")
    text = text.replace(" BootTime=2026-11-30T15:38:18", "" if boot is None else f" BootTime={boot}")
    slurm.on(show(), stdout=text)
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r1"})
    assert not result.get("failed"), result
    assert result["before"]["boot_time"] is expected


def test_a_boot_time_in_another_format_fails_and_changes_nothing(slurm, run_module):
    slurm.on(show(), stdout=node_text(state="IDLE+DRAIN", reason=OURS).replace("BootTime=2026-11-30T15:38:18", "BootTime=11/30-15:38:18"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "resumed", "rollout_id": "r1"})
    assert result["failed"] is True
    assert "BootTime='11/30-15:38:18'" in result["msg"] and "SLURM_TIME_FORMAT" in result["msg"], result["msg"]
    assert not any(argv[1] == "update" for argv in argvs(slurm))


def test_drained_after_our_reboot_sets_the_drain_again_with_slurms_notes(slurm, run_module, monkeypatch):
    # scontrol reboot nextstate=DOWN ends with DRAIN cleared: ReturnToService=2 would put the node back into service at its
    # next answer (seen on Debian's slurmctld 22.05 about 30 s after the reboot completed). drained sets DRAIN again.
    done = "gpufleet:r9: reboot : reboot issued : reboot complete"
    sequence(slurm, monkeypatch, show(), [node_text(state="DOWN", reason=done)] * 2 + [node_text(state="DOWN+DRAIN", reason=done)])
    slurm.on(update("State=DRAIN", f"Reason={done}"))
    result = run_module(slurm_node.main, {"node": "busy-01", "state": "drained", "reason": "reboot", "rollout_id": "r9"})
    assert update("State=DRAIN", f"Reason={done}") in argvs(slurm), argvs(slurm)
    assert result["changed"] is True and result["drained_by_others"] is False, result
    assert result["diff"]["after"] == {"state": "DOWN+DRAIN", "reason": done}, result["diff"]
