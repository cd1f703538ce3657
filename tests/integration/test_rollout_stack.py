"""playbooks/upgrade.yml with OFED and the driver as one stack (issue 24), on 2 simulated nodes over real SSH and Slurm.

The fleet (tests/fixtures/rollout/fleet-stack.yml, 127.0.56.x, slurmctld on 19000): PCIe L40S nodes with ConnectX-7 NICs
on MLNX_OFED 24.04 and driver 570.124.06 (DKMS; nvidia_peermem built against that OFED), rolled out with
gpufleet_components [ofed, nvidia_driver] to the BOM's OFED 24.10 and driver 580.95.05, whose stack wants nvidia_peermem.
The canary (stack-01) is upgraded: OFED installed without its firmware updater (the NICs keep their firmware), the
driver built after it, so nvidia_peermem resolves the new OFED's symbols and loads. stack-02 loses a GPU (Xid 79) on
the new driver: its rollback restores the driver and OFED together, and nvidia_peermem is rebuilt against the restored
OFED (built against 24.10 it would refuse to load on 24.04: Unknown symbol ib_register_peer_memory_client), so the node
validates with peermem loaded and goes back into service. Then playbooks/rollback.yml, asked for the canary without naming
components, gives it back what its rollout changed: OFED and the driver, peermem rebuilt and loaded. Last, the driver's
verify on a node whose nvidia_peermem was built against another OFED fails naming the kernel's refusal and what to do.
Needs root and the simulator's packages (tests/gpusim/install-deps.sh). Run:
    .venv/bin/python -m pytest tests/integration/test_rollout_stack.py -m integration -q
"""

from __future__ import annotations

import json

import pytest
from fleet import REPO, TESTS, fleet_up, needs_fleet
from gpusim import ofed as sim_ofed
from gpusim import state as gstate
from rollout_helpers import NEW, OLD, RolloutFleet, failures, recap, report_json, write_runfiles

SPEC = TESTS / "fixtures" / "rollout" / "fleet-stack.yml"
OFED_OLD, OFED_NEW = "24.04-0.6.6", "24.10-1.1.4.0"
NIC_FW = "28.39.1002"

pytestmark = needs_fleet()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("rollout-stack")
    runfiles = write_runfiles(base / "runfiles", (OLD, NEW))
    bundles = sim_ofed.write_bundles(base / "bundles", (OFED_OLD, OFED_NEW))
    with fleet_up(SPEC, base / "fleet", timeout=300) as workdir:
        fleet = RolloutFleet(workdir, runfiles)
        fleet.ofed = {"ofed_bundles": bundles, "ofed_bundle_dir": str(base / "ofed-work")}
        yield fleet


@pytest.fixture(scope="module")
def rollout(fleet, tmp_path_factory):
    out = tmp_path_factory.mktemp("stack")
    fleet.fault("stack-02", "xid79", gpu=1, when="upgrade")
    done = fleet.upgrade(out / "report", gpufleet_components=["ofed", "nvidia_driver"], gpufleet_max_unavailable=1, gpufleet_waves=[1],
                         gpufleet_failure_budget=1, **fleet.ofed)
    (out / "upgrade.log").write_text(done.stdout + done.stderr)  # for a failing test's reader
    return {"run": done, "report": out / "report"}


def stack(fleet, name):
    node = fleet.sim(name)
    return {"driver": node["driver"]["version"], "ofed": node["stack"]["ofed"]["version"], "ofed_loaded": node["stack"]["ofed"]["loaded"],
            "peermem_built_for": node["driver"]["peermem_ofed"], "peermem_loaded": "nvidia_peermem" in node["modules"],
            "nic_fw": sorted({nic["fw"] for nic in node["nics"]})}


def test_the_canary_runs_the_new_stack_with_peermem_loaded_against_it(fleet, rollout):
    record = {r["node"]: r for r in report_json(rollout["report"])["nodes"]}
    assert record["stack-01"]["wave"] == 0 and record["stack-01"]["result"] == "upgraded", (record["stack-01"], failures(rollout["run"].stdout))
    assert stack(fleet, "stack-01") == {"driver": NEW, "ofed": OFED_NEW, "ofed_loaded": OFED_NEW, "peermem_built_for": f"mlnx-ofed-{OFED_NEW}",
                                        "peermem_loaded": True, "nic_fw": [NIC_FW]}
    # The record tells the OFED change as it tells the driver's.
    versions = (record["stack-01"]["before"], record["stack-01"]["after"])
    assert [(v["driver"], v["ofed"]) for v in versions] == [(OLD, f"mlnx-ofed {OFED_OLD}"), (NEW, f"mlnx-ofed {OFED_NEW}")], versions
    assert f"ofed mlnx-ofed {OFED_OLD} → mlnx-ofed {OFED_NEW}" in (rollout["report"] / "rollout-report.md").read_text()
    phases = [p["name"] for p in fleet.phases("stack-01") if p["status"] == "ok"]
    assert phases.index("ofed") < phases.index("driver") < phases.index("activate"), phases  # OFED first: peermem builds against it


