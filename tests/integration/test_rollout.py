"""playbooks/upgrade.yml on 13 simulated nodes in 5 racks over real SSH and real Slurm: the happy path with running
jobs, a node someone else drained and waves spread over the racks (gpufleet_wave_max_per_domain 1), the second run
that changes nothing, a canary that fails validation, then playbooks/rollback.yml on nodes named on demand.
(The gates of [3] are not spread over racks at plan time: the sliding window's admission keeps a rack's nodes apart.)

The fleet (tests/fixtures/rollout/fleet-happy.yml, 127.0.25.x, slurmctld on 18500): PCIe L40S nodes on driver
570.124.06, BOM 580.95.05. Slurm's own node states are sampled during each run (rollout_helpers.Sampler): the
capacity and rack invariants are checked from that log and from the nodes' own phase times, not from the playbook's
output. (One fleet for all of it: each rollout costs minutes, and the suite's time is a budget.)
Needs root and the simulator's packages (tests/gpusim/install-deps.sh). Run:
    .venv/bin/python -m pytest tests/integration/test_rollout.py -m integration -q
"""

from __future__ import annotations

import itertools
import json
import time

import pytest
from fleet import REPO, TESTS, fleet_up, gpusim, needs_fleet, steady
from gpusim import node as gnode
from gpusim import state as gstate
from rollout_helpers import NEW, OLD, RolloutFleet, by_time, failures, max_unavailable, recap, report_json, unavailable, waves_of, write_runfiles

SPEC = TESTS / "fixtures" / "rollout" / "fleet-happy.yml"
NEWER = "595.45.04"
ADMIN_REASON = "admin: fan 3 replaced, burn-in pending"
MAX_UNAVAILABLE = 4
ROLLBACK = REPO / "playbooks" / "rollback.yml"
# The spec's group vars: each node's rack (gpu-13, the pre-drained node, alone in r5).
RACKS = {f"gpu-{i:02d}": f"r{(i - 1) // 3 + 1}" for i in range(1, 14)}
SPREAD = {"gpufleet_wave_spread_by": ["rack"], "gpufleet_wave_max_per_domain": 1}

pytestmark = needs_fleet()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("rollout")
    runfiles = write_runfiles(base / "runfiles", (OLD, NEW, NEWER))
    with fleet_up(SPEC, base / "fleet", timeout=300) as workdir:
        yield RolloutFleet(workdir, runfiles)


def changed_tasks(stdout: str) -> list[str]:
    """The TASK headers followed by a 'changed:' line in ansible-playbook's output."""
    out, task = [], ""
    for line in stdout.splitlines():
        if line.startswith("TASK ["):
            task = line
        elif line.startswith("changed:") and task:
            out.append(task)
    return out


def slurm_epoch(text: str) -> float:
    """Slurm's StartTime/EndTime (local time, ISO without a zone) as epoch seconds."""
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


@pytest.fixture(scope="module")
def happy(fleet, tmp_path_factory):
    """The first rollout: gpu-13 drained by a person beforehand, a job of a few seconds on every other node."""
    out = tmp_path_factory.mktemp("happy")
    fleet.drain_as_admin("gpu-13", ADMIN_REASON)
    jobs = {name: fleet.submit(name, 6) for name in fleet.names if name != "gpu-13"}
    fleet.wait_jobs_running(list(jobs.values()))
    before = {name: fleet.state_file(name) for name in fleet.names}
    sampler = fleet.sampler(out / "slurm-states.jsonl")
    done = fleet.upgrade(out / "report", gpufleet_max_unavailable=MAX_UNAVAILABLE, gpufleet_waves=[3], gpufleet_failure_budget=0,
                         **SPREAD)
    samples = sampler.stop()
    return {"run": done, "jobs": jobs, "samples": samples, "report": out / "report", "before": before, "job_states": sampler.jobs}


