"""slurm_capacity against real Slurm (gpusim: slurmctld + one slurmd per simulated node).

Invariant 1: never more nodes unavailable than max_unavailable, counting the ones out for others.
Nodes are drained, set DOWN or left out of Slurm "by someone else" with scontrol on the controller;
the module runs on the controller (a Slurm client, the fleet's SLURM_CONF), as the rollout runs it
delegated to gpufleet_slurm_client, and must refuse, wait, and admit once a node is resumed during
its wait. The same fleet's nodes also run rollout_state over real SSH: the lock four ways, a second
rollout refused, and two controllers acquiring one node at once (one wins). Run:
    .venv/bin/python -m pytest tests/integration/test_slurm_capacity.py -m integration -q
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from fleet import ANSIBLE, Fleet, ansible_env, fleet_up, needs_fleet, run, task_hosts

pytestmark = needs_fleet()

NODES = ["cap-01", "cap-02", "cap-03", "cap-04", "cap-05"]
SPEC = """\
# slurm_capacity's fleet: 5 idle nodes, real slurmctld and slurmd.
fleet:
  name: capacity-5
  loopback: 24          # nodes on 127.0.24.1 ...
  ssh_port: 22
  slurm_port: 18400     # slurmctld; each slurmd on 18401 + node index
timing:
  reboot: 2
  flash: 1
  diag: 0.2
  burn: 0.2
  nccl: 0.2
skus:
  hgx_h100:
    gpu_model: NVIDIA H100 80GB HBM3
    gpu_count: 8
    nvswitch: true
    cpus: 4
    nics:
      - {type: ConnectX-7, psid: MT_0000000834, part_number: MCX755106AS-HEA_Ax, fw: 28.43.1014, count: 1}
nodes:
  - {names: [cap-01, cap-02, cap-03, cap-04, cap-05], sku: hgx_h100, driver: 570.124.06, kernel_module: open}
