"""playbooks/upgrade.yml interrupted and resumed, and its lock, on 8 simulated nodes over real SSH and real Slurm.

The fleet (tests/fixtures/rollout/fleet-resume.yml, 127.0.27.x, slurmctld on 18700). While a rollout runs, a second
rollout (another id) over the same nodes refuses before it touches any, naming the owner and the age of the lock, and
so does a second run of the same rollout (the same id: another operator, an AWX job). The first rollout's
ansible-playbook is then killed (SIGKILL) while a wave is in flight; run again at once it is refused as a twin (the
killed run's heartbeat is fresh), run with a gpufleet_lock_stale_seconds under the lock's age it takes the nodes over,
resumes and completes; a third run changes nothing. Then a new BOM with the stop switch: the stop file (gpufleet_stop_file) put
down while the canary is in flight finishes the nodes in flight, starts no new node and says how to resume; with the
file gone, the same command completes the rollout.
Run:
    .venv/bin/python -m pytest tests/integration/test_rollout_resume.py -m integration -q
"""

from __future__ import annotations

import time

import pytest
from fleet import TESTS, fleet_up, needs_fleet
from rollout_helpers import NEW, OLD, RolloutFleet, recap, write_runfiles

SPEC = TESTS / "fixtures" / "rollout" / "fleet-resume.yml"
SHAPE = {"gpufleet_max_unavailable": 2, "gpufleet_waves": [2], "gpufleet_soak_seconds": 2}
NEWER = "595.45.04"
BOM_NEWER = {"driver": {"version": NEWER, "install": "runfile", "kernel_module": "open"}, "gpu": {"model": "NVIDIA L40S", "count": 2},
             "cuda": ["12.4"]}

pytestmark = needs_fleet()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("rollout-resume")
    runfiles = write_runfiles(base / "runfiles", (OLD, NEW, NEWER))
    with fleet_up(SPEC, base / "fleet", timeout=300) as workdir:
        yield RolloutFleet(workdir, runfiles)