def test_happy_path_upgrades_every_node(fleet, happy):
    done = happy["run"]
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    for name in fleet.names:
        if name == "gpu-13":
            continue
        assert fleet.driver(name) == NEW, name
        section = fleet.rollout_section(name)
        assert (section["status"], section["result"]) == ("done", "upgraded"), (name, section)
        names = [p["name"] for p in section["phases"] if p["status"] == "ok"]
        for phase in ("preflight", "drain", "driver", "activate", "validate", "resume"):
            assert phase in names, (name, phase, section["phases"])
        # Back in service, without a reason left behind.
        assert "DRAIN" not in fleet.node(name)["state"], fleet.node(name)
    assert "rollout" in done.stdout and "canary" in done.stdout


def test_no_job_was_killed_and_drains_waited_for_them(fleet, happy):
    for name, job_id in happy["jobs"].items():
        job = happy["job_states"][job_id]  # the last state Slurm showed during the run
        assert (job["state"], job["exit"]) == ("COMPLETED", "0:0"), (name, job)
        # Nothing was changed on a node while its job ran: the driver phase starts after the job ended.
        driver = fleet.phase(name, "driver")
        assert driver is not None and driver["start"] >= slurm_epoch(job["end"]) - 1, (name, job, driver)
    # A drain that starts while the job runs ends after it. (The preflight of these 13 nodes takes about 28 s, so a
    # 6 s job has usually ended before the canary's drain: a drain waiting for a running job is
    # test_node_maintenance.py's test_drain_waits_for_the_running_job_then_holds_the_node_and_resume_gives_it_back.)
    for name, job_id in happy["jobs"].items():
        drain, job_end = fleet.phase(name, "drain"), slurm_epoch(happy["job_states"][job_id]["end"])
        if drain["start"] < job_end - 1:
            assert drain["end"] >= job_end - 1, (name, drain, job_end)


def test_a_node_drained_by_someone_else_keeps_its_drain_and_reason(fleet, happy):
    node = fleet.node("gpu-13")
    assert "DRAIN" in node["state"] and node["reason"].startswith(ADMIN_REASON), node
    assert fleet.driver("gpu-13") == OLD
    # Never locked nor touched: its state file is as it was.
    assert fleet.state_file("gpu-13") == happy["before"]["gpu-13"]
    record = next(r for r in report_json(happy["report"])["nodes"] if r["node"] == "gpu-13")
    assert record["result"] == "skipped" and ADMIN_REASON.split(",", maxsplit=1)[0] in record["skip_reason"], record


def test_unavailable_never_above_the_budget_in_slurms_own_states(fleet, happy):
    count, at, nodes = max_unavailable(happy["samples"], fleet.names)
    assert count <= MAX_UNAVAILABLE, f"{count} unavailable at {at}: {nodes}"
    # The sampler did see the rollout work: the pre-drained node and ours together, more than one at a time.
    assert count >= 2, (count, nodes)
    assert len({s["t"] for s in happy["samples"]}) > 20


def test_the_report_tells_what_happened(happy):
    report = report_json(happy["report"])
    assert report["summary"]["upgraded"] == 12 and report["summary"]["skipped"] == 1, report["summary"]
    for name in ("rollout-report.md", "rollout-report.html", "rollout-junit.xml"):
        assert (happy["report"] / name).stat().st_size > 0
    upgraded = next(r for r in report["nodes"] if r["result"] == "upgraded")
    assert (upgraded["before"]["driver"], upgraded["after"]["driver"]) == (OLD, NEW)


# Issue 22: the tasks (ok + skipped in the play recap) of a node of a gate, driver only, on the happy path (178 before
# the rollout's steps were cut, of which 85 are the component roles' own). The first node of a gate also counts the
# gate's run-once tasks (its judgement, pause and progress lines), and a node that waited for a slot a few more.
# 139 when measured; since then the tray refusal (plan.yml, one skipped task a node) and the Secure Boot signature check
# (nvidia_driver verify, one skipped include a node) were added: CI18 counted 142 before the check became one include.
TASKS_PER_NODE = 141
TASKS_RUN_ONCE_PER_GATE = 20


