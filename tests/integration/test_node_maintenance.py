"""The node_maintenance role's Slurm backend on simulated nodes with real Slurm (gpusim: slurmctld + one slurmd per node).

Brings up tests/fixtures/maintenance/fleet-maint.yml (job-01 and slow-01 run a sleep job, idle-01 and pre-01
are idle) once for the file and runs the role's entry points with ansible-playbook over SSH, as the rollout
does: Slurm commands run on the Slurm client `slurmctl` (the simulator's group slurm_clients, a local connection
on the controller with the fleet's SLURM_CONF), the reboot's checks on the node. Slurm's view is read with scontrol
on the controller. Needs root and the simulator's packages (tests/gpusim/install-deps.sh). Run:
    .venv/bin/python -m pytest tests/integration/test_node_maintenance.py -m integration -q
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from fleet import TESTS, ansible_env, fleet_up, gpusim, json_doc, needs_fleet, scontrol_node
from fleet import Fleet as BaseFleet

SPEC = TESTS / "fixtures" / "maintenance" / "fleet-maint.yml"
ROLLOUT = "maint-it-1"
REASON = "driver upgrade"
OURS = f"gpufleet:{ROLLOUT}: {REASON}"

pytestmark = needs_fleet()

PLAYBOOK = """
- name: node_maintenance entry point
  hosts: "{{ target }}"
  gather_facts: false
  tasks:
    - name: Run the entry point
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.node_maintenance
        tasks_from: "{{ entry }}"

    - name: Report the role's facts
      ansible.builtin.debug:
        msg:
          drained: "{{ node_maintenance_drained | default(None) }}"
          skip: "{{ node_maintenance_skip | default(None) }}"
          skip_reason: "{{ node_maintenance_skip_reason | default(None) }}"
          drain: "{{ node_maintenance_drain | default(None) }}"
          jobs: "{{ node_maintenance_jobs | default(None) }}"
          resumed: "{{ node_maintenance_resumed | default(None) }}"
          rebooted: "{{ node_maintenance_rebooted | default(None) }}"
          boot_id: "{{ node_maintenance_boot_id | default(None) }}"
          reboot_path: "{{ node_maintenance_reboot_path | default(None) }}"
          reboot_why: "{{ node_maintenance_reboot_why | default(None) }}"
