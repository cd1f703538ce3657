"""End to end: the 8-node simulated fleet with real sshd, Ansible and Slurm.

Needs root and the simulator's packages (tests/gpusim/install-deps.sh). Run:
    .venv/bin/python -m pytest tests/integration/test_fleet_e2e.py -m integration -q
"""

from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import time

import pytest
from fleet import REPO, TESTS, fleet_up, needs_fleet
from fleet import Fleet as BaseFleet
from fleet import gpusim as fleet_gpusim
from fleet import run as fleet_run
from gpusim import node as gnode

SPEC = TESTS / "gpusim" / "specs" / "e2e-8.yml"
NODES = ["h100-01", "h100-02", "h100-03", "h100-04", "h200-01", "h200-02", "h200-03", "h200-04"]

pytestmark = needs_fleet()


def gpusim(*args: str, workdir: pathlib.Path) -> subprocess.CompletedProcess:
    """`python -m gpusim` with this file's longer timeout (eight nodes)."""
    return fleet_gpusim(*args, workdir=workdir, timeout=300)


class Fleet(BaseFleet):
    def slurm_state(self, name: str, via: str = "h100-02") -> tuple[str, str]:
        """(scontrol State=..., sinfo %T) of a node, asked from inside another node over SSH."""
        done = self.ssh(via, f"scontrol show node {name}; echo SINFO $(sinfo -h -N -n {name} -o %T)")
        assert done.returncode == 0, done.stderr
        state = next(w.split("=", 1)[1] for w in done.stdout.split() if w.startswith("State="))
        sinfo = done.stdout.rsplit("SINFO", 1)[1].strip()
        return state, sinfo

    def wait_state(self, name: str, accept, timeout: float = 60) -> tuple[str, str]:
        deadline = time.monotonic() + timeout
        seen = None
        while time.monotonic() < deadline:
            seen = self.slurm_state(name)
            if accept(*seen):
                return seen
            time.sleep(0.5)
        pytest.fail(f"{name}: Slurm state stayed {seen}")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with fleet_up(SPEC, tmp_path_factory.mktemp("gpusim") / "fleet", timeout=300, check_down=False) as workdir:
        yield Fleet(workdir)


def test_ansible_ping_every_node(fleet):
    done = fleet.ansible("all", "-m", "ansible.builtin.ping", "-f", "8")
    assert done.returncode == 0, done.stdout + done.stderr
    for name in NODES:
        assert f"{name} | SUCCESS" in done.stdout


def bmc_password(fleet) -> str:
    password = json.loads((fleet.workdir / "bmc" / "credentials.json").read_text())["password"]
    assert len(password) >= 8
    return password


def audit(fleet, report_dir, *extra):
    """playbooks/audit.yml with -vvv (more than -v: module invocations too), the BMCs' certificate checked against the fleet's own CA."""
    return fleet.ansible_playbook(
        REPO / "playbooks" / "audit.yml", "-vvv", "-e", f"gpufleet_report_dir={report_dir}",
        "-e", f"gpufleet_bmc_ca_path={fleet.workdir / 'bmc' / 'cert.pem'}", "-f", "8", *extra,
    )


