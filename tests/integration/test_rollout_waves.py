"""playbooks/upgrade.yml when wave nodes fail, on 8 simulated nodes over real SSH and real Slurm.

The fleet (tests/fixtures/rollout/fleet-waves.yml, 127.0.26.x, slurmctld on 18600). First rollout: in wave 1 an
installer (DKMS) failure, in wave 2 an Xid after the upgrade on a node that then never comes back from the rollback's
reboot: the first is rolled back and validated, the second left drained with a reason naming the rollout and the
failed check; the waves go on within the failure budget. Second rollout (a new BOM, budget 1): two failures in a wave
spend the budget, and the rollout stops with the remaining nodes untouched.
Run:
    .venv/bin/python -m pytest tests/integration/test_rollout_waves.py -m integration -q
"""

from __future__ import annotations

import pytest
from fleet import TESTS, fleet_up, needs_fleet, steady
from rollout_helpers import NEW, OLD, RolloutFleet, failures, recap, report_json, write_runfiles

SPEC = TESTS / "fixtures" / "rollout" / "fleet-waves.yml"
NEWER = "595.45.04"

pytestmark = needs_fleet()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("rollout-waves")
    runfiles = write_runfiles(base / "runfiles", (OLD, NEW, NEWER))
    with fleet_up(SPEC, base / "fleet", timeout=300) as workdir:
        yield RolloutFleet(workdir, runfiles)


@pytest.fixture(scope="module")
def first(fleet, tmp_path_factory):
    out = tmp_path_factory.mktemp("waves-first")
    fleet.fault("gpu-03", "dkms_fail")
    fleet.fault("gpu-06", "xid48", gpu=0, when="upgrade")
    fleet.fault("gpu-06", "no_return")
    done = fleet.upgrade(out / "report", gpufleet_max_unavailable=3, gpufleet_waves=[3], gpufleet_failure_budget=2,
                         gpufleet_wave_max_fail_percentage=50)
    return {"run": done, "report": out / "report"}


def test_an_installer_failure_is_rolled_back_and_validated(fleet, first):
    assert fleet.driver("gpu-03") == OLD
    section = fleet.rollout_section("gpu-03")
    assert section["result"] == "rolled_back", section
    driver = [p for p in section["phases"] if p["name"] == "driver"]
    assert driver and driver[-1]["status"] == "failed", section["phases"]
    assert [p["status"] for p in section["phases"] if p["name"] == "rollback"] == ["ok"]
    assert "DRAIN" not in fleet.node("gpu-03")["state"], fleet.node("gpu-03")


def test_a_node_that_never_returns_is_left_drained_with_a_reason(fleet, first):
    rollout_id = report_json(first["report"])["rollout_id"]
    node = fleet.node("gpu-06")
    assert "DRAIN" in node["state"] or "DOWN" in node["state"], node
    assert rollout_id in node["reason"] and "xid" in node["reason"].lower(), node
    record = next(r for r in report_json(first["report"])["nodes"] if r["node"] == "gpu-06")
    assert record["result"] == "failed_drained" and record["rollback"]["result"] == "failed", record


def test_the_waves_go_on_within_the_budget(fleet, first):
    done = first["run"]
    # A node left drained makes the run fail, after every wave ran.
    assert done.returncode != 0
    assert "left drained: gpu-06" in done.stdout, done.stdout[-4000:]
    assert "STOPS" not in done.stdout
    for name in ("gpu-01", "gpu-02", "gpu-04", "gpu-05", "gpu-07", "gpu-08"):
        assert fleet.driver(name) == NEW, name
        assert fleet.rollout_section(name)["result"] == "upgraded", name
    summary = report_json(first["report"])["summary"]
    assert (summary["upgraded"], summary["rolled_back"], summary["failed_drained"]) == (6, 1, 1), summary


def test_the_same_rollout_again_leaves_the_finished_waves_and_does_not_judge_them_again(fleet, first, tmp_path):
    """The same command again, with gpufleet_wave_max_fail_percentage 0: wave 1 (gpu-03 rolled back) is over that now,
    but the first run judged it. Every batch was finished by that run and ends at once ("run the same command again to
    resume" after a wave stopped the rollout goes on with the next wave, not the stopped one); nothing is written."""
    names = [n for n in fleet.names if n != "gpu-06"]  # gpu-06 never came back from the first rollout's reboot
    before = {n: (fleet.state_file(n), steady(fleet.node(n)["state"])) for n in names}
    done = fleet.upgrade(tmp_path / "report", gpufleet_max_unavailable=3, gpufleet_waves=[3], gpufleet_failure_budget=2,
                         gpufleet_wave_max_fail_percentage=0)
    assert "STOPS" not in done.stdout, failures(done.stdout) + done.stdout[-4000:]
    finished = " ".join(line for line in done.stdout.splitlines() if "was finished by an earlier run" in line)
    assert all(name in finished for name in names), done.stdout[-6000:]  # every batch, the canary's too
    changed = {host: counts["changed"] for host, counts in recap(done.stdout).items() if host in names}
    assert set(changed) == set(names) and set(changed.values()) == {0}, changed
    for name in names:
        assert (fleet.state_file(name), steady(fleet.node(name)["state"])) == before[name], name


def test_a_spent_failure_budget_stops_the_rollout_with_the_rest_untouched(fleet, first, tmp_path):
    bom = {"driver": {"version": NEWER, "install": "runfile", "kernel_module": "open"}, "gpu": {"model": "NVIDIA L40S", "count": 2},
           "cuda": ["12.4"]}
    fleet.fault("gpu-02", "xid48", gpu=1, when="upgrade")  # gpu-03 keeps its DKMS failure
    before = {n: fleet.state_file(n) for n in ("gpu-04", "gpu-05", "gpu-07", "gpu-08")}
    done = fleet.upgrade(tmp_path / "report", gpufleet_bom=bom, gpufleet_max_unavailable=3, gpufleet_waves=[2],
                         gpufleet_failure_budget=1, gpufleet_wave_max_fail_percentage=100, timeout=1800)
    assert done.returncode != 0
    assert "the failure budget is spent" in done.stdout, done.stdout[-5000:]
    report = report_json(tmp_path / "report")
    results = {r["node"]: r["result"] for r in report["nodes"]}
    # Xid 48 leaves grown double-bit ECC counters, which no rollback cures: gpu-02 stays drained with a reason.
    assert results["gpu-02"] == "failed_drained", results
    assert results["gpu-03"] in ("rolled_back", "failed_drained"), results
    # The waves after the failing one never started: their nodes were not touched.
    # gpu-06 is still down from the first rollout: it was not reachable, so it is not among them.
    untouched = [n for n, r in results.items() if r == "not_started" and n in before]
    assert len(untouched) >= 2, results
    for name in untouched:
        assert fleet.driver(name) == NEW, name
        section = fleet.rollout_section(name)
        assert {p["name"] for p in section.get("phases", [])} <= {"preflight"}, (name, section)
        assert "DRAIN" not in fleet.node(name)["state"]
        assert {k: v for k, v in fleet.state_file(name).items() if k != "rollout"} == \
            {k: v for k, v in before[name].items() if k != "rollout"}, name
