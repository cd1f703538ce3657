"""playbooks/upgrade.yml interrupted and resumed, and its lock, on 8 simulated nodes over real SSH and real Slurm.

The fleet (tests/fixtures/rollout/fleet-resume.yml, 127.0.27.x, slurmctld on 18700). While a rollout runs, a second
rollout (another id) over the same nodes refuses before it touches any, naming the owner and the age of the lock.
The first rollout's ansible-playbook is then killed (SIGKILL) while a wave is in flight; run again it resumes and
completes; a third run changes nothing.
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

pytestmark = needs_fleet()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("rollout-resume")
    runfiles = write_runfiles(base / "runfiles", (OLD, NEW))
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
    """The nodes among names that Slurm shows drained with a gpufleet reason."""
    return [n for n in names if "DRAIN" in (node := fleet.node(n))["state"] and node["reason"].startswith("gpufleet:")]


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
        # Then a wave node is drained (in flight): kill the playbook there.
        wave_node = wait_for("a wave node's drain", lambda: ours_draining(fleet, [n for n in fleet.names if n != canary]), 300, proc)[0]
        fleet.kill(proc)
    finally:
        if proc.poll() is None:
            fleet.kill(proc)
    killed_states = {n: fleet.rollout_section(n) for n in fleet.names}
    resumed = fleet.upgrade(report, **SHAPE)
    third = fleet.upgrade(report, **SHAPE)
    return {"id": rollout_id, "canary": canary, "second": second, "wave_node": wave_node, "killed": killed_states,
            "resumed": resumed, "third": third, "first_log": (out / "first.log").read_text()}


def test_a_second_rollout_refuses_naming_the_owner_and_age(fleet, interrupted):
    second = interrupted["second"]
    assert second.returncode != 0
    assert "rollout r-second refuses to start" in second.stdout, second.stdout[-4000:]
    assert f"held by rollout {interrupted['id']}" in second.stdout and " age " in second.stdout, second.stdout[-4000:]
    assert "No node was touched" in second.stdout
    # Its lock was never taken on any node: every section still names the first rollout.
    for name, section in interrupted["killed"].items():
        assert section.get("id") == interrupted["id"], (name, section)


def test_the_killed_rollout_left_a_wave_in_flight(interrupted):
    section = interrupted["killed"][interrupted["wave_node"]]
    assert section["status"] == "running", section
    assert "rollout" in interrupted["first_log"]


def test_run_again_it_completes(fleet, interrupted):
    resumed = interrupted["resumed"]
    assert resumed.returncode == 0, resumed.stdout[-6000:] + resumed.stderr[-2000:]
    for name in fleet.names:
        assert fleet.driver(name) == NEW, name
        section = fleet.rollout_section(name)
        assert (section["id"], section["status"], section["result"]) == (interrupted["id"], "done", "upgraded"), (name, section)
        assert "DRAIN" not in fleet.node(name)["state"], name


def test_a_third_run_changes_nothing(interrupted):
    third = interrupted["third"]
    assert third.returncode == 0, third.stdout[-6000:]
    changed = {host: counts["changed"] for host, counts in recap(third.stdout).items()}
    assert changed and set(changed.values()) == {0}, changed
