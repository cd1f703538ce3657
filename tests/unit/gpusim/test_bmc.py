"""gpusim's BMC in-process: the Redfish service of a simulated node over real HTTPS on 127.0.0.1.

Every test reads what a client sees (status, headers, JSON) and what the node's other tools see
(nvidia-smi -q -x on the same state), so that the BMC is held to agree with them.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
import time
import xml.etree.ElementTree as ET

import pytest
from gpusim import artifacts, state
from gpusim.bmc import cert, redfish, server
from test_tools_support import node_factory

USER, PASSWORD = "admin", "s3cret-Pw"
INV = "/redfish/v1/UpdateService/FirmwareInventory"


class Client:
    def __init__(self, address: str, port: int):
        self.address, self.port = address, port
        self.ctx = ssl._create_unverified_context()  # noqa: S323 - the fleet's self-signed certificate

    def request(self, method: str, path: str, body=None, *, auth=(USER, PASSWORD), headers=None, timeout=5.0):
        conn = http.client.HTTPSConnection(self.address, self.port, context=self.ctx, timeout=timeout)
        hdrs = dict(headers or {})
        if auth:
            hdrs["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        try:
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(data) if data else None
        finally:
            conn.close()

    def get(self, path: str, **kw):
        status, _h, doc = self.request("GET", path, **kw)
        assert status == 200, (path, status, doc)
        return doc


@pytest.fixture
def bmc(tmp_path):
    """(node, client, log lines, server) for a fresh HGX H100 node whose BMC serves on 127.0.0.1."""
    node = node_factory(tmp_path)(timing={"flash": 0.4, "bmc_reset": 1.0})
    certfile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.make_self_signed(certfile, keyfile, ["127.0.0.1"], ["gpu-a01-bmc"], "test")
    lines: list[str] = []
    srv = server.Server([server.Endpoint("gpu-a01", node.dir, "127.0.0.1", 0)], USER, PASSWORD, certfile, keyfile,
                        log=lines.append, workers=4)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield node, Client(*srv.bound["gpu-a01"]), lines, srv
    srv.stop()
    thread.join(5)


def _wait_task(client, tid, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = client.get(f"/redfish/v1/TaskService/Tasks/{tid}")
        if task["TaskState"] not in ("New", "Starting", "Running"):
            return task
        time.sleep(0.1)
    pytest.fail(f"task {tid} still running: {task}")


def _push(client, path, **components):
    status, headers, doc = client.request("POST", "/redfish/v1/UpdateService", path.read_bytes(),
                                          headers={"Content-Type": "application/octet-stream"})
    assert status == 202, doc
    assert headers["location"] == f"/redfish/v1/TaskService/Tasks/{doc['Id']}/Monitor"
    assert doc["@odata.type"].startswith("#Task.") and doc["TaskState"] in ("Running", "Completed") and "Messages" in doc
    return _wait_task(client, doc["Id"])


def _versions(client):
    members = client.get(INV)["Members"]
    items = [client.get(m["@odata.id"]) for m in members]
    return {i["Id"]: (i["Version"], i["Oem"]["Nvidia"]["InactiveFirmwareSlot"]["FirmwareState"]) for i in items}


def _smi_vbios(node):
    root = ET.fromstring(node.run("nvidia-smi", "-q", "-x").stdout)  # noqa: S314 - the simulator's own output
    return [g.findtext("vbios_version") for g in root.findall("gpu")]


def test_service_root_is_public_everything_else_needs_credentials(bmc):
    _node, client, lines, _srv = bmc
    root = client.get("/redfish/v1/", auth=None)
    assert root["Links"]["Sessions"]["@odata.id"] == "/redfish/v1/SessionService/Sessions"
    for key in ("Systems", "Chassis", "Managers", "UpdateService", "TaskService", "SessionService"):
        assert root[key]["@odata.id"] == f"/redfish/v1/{key}"
    for auth in (None, (USER, "wrong"), ("root", PASSWORD)):
        status, headers, doc = client.request("GET", "/redfish/v1/Systems/System_0", auth=auth)
        assert status == 401 and headers["www-authenticate"] == 'Basic realm="Redfish"'
        assert doc["error"]["code"] == "Base.1.16.0.ResourceAtUriUnauthorized"
    assert client.get("/redfish/v1/Systems/System_0")["PowerState"] == "Off"  # no supervisor booted it
    assert not any(PASSWORD in line for line in lines)


def test_sessions(bmc):
    _node, client, _lines, _srv = bmc
    status, _h, _d = client.request("POST", "/redfish/v1/SessionService/Sessions",
                                    {"UserName": USER, "Password": "nope"}, auth=None)
    assert status == 401
    status, headers, doc = client.request("POST", "/redfish/v1/SessionService/Sessions",
                                          {"UserName": USER, "Password": PASSWORD}, auth=None)
    assert status == 201 and headers["location"] == doc["@odata.id"] and doc["UserName"] == USER
    token = {"X-Auth-Token": headers["x-auth-token"]}
    assert client.get("/redfish/v1/Chassis", auth=None, headers=token)["Members@odata.count"] == 10
    assert client.get("/redfish/v1/SessionService/Sessions", auth=None, headers=token)["Members@odata.count"] == 1
    assert client.request("DELETE", headers["location"], auth=None, headers=token)[0] == 204
    assert client.request("GET", "/redfish/v1/Chassis", auth=None, headers=token)[0] == 401


def test_inventory_agrees_with_nvidia_smi(bmc):
    node, client, _lines, _srv = bmc
    state.update(node.dir, lambda s: s["gpus"][3].update(vbios="96.00.74.00.1C"))
    versions = _versions(client)
    smi = _smi_vbios(node)
    assert smi[3] == "96.00.74.00.1C"
    assert [versions[f"HGX_FW_GPU_SXM_{i + 1}"][0] for i in range(8)] == smi
    assert versions["HGX_FW_BMC_0"] == ("HGX-22.10-1", "Active")
    assert {k for k in versions if "NVSwitch" in k} == {f"HGX_FW_NVSwitch_{i}" for i in range(4)}
    item = client.get(f"{INV}/HGX_FW_GPU_SXM_4")
    chassis = client.get(item["RelatedItem"][0]["@odata.id"])
    root = ET.fromstring(node.run("nvidia-smi", "-q", "-x").stdout)  # noqa: S314 - the simulator's own output
    assert chassis["SerialNumber"] == root.findall("gpu")[3].findtext("serial")
    assert chassis["SKU"] == "0x233016c1"


def test_update_stages_and_each_reset_activates_its_components(bmc, tmp_path):
    node, client, _lines, _srv = bmc
    pkg = artifacts.write_fwpkg(tmp_path / "art", "HGX-24.04-2", components={
        "HMC": "HGX-24.04-2", "GPU_SXM": "96.00.AF.00.01", "NVSwitch": "96.10.70.00.01", "PCIeSwitch": "1.8.0A"})
    task = _push(client, pkg)
    assert task["TaskState"] == "Completed" and task["TaskStatus"] == "OK" and task["PercentComplete"] == 100
    assert "EndTime" in task and task["StartTime"] <= task["EndTime"]
    ids = [m["MessageId"] for m in task["Messages"]]
    assert ids[0] == "TaskEvent.1.0.TaskStarted" and ids[-1] == "TaskEvent.1.0.TaskCompletedOK"
    assert ids.count("Update.1.0.UpdateSuccessful") == 1 + 8 + 4 + 1
    resets = [m["MessageArgs"] for m in task["Messages"] if m["MessageId"] == "Base.1.16.0.ResetRequired"]
    assert resets == [["/redfish/v1/Chassis/HGX_Chassis_0/Actions/Chassis.Reset", "PowerCycle"]]
    # staged, not running: Redfish and nvidia-smi still say the old versions
    versions = _versions(client)
    assert versions["HGX_FW_GPU_SXM_1"] == ("96.00.A5.00.01", "Staged")
    assert _smi_vbios(node) == ["96.00.A5.00.01"] * 8
    # a GPU reset activates that GPU's VBIOS only
    assert node.run("nvidia-smi", "-r", "-i", "2").returncode == 0
    assert _smi_vbios(node)[2] == "96.00.AF.00.01" and _smi_vbios(node)[1] == "96.00.A5.00.01"
    assert _versions(client)["HGX_FW_GPU_SXM_3"] == ("96.00.AF.00.01", "Active")
    # a host reboot: every GPU and the PCIe switch; the NVSwitches and the HMC wait for their resets
    assert state.boot(node.dir) is True
    versions = _versions(client)
    assert _smi_vbios(node) == ["96.00.AF.00.01"] * 8
    assert versions["HGX_FW_PCIeSwitch_0"] == ("1.8.0A", "Active")
    assert versions["HGX_FW_NVSwitch_0"] == ("96.10.6D.00.01", "Staged")
    assert versions["HGX_FW_BMC_0"] == ("HGX-22.10-1", "Staged")
    # an AC power cycle: everything
    assert state.boot(node.dir, power_cycle=True) is True
    versions = _versions(client)
    assert all(state == "Active" for _v, state in versions.values())
    assert versions["HGX_FW_NVSwitch_3"][0] == "96.10.70.00.01" and versions["HGX_FW_BMC_0"][0] == "HGX-24.04-2"
    assert node.state["gpu_firmware"]["version"] == "HGX-24.04-2"


def test_same_or_older_needs_force_update(bmc, tmp_path):
    node, client, _lines, _srv = bmc
    old = artifacts.write_fwpkg(tmp_path / "art", "HGX-22.09-1", components={"HMC": "HGX-22.09-1", "GPU_SXM": "96.00.A5.00.01"})
    task = _push(client, old)
    assert task["TaskState"] == "Completed"
    skipped = [m for m in task["Messages"] if m["MessageId"] == "NvidiaUpdate.1.0.ComponentUpdateSkipped"]
    assert len(skipped) == 9 and "HGX-22.10-1 is newer" in skipped[0]["Message"]
    assert all(s == "Active" for _v, s in _versions(client).values())
    assert client.get("/redfish/v1/UpdateService")["HttpPushUriOptions"] == {"ForceUpdate": False}
    status, _h, _d = client.request("PATCH", "/redfish/v1/UpdateService", {"HttpPushUriOptions": {"ForceUpdate": True}},
                                    headers={"If-Match": "*"})
    assert status == 204
    assert client.get("/redfish/v1/UpdateService")["HttpPushUriOptions"] == {"ForceUpdate": True}
    _push(client, old)
    assert _versions(client)["HGX_FW_BMC_0"] == ("HGX-22.10-1", "Staged")
    assert node.state["gpus"][0]["staged_vbios"] == "96.00.A5.00.01"
    status, _h, doc = client.request("PATCH", "/redfish/v1/UpdateService", {"HttpPushUriOptions": {"ForceUpdate": "yes"}})
    assert status == 400 and doc["error"]["code"] == "Base.1.16.0.PropertyValueTypeError"


def test_flash_fail_ends_in_exception_with_some_components_done(bmc, tmp_path):
    node, client, _lines, _srv = bmc
    node.fault("flash_fail", percent=50)
    pkg = artifacts.write_fwpkg(tmp_path / "art", "HGX-24.04-2", components={"HMC": "HGX-24.04-2", "GPU_SXM": "96.00.AF.00.01"})
    task = _push(client, pkg)
    assert (task["TaskState"], task["TaskStatus"]) == ("Exception", "Critical")
    failed = [m for m in task["Messages"] if m["MessageId"] == "Update.1.0.ApplyFailed"]
    assert len(failed) == 1 and failed[0]["MessageArgs"][1] == "HGX_FW_GPU_SXM_4"
    staged = {k for k, (_v, s) in _versions(client).items() if s == "Staged"}
    assert staged == {"HGX_FW_BMC_0", "HGX_FW_GPU_SXM_1", "HGX_FW_GPU_SXM_2", "HGX_FW_GPU_SXM_3"}


def test_targets_limit_an_update(bmc, tmp_path):
    _node, client, _lines, _srv = bmc
    pkg = artifacts.write_fwpkg(tmp_path / "art", "HGX-24.04-2", components={"HMC": "HGX-24.04-2", "GPU_SXM": "96.00.AF.00.01"})
    status, _h, doc = client.request("PATCH", "/redfish/v1/UpdateService", {"HttpPushUriTargets": [f"{INV}/NOPE"]})
    assert status == 400 and "NOPE" in doc["error"]["message"]
    assert client.request("PATCH", "/redfish/v1/UpdateService", {"HttpPushUriTargets": [f"{INV}/HGX_FW_GPU_SXM_2"]})[0] == 204
    _push(client, pkg)
    assert {k for k, (_v, s) in _versions(client).items() if s == "Staged"} == {"HGX_FW_GPU_SXM_2"}


def test_multipart_update(bmc, tmp_path):
    node, client, _lines, _srv = bmc
    pkg = artifacts.write_fwpkg(tmp_path / "art", "HGX-24.04-2", components={"GPU_SXM": "96.00.AF.00.01"})
    boundary = "gpusimBoundary0123"
    params = json.dumps({"Targets": [f"{INV}/HGX_FW_GPU_SXM_1"]}).encode()
    head1 = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"UpdateParameters\"\r\n"
             "Content-Type: application/json\r\n\r\n")
    head2 = (f"\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"UpdateFile\"; filename=\"{pkg.name}\"\r\n"
             "Content-Type: application/octet-stream\r\n\r\n")
    body = head1.encode() + params + head2.encode() + pkg.read_bytes() + f"\r\n--{boundary}--\r\n".encode()
    assert client.get("/redfish/v1/UpdateService")["MultipartHttpPushUri"] == "/redfish/v1/UpdateService/update-multipart"
    multipart = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    status, _headers, doc = client.request("POST", "/redfish/v1/UpdateService/update-multipart", body, headers=multipart)
    assert status == 202, doc
    task = _wait_task(client, doc["Id"])
    assert any(m["MessageArgs"] == ["HGX_FW_GPU_SXM_1", pkg.name] for m in task["Messages"])
    assert node.state["gpus"][0]["staged_vbios"] == "96.00.AF.00.01" and node.state["gpus"][1]["staged_vbios"] is None
    # NVIDIA's UpdateParameters: the baseboard as the target, ForceUpdate for this update only
    old = artifacts.write_fwpkg(tmp_path / "old", "HGX-22.09-1", components={"GPU_SXM": "96.00.99.00.01"})
    params = json.dumps({"Targets": ["/redfish/v1/Chassis/HGX_Chassis_0"], "ForceUpdate": True}).encode()
    head2 = head2.replace(pkg.name, old.name)
    body = head1.encode() + params + head2.encode() + old.read_bytes() + f"\r\n--{boundary}--\r\n".encode()
    status, _headers, doc = client.request("POST", "/redfish/v1/UpdateService/update-multipart", body, headers=multipart)
    assert status == 202, doc
    _wait_task(client, doc["Id"])
    assert {g["staged_vbios"] for g in node.state["gpus"]} == {"96.00.99.00.01"}
    assert client.get("/redfish/v1/UpdateService")["HttpPushUriOptions"] == {"ForceUpdate": False}


def test_bad_requests_are_refused_with_the_reason(bmc, tmp_path):
    _node, client, _lines, _srv = bmc
    status, _h, doc = client.request("POST", "/redfish/v1/UpdateService", b"not a package\n")
    assert status == 400 and "not a valid PLDM firmware package" in doc["error"]["message"]
    h200 = artifacts.write_fwpkg(tmp_path / "art", "HGX-H200-1", components={"GPU_SXM": "96.00.B0.00.01"},
                                 gpu_models=("NVIDIA H200",))
    status, _h, doc = client.request("POST", "/redfish/v1/UpdateService", h200.read_bytes())
    assert status == 400 and "holds no firmware for this system" in doc["error"]["message"]
    status, headers, doc = client.request("DELETE", "/redfish/v1/UpdateService")
    assert status == 405 and headers["allow"] == "GET, PATCH, POST"
    assert client.request("GET", "/redfish/v1/Nope")[0] == 404
    status, _h, doc = client.request("POST", "/redfish/v1/Systems/System_0/Actions/ComputerSystem.Reset", b"{no json")
    assert status == 400 and doc["error"]["code"] == "Base.1.16.0.MalformedJSON"
    status, _h, doc = client.request("POST", "/redfish/v1/Systems/System_0/Actions/ComputerSystem.Reset",
                                     {"ResetType": "Nmi"})
    assert status == 400 and doc["error"]["code"] == "Base.1.16.0.ActionParameterValueNotInList"
    # a body over the limit is refused from its Content-Length, before it is read
    with socket.create_connection(("127.0.0.1", client.port), timeout=5) as raw, \
            client.ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"POST /redfish/v1/UpdateService HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                    % (redfish.IMAGE_LIMIT + 1))
        assert tls.recv(64).startswith(b"HTTP/1.1 413")


def test_system_reset_asks_the_supervisor(bmc):
    node, client, _lines, _srv = bmc
    uri = "/redfish/v1/Systems/System_0/Actions/ComputerSystem.Reset"
    assert client.request("POST", uri, {"ResetType": "On"})[0] == 204  # the node is off: power it on
    assert json.loads((node.dir / "reboot.request").read_text())["action"] == "on"
    (node.dir / "power").write_text("up\n")
    assert client.get("/redfish/v1/Systems/System_0")["PowerState"] == "On"
    assert client.request("POST", uri, {"ResetType": "ForceRestart"})[0] == 204
    assert json.loads((node.dir / "reboot.request").read_text())["action"] == "reboot"
    assert client.request("POST", "/redfish/v1/Chassis/HGX_Chassis_0/Actions/Chassis.Reset",
                          {"ResetType": "PowerCycle"})[0] == 204
    assert json.loads((node.dir / "reboot.request").read_text())["action"] == "powercycle"
    assert client.request("POST", uri, {"ResetType": "ForceOff"})[0] == 204
    assert json.loads((node.dir / "reboot.request").read_text())["action"] == "poweroff"


def _unanswered(client) -> bool:
    try:
        client.request("GET", "/redfish/v1/", auth=None, timeout=0.8)
    except (TimeoutError, socket.timeout, ConnectionError, ssl.SSLError):
        return True
    return False


def test_manager_reset_activates_the_hmc_and_the_bmc_goes_quiet(bmc, tmp_path):
    node, client, _lines, _srv = bmc
    _push(client, artifacts.write_fwpkg(tmp_path / "art", "HGX-24.04-2"))
    assert client.request("POST", "/redfish/v1/Managers/HGX_BMC_0/Actions/Manager.Reset",
                          {"ResetType": "ForceRestart"})[0] == 204
    assert node.state["gpu_firmware"]["version"] == "HGX-24.04-2"
    assert _unanswered(client)
    time.sleep(1.0)
    assert client.get("/redfish/v1/Managers/HGX_BMC_0")["FirmwareVersion"] == "HGX-24.04-2"


def test_unresponsive_fault(bmc):
    node, client, _lines, _srv = bmc
    node.fault("bmc_unresponsive")
    assert _unanswered(client)
    state.update(node.dir, lambda s: state.clear_faults(s, "bmc_unresponsive"))
    assert client.get("/redfish/v1/", auth=None)["Vendor"] == "NVIDIA"


def test_a_running_task_writes_the_state_only_when_something_happens(bmc, tmp_path):
    node, client, _lines, _srv = bmc
    state.update(node.dir, lambda s: s["timing"].update(flash=30.0))
    pkg = artifacts.write_fwpkg(tmp_path / "art", "HGX-24.04-2", components={"HMC": "HGX-24.04-2"})
    status, _h, doc = client.request("POST", "/redfish/v1/UpdateService", pkg.read_bytes())
    assert status == 202 and doc["TaskState"] == "Running"
    time.sleep(0.3)
    before = (node.dir / "state.json").stat().st_mtime_ns
    time.sleep(1.0)  # ten ticks of the task ticker, no component done yet
    assert (node.dir / "state.json").stat().st_mtime_ns == before
    assert 0 <= client.get(f"/redfish/v1/TaskService/Tasks/{doc['Id']}")["PercentComplete"] < 10


def test_a_pcie_node_lists_its_gpus_and_takes_no_hgx_package(tmp_path):
    node = node_factory(tmp_path)(gpu_model="NVIDIA L40S", gpu_count=4, nvswitch=False, fabricmanager=None)
    certfile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.make_self_signed(certfile, keyfile, ["127.0.0.1"], [], "test")
    srv = server.Server([server.Endpoint("l40s", node.dir, "127.0.0.1", 0)], USER, PASSWORD, certfile, keyfile, workers=2)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        client = Client(*srv.bound["l40s"])
        items = [client.get(m["@odata.id"]) for m in client.get(INV)["Members"]]
        # the host's BMC and BIOS are updatable through the BMC; a PCIe server's GPUs are not
        expected = [("HostBIOS_0", "2.1.0", True), ("HostBMC_0", "24.01.1", True)]  # state.json keeps keys sorted
        expected += [(f"GPU_{n}", "95.02.66.00.02", False) for n in range(4)]
        assert [(i["Id"], i["Version"], i["Updateable"]) for i in items] == expected
        assert [m["@odata.id"].rsplit("/", 1)[1] for m in client.get("/redfish/v1/Managers")["Members"]] == ["BMC_0"]
        assert client.request("POST", "/redfish/v1/Chassis/HGX_Chassis_0/Actions/Chassis.Reset",
                              {"ResetType": "PowerCycle"})[0] == 404
        pkg = artifacts.write_fwpkg(tmp_path / "art", "HGX-24.04-2", components={"HMC": "HGX-24.04-2"})
        status, _h, doc = client.request("POST", "/redfish/v1/UpdateService", pkg.read_bytes())
        assert status == 400 and "this system's: HostBIOS, HostBMC" in doc["error"]["message"]
    finally:
        srv.stop()
        thread.join(5)