def test_audit_reports_the_drift_the_spec_declares(fleet, tmp_path):
    """playbooks/audit.yml over SSH: the report's drift is exactly what e2e-8.yml puts on the fleet."""
    done = audit(fleet, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "8 nodes: 5 match their BOM, 3 drift, 0 unknown, 0 could not be read, 0 unreachable" in done.stdout
    report = json.loads((tmp_path / "fleet-report.json").read_text())
    # The HGX bundle was read out of band from every node's BMC, and matches the BOM's gpu_firmware.
    for node in report["nodes"]:
        bundle = next(i for i in node["items"] if i["component"] == "gpu_firmware")
        assert (bundle["installed"], bundle["status"], bundle["source"]) == ("HGX-22.10-1", "ok", "bmc"), node["name"]
        assert node["bmc_inventory"] == "read" and bundle["inventory_ids"] == ["HGX_FW_BMC_0"]
    # Invariant 7: the BMC password is in no output and no report.
    password = bmc_password(fleet)
    assert password not in done.stdout + done.stderr
    for name in ("fleet-report.json", "fleet-report.md", "fleet-report.html"):
        assert password not in (tmp_path / name).read_text(), name
    drifting = {
        node["name"]: {(i["component"], i["installed"], i["wanted"]) for i in node["items"] if i["status"] != "ok"}
        for node in report["nodes"]
        if node["status"] != "ok"
    }
    nic_items = drifting.pop("h200-04")
    assert drifting == {
        "h100-04": {("driver", "550.90.07", "570.124.06"), ("fabricmanager", "550.90.07", "570.124.06")},
        "h200-03": {("gpu_vbios", "96.00.A5.00.02", "96.00.A5.00.03")},
    }
    # Only the first ConnectX-7 of h200-04 runs old firmware.
    assert len(nic_items) == 1
    component, installed, wanted = nic_items.pop()
    assert component.startswith("nic_firmware[") and (installed, wanted) == ("28.40.1000", "28.43.1014")
    assert set(report["mixed_within_sku"]["hgx_h200"]) == {"gpu_vbios", "nic_firmware[MT_0000000834]"}
    assert report["mixed_within_sku"]["hgx_h200"]["gpu_vbios"]["96.00.A5.00.02"] == ["h200-03"]
    assert "| h100-04 | driver | 550.90.07 | 570.124.06 | drift |" in (tmp_path / "fleet-report.md").read_text()
    assert (tmp_path / "fleet-report.html").read_text().count('<tr class="drift">') >= 3


def test_audit_without_bmc_credentials_says_unknown_for_the_firmware_never_ok(fleet, tmp_path):
    done = audit(fleet, tmp_path, "-e", "bmc_password=")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "8 nodes: 0 match their BOM, 3 drift, 5 unknown, 0 could not be read, 0 unreachable" in done.stdout
    report = json.loads((tmp_path / "fleet-report.json").read_text())
    for node in report["nodes"]:
        bundle = next(i for i in node["items"] if i["component"] == "gpu_firmware")
        assert bundle["status"] == "unknown" and bundle["installed"] is None, node["name"]
        assert "no BMC credentials" in bundle["detail"]
    assert "| h100-01 | gpu_firmware | — | HGX-22.10-1 | no BMC credentials for this host" in (tmp_path / "fleet-report.md").read_text()


def test_audit_of_a_bmc_that_does_not_answer_says_unknown_with_the_reason(fleet, tmp_path):
    assert gpusim("fault", "h100-02", "bmc_unresponsive", workdir=fleet.workdir).returncode == 0
    try:
        done = audit(fleet, tmp_path, "-e", "gpufleet_bmc_timeout=3", "--limit", "h100-02,h100-03,localhost")
    finally:
        assert gpusim("clear-faults", "h100-02", "bmc_unresponsive", workdir=fleet.workdir).returncode == 0
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "fleet-report.json").read_text())
    by_name = {node["name"]: node for node in report["nodes"]}
    bundle = next(i for i in by_name["h100-02"]["items"] if i["component"] == "gpu_firmware")
    assert bundle["status"] == "unknown" and "could not be read" in bundle["detail"], bundle
    assert by_name["h100-02"]["bmc_inventory"].startswith("error: ")
    assert next(i for i in by_name["h100-03"]["items"] if i["component"] == "gpu_firmware")["status"] == "ok"
    assert bmc_password(fleet) not in done.stdout + done.stderr + (tmp_path / "fleet-report.md").read_text()