"""


class Fleet(BaseFleet):
    def __init__(self, workdir):
        super().__init__(workdir)
        self.playbook = workdir / "maint-play.yml"
        self.playbook.write_text(PLAYBOOK)

    def role(self, target: str, entry: str, check: bool = False, **extra) -> tuple[subprocess.CompletedProcess, dict]:
        """ansible-playbook the entry point on target -> (process, json document)."""
        variables = {"target": target, "entry": entry, "gpufleet_rollout_id": ROLLOUT, "gpufleet_maintenance_reason": REASON,
                     "node_maintenance_poll_interval": 1, **extra}
        proc = self.ansible_playbook(self.playbook, "-e", json.dumps(variables), *(["--check"] if check else []),
                                     timeout=600, env=ansible_env(json_output=True))
        return proc, json_doc(proc)

    def facts(self, doc: dict, host: str) -> dict:
        task = next(t for t in doc["plays"][0]["tasks"] if t["task"]["name"].endswith("Report the role's facts"))
        return task["hosts"][host]["msg"]

    def scontrol(self, *args: str) -> str:
        done = subprocess.run(["scontrol", *args], env=self.slurm_env, capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def node(self, name: str) -> tuple[str, str | None]:
        """(State= without NOT_RESPONDING, reason without the [user@time] suffix) as the controller sees them."""
        return scontrol_node(self.scontrol("show", "node", "-o", name))

    def submit_job(self, name: str) -> str:
        done = subprocess.run(["sbatch", "--parsable", "-w", name, "-J", f"user-{name}", "-o", "/dev/null", "-D", "/tmp", "--wrap", "sleep 3600"],
                              env=self.slurm_env, capture_output=True, text=True, timeout=30, check=True)
        job = done.stdout.strip().split(";")[0]
        deadline = time.monotonic() + 60
        while job not in self.running_jobs(name):
            if time.monotonic() > deadline:
                pytest.fail(f"job {job} did not start on {name}")
            time.sleep(0.3)
        return job

    def running_jobs(self, name: str) -> list[str]:
        done = subprocess.run(["squeue", "-h", "-w", name, "-t", "R", "-o", "%i"], env=self.slurm_env, capture_output=True,
                              text=True, timeout=30, check=True)
        return done.stdout.split()

    def wait_state(self, name: str, accept, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.node(name)[0]
            if accept(state):
                return state
            time.sleep(0.3)
        pytest.fail(f"{name}: Slurm state stayed {state}")


def failed_tasks(doc: dict, host: str) -> list[dict]:
    return [t["hosts"][host] for p in doc["plays"] for t in p["tasks"] if t["hosts"].get(host, {}).get("failed")
            and not t["hosts"][host].get("ignore_errors")]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with fleet_up(SPEC, tmp_path_factory.mktemp("gpusim-maint") / "fleet") as workdir:
        fleet = Fleet(workdir)
        for name in ("job-01", "slow-01"):  # the spec's sleep jobs run
            fleet.wait_state(name, lambda s: s == "MIXED")
        yield fleet


def test_drain_waits_for_the_running_job_then_holds_the_node_and_resume_gives_it_back(fleet):
    job = fleet.running_jobs("job-01")
    assert len(job) == 1
    # The job ends while the drain waits (its user's job finishing, as on a real cluster).
    ender = subprocess.Popen(["sh", "-c", f"sleep 12; scancel {job[0]}"], env=fleet.slurm_env)
    try:
        proc, doc = fleet.role("job-01", "drain", gpufleet_drain_timeout=120)
    finally:
        ender.wait(timeout=60)
    assert proc.returncode == 0, proc.stdout[-3000:]
    facts = fleet.facts(doc, "job-01")
    assert facts["drained"] is True and facts["skip"] is False, facts
    assert facts["drain"] == {"ours": True, "reason": OURS}
    assert fleet.node("job-01") == ("IDLE+DRAIN", OURS)

    # Run again (a rollout that resumes): nothing changes, the node is still ours.
    proc, doc = fleet.role("job-01", "drain")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert fleet.facts(doc, "job-01")["drained"] is True
    assert doc["stats"]["job-01"]["changed"] == 0, doc["stats"]
    assert fleet.node("job-01") == ("IDLE+DRAIN", OURS)

    proc, doc = fleet.role("job-01", "resume")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert fleet.facts(doc, "job-01")["resumed"] is True
    assert fleet.wait_state("job-01", lambda s: s == "IDLE") == "IDLE"
    assert fleet.node("job-01")[1] is None


def test_node_drained_by_someone_else_is_skipped_and_keeps_its_drain_and_reason(fleet):
    theirs = "hw ticket 4711: GPU 3 Xid 79"
    fleet.scontrol("update", "NodeName=pre-01", "State=DRAIN", f"Reason={theirs}")
    try:
        proc, doc = fleet.role("pre-01", "drain")
        assert proc.returncode == 0, proc.stdout[-3000:]
        facts = fleet.facts(doc, "pre-01")
        assert facts["skip"] is True and facts["drained"] is False, facts
        assert facts["skip_reason"].startswith("drained by others: pre-01 is IDLE+DRAIN")
        assert theirs in facts["skip_reason"]
        assert facts["drain"] == {"ours": False, "reason": theirs}
        assert fleet.node("pre-01") == ("IDLE+DRAIN", theirs)

        proc, doc = fleet.role("pre-01", "resume")  # resume only ours: theirs stays
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert fleet.facts(doc, "pre-01")["resumed"] is False
        assert fleet.node("pre-01") == ("IDLE+DRAIN", theirs)
    finally:
        fleet.scontrol("update", "NodeName=pre-01", "State=RESUME")
        fleet.wait_state("pre-01", lambda s: s == "IDLE")


def test_check_mode_predicts_the_drain_and_changes_nothing(fleet):
    job = fleet.running_jobs("slow-01")
    proc, doc = fleet.role("slow-01", "drain", check=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    drain = next(t["hosts"]["slow-01"] for t in doc["plays"][0]["tasks"] if "Drain the node with our reason" in t["task"]["name"])
    assert drain["changed"] is True and drain["diff"]["after"] == {"state": "MIXED+DRAIN", "reason": OURS}
    assert fleet.node("slow-01") == ("MIXED", None)
    assert fleet.running_jobs("slow-01") == job


def test_drain_timeout_with_skip_resumes_our_drain_and_leaves_their_job_running(fleet):
    job = fleet.running_jobs("slow-01")
    assert len(job) == 1
    proc, doc = fleet.role("slow-01", "drain", gpufleet_drain_timeout=3, gpufleet_drain_timeout_action="skip")
    assert proc.returncode == 0, proc.stdout[-3000:]
    facts = fleet.facts(doc, "slow-01")
    assert facts["skip"] is True and facts["drained"] is False, facts
    assert facts["skip_reason"].startswith("drain timed out: slow-01 still ran job " + job[0]), facts["skip_reason"]
    assert "our drain was resumed and the jobs left untouched" in facts["skip_reason"]
    assert [j["id"] for j in facts["jobs"]] == job
    fleet.wait_state("slow-01", lambda s: s == "MIXED")
    assert fleet.node("slow-01") == ("MIXED", None)
    assert fleet.running_jobs("slow-01") == job


def test_drain_timeout_with_stop_fails_the_host_and_keeps_the_job(fleet):
    job = fleet.running_jobs("slow-01")
    proc, doc = fleet.role("slow-01", "drain", gpufleet_drain_timeout=3, gpufleet_drain_timeout_action="stop")
    try:
        assert proc.returncode == 2, proc.stdout[-3000:]
        failures = failed_tasks(doc, "slow-01")
        assert len(failures) == 1, failures
        assert "drain timed out: slow-01 still ran job " + job[0] in failures[0]["msg"]
        assert "the rollout stops here" in failures[0]["msg"]
        assert fleet.node("slow-01") == ("MIXED+DRAIN", OURS)  # the drain stays, as the message says
        assert fleet.running_jobs("slow-01") == job
    finally:
        proc = fleet.role("slow-01", "resume")[0]
        assert proc.returncode == 0, proc.stdout[-3000:]
        fleet.wait_state("slow-01", lambda s: s == "MIXED")


def test_reboot_through_slurm_from_the_slurm_client_then_resume(fleet):
    proc, doc = fleet.role("idle-01", "drain")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert fleet.node("idle-01") == ("IDLE+DRAIN", OURS)
    proc, doc = fleet.role("idle-01", "reboot", gpufleet_reboot_timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:]
    request = next(t["hosts"]["idle-01"] for t in doc["plays"][0]["tasks"] if "Ask Slurm to reboot" in t["task"]["name"])
    assert request["changed"] is True, request
    # Asked from slurmctl: the module did not run on the node it rebooted (it warns when it does).
    assert request["_ansible_delegated_vars"]["ansible_host"] == "slurmctl", request
    assert not any("asked Slurm to reboot itself" in w for w in request.get("warnings", [])), request
    facts = fleet.facts(doc, "idle-01")
    assert facts["rebooted"] is True
    assert facts["boot_id"]["before"] != facts["boot_id"]["after"] and facts["boot_id"]["after"]
    assert_drained_after_reboot(fleet, "idle-01")

    proc, doc = fleet.role("idle-01", "resume")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert fleet.facts(doc, "idle-01")["resumed"] is True
    assert fleet.wait_state("idle-01", lambda s: s == "IDLE") == "IDLE"


def assert_drained_after_reboot(fleet, name):
    """Slurm ended its reboot (nextstate=DOWN) with DRAIN cleared; the role drains the node again at once (Slurm's notes
    kept), so that ReturnToService=2 cannot put it back into service before the rollout has validated it."""
    state, reason = fleet.node(name)
    assert state in ("DOWN+DRAIN", "IDLE+DRAIN"), (name, state, reason)
    assert reason == f"{OURS} : reboot issued : reboot complete", (name, state, reason)


def _lost_reboot(fleet, name, count, **extra):
    """Drain name, make Slurm's next `count` reboot requests to it get lost, reboot it through the role; -> (facts, supervisor log)."""
    proc, _doc = fleet.role(name, "drain")
    assert proc.returncode == 0, proc.stdout[-3000:]
    done = gpusim("fault", name, "reboot_lost", f"count={count}", workdir=fleet.workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    proc, doc = fleet.role(name, "reboot", gpufleet_reboot_timeout=180, gpufleet_reboot_start_timeout=8, **extra)
    assert proc.returncode == 0, proc.stdout[-4000:]
    facts = fleet.facts(doc, name)
    assert facts["rebooted"] is True and facts["boot_id"]["before"] != facts["boot_id"]["after"], facts
    # Slurm took the boot for the reboot it asked for (within ResumeTimeout: not "reboot timed out"), our reason kept.
    assert_drained_after_reboot(fleet, name)
    log = (fleet.workdir / "supervisor.log").read_text()
    assert f"{name}: Slurm's reboot request lost (fault reboot_lost)" in log, log[-2000:]
    proc, doc = fleet.role(name, "resume")
    assert proc.returncode == 0 and fleet.facts(doc, name)["resumed"] is True, proc.stdout[-3000:]
    return facts


def test_a_reboot_request_slurm_loses_is_asked_of_the_node_itself(fleet):
    """Slurm sends its reboot request once; lost (the simulated slurmd drops it), Slurm shows the reboot issued and
    would wait ResumeTimeout (600 s here). The role sees the node did not go down within its start bound and asks
    the node's own reboot; Slurm completes its reboot with that boot."""
    facts = _lost_reboot(fleet, "idle-01", 1)
    assert facts["reboot_path"] == "node", facts
    assert "its request to slurmd was lost" in facts["reboot_why"] or "node went down" in facts["reboot_why"], facts


def test_a_node_neither_slurm_nor_its_os_reboots_is_reset_through_its_bmc(fleet):
    """Slurm's request lost and the node's own reboot command doing nothing: the BMC's ComputerSystem.Reset
    (certificate checked against the fleet's CA) reboots it, and its record says so."""
    facts = _lost_reboot(fleet, "pre-01", 1, node_maintenance_node_reboot_command=["true"])
    assert facts["reboot_path"] == "bmc", facts


def test_kill_jobs_cancels_the_jobs_that_held_the_drain(fleet):
    # Dangerous, and only on request: gpufleet_drain_kill_jobs.
    fleet.submit_job("job-01")
    jobs = fleet.running_jobs("job-01")  # with the spec's own job when the first test did not end it
    proc, doc = fleet.role("job-01", "drain", gpufleet_drain_timeout=3, gpufleet_drain_kill_jobs=True, node_maintenance_kill_wait_timeout=60)
    assert proc.returncode == 0, proc.stdout[-3000:]
    facts = fleet.facts(doc, "job-01")
    assert facts["drained"] is True and facts["skip"] is False, facts
    cancel = next(t["hosts"]["job-01"] for t in doc["plays"][0]["tasks"] if "Cancel the jobs still running" in t["task"]["name"])
    assert cancel["cmd"][0] == "scancel" and sorted(cancel["cmd"][1:]) == sorted(jobs), cancel
    assert fleet.running_jobs("job-01") == []
    assert fleet.node("job-01") == ("IDLE+DRAIN", OURS)
    proc = fleet.role("job-01", "resume")[0]
    assert proc.returncode == 0, proc.stdout[-3000:]
    fleet.wait_state("job-01", lambda s: s == "IDLE")


def test_reboot_without_a_slurm_client_asks_from_the_node_itself(fleet):
    # No Slurm client: the node runs scontrol itself, and its reboot may cut the request's connection (accepted,
    # as ansible.builtin.reboot does); the new boot id and Slurm's ': reboot complete' prove it rebooted.
    alone = {"gpufleet_slurm_client": ""}
    proc = fleet.role("pre-01", "drain", **alone)[0]
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert fleet.node("pre-01") == ("IDLE+DRAIN", OURS)
    proc, doc = fleet.role("pre-01", "reboot", gpufleet_reboot_timeout=180, **alone)
    assert proc.returncode == 0, proc.stdout[-3000:]
    request = next(t["hosts"]["pre-01"] for t in doc["plays"][0]["tasks"] if "Ask Slurm to reboot" in t["task"]["name"])
    assert request.get("unreachable") or any("asked Slurm to reboot itself" in w for w in request.get("warnings", [])), request
    facts = fleet.facts(doc, "pre-01")
    assert facts["rebooted"] is True and facts["boot_id"]["before"] != facts["boot_id"]["after"]
    assert_drained_after_reboot(fleet, "pre-01")
    proc = fleet.role("pre-01", "resume", **alone)[0]
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert fleet.wait_state("pre-01", lambda s: s == "IDLE") == "IDLE"


def test_a_wave_of_nodes_drains_at_once_through_one_slurm_client(fleet):
    # Each node's drain waits async on slurmctl: two nodes, one client, both held, then both given back.
    proc, doc = fleet.role("idle-01:pre-01", "drain")
    assert proc.returncode == 0, proc.stdout[-3000:]
    for name in ("idle-01", "pre-01"):
        assert fleet.facts(doc, name)["drained"] is True
        assert fleet.node(name) == ("IDLE+DRAIN", OURS)
    proc, doc = fleet.role("idle-01:pre-01", "resume")
    assert proc.returncode == 0, proc.stdout[-3000:]
    for name in ("idle-01", "pre-01"):
        assert fleet.facts(doc, name)["resumed"] is True
        assert fleet.wait_state(name, lambda s: s == "IDLE") == "IDLE"