def test_a_failed_node_gets_its_whole_stack_back_with_peermem_rebuilt_for_it(fleet, rollout):
    record = next(r for r in report_json(rollout["report"])["nodes"] if r["node"] == "stack-02")
    assert record["result"] == "rolled_back" and record["rollback"]["result"] == "validated", (record, failures(rollout["run"].stdout))
    assert stack(fleet, "stack-02") == {"driver": OLD, "ofed": OFED_OLD, "ofed_loaded": OFED_OLD, "peermem_built_for": f"mlnx-ofed-{OFED_OLD}",
                                        "peermem_loaded": True, "nic_fw": [NIC_FW]}
    assert record["after"]["ofed"] == record["before"]["ofed"] == f"mlnx-ofed {OFED_OLD}", record
    rollback = [p for p in fleet.phases("stack-02") if p["name"] == "rollback"]
    assert [p["status"] for p in rollback] == ["ok"] and "restored ofed, nvidia_driver" in rollback[-1]["detail"], rollback
    assert "DRAIN" not in fleet.node("stack-02")["state"], fleet.node("stack-02")  # validated, back in service


def test_the_on_demand_rollback_gives_back_what_the_last_rollout_changed(fleet, rollout, tmp_path):
    """playbooks/rollback.yml for the canary, components not named: its state file says its rollout changed OFED and the
    driver, so both come back (the default used to be the driver alone, leaving OFED 24.10 under the old driver)."""
    assert stack(fleet, "stack-01")["ofed"] == OFED_NEW  # the first test's upgrade
    extra = {**fleet.extra_vars(tmp_path / "report"), **fleet.ofed, "gpufleet_rollback_nodes": "stack-01"}
    done = fleet.ansible_playbook(REPO / "playbooks" / "rollback.yml", "-e", json.dumps(extra), timeout=900)
    assert done.returncode == 0 and recap(done.stdout)["stack-01"]["failed"] == 0, failures(done.stdout)
    assert stack(fleet, "stack-01") == {"driver": OLD, "ofed": OFED_OLD, "ofed_loaded": OFED_OLD, "peermem_built_for": f"mlnx-ofed-{OFED_OLD}",
                                        "peermem_loaded": True, "nic_fw": [NIC_FW]}
    section = fleet.rollout_section("stack-01")
    assert (section["status"], section["result"]) == ("done", "rolled_back"), section
    rollback = [p for p in section["phases"] if p["name"] == "rollback"]
    assert [p["status"] for p in rollback] == ["ok"] and "restored ofed, nvidia_driver" in rollback[-1]["detail"], rollback
    assert "DRAIN" not in fleet.node("stack-01")["state"], fleet.node("stack-01")


VERIFY = """
- name: The driver's verify entry point
  hosts: stack-01
  gather_facts: false
  tasks:
    - name: Verify
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.nvidia_driver
        tasks_from: verify
"""


def test_the_driver_verify_names_why_nvidia_peermem_does_not_load(fleet, tmp_path):
    """OFED changed under the driver behind the rollout's back (nvidia_peermem built against another OFED, not loaded): the
    driver's verify, where the BOM wants peermem (nvidia_driver_peermem), loads it, sees the kernel refuse it, and fails with
    the refusal and what to do, not a bare assert."""
    def other_ofed(s):
        s["driver"]["peermem_ofed"] = "mlnx-ofed-23.10-1.1.9.0"
        s["modules"] = [m for m in s["modules"] if m != "nvidia_peermem"]

    gstate.update(fleet.node_dir("stack-01"), other_ofed)
    playbook = tmp_path / "verify.yml"
    playbook.write_text(VERIFY)
    done = fleet.ansible_playbook(playbook, "-e", json.dumps({"nvidia_driver_version": OLD, "nvidia_driver_peermem": True}), timeout=300)
    said = " ".join(done.stdout.split())
    assert done.returncode != 0 and recap(done.stdout)["stack-01"]["failed"] == 1, done.stdout[-4000:]
    assert f"stack-01: nvidia_peermem does not load with driver {OLD} (modprobe: ERROR: could not insert 'nvidia_peermem': Unknown symbol" in said, \
        said[-3000:]
    assert "rebuild it after OFED" in said
    assert "nvidia_peermem" not in fleet.sim("stack-01")["modules"]