def test_a_driver_only_node_runs_few_tasks(happy):
    """Each task costs the controller a worker per node (the suite's time on two cores): the typical node of a gate stays
    under TASKS_PER_NODE, and none over it by more than its gate's run-once tasks."""
    counts = recap(happy["run"].stdout)
    gates = [wave for number, wave in waves_of(report_json(happy["report"])).items() if number > 0]
    per_node = {name: counts[name]["ok"] + counts[name]["skipped"] for gate in gates for name in gate}
    assert len(per_node) == 11, per_node  # 12 upgraded, one of them the canary
    typical = sorted(per_node.values())[len(per_node) // 2]
    assert typical <= TASKS_PER_NODE, per_node
    assert max(per_node.values()) <= TASKS_PER_NODE + TASKS_RUN_ONCE_PER_GATE, per_node


def out_of_service(fleet, name):
    """(start, end) of the node's time out of service: its drain's start to its resume's end (its own state file)."""
    drain, resume = fleet.phase(name, "drain"), fleet.phase(name, "resume")
    assert drain and resume and resume["end"], (name, fleet.phases(name))
    return drain["start"], resume["end"]


def test_gates_are_sized_by_the_waves_and_the_window_keeps_the_racks_apart(happy):
    """Gates (gpufleet_waves [3]) are where the rollout pauses, not concurrency barriers: they hold 3 nodes whatever the
    racks, and a gate holds two nodes of one rack; the admission keeps them apart at run time (the two tests below)."""
    waves = waves_of(report_json(happy["report"]))
    gates = [wave for number, wave in waves.items() if number > 0]
    assert len(waves[0]) == 1 and [len(g) for g in gates[:-1]] == [3] * (len(gates) - 1), waves
    assert any(len({RACKS[n] for n in gate}) < len(gate) for gate in gates), waves


def test_no_two_nodes_of_a_rack_were_out_at_once_by_their_own_times(fleet, happy):
    nodes = [n for n in RACKS if n != "gpu-13"]
    spans = {name: out_of_service(fleet, name) for name in nodes}
    for a, b in itertools.combinations(nodes, 2):
        if RACKS[a] == RACKS[b]:
            (a0, a1), (b0, b1) = spans[a], spans[b]
            assert a1 <= b0 or b1 <= a0, f"{a} {spans[a]} and {b} {spans[b]} (rack {RACKS[a]}) overlap"
    # Nodes of different racks did overlap: the waves ran nodes in parallel.
    assert any(not (spans[a][1] <= spans[b][0] or spans[b][1] <= spans[a][0])
               for a, b in itertools.combinations(nodes, 2) if RACKS[a] != RACKS[b])


def test_no_two_nodes_of_a_rack_were_out_at_once_in_slurms_states(happy):
    for t, nodes in by_time(happy["samples"]).items():
        out = [n for n in RACKS if n in nodes and unavailable(nodes[n]["state"])]
        racks = [RACKS[n] for n in out]
        assert len(racks) == len(set(racks)), (t, out)


def test_a_second_run_changes_nothing(fleet, happy):
    """The same command again (the same report folder: the rollout's evidence is rewritten only where it changed)."""
    done = fleet.upgrade(happy["report"], gpufleet_max_unavailable=MAX_UNAVAILABLE, gpufleet_waves=[3], gpufleet_failure_budget=0,
                         **SPREAD)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    changed = {host: counts["changed"] for host, counts in recap(done.stdout).items()}
    assert changed and set(changed.values()) == {0}, (changed, changed_tasks(done.stdout))
    assert "DRAIN" in fleet.node("gpu-13")["state"]


def test_a_run_that_rolls_out_nothing_fails_and_says_why(fleet, happy, tmp_path):
    """Targets that are all skipped (gpu-13, a person's drain) roll nothing out: the run fails, naming the node and its
    reason, and touches nothing. With a node among the targets that this rollout upgraded it passes (the second run
    above: twelve upgraded, gpu-13 skipped), unless gpufleet_fail_on_skipped."""
    before13 = fleet.state_file("gpu-13")
    common = {"gpufleet_max_unavailable": MAX_UNAVAILABLE, "gpufleet_waves": [3], "gpufleet_failure_budget": 0}
    alone = fleet.upgrade(tmp_path / "alone", gpufleet_targets="gpu-13", **common)
    said = " ".join(alone.stdout.split())
    assert alone.returncode != 0, alone.stdout[-4000:]
    assert "rolled out no node: every target it reached was skipped (gpu-13: out of service for someone else" in said, said[-3000:]
    assert ADMIN_REASON.split(",", maxsplit=1)[0] in said
    assert fleet.state_file("gpu-13") == before13 and fleet.driver("gpu-13") == OLD
    assert report_json(tmp_path / "alone")["summary"]["skipped"] == 1
    # gpu-12 upgraded by this rollout, gpu-13 skipped: with gpufleet_fail_on_skipped the run fails on gpu-13 alone.
    strict = fleet.upgrade(tmp_path / "strict", gpufleet_targets="gpu-12:gpu-13", gpufleet_fail_on_skipped=True, **common)
    said = " ".join(strict.stdout.split())
    assert strict.returncode != 0, strict.stdout[-4000:]
    assert "skipped (gpufleet_fail_on_skipped): gpu-13: out of service for someone else" in said, said[-3000:]
    assert "rolled out no node" not in said
    assert "DRAIN" in fleet.node("gpu-13")["state"] and fleet.state_file("gpu-13") == before13


def test_a_node_lost_while_this_rollout_holds_it_drained_is_reported_so(fleet, happy, tmp_path):
    """A run killed after draining gpu-12 (its marker of this rollout in Slurm), and gpu-12 powered off before the same
    command runs again: the run cannot reach it. The report and the failure say that this rollout left it drained, from
    what Slurm shows, not only that it was lost from the run."""
    rollout_id = report_json(happy["report"])["rollout_id"]
    reason = f"gpufleet:{rollout_id}: driver upgrade (a killed run)"
    node_dir = fleet.node_dir("gpu-12")
    fleet.scontrol("update", "nodename=gpu-12", "state=drain", f"reason={reason}")
    gstate.request_reboot(node_dir, 0, "poweroff")  # what the node's BMC does for ComputerSystem.Reset ForceOff
    try:
        deadline = time.monotonic() + 60
        while gnode.power(node_dir) != "down":
            assert time.monotonic() < deadline, "gpu-12 did not power off"
            time.sleep(0.5)
        done = fleet.upgrade(tmp_path / "lost", gpufleet_targets="gpu-11:gpu-12", gpufleet_max_unavailable=MAX_UNAVAILABLE,
                             gpufleet_waves=[3], gpufleet_failure_budget=0, **SPREAD)
        said = " ".join(done.stdout.split())
        assert done.returncode != 0, done.stdout[-4000:]
        assert "left drained: gpu-12 (lost from the run, drained by this rollout)" in said, said[-3000:]
        # The last lines: the nodes by result, and the files (not a dict's repr, not "key value" per summary field).
        assert f"rollout {rollout_id}: 2 nodes: 1 upgraded, 0 rolled back, 1 not started." in said, said[-3000:]
        assert "rollout-report.json, rollout-report.md, rollout-report.html, rollout-junit.xml, nodes/ (a JSON file per node))" in said
        record = json.loads((tmp_path / "lost" / "nodes" / "gpu-12.json").read_text())
        assert record["skip_reason"].startswith("lost from the run (unreachable); Slurm shows it "), record["skip_reason"]
        assert f"drained by this rollout ({reason})" in record["skip_reason"], record["skip_reason"]
        assert json.loads((tmp_path / "lost" / "nodes" / "gpu-11.json").read_text())["result"] == "upgraded"
        assert "DRAIN" in fleet.node("gpu-12")["state"]
    finally:  # back in service for the tests after this one
        done_on = gpusim("power-on", "gpu-12", workdir=fleet.workdir)
        assert done_on.returncode == 0, done_on.stdout + done_on.stderr
        deadline = time.monotonic() + 90
        while True:
            state = fleet.node("gpu-12")["state"]
            if "NOT_RESPONDING" not in state and "*" not in state and "DOWN" not in state:
                break
            assert time.monotonic() < deadline, f"gpu-12 did not come back in Slurm: {state}"
            time.sleep(1)
        fleet.scontrol("update", "nodename=gpu-12", "state=resume")
        while steady(fleet.node("gpu-12")["state"]) != "IDLE":
            assert time.monotonic() < deadline, f"gpu-12 not idle after resume: {fleet.node('gpu-12')}"
            time.sleep(1)


def test_a_failing_canary_is_rolled_back_and_stops_the_rollout(fleet, happy, tmp_path):
    """A new BOM (595.45.04): a GPU of the canary falls off the bus (Xid 79) once the new driver loads; it is rolled
    back (the rollback reboots first), validated, and no other node is touched. (A double-bit ECC error instead leaves
    grown ECC counters that no rollback cures: such a node ends drained, as test_rollout_waves shows.)"""
    report = report_json(happy["report"])
    canary = waves_of(report)[0][0]
    fleet.fault(canary, "xid79", gpu=1, when="upgrade")
    # And Slurm loses the rollback's first reboot request (run 1 of issue 20: the rolled-back node of make demo went
    # DOWN at ResumeTimeout): the rollout asks the node itself after gpufleet_reboot_start_timeout.
    fleet.fault(canary, "reboot_lost", when="upgrade")
    others = [n for n in fleet.names if n not in (canary, "gpu-13")]
    before = {n: (fleet.state_file(n), fleet.node(n)) for n in others}
    bom = {"driver": {"version": NEWER, "install": "runfile", "kernel_module": "open"}, "gpu": {"model": "NVIDIA L40S", "count": 2},
           "cuda": ["12.4"]}
    done = fleet.upgrade(tmp_path / "report", gpufleet_max_unavailable=MAX_UNAVAILABLE, gpufleet_waves=[3], gpufleet_bom=bom,
                         gpufleet_reboot_start_timeout=15, **SPREAD)
    assert done.returncode != 0
    assert "the canary failed" in done.stdout and canary in done.stdout, done.stdout[-5000:]
    supervisor_log = (fleet.workdir / "supervisor.log").read_text()
    assert f"{canary}: Slurm's reboot request lost (fault reboot_lost)" in supervisor_log, supervisor_log[-3000:]
    asked = [block for block in done.stdout.split("TASK [")[1:] if "Ask the node itself to reboot" in block.split("\n", 1)[0]]
    assert any(f"changed: [{canary}]" in block for block in asked), done.stdout[-5000:]
    # Rolled back to the driver it ran before, validated, back in service.
    assert fleet.driver(canary) == NEW
    section = fleet.rollout_section(canary)
    assert section["result"] == "rolled_back", section
    assert [p["status"] for p in section["phases"] if p["name"] == "rollback"] == ["ok"], section["phases"]
    assert "DRAIN" not in fleet.node(canary)["state"]
    # No other node touched: Slurm state the same, state file without a phase past preflight.
    for n in others:
        after_file, after_node = fleet.state_file(n), fleet.node(n)
        assert steady(after_node["state"]) == steady(before[n][1]["state"]), n
        assert fleet.driver(n) == NEW, n
        section = after_file.get("rollout") or {}
        assert section.get("id") != (before[n][0].get("rollout") or {}).get("id"), (n, section)
        assert {p["name"] for p in section.get("phases", [])} <= {"preflight"}, (n, section)
        assert {k: v for k, v in after_file.items() if k != "rollout"} == {k: v for k, v in before[n][0].items() if k != "rollout"}, n
    record = next(r for r in report_json(tmp_path / "report")["nodes"] if r["node"] == canary)
    # Who decided it: the driver role saw the lost GPU right after the install (nvidia-smi: gpu_lost), or validation the Xid.
    assert record["rollback"]["result"] == "validated", record
    assert any(word in record["rollback"]["reason"].lower() for word in ("gpu_lost", "xid")), record["rollback"]
    # The same command again: the canary is finished (rolled back) for this rollout and is not tried again, but its
    # failure still stops the rollout before any other node (a finished wave is left, a failed canary is not).
    again = fleet.upgrade(tmp_path / "again", gpufleet_max_unavailable=MAX_UNAVAILABLE, gpufleet_waves=[3], gpufleet_bom=bom, **SPREAD)
    assert again.returncode != 0
    assert "the canary failed: " + canary + " rolled_back in an earlier run of this rollout" in " ".join(again.stdout.split()), \
        again.stdout[-5000:]
    assert "was finished by an earlier run" not in again.stdout, again.stdout[-5000:]
    for n in others:
        assert steady(fleet.node(n)["state"]) == steady(before[n][1]["state"]) and fleet.driver(n) == NEW, n
        assert {p["name"] for p in (fleet.rollout_section(n) or {}).get("phases", [])} <= {"preflight"}, n


def test_rollback_playbook_restores_the_named_nodes_and_keeps_someone_elses_drain(fleet, happy, tmp_path):
    """playbooks/rollback.yml (its own default id: not the rollout's, which finished these nodes), asked for two
    upgraded nodes and gpu-13 (a person's drain): the two are back on the driver they ran before the rollout (their last
    known good), validated and in service; gpu-13 is not touched: its drain and reason are kept, its driver and the rest
    of its state file are as they were, no lock is left on it, and the run says why it was refused. Run again, it
    changes nothing on the two."""
    waves = waves_of(report_json(happy["report"]))
    targets = [waves[1][0], waves[2][0]]
    before13 = fleet.state_file("gpu-13")
    extra = {**fleet.extra_vars(tmp_path / "report"), "gpufleet_rollback_nodes": ",".join([*targets, "gpu-13"])}
    done = fleet.ansible_playbook(ROLLBACK, "-f", "4", "-e", json.dumps(extra), timeout=900)
    counts = recap(done.stdout)
    for name in targets:
        assert counts[name]["failed"] == 0, (name, failures(done.stdout))
        assert fleet.driver(name) == OLD, name
        section = fleet.rollout_section(name)
        assert (section["status"], section["result"]) == ("done", "rolled_back"), (name, section)
        assert [p["status"] for p in section["phases"] if p["name"] == "rollback"] == ["ok"], section["phases"]
        assert "DRAIN" not in fleet.node(name)["state"], fleet.node(name)
    # gpu-13: refused by name, nothing changed.
    assert done.returncode != 0 and counts["gpu-13"]["failed"] == 1, done.stdout[-4000:]
    assert "gpu-13 is out of service for someone else" in done.stdout, done.stdout[-4000:]
    node = fleet.node("gpu-13")
    assert "DRAIN" in node["state"] and node["reason"].startswith(ADMIN_REASON), node
    # Its state file holds at most the released lock (taking the lock writes the file): no last known good changed.
    after13 = fleet.state_file("gpu-13")
    assert (after13.get("last_known_good") or {}) == (before13.get("last_known_good") or {}), after13
    assert (after13.get("rollout") or {}).get("status") != "running", after13.get("rollout")
    assert fleet.driver("gpu-13") == OLD
    # The same command again: the two are done by this rollback, nothing changes.
    again = fleet.ansible_playbook(ROLLBACK, "-f", "4", "-e", json.dumps({**extra, "gpufleet_rollback_nodes": ",".join(targets)}),
                                   timeout=900)
    assert again.returncode == 0, again.stdout[-4000:]
    assert {recap(again.stdout)[name]["changed"] for name in targets} == {0}, again.stdout[-4000:]
    assert all(fleet.driver(name) == OLD for name in targets)