def test_make_demo_audits_then_rolls_out_with_one_rollback():
    """`make demo` (its own 24-node fleet on 127.0.30.x): the audit (h100-07's OFED drift among the stack), then the rollout: l40s-03 (an Xid 79 once the new
    driver loads) rolled back and validated, l40s-09 (a person's drain) skipped with its drain kept, no node left drained
    by the rollout, every node's evidence written."""
    started = time.monotonic()
    done = fleet_run(["bash", str(TESTS / "gpusim" / "demo.sh")], timeout=1800)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-4000:]
    assert "== the audit's report" in done.stdout and "== the rollout's report" in done.stdout
    # The audit read each H100's stack against its BOM's OFED (issue 24): h100-07 runs an older DOCA-OFED release.
    audit = json.loads((REPO / "reports" / "demo" / "fleet-report.json").read_text())
    ofed = {node["name"]: [i for i in node.get("items", []) if i.get("component") == "ofed"] for node in audit["nodes"]}
    drift = [("drift", "doca-ofed 24.04-0.6.6", "doca-ofed 24.10-1.1.4.0.200")]
    assert [(i["status"], i["installed"], i["wanted"]) for i in ofed["h100-07"]] == drift, ofed["h100-07"]
    assert all([i["status"] for i in ofed[n]] == ["ok"] for n in ofed if n.startswith("h100-") and n != "h100-07"), ofed
    assert all(ofed[n] == [] for n in ofed if n.startswith("l40s-")), ofed  # their BOM names no stack
    rollout = REPO / "reports" / "demo" / "rollout"
    report = json.loads((rollout / "rollout-report.json").read_text())
    results = {node["node"]: node["result"] for node in report["nodes"]}
    assert len(results) == 24, results
    assert results["l40s-03"] == "rolled_back", results
    assert results["l40s-09"] == "skipped", results
    assert "failed_drained" not in results.values(), results
    assert {r for n, r in results.items() if n not in ("l40s-03", "l40s-09")} <= {"upgraded", "unchanged"}, results
    assert "upgraded" in results.values()
    # the person's drain and reason are Slurm's after the rollout, as demo.sh prints them (sinfo -N -o "%N %T %E")
    assert any(line.startswith("l40s-09 drained admin: PSU swap") for line in done.stdout.splitlines()), done.stdout[-3000:]
    for name, result in results.items():
        assert (rollout / "nodes" / f"{name}.json").is_file() or result == "not_started", name
    html = (rollout / "rollout-report.html").read_text()
    assert "<svg" in html
    print(f"make demo: {elapsed:.1f} s")  # a figure, not an assert: the machine is shared


def test_validate_holds_each_node_to_its_bom(fleet, tmp_path):
    """playbooks/validate.yml (quick): the driver and GPU count come from the SKU's BOM; h100-04 (driver 550) fails, the rest pass."""
    done = fleet.ansible_playbook(REPO / "playbooks" / "validate.yml", "-e", f"gpufleet_report_dir={tmp_path}", "-f", "8")
    assert done.returncode == 2, done.stdout + done.stderr  # one node failed its validation
    report = json.loads((tmp_path / "validation-report.json").read_text())
    failed = {node["name"]: node["failed_checks"] for node in report["nodes"] if node["status"] == "fail"}
    assert set(failed) == {"h100-04"} and "driver_version" in failed["h100-04"]
    h100_04 = next(node for node in report["nodes"] if node["name"] == "h100-04")
    driver_check = next(check for check in h100_04["checks"] if check["name"] == "driver_version")
    assert "550.90.07" in str(driver_check["observed"]) and "570.124.06" in str(driver_check["expected"])
    gpu_count = next(check for check in h100_04["checks"] if check["name"] == "gpu_count")
    assert gpu_count["status"] == "pass" and "8" in str(gpu_count["expected"])


def test_each_node_has_its_own_hostname_driver_and_tools(fleet):
    for name in NODES:
        done = fleet.ssh(name, "hostname; command -v nvidia-smi; cat /proc/driver/nvidia/version; cat /proc/sys/kernel/osrelease")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == name
        assert lines[-1] == "6.1.0-28-amd64"  # the spec's kernel, not the controller's
        assert lines[1] == "/usr/local/bin/nvidia-smi"
        assert ("550.90.07" if name == "h100-04" else "570.124.06") in lines[2]


def test_inventory_groups_by_sku_with_bom(fleet):
    done = fleet.ansible("hgx_h200", "-m", "ansible.builtin.debug", "-a", "var=gpufleet_bom.nic_firmware")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("MT_0000000834") == 4
    assert "h100-01" not in done.stdout