def wait_for(what, check, timeout: float, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the rollout ended (rc {proc.returncode}) before {what}")
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def ours_draining(fleet, names):
    """The nodes among names that Slurm shows drained with a gpufleet reason (one scontrol call for all of them)."""
    nodes = fleet.nodes()
    return [n for n in names if n in nodes and "DRAIN" in nodes[n]["state"] and nodes[n]["reason"].startswith("gpufleet:")]


@pytest.fixture(scope="module")
def interrupted(fleet, tmp_path_factory):
    out = tmp_path_factory.mktemp("resume")
    report = out / "report"
    proc = fleet.start_upgrade(report, out / "first.log", **SHAPE)
    try:
        # The canary is drained: the rollout holds every target now.
        canary = wait_for("the canary's drain", lambda: ours_draining(fleet, fleet.names), 240, proc)[0]
        rollout_id = fleet.rollout_section(canary)["id"]
        second = fleet.upgrade(out / "second", gpufleet_rollout_id="r-second", **SHAPE)
        twin = fleet.upgrade(out / "twin", **SHAPE)  # the same BOM, so the same rollout id: another run of it
        # Then a wave node is drained (in flight): kill the playbook there.
        wave_node = wait_for("a wave node's drain", lambda: ours_draining(fleet, [n for n in fleet.names if n != canary]), 300, proc)[0]
        fleet.kill(proc)
    finally:
        if proc.poll() is None:
            fleet.kill(proc)
    killed_states = {n: fleet.rollout_section(n) for n in fleet.names}
    too_soon = fleet.upgrade(out / "too-soon", **SHAPE)  # the killed run's heartbeat is fresh: it could still be alive
    time.sleep(3)
    resumed = fleet.upgrade(report, gpufleet_lock_stale_seconds=2, **SHAPE)  # the operator says: that run is gone
    third = fleet.upgrade(report, **SHAPE)
    return {"id": rollout_id, "canary": canary, "second": second, "twin": twin, "wave_node": wave_node, "killed": killed_states,
            "too_soon": too_soon, "resumed": resumed, "third": third, "first_log": (out / "first.log").read_text()}


def test_a_second_rollout_refuses_naming_the_owner_and_age(fleet, interrupted):
    second = interrupted["second"]
    assert second.returncode != 0
    assert "rollout r-second refuses to start" in second.stdout, second.stdout[-4000:]
    assert f"held by rollout {interrupted['id']}" in second.stdout and " age " in second.stdout, second.stdout[-4000:]
    assert "No node was touched" in second.stdout
    # Its lock was never taken on any node: every section still names the first rollout.
    for name, section in interrupted["killed"].items():
        assert section.get("id") == interrupted["id"], (name, section)


@pytest.mark.parametrize("run", ["twin", "too_soon"])
def test_a_second_run_of_the_same_rollout_refuses_while_the_first_may_live(interrupted, run):
    refused = interrupted[run]
    assert refused.returncode != 0
    assert f"rollout {interrupted['id']} refuses to start" in refused.stdout, refused.stdout[-4000:]
    assert f"held by another run of the same rollout {interrupted['id']}" in refused.stdout, refused.stdout[-4000:]
    assert "gpufleet_lock_stale_seconds" in refused.stdout and "No node was touched" in refused.stdout
    # Its nonce was never recorded: every node still names the first run's.
    runs = {section.get("run") for section in interrupted["killed"].values()}
    assert len(runs) == 1 and None not in runs, interrupted["killed"]


def test_the_killed_rollout_left_a_wave_in_flight(interrupted):
    section = interrupted["killed"][interrupted["wave_node"]]
    assert section["status"] == "running", section
    assert "rollout" in interrupted["first_log"]


def assert_completed(fleet, run, driver, rollout_id=None):
    """The run succeeded: every node on `driver`, finished upgraded (by rollout_id, when given), back in service."""
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    for name in fleet.names:
        assert fleet.driver(name) == driver, name
        section = fleet.rollout_section(name)
        assert (section["status"], section["result"]) == ("done", "upgraded"), (name, section)
        assert rollout_id is None or section["id"] == rollout_id, (name, section)
        assert "DRAIN" not in fleet.node(name)["state"], name


def test_run_again_it_completes(fleet, interrupted):
    assert_completed(fleet, interrupted["resumed"], NEW, interrupted["id"])
    output = " ".join((interrupted["resumed"].stdout + interrupted["resumed"].stderr).split())  # warnings: stderr, wrapped
    assert "took over node" in output and "its heartbeat is stale" in output, output[-4000:]


def test_a_third_run_changes_nothing(interrupted):
    third = interrupted["third"]
    assert third.returncode == 0, third.stdout[-6000:]
    changed = {host: counts["changed"] for host, counts in recap(third.stdout).items()}
    assert changed and set(changed.values()) == {0}, changed


@pytest.fixture(scope="module")
def stopped(fleet, interrupted, tmp_path_factory):
    """A rollout to NEWER; the stop file is put down once the canary is drained; then removed and the command rerun."""
    out = tmp_path_factory.mktemp("stop")
    stop = fleet.workdir / "gpufleet.stop"  # the tests' gpufleet_stop_file (RolloutFleet.extra_vars)
    proc = fleet.start_upgrade(out / "report", out / "stop.log", gpufleet_bom=BOM_NEWER, **SHAPE)
    try:
        canary = wait_for("the canary's drain", lambda: ours_draining(fleet, fleet.names), 240, proc)[0]
        stop.write_text("the maintenance window is over\n")
        proc.wait(timeout=1200)
    finally:
        if proc.poll() is None:
            fleet.kill(proc)
    stopped_at = {n: (fleet.driver(n), fleet.node(n), fleet.rollout_section(n)) for n in fleet.names}
    stop.unlink()
    resumed = fleet.upgrade(out / "report", gpufleet_bom=BOM_NEWER, **SHAPE)
    return {"canary": canary, "rc": proc.returncode, "log": (out / "stop.log").read_text(), "at": stopped_at, "resumed": resumed}


def test_the_stop_file_finishes_the_nodes_in_flight_and_starts_no_new_node(fleet, stopped):
    log = stopped["log"]
    assert "STOPS before wave" in log and "the stop file" in log, log[-5000:]
    assert f"To resume, delete {fleet.workdir / 'gpufleet.stop'} and run the same command again" in log, log[-5000:]
    at = stopped["at"]
    # The canary, in flight when the file appeared, was finished: upgraded and back in service.
    driver, node, section = at[stopped["canary"]]
    assert driver == NEWER and "DRAIN" not in node["state"] and section["result"] == "upgraded", at[stopped["canary"]]
    # No node was left drained, and some were never started: still on the old BOM, no phase past preflight.
    untouched = [n for n, (driver, _node, _section) in at.items() if driver == NEW]
    assert untouched, at
    for name, (driver, node, section) in at.items():
        assert "DRAIN" not in node["state"], (name, node)
        if driver == NEW:
            assert {p["name"] for p in section.get("phases", [])} <= {"preflight"}, (name, section)


def test_with_the_stop_file_gone_the_same_command_completes(fleet, stopped):
    assert_completed(fleet, stopped["resumed"], NEWER)