"""


class CapacityFleet(Fleet):
    def capacity(self, args: dict, *, check: bool = False, timeout: float = 180) -> dict:
        """`ansible localhost -m gpufleet.lifecycle.slurm_capacity -a ARGS` with the fleet's SLURM_CONF -> the result."""
        cmd = [str(ANSIBLE), "localhost", "-c", "local", "-m", "gpufleet.lifecycle.slurm_capacity", "-a", json.dumps(args),
               *(["--check"] if check else [])]
        env = ansible_env(json_output=True, SLURM_CONF=self.slurm_env["SLURM_CONF"])
        return task_hosts(run(cmd, env=env, timeout=timeout))["localhost"]

    def scontrol(self, *args: str) -> str:
        done = subprocess.run(["scontrol", *args], env=self.slurm_env, capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def state(self, name: str) -> str:
        line = self.scontrol("show", "node", "-o", name)
        return next(w.split("=", 1)[1] for w in line.split() if w.startswith("State="))

    def wait_state(self, name: str, accept, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.state(name)
            if accept(state):
                return state
            time.sleep(0.3)
        pytest.fail(f"{name}: Slurm state stayed {state}")

    def back_in_service(self, *names: str) -> None:
        for name in names:
            if self.state(name) != "IDLE":
                self.scontrol("update", f"NodeName={name}", "State=RESUME")
            self.wait_state(name, lambda s: s == "IDLE")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpusim-capacity")
    spec = folder / "fleet-capacity.yml"
    spec.write_text(SPEC)
    with fleet_up(spec, folder / "fleet") as workdir:
        fleet = CapacityFleet(workdir)
        for name in NODES:
            fleet.wait_state(name, lambda s: s == "IDLE", timeout=60)
        yield fleet


@pytest.fixture
def clean(fleet):
    yield fleet
    fleet.back_in_service(*NODES)


def wave(**extra):
    args = {"pool": NODES, "max_unavailable": 2, "admit": ["cap-01", "cap-02"], "rollout_id": "it-cap"}
    args.update(extra)
    return args


def test_a_wave_within_the_budget_is_admitted_check_and_real(clean):
    for check in (True, False):
        result = clean.capacity(wave(), check=check)
        assert not result.get("failed"), result
        assert result["admitted"] is True and result["changed"] is False
        assert (result["budget"], result["counted"], result["unavailable"], result["samples"]) == (2, 2, [], 1)


def test_a_node_drained_by_someone_else_uses_the_budget(clean):
    clean.scontrol("update", "NodeName=cap-04", "State=DRAIN", "Reason=hw ticket 9: gpu 3")
    result = clean.capacity(wave())
    assert result["failed"] is True and result["admitted"] is False
    assert result["unavailable"] == [{"node": "cap-04", "state": "IDLE+DRAIN", "reason": "hw ticket 9: gpu 3", "ours": False}]
    assert "cap-04 IDLE+DRAIN 'hw ticket 9: gpu 3' (others)" in result["msg"]
    assert "3 in all, over the budget of 2" in result["msg"]
    # a smaller wave fits; check mode reports the refusal without failing
    assert clean.capacity(wave(admit=["cap-01"]))["admitted"] is True
    check = clean.capacity(wave(), check=True)
    assert not check.get("failed") and check["admitted"] is False


def test_down_fail_and_our_own_drains_all_count(clean):
    clean.scontrol("update", "NodeName=cap-03", "State=DOWN", "Reason=bad dimm")
    clean.scontrol("update", "NodeName=cap-04", "State=FAIL", "Reason=psu alarm")
    clean.scontrol("update", "NodeName=cap-05", "State=DRAIN", "Reason=gpufleet:it-cap: driver upgrade")
    result = clean.capacity(wave(max_unavailable=5, admit=["cap-01", "cap-05"]))
    assert result["admitted"] is True, result
    states = {e["node"]: (e["state"], e["ours"]) for e in result["unavailable"]}
    assert states == {"cap-03": ("DOWN", False), "cap-04": ("IDLE+FAIL", False), "cap-05": ("IDLE+DRAIN", True)}
    assert result["counted"] == 4  # cap-05 is out and in the wave: counted once
    refused = clean.capacity(wave(max_unavailable=3, admit=["cap-01"]))
    assert refused["failed"] is True and refused["counted"] == 4


def test_a_pool_node_slurm_does_not_know_counts(clean):
    result = clean.capacity(wave(pool=[*NODES, "ghost-01"], admit=["cap-01", "cap-02"]))
    assert result["failed"] is True
    assert result["unavailable"] == [{"node": "ghost-01", "state": "not known to Slurm", "reason": None, "ours": False}]


def test_waits_and_admits_when_a_node_is_resumed_during_the_wait(clean):
    clean.scontrol("update", "NodeName=cap-04", "State=DRAIN", "Reason=hw ticket 9")
    clean.scontrol("update", "NodeName=cap-05", "State=DOWN", "Reason=bad dimm")
    # 8 s: the module must be polling when the node comes back (Ansible's start alone takes seconds on a loaded machine)
    resumer = subprocess.Popen(["sh", "-c", "sleep 8; scontrol update NodeName=cap-04 State=RESUME"], env=clean.slurm_env)
    try:
        result = clean.capacity(wave(admit=["cap-01"], wait_timeout=90, poll_interval=1))
    finally:
        resumer.wait(timeout=30)
    assert not result.get("failed"), result
    assert result["admitted"] is True
    assert result["samples"] >= 2 and result["waited_s"] >= 1
    assert [e["node"] for e in result["unavailable"]] == ["cap-05"]


def test_a_wait_that_finds_no_capacity_ends_and_refuses(clean):
    clean.scontrol("update", "NodeName=cap-04", "State=DRAIN", "Reason=hw ticket 9")
    clean.scontrol("update", "NodeName=cap-05", "State=DOWN", "Reason=bad dimm")
    started = time.monotonic()
    result = clean.capacity(wave(admit=["cap-01"], wait_timeout=3, poll_interval=1))
    assert time.monotonic() - started < 60
    assert result["failed"] is True
    assert result["waited_s"] >= 3 and result["samples"] >= 3
    assert "after waiting 3 s" in result["msg"]
    assert {e["node"] for e in result["unavailable"]} == {"cap-04", "cap-05"}


# --- the rollout lock on the same fleet's nodes (rollout_state over real SSH and Ansible) ---------------------------


def lock(fleet: CapacityFleet, node: str, args: dict, *, check: bool = False) -> dict:
    return fleet.module("gpufleet.lifecycle.rollout_state", node, args, check=check, diff=True, timeout=120)[node]


@pytest.fixture
def state(fleet):
    """A state file path of its own on the nodes (removed afterwards)."""
    folder = f"/var/tmp/gpufleet-it-lock-{time.time_ns()}"
    yield f"{folder}/gpufleet.fact"
    for node in ("cap-01", "cap-02"):
        fleet.ssh(node, f"rm -rf {folder}")


def test_rollout_lock_four_ways_and_a_second_rollout_refused(fleet, state):
    take = {"rollout_id": "it-a", "action": "acquire", "owner": "it@controller", "wave": 1, "state_file": state}
    check = lock(fleet, "cap-01", take, check=True)
    assert check["changed"] is True and check["rollout"]["status"] == "running", check
    assert fleet.ssh("cap-01", f"test -e {state}").returncode != 0  # check mode wrote nothing
    real = lock(fleet, "cap-01", take)
    assert real["changed"] is True and real["lock"]["held_by"] == "it-a"
    assert real["diff"]["before"]["id"] is None and real["diff"]["after"]["id"] == "it-a"
    written = json.loads(fleet.ssh_ok("cap-01", f"cat {state}"))
    assert written["rollout"]["owner"] == "it@controller" and written["rollout"]["status"] == "running"

    other = dict(take, rollout_id="it-b", owner="someone@else")
    for checking in (True, False):
        refused = lock(fleet, "cap-01", other, check=checking)
        assert refused["failed"] is True
        assert refused["msg"].startswith("node cap-01 is held by rollout it-a (it@controller, age ")
    assert json.loads(fleet.ssh_ok("cap-01", f"cat {state}")) == written

    lock(fleet, "cap-01", {"rollout_id": "it-a", "action": "phase", "phase": "drain", "status": "started", "state_file": state})
    closed = lock(fleet, "cap-01", {"rollout_id": "it-a", "action": "phase", "phase": "drain", "status": "ok", "state_file": state})
    assert [(p["name"], p["status"]) for p in closed["rollout"]["phases"]] == [("drain", "ok")]
    finish = {"rollout_id": "it-a", "action": "finish", "result": "upgraded", "state_file": state}
    assert lock(fleet, "cap-01", finish)["changed"] is True
    for checking in (False, True):  # idempotent, and a finished rollout acquired again changes nothing
        assert lock(fleet, "cap-01", finish, check=checking)["changed"] is False
        assert lock(fleet, "cap-01", take, check=checking)["changed"] is False


def test_two_controllers_acquiring_one_node_at_once_one_wins(fleet, state):
    procs = []
    for rollout in ("it-x", "it-y"):
        args = {"rollout_id": rollout, "action": "acquire", "owner": f"{rollout}@controller", "state_file": state}
        cmd = [str(ANSIBLE), "cap-02", "-i", str(fleet.inventory), "-m", "gpufleet.lifecycle.rollout_state", "-a", json.dumps(args)]
        procs.append(subprocess.Popen(cmd, env=ansible_env(json_output=True), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        out, _err = proc.communicate(timeout=180)
        results.append(json.loads(out)["plays"][0]["tasks"][0]["hosts"]["cap-02"])
    won = [r for r in results if not r.get("failed")]
    refused = [r for r in results if r.get("failed")]
    assert len(won) == 1 and len(refused) == 1, results
    assert f"is held by rollout {won[0]['rollout']['id']}" in refused[0]["msg"]
    assert json.loads(fleet.ssh_ok("cap-02", f"cat {state}"))["rollout"]["id"] == won[0]["rollout"]["id"]