def test_ansible_reboot_changes_boot_id(fleet):
    before = fleet.ssh("h100-03", "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    other_before = fleet.ssh("h100-02", "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    assert len(before) == 36
    done = fleet.ansible("h100-03", "-m", "ansible.builtin.reboot", "-a", "reboot_timeout=60", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"rebooted": true' in done.stdout
    after = fleet.ssh("h100-03", "cat /proc/sys/kernel/random/boot_id; hostname").stdout.split()
    assert after[0] != before
    assert after[1] == "h100-03"
    assert fleet.ssh("h100-02", "cat /proc/sys/kernel/random/boot_id").stdout.strip() == other_before
    status = json.loads(gpusim("status", "--json", workdir=fleet.workdir).stdout)
    row = next(r for r in status if r["name"] == "h100-03")
    assert row["power"] == "up"
    assert row["boot_id"] == after[0]


def test_drain_and_resume_a_node_with_a_running_job(fleet):
    state, sinfo = fleet.wait_state("h100-01", lambda s, i: s == "MIXED")  # the spec's sleep job
    done = fleet.ssh("h100-02", "scontrol update nodename=h100-01 state=drain reason=gpusim-e2e")
    assert done.returncode == 0, done.stderr
    state, sinfo = fleet.slurm_state("h100-01")
    assert state == "MIXED+DRAIN"
    assert sinfo == "draining"

    fleet.ssh("h100-02", "scontrol update nodename=h100-01 state=resume")
    fleet.wait_state("h100-01", lambda s, i: s == "MIXED" and i == "mixed")

    fleet.ssh("h100-02", "scontrol update nodename=h100-01 state=drain reason=gpusim-e2e")
    done = fleet.ssh("h100-01", "scancel -w h100-01")
    assert done.returncode == 0, done.stderr
    state, sinfo = fleet.wait_state("h100-01", lambda s, i: i == "drained")
    assert state == "IDLE+DRAIN"

    fleet.ssh("h100-02", "scontrol update nodename=h100-01 state=resume")
    fleet.wait_state("h100-01", lambda s, i: s == "IDLE" and i == "idle")


def test_node_that_does_not_come_back_and_power_on(fleet):
    done = gpusim("fault", "h200-02", "no_return", workdir=fleet.workdir)
    assert done.returncode == 0, done.stderr
    assert fleet.ssh("h200-02", "shutdown -r now").returncode in (0, 255)  # 255: the session died with the node
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = {r["name"]: r for r in json.loads(gpusim("status", "--json", workdir=fleet.workdir).stdout)}
        if status["h200-02"]["power"] == "down" and "does not come back" in (fleet.workdir / "supervisor.log").read_text():
            break
        time.sleep(0.5)
    assert status["h200-02"]["power"] == "down"
    assert status["h200-01"]["power"] == "up"
    assert fleet.ssh("h200-02", "true", timeout=20).returncode == 255

    refused = gpusim("power-on", "h200-02", workdir=fleet.workdir)
    assert refused.returncode == 2
    assert "does not come back" in refused.stderr
    assert gpusim("clear-faults", "h200-02", workdir=fleet.workdir).returncode == 0
    done = gpusim("power-on", "h200-02", workdir=fleet.workdir)
    assert done.returncode == 0, done.stderr
    assert fleet.ssh("h200-02", "hostname").stdout.strip() == "h200-02"


def test_down_leaves_nothing_behind(fleet):
    table = gnode.namespace_table()
    pids = [pid for name in NODES for pid in gnode.processes(fleet.workdir / "nodes" / name, table)]
    assert pids, "the fleet's node processes were not found"
    done = gpusim("down", workdir=fleet.workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not fleet.workdir.exists()
    marker = str(fleet.workdir).encode()
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        assert marker not in cmdline, f"process {entry.name} left: {cmdline!r}"
    for pid in pids:
        assert not pathlib.Path(f"/proc/{pid}/cmdline").exists() or not pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    with open("/proc/self/mountinfo") as fh:
        assert not [line for line in fh if str(fleet.workdir) in line]
    for name in NODES:
        with socket.socket() as sock:
            sock.settimeout(2)
            assert sock.connect_ex((fleet.address[name], fleet.record["ssh_port"])) != 0, f"{name}'s sshd still listens"
