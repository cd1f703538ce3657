"""The gpu_firmware role's host BMC and BIOS updates over Redfish (community.general.redfish_info/redfish_command
against the simulated BMCs), and the audit of both, on a 2-node fleet (tests/fixtures/firmware/fleet-bmc-bios.yml:
nodes on 127.0.90.x, BMCs on 127.0.190.x:443). bmcbios-01's host BMC and bmcbios-02's BIOS drift from the BOM.

Checks: the audit reports the drift; a wrong sha256 and a downgrade are refused with nothing pushed; check
mode plans (changed) and pushes nothing; the real run (-vvv) pushes the BMC image to one node and the BIOS
image to the other, resets the BMC / reboots the host, and Redfish then shows the new versions; the BMC
password is in no output; a second run changes nothing, nor does it in check mode; the audit is ok after.
Run:
    .venv/bin/python -m pytest tests/integration/test_bmc_bios.py -m integration -q
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.request

import pytest
from fleet import REPO, TESTS, ansible_env, fleet_up, json_doc, needs_fleet
from fleet import Fleet as BaseFleet
from gpusim import artifacts

SPEC = TESTS / "fixtures" / "firmware" / "fleet-bmc-bios.yml"
NODES = ["bmcbios-01", "bmcbios-02"]
BMC_OLD, BMC_NEW, BIOS_OLD, BIOS_NEW = "24.01.1", "24.05.2", "2.1.0", "2.3.1"

pytestmark = needs_fleet()

PLAY = """
- name: Host BMC and BIOS firmware through the gpu_firmware role
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Run the role
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.gpu_firmware
"""


class Fleet(BaseFleet):
    def __init__(self, workdir, playbook, images):
        super().__init__(workdir)
        creds = json.loads((workdir / "bmc" / "credentials.json").read_text())
        self.user, self.password = creds["user"], creds["password"]
        self.bmc = {r["name"]: r["bmc_address"] for r in self.record["nodes"]}
        self.playbook = playbook
        self.images = images
        self.ctx = ssl._create_unverified_context()  # noqa: S323 - the fleet's self-signed certificate

    def redfish(self, name, path):
        req = urllib.request.Request(f"https://{self.bmc[name]}{path}")
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode())
        with urllib.request.urlopen(req, context=self.ctx, timeout=10) as resp:  # noqa: S310 - https only
            return json.loads(resp.read())

    def versions(self, name):
        inv = "/redfish/v1/UpdateService/FirmwareInventory"
        return {
            "HostBMC_0": self.redfish(name, f"{inv}/HostBMC_0")["Version"],
            "HostBIOS_0": self.redfish(name, f"{inv}/HostBIOS_0")["Version"],
            "manager": self.redfish(name, "/redfish/v1/Managers/BMC_0")["FirmwareVersion"],
            "system": self.redfish(name, "/redfish/v1/Systems/System_0")["BiosVersion"],
        }

    def tasks(self, name):
        return self.redfish(name, "/redfish/v1/TaskService/Tasks")["Members@odata.count"]

    def role(self, *args, verbose=False, **extra):
        evars = {"gpu_firmware_bmc_image": self.images["bmc"], "gpu_firmware_bios_image": self.images["bios"],
                 "gpu_firmware_poll_interval": 1, "gpu_firmware_timeout": 60, "gpu_firmware_bmc_reset_wait": 30,
                 "gpu_firmware_reboot_timeout": 120, **extra}
        cmd = ["-e", json.dumps(evars), *args]
        if verbose:
            return self.ansible_playbook(self.playbook, "-vvv", *cmd, env=ansible_env(), timeout=200)
        proc = self.ansible_playbook(self.playbook, *cmd, json_output=True, timeout=200)
        return proc, json_doc(proc)

    def audit(self, report_dir):
        proc = self.ansible_playbook(
            REPO / "playbooks" / "audit.yml", "-e", f"gpufleet_report_dir={report_dir}",
            "-e", f"gpufleet_bmc_ca_path={self.workdir / 'bmc' / 'cert.pem'}", timeout=200)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        assert self.password not in proc.stdout + proc.stderr
        report = json.loads((report_dir / "fleet-report.json").read_text())
        return proc, {n["name"]: {i["component"]: (i["installed"], i["wanted"], i["status"]) for i in n["items"]
                                  if i["component"] in ("bmc_firmware", "bios")} for n in report["nodes"]}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("gpusim-bmc-bios")
    playbook = base / "bmc_bios.yml"
    playbook.write_text(PLAY)
    bmc = artifacts.write_host_image(base / "images", "bmc", BMC_NEW)
    bios = artifacts.write_host_image(base / "images", "bios", BIOS_NEW)
    images = {"bmc": {"version": BMC_NEW, "path": str(bmc), "checksum": "sha256:" + artifacts.sha256_file(bmc)},
              "bios": {"version": BIOS_NEW, "path": str(bios), "checksum": artifacts.sha256_file(bios)}}
    with fleet_up(SPEC, base / "fleet") as workdir:
        yield Fleet(workdir, playbook, images)


def _failures(doc):
    """{host: msg} of the tasks that failed (the json callback's plays)."""
    out = {}
    for play in doc["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                if result.get("failed"):  # a loop's message is its failed items'
                    items = [r.get("msg", "") for r in result.get("results", []) if r.get("failed")]
                    out[host] = "; ".join(items) if items else result.get("msg", "")
    return out


def _changed(doc, host):
    return doc["stats"][host]["changed"]


def test_audit_check_mode_update_rerun_and_audit_again(fleet, tmp_path):
    # the audit sees the drift the spec declares, read out of band from the BMCs
    _proc, before = fleet.audit(tmp_path / "before")
    assert before["bmcbios-01"] == {"bmc_firmware": (BMC_OLD, BMC_NEW, "drift"), "bios": (BIOS_NEW, BIOS_NEW, "ok")}
    assert before["bmcbios-02"] == {"bmc_firmware": (BMC_NEW, BMC_NEW, "ok"), "bios": (BIOS_OLD, BIOS_NEW, "drift")}
    seen = {n: fleet.versions(n) for n in NODES}
    assert seen["bmcbios-01"]["manager"] == BMC_OLD and seen["bmcbios-02"]["system"] == BIOS_OLD
    tasks = {n: fleet.tasks(n) for n in NODES}

    # a wrong sha256, and a downgrade: refused before anything is pushed
    wrong = dict(fleet.images["bios"], checksum="0" * 64)
    proc, doc = fleet.role("-e", json.dumps({"gpu_firmware_bios_image": wrong, "gpu_firmware_bmc_image": {}}))
    failed = _failures(doc)
    assert proc.returncode != 0 and set(failed) == {"bmcbios-02"}, failed  # bmcbios-01's BIOS is already at 2.3.1
    assert "nothing was pushed" in failed["bmcbios-02"] and fleet.images["bios"]["path"] in failed["bmcbios-02"]
    older = dict(fleet.images["bmc"], version="23.01.0")
    proc, doc = fleet.role("-e", json.dumps({"gpu_firmware_bmc_image": older, "gpu_firmware_bios_image": {}}))
    failed = _failures(doc)
    assert proc.returncode != 0 and set(failed) == set(NODES), failed
    assert failed["bmcbios-01"] == ("HostBMC_0 runs 24.01.1, newer than the image's 23.01.0: that is a downgrade; set "
                                    "gpu_firmware_allow_downgrade to do it"), failed
    assert {n: fleet.versions(n) for n in NODES} == seen and {n: fleet.tasks(n) for n in NODES} == tasks

    # check mode: the plan (changed on both nodes), nothing pushed, nothing reset
    proc, doc = fleet.role("--check")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert all(_changed(doc, n) > 0 for n in NODES), doc["stats"]
    assert {n: fleet.versions(n) for n in NODES} == seen and {n: fleet.tasks(n) for n in NODES} == tasks

    # the real run, -vvv: the BMC image to bmcbios-01 (then its BMC resets), the BIOS to bmcbios-02 (then it reboots)
    boot_id = fleet.ssh_ok("bmcbios-02", "cat /proc/sys/kernel/random/boot_id").strip()
    proc = fleet.role(verbose=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert fleet.password not in out  # invariant 7, module invocations included
    assert {n: fleet.tasks(n) - tasks[n] for n in NODES} == {"bmcbios-01": 1, "bmcbios-02": 1}
    want = {"HostBMC_0": BMC_NEW, "HostBIOS_0": BIOS_NEW, "manager": BMC_NEW, "system": BIOS_NEW}
    assert {n: fleet.versions(n) for n in NODES} == {n: want for n in NODES}
    assert fleet.ssh_ok("bmcbios-02", "cat /proc/sys/kernel/random/boot_id").strip() != boot_id  # the BIOS reboot

    # again: nothing to do
    proc, doc = fleet.role()
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert {n: _changed(doc, n) for n in NODES} == {n: 0 for n in NODES}, doc["stats"]
    proc, doc = fleet.role("--check")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert {n: _changed(doc, n) for n in NODES} == {n: 0 for n in NODES}, doc["stats"]
    assert {n: fleet.tasks(n) - tasks[n] for n in NODES} == {"bmcbios-01": 1, "bmcbios-02": 1}  # nothing pushed again

    _proc, after = fleet.audit(tmp_path / "after")
    assert after == {n: {"bmc_firmware": (BMC_NEW, BMC_NEW, "ok"), "bios": (BIOS_NEW, BIOS_NEW, "ok")} for n in NODES}
