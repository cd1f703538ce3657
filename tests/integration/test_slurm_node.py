"""slurm_node on simulated nodes with real Slurm (gpusim: slurmctld + one slurmd per node).

Brings up tests/fixtures/slurm/fleet-slurm.yml (busy-01 and busy-02 run a sleep job, idle-01..03 are
idle) once for the file and runs `ansible NODE -m gpufleet.lifecycle.slurm_node` on the nodes over
SSH (the module runs on the node, node name = its short host name). Results are read with the json
stdout callback; Slurm's view is read with scontrol on the controller (the fleet's SLURM_CONF).
Needs root and the simulator's packages (tests/gpusim/install-deps.sh). Run:
    .venv/bin/python -m pytest tests/integration/test_slurm_node.py -m integration -q
"""

from __future__ import annotations

import subprocess
import time

import pytest
from fleet import TESTS, fleet_up, needs_fleet, scontrol_node
from fleet import Fleet as BaseFleet

SPEC = TESTS / "fixtures" / "slurm" / "fleet-slurm.yml"
ROLLOUT = "it-1"
OURS = f"gpufleet:{ROLLOUT}: driver upgrade"

pytestmark = needs_fleet()


class Fleet(BaseFleet):
    def module(self, pattern: str, args: dict, *, check: bool = False) -> dict[str, dict]:
        """`ansible PATTERN -m gpufleet.lifecycle.slurm_node -a ARGS --diff` -> {host: result}."""
        return super().module("gpufleet.lifecycle.slurm_node", pattern, args, check=check, diff=True, timeout=120)

    def scontrol(self, *args: str) -> str:
        done = subprocess.run(["scontrol", *args], env=self.slurm_env, capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def node(self, name: str) -> tuple[str, str | None]:
        """(State= without NOT_RESPONDING, reason without the [user@time] suffix) as the controller sees them."""
        return scontrol_node(self.scontrol("show", "node", "-o", name))

    def wait_ssh(self, name: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.ssh(name, "true", timeout=30).returncode != 0:
            if time.monotonic() > deadline:
                pytest.fail(f"{name}: sshd did not come back within {timeout} s")
            time.sleep(0.5)

    def wait_state(self, name: str, accept, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.node(name)[0]
            if accept(state):
                return state
            time.sleep(0.3)
        pytest.fail(f"{name}: Slurm state stayed {state}")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with fleet_up(SPEC, tmp_path_factory.mktemp("gpusim-slurm") / "fleet") as workdir:
        fleet = Fleet(workdir)
        for name in ("busy-01", "busy-02"):  # the spec's sleep jobs run
            fleet.wait_state(name, lambda s: s == "MIXED")
        yield fleet


DRAIN = {"state": "drained", "reason": "driver upgrade", "rollout_id": ROLLOUT}


def test_drain_busy_node_four_ways_then_wait_for_drained(fleet):
    # check mode first: predicted change, nothing done
    check = fleet.module("busy-01", DRAIN, check=True)["busy-01"]
    assert not check.get("failed"), check
    assert check["changed"] is True
    assert fleet.node("busy-01") == ("MIXED", None)
    assert check["diff"]["after"] == {"state": "MIXED+DRAIN", "reason": OURS}

    real = fleet.module("busy-01", DRAIN)["busy-01"]
    assert real["changed"] is True, real
    assert real["after"]["drain_state"] == "draining"
    assert [j["name"] for j in real["after"]["jobs"]] == ["sim-busy-01"]
    assert fleet.node("busy-01") == ("MIXED+DRAIN", OURS)

    for checking in (False, True):
        again = fleet.module("busy-01", DRAIN, check=checking)["busy-01"]
        assert again["changed"] is False, again
        assert again["drained_by_others"] is False

    # A short wait times out while the job runs: the task fails with the job, the drain stays.
    timed_out = fleet.module("busy-01", dict(DRAIN, wait=True, timeout=2, poll_interval=1))["busy-01"]
    assert timed_out["failed"] is True
    assert "still draining after 2 s" in timed_out["msg"]
    assert [j["name"] for j in timed_out["jobs"]] == ["sim-busy-01"]
    assert fleet.node("busy-01") == ("MIXED+DRAIN", OURS)

    # The job is cancelled from the controller while the module waits: it reaches DRAINED.
    # 8 s: the module must be polling when the job ends (Ansible's start alone took over 2 s on a loaded machine).
    canceller = subprocess.Popen(["sh", "-c", "sleep 8; scancel -w busy-01"], env=fleet.slurm_env)
    try:
        waited = fleet.module("busy-01", dict(DRAIN, wait=True, timeout=60, poll_interval=1))["busy-01"]
    finally:
        canceller.wait(timeout=30)
    assert not waited.get("failed"), waited
    assert waited["changed"] is False
    assert waited["waited_s"] >= 1
    assert waited["after"]["drain_state"] == "drained"
    assert waited["after"]["jobs"] == []
    assert fleet.node("busy-01") == ("IDLE+DRAIN", OURS)


def test_resume_our_drain_four_ways(fleet):
    fleet.scontrol("update", "NodeName=idle-02", "State=DRAIN", f"Reason={OURS}")
    args = {"state": "resumed", "rollout_id": ROLLOUT}
    check = fleet.module("idle-02", args, check=True)["idle-02"]
    assert check["changed"] is True
    assert fleet.node("idle-02") == ("IDLE+DRAIN", OURS)
    real = fleet.module("idle-02", args)["idle-02"]
    assert real["changed"] is True, real
    assert real["diff"]["before"] == {"state": "IDLE+DRAIN", "reason": OURS}
    assert fleet.wait_state("idle-02", lambda s: s == "IDLE") == "IDLE"
    for checking in (False, True):
        again = fleet.module("idle-02", args, check=checking)["idle-02"]
        assert again["changed"] is False, again


def test_resume_busy_node_back_in_service(fleet):
    fleet.module("busy-02", DRAIN)
    assert fleet.node("busy-02") == ("MIXED+DRAIN", OURS)
    resumed = fleet.module("busy-02", {"state": "resumed", "rollout_id": ROLLOUT})["busy-02"]
    assert resumed["changed"] is True
    assert fleet.wait_state("busy-02", lambda s: s == "MIXED") == "MIXED"


def assert_left_alone(fleet, name: str, state: str | set[str], reason: str, why: str) -> None:
    """resumed (check, real), drained (with wait) and rebooted on the node: nothing changes, their state and reason stay.

    ``state`` is the node's Slurm state, or the set of states Slurm itself may move it between meanwhile.
    """
    states = {state} if isinstance(state, str) else state
    for checking in (True, False):
        result = fleet.module(name, {"state": "resumed", "rollout_id": ROLLOUT}, check=checking)[name]
        assert not result.get("failed"), result
        assert result["changed"] is False, result
        assert result["drained_by_others"] is True
        assert result["before"]["reason"] == reason
        assert result["before"]["hold"] == "others" and why in result["before"]["hold_why"]
        assert any("not resumed" in w and why in w for w in result.get("warnings", [])), result.get("warnings")
        assert fleet.node(name)[1] == reason and fleet.node(name)[0] in states, fleet.node(name)
    for args in (dict(DRAIN, wait=True, timeout=5, poll_interval=1), {"state": "rebooted", "reason": "driver upgrade", "rollout_id": ROLLOUT}):
        result = fleet.module(name, args)[name]
        assert not result.get("failed"), result
        assert result["changed"] is False, result
        assert result["drained_by_others"] is True
        assert result["before"]["reason_user"] == "root"
        assert fleet.node(name)[1] == reason and fleet.node(name)[0] in states, fleet.node(name)


@pytest.mark.parametrize(
    "reason",
    [
        "hw ticket 4711: GPU 3 Xid 79",
        "gpufleet:other-rollout: failed validation",
        # a person's reason that merely starts with the marker and our rollout id
        f"gpufleet:{ROLLOUT} hold for bob",
    ],
)
def test_someone_elses_drain_is_neither_resumed_nor_overwritten(fleet, reason):
    fleet.scontrol("update", "NodeName=idle-03", "State=DRAIN", f"Reason={reason}")
    try:
        assert_left_alone(fleet, "idle-03", "IDLE+DRAIN", reason, "other-rollout" if "other-rollout" in reason else "our marker")
    finally:
        fleet.scontrol("update", "NodeName=idle-03", "State=RESUME")
        fleet.wait_state("idle-03", lambda s: s.startswith("IDLE") and "DRAIN" not in s)


def test_resume_without_rollout_id_is_refused_and_keeps_another_rollouts_drain(fleet):
    other = "gpufleet:r-OTHER: driver upgrade"
    fleet.scontrol("update", "NodeName=idle-03", "State=DRAIN", f"Reason={other}")
    try:
        result = fleet.module("idle-03", {"state": "resumed"})["idle-03"]
        assert result["failed"] is True
        assert result["msg"].startswith("rollout_id is required")
        assert fleet.node("idle-03") == ("IDLE+DRAIN", other)
    finally:
        fleet.scontrol("update", "NodeName=idle-03", "State=RESUME")
        fleet.wait_state("idle-03", lambda s: s.startswith("IDLE") and "DRAIN" not in s)


@pytest.mark.parametrize("reason", ["psu alarm, do not touch", OURS])
def test_fail_node_is_left_alone_whatever_its_reason(fleet, reason):
    # Real Slurm 22.05: State=DRAIN on IDLE+FAIL replaces FAIL by DRAIN and the reason; State=RESUME clears FAIL.
    fleet.scontrol("update", "NodeName=idle-01", "State=FAIL", f"Reason={reason}")
    try:
        assert fleet.node("idle-01") == ("IDLE+FAIL", reason)
        assert_left_alone(fleet, "idle-01", "IDLE+FAIL", reason, "FAIL flag")
    finally:
        fleet.scontrol("update", "NodeName=idle-01", "State=RESUME")
        fleet.wait_state("idle-01", lambda s: s.startswith("IDLE") and "FAIL" not in s)


def test_down_node_is_left_alone(fleet):
    # With ReturnToService=2 (the fleet's, and many clusters') Slurm itself returns a node set DOWN by hand at its next
    # registration, which its periodic ping asks for (~20 s here): a DOWN that lasts is a node whose slurmd cannot
    # answer. Its slurmd is stopped (SIGSTOP) for the test, so Slurm may add NOT_RESPONDING (which node() leaves
    # out); nothing else may change.
    reason = "bad dimm, ticket 77"
    fleet.ssh_ok("idle-03", "kill -STOP $(cat /run/slurmd.pid)")
    try:
        fleet.scontrol("update", "NodeName=idle-03", "State=DOWN", f"Reason={reason}")
        assert fleet.node("idle-03") == ("DOWN", reason)
        assert_left_alone(fleet, "idle-03", {"DOWN"}, reason, "our marker")
    finally:
        fleet.ssh_ok("idle-03", "kill -CONT $(cat /run/slurmd.pid)")
        fleet.scontrol("update", "NodeName=idle-03", "State=RESUME")
        fleet.wait_state("idle-03", lambda s: s == "IDLE", timeout=60)


def test_reboot_then_resume_after_reboot_complete(fleet):
    # scontrol reboot ASAP nextstate=DOWN: Slurm appends ": reboot issued : reboot complete" (as SlurmUser) and leaves it DOWN.
    # Asked from another Slurm client, as the rollout does: an idle node reboots at once, and a task running on it
    # may lose its connection before its result comes back (a real node's sshd goes down with it, too).
    args = {"state": "rebooted", "reason": "driver upgrade", "rollout_id": ROLLOUT, "node": "idle-02"}
    requested = fleet.module("idle-01", args)["idle-01"]
    assert requested["changed"] is True, requested
    assert not requested.get("warnings"), requested
    fleet.wait_state("idle-02", lambda s: s == "DOWN", timeout=90)
    fleet.wait_ssh("idle-02")  # slurmd registers before the simulated node's sshd is back
    state, reason = fleet.node("idle-02")
    assert state == "DOWN"
    assert reason == f"{OURS} : reboot issued : reboot complete"
    again = fleet.module("idle-02", {k: v for k, v in args.items() if k != "node"})["idle-02"]
    assert again["changed"] is False, again
    assert again["before"]["hold"] == "ours"
    # another rollout does not resume it
    other = fleet.module("idle-02", {"state": "resumed", "rollout_id": "it-2"})["idle-02"]
    assert other["changed"] is False and other["drained_by_others"] is True
    assert fleet.node("idle-02") == ("DOWN", reason)
    resumed = fleet.module("idle-02", {"state": "resumed", "rollout_id": ROLLOUT})["idle-02"]
    assert resumed["changed"] is True, resumed
    assert fleet.wait_state("idle-02", lambda s: s == "IDLE", timeout=60) == "IDLE"


def test_unknown_node_fails_clearly(fleet):
    result = fleet.module("idle-01", {"node": "no-such-node", "state": "drained", "reason": "x", "rollout_id": ROLLOUT})["idle-01"]
    assert result["failed"] is True
    assert result["msg"].startswith("Slurm does not know node no-such-node")
