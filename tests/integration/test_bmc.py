"""Every simulated node's BMC, end to end: NVIDIA's real nvfwupd and community.general's redfish modules
against the Redfish service of a 2-node fleet (tests/gpusim/specs/bmc-2.yml: nodes on 127.0.60.x, BMCs on
127.0.160.x:443), and nvidia-smi over SSH on the same nodes.

Checks that show_version agrees with nvidia-smi, that update_fw stages firmware that nvidia-smi shows
only after the activation reset, that a downgrade needs force_update, that a wrong password is the tool's
error, that redfish_info reads the same inventory, that a hung BMC does not answer, and that `gpusim down`
leaves no BMC listening. Needs root, the simulator's packages and ../shared/tools/open-nvfwupd (the
nvfwupd tests skip with a reason without it). Run:
    .venv/bin/python -m pytest tests/integration/test_bmc.py -m integration -q
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

import pytest
from fleet import TESTS, fleet_up, gpusim, needs_fleet
from fleet import Fleet as BaseFleet
from gpusim import artifacts, opennvfwupd, slurm

SPEC = TESTS / "gpusim" / "specs" / "bmc-2.yml"
NODES = ("bmc-01", "bmc-02")
NEW_VBIOS, OLD_VBIOS = "96.00.AF.00.01", "96.00.A5.00.01"
WRONG = "not-the-password"

pytestmark = needs_fleet()


class Fleet(BaseFleet):
    def __init__(self, workdir):
        super().__init__(workdir)
        creds = json.loads((workdir / "bmc" / "credentials.json").read_text())
        self.user, self.password = creds["user"], creds["password"]
        self.bmc = {r["name"]: r["bmc_address"] for r in self.record["nodes"]}
        self.ctx = ssl._create_unverified_context()  # noqa: S323 - the fleet's self-signed certificate

    def nvfwupd(self, name: str, *args: str, password: str | None = None, timeout: float = 180):
        return opennvfwupd.run("-t", f"ip={self.bmc[name]}", f"user={self.user}", f"password={password or self.password}",
                               "servertype=HGX", *args, timeout=timeout)

    def redfish(self, name: str, method: str, path: str, body: dict | None = None, timeout: float = 10):
        req = urllib.request.Request(f"https://{self.bmc[name]}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None)
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode())
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as resp:  # noqa: S310 - https only
                data = resp.read()
                return resp.status, json.loads(data) if data else None
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def wait_task(self, name: str, tid: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            status, task = self.redfish(name, "GET", f"/redfish/v1/TaskService/Tasks/{tid}")
            assert status == 200, task
            if task["TaskState"] != "Running":
                return task
            assert time.monotonic() < deadline, task
            time.sleep(0.3)

    def vbios(self, name: str) -> list[str]:
        root = ET.fromstring(self.ssh_ok(name, "nvidia-smi -q -x"))  # noqa: S314 - the simulator's output
        return [g.findtext("vbios_version") for g in root.findall("gpu")]

    def boot_id(self, name: str) -> str:
        return self.ssh_ok(name, "cat /proc/sys/kernel/random/boot_id").strip()

    def wait_rebooted(self, name: str, old_boot_id: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self.ssh(name, "cat /proc/sys/kernel/random/boot_id", timeout=10)
            if proc.returncode == 0 and proc.stdout.strip() not in ("", old_boot_id):
                return
            time.sleep(0.5)
        pytest.fail(f"{name} did not come back with a new boot_id")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with fleet_up(SPEC, tmp_path_factory.mktemp("gpusim-bmc") / "fleet") as workdir:
        yield Fleet(workdir)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    art = tmp_path_factory.mktemp("fwpkg")
    new = artifacts.write_fwpkg(art, "HGX-24.04-2", components={"HMC": "HGX-24.04-2", "GPU_SXM": NEW_VBIOS})
    old = artifacts.write_fwpkg(art, "HGX-22.09-1", components={"GPU_SXM": "96.00.99.00.01"})
    return new, old


def _gpu_rows(doc: dict) -> dict[str, dict]:
    return {r["AP Name"]: r for r in doc["Firmware Devices"] if r["AP Name"].startswith("HGX_FW_GPU_SXM_")}


def test_every_node_has_a_bmc_on_its_management_address(fleet):
    hosts = fleet.record["nodes"]
    assert [(h["address"], h["bmc_address"]) for h in hosts] == [("127.0.60.1", "127.0.160.1"), ("127.0.60.2", "127.0.160.2")]
    inventory = (fleet.workdir / "inventory" / "hosts.yml").read_text()
    assert "bmc_address: 127.0.160.1" in inventory and f"bmc_password: {fleet.password}" in inventory
    for secret in (fleet.workdir / "bmc" / "credentials.json", fleet.workdir / "inventory" / "hosts.yml"):
        assert oct(secret.stat().st_mode & 0o777) == "0o600", secret
    for name in NODES:
        status, root = fleet.redfish(name, "GET", "/redfish/v1/")
        assert status == 200 and root["Vendor"] == "NVIDIA"
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.60.1", 443), timeout=2):
        pass  # the BMC does not listen on the node's own address
    assert fleet.password not in (fleet.workdir / "bmc" / "bmc.log").read_text()


def test_show_version_agrees_with_nvidia_smi(fleet, real_nvfwupd, packages):
    new, _old = packages
    for name in NODES:
        done = fleet.nvfwupd(name, "show_version", "-p", str(new), "-j")
        assert done.returncode == 0, done.stdout + done.stderr
        doc = json.loads(done.stdout)
        assert doc["Error Code"] == 0 and doc["Packages"] == ["HGX-24.04-2"]
        rows = _gpu_rows(doc)
        assert [rows[f"HGX_FW_GPU_SXM_{i + 1}"]["Sys Version"] for i in range(8)] == fleet.vbios(name)
        assert {r["Pkg Version"] for r in rows.values()} == {NEW_VBIOS}
        assert {r["Up-To-Date"] for r in rows.values()} == {"No"}


def test_update_fw_shows_in_nvidia_smi_only_after_the_reset(fleet, real_nvfwupd, packages):
    new, _old = packages
    done = fleet.nvfwupd("bmc-01", "update_fw", "-p", str(new), "-y")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Firmware update successful!" in done.stdout and "Error Code: 0" in done.stdout
    assert fleet.vbios("bmc-01") == [OLD_VBIOS] * 8  # staged only
    boot_id = fleet.boot_id("bmc-01")
    result = fleet.module("community.general.redfish_command", "localhost", {
        "category": "Systems", "command": "PowerForceRestart", "baseuri": fleet.bmc["bmc-01"],
        "username": fleet.user, "password": fleet.password})["localhost"]
    assert result.get("changed") is True, result
    fleet.wait_rebooted("bmc-01", boot_id)
    assert fleet.vbios("bmc-01") == [NEW_VBIOS] * 8
    doc = json.loads(fleet.nvfwupd("bmc-01", "show_version", "-p", str(new), "-j").stdout)
    assert {r["Up-To-Date"] for r in _gpu_rows(doc).values()} == {"Yes"}
    hmc = next(r for r in doc["Firmware Devices"] if r["AP Name"] == "HGX_FW_BMC_0")
    assert hmc["Sys Version"] == "HGX-22.10-1"  # the HMC waits for its own reset (Manager.Reset)


def test_downgrade_needs_force_update_and_an_ac_power_cycle_activates_it(fleet, real_nvfwupd, packages):
    _new, old = packages
    assert fleet.nvfwupd("bmc-02", "update_fw", "-p", str(old), "-y", "-b").returncode == 0
    task = fleet.wait_task("bmc-02", "0")
    assert task["TaskState"] == "Completed"
    assert any(m["MessageId"] == "NvidiaUpdate.1.0.ComponentUpdateSkipped" for m in task["Messages"])
    enabled = fleet.nvfwupd("bmc-02", "force_update", "enable")
    assert "ForceUpdate flag was successfully set True" in enabled.stdout, enabled.stdout
    assert fleet.nvfwupd("bmc-02", "update_fw", "-p", str(old), "-y", "-b").returncode == 0
    assert fleet.wait_task("bmc-02", "1")["TaskState"] == "Completed"
    assert fleet.vbios("bmc-02") == [OLD_VBIOS] * 8
    boot_id = fleet.boot_id("bmc-02")
    status, _doc = fleet.redfish("bmc-02", "POST", "/redfish/v1/Chassis/HGX_Chassis_0/Actions/Chassis.Reset",
                                 {"ResetType": "PowerCycle"})
    assert status == 204
    fleet.wait_rebooted("bmc-02", boot_id)
    assert fleet.vbios("bmc-02") == ["96.00.99.00.01"] * 8


def test_wrong_password_is_the_tools_error(fleet, real_nvfwupd):
    done = fleet.nvfwupd("bmc-01", "show_version", password=WRONG)
    assert done.returncode == 1
    assert "Connection Status: Failed" in done.stdout and "Error Code: 1" in done.stdout
    assert WRONG not in done.stdout + done.stderr


def test_redfish_info_reads_the_same_inventory(fleet, real_nvfwupd, packages):
    new, _old = packages
    result = fleet.module("community.general.redfish_info", "localhost", {
        "category": "Update", "command": "GetFirmwareInventory", "baseuri": fleet.bmc["bmc-02"],
        "username": fleet.user, "password": fleet.password})["localhost"]
    entries = {e["Id"]: e["Version"] for e in result["redfish_facts"]["firmware"]["entries"]}
    doc = json.loads(fleet.nvfwupd("bmc-02", "show_version", "-p", str(new), "-j").stdout)
    assert entries == {r["AP Name"]: r["Sys Version"] for r in doc["Firmware Devices"]}
    assert [entries[f"HGX_FW_GPU_SXM_{i + 1}"] for i in range(8)] == fleet.vbios("bmc-02")


def test_bmc_inventory_reads_what_redfish_info_reads(fleet):
    """gpufleet.lifecycle.bmc_inventory, both BMCs in one call, returns entry for entry what community.general.redfish_info
    returns for each; it also names the BMC whose password is wrong without failing the call or showing the password."""
    wanted = {}
    for name in NODES:
        result = fleet.module("community.general.redfish_info", "localhost", {
            "category": "Update", "command": "GetFirmwareInventory", "baseuri": fleet.bmc[name],
            "username": fleet.user, "password": fleet.password})["localhost"]
        wanted[name] = result["redfish_facts"]["firmware"]["entries"]
    bmcs = [{"name": name, "address": fleet.bmc[name], "user": fleet.user, "password": fleet.password} for name in NODES]
    result = fleet.module("gpufleet.lifecycle.bmc_inventory", "localhost", {"bmcs": bmcs, "validate_certs": False})["localhost"]
    assert result["summary"]["errors"] == [] and result["summary"]["connections"] == 2
    for name in NODES:
        assert result["inventories"][name]["entries"] == wanted[name]
    bmcs[1]["password"] = WRONG
    result = fleet.module("gpufleet.lifecycle.bmc_inventory", "localhost", {"bmcs": bmcs, "validate_certs": False})["localhost"]
    assert result["inventories"]["bmc-01"]["entries"] == wanted["bmc-01"]
    assert "(HTTP 401): check bmc_user and bmc_password" in result["inventories"]["bmc-02"]["error"]
    assert WRONG not in json.dumps(result)


def test_a_hung_bmc_does_not_answer(fleet):
    assert gpusim("fault", "bmc-02", "bmc_unresponsive", workdir=fleet.workdir).returncode == 0
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        fleet.redfish("bmc-02", "GET", "/redfish/v1/", timeout=2)
    assert fleet.redfish("bmc-01", "GET", "/redfish/v1/")[0] == 200  # the other BMC answers
    assert gpusim("clear-faults", "bmc-02", "bmc_unresponsive", workdir=fleet.workdir).returncode == 0
    assert fleet.redfish("bmc-02", "GET", "/redfish/v1/")[0] == 200


def test_down_leaves_no_bmc(fleet):
    pid = int((fleet.workdir / "bmc" / "bmc.pid").read_text())
    assert gpusim("down", workdir=fleet.workdir).returncode == 0
    assert not (fleet.workdir.exists())
    assert not slurm._alive(pid)  # gone, or a zombie its parent has not reaped yet
    for address in fleet.bmc.values():
        with pytest.raises(ConnectionRefusedError), socket.create_connection((address, 443), timeout=2):
            pass
