"""gpusim's BMC: the host's own BMC (HostBMC_0) and BIOS (HostBIOS_0) in the firmware inventory, their versions
where Managers/BMC_0 and Systems/System_0 show them, and an update of each through MultipartHttpPushUri that
the reset it needs activates (Manager.Reset of BMC_0; a host reboot for the BIOS)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from gpusim import artifacts, spec, state
from gpusim.bmc import cert, server
from test_bmc import INV, PASSWORD, USER, Client, _wait_task
from test_tools_support import node_factory


def _serve(tmp_path, node):
    certfile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.make_self_signed(certfile, keyfile, ["127.0.0.1"], ["gpu-a01-bmc"], "test")
    srv = server.Server([server.Endpoint("gpu-a01", node.dir, "127.0.0.1", 0)], USER, PASSWORD, certfile, keyfile,
                        log=lambda _line: None, workers=4)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    return srv, thread


@pytest.fixture(params=[True, False], ids=["hgx", "pcie"])
def host(request, tmp_path):
    """(node, client) for a node whose host BMC runs 24.01.1 and BIOS 2.1.0 (HGX and a PCIe server)."""
    extra = {} if request.param else {"gpu_model": "NVIDIA L40S", "gpu_count": 4, "nvswitch": False}
    node = node_factory(tmp_path)(timing={"flash": 0.2, "bmc_reset": 0.5}, bmc_firmware="24.01.1", bios="2.1.0", **extra)
    srv, thread = _serve(tmp_path, node)
    yield node, Client(*srv.bound["gpu-a01"])
    srv.stop()
    thread.join(5)


def _push(client, image, targets):
    boundary = "gpusimHostBoundary"
    params = json.dumps({"Targets": targets}).encode()
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"UpdateParameters\"\r\n"
            "Content-Type: application/json\r\n\r\n").encode() + params
    body += (f"\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"UpdateFile\"; filename=\"{image}\"\r\n"
             "Content-Type: application/octet-stream\r\n\r\n").encode() + image.read_bytes()
    body += f"\r\n--{boundary}--\r\n".encode()
    status, headers, doc = client.request("POST", "/redfish/v1/UpdateService/update-multipart", body,
                                          headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert status == 202, doc
    assert headers["location"] == f"/redfish/v1/TaskService/Tasks/{doc['Id']}/Monitor"
    return _wait_task(client, doc["Id"])


def _member(client, cid):
    return client.get(f"{INV}/{cid}")


def test_inventory_lists_host_bmc_and_bios_as_the_manager_and_system_report_them(host):
    _node, client = host
    ids = [m["@odata.id"].rsplit("/", 1)[-1] for m in client.get(INV)["Members"]]
    assert "HostBMC_0" in ids and "HostBIOS_0" in ids
    bmc, bios = _member(client, "HostBMC_0"), _member(client, "HostBIOS_0")
    assert (bmc["Version"], bmc["Updateable"], bmc["SoftwareId"]) == ("24.01.1", True, "HostBMC")
    assert (bios["Version"], bios["Updateable"], bios["SoftwareId"]) == ("2.1.0", True, "HostBIOS")
    assert bmc["@odata.type"].startswith("#SoftwareInventory.") and bmc["Status"]["Health"] == "OK"
    assert bmc["RelatedItem"] == [{"@odata.id": "/redfish/v1/Managers/BMC_0"}]
    assert bios["RelatedItem"] == [{"@odata.id": "/redfish/v1/Systems/System_0"}]
    assert client.get("/redfish/v1/Managers/BMC_0")["FirmwareVersion"] == "24.01.1"
    assert client.get("/redfish/v1/Systems/System_0")["BiosVersion"] == "2.1.0"


def test_host_bmc_update_is_staged_then_activated_by_a_reset_of_bmc_0(host, tmp_path):
    node, client = host
    image = artifacts.write_host_image(tmp_path / "art", "bmc", "24.05.2")
    task = _push(client, image, [f"{INV}/HostBMC_0"])
    assert task["TaskState"] == "Completed", task
    resets = [m["MessageArgs"] for m in task["Messages"] if m["MessageId"] == "Base.1.16.0.ResetRequired"]
    assert resets == [["/redfish/v1/Managers/BMC_0/Actions/Manager.Reset", "GracefulRestart"]]
    bmc = _member(client, "HostBMC_0")
    assert bmc["Version"] == "24.01.1" and bmc["Oem"]["Nvidia"]["InactiveFirmwareSlot"] == {
        "Version": "24.05.2", "FirmwareState": "Staged"}
    assert _member(client, "HostBIOS_0")["Version"] == "2.1.0"  # the BIOS is not touched
    status, _h, _d = client.request("POST", "/redfish/v1/Managers/BMC_0/Actions/Manager.Reset",
                                    {"ResetType": "GracefulRestart"})
    assert status == 204
    time.sleep(0.7)  # the BMC does not answer while it resets
    assert client.get("/redfish/v1/Managers/BMC_0")["FirmwareVersion"] == "24.05.2"
    assert _member(client, "HostBMC_0")["Version"] == "24.05.2"
    assert node.state["gpu_firmware"]["components"]["HostBMC_0"]["staged"] is None


def test_bios_update_waits_for_a_host_reboot_and_a_bmc_reset_does_not_activate_it(host, tmp_path):
    node, client = host
    image = artifacts.write_host_image(tmp_path / "art", "bios", "2.3.1")
    task = _push(client, image, [f"{INV}/HostBIOS_0"])
    resets = [m["MessageArgs"] for m in task["Messages"] if m["MessageId"] == "Base.1.16.0.ResetRequired"]
    assert resets == [["/redfish/v1/Systems/System_0/Actions/ComputerSystem.Reset", "ForceRestart"]]
    assert client.request("POST", "/redfish/v1/Managers/BMC_0/Actions/Manager.Reset",
                          {"ResetType": "GracefulRestart"})[0] == 204
    time.sleep(0.7)
    assert client.get("/redfish/v1/Systems/System_0")["BiosVersion"] == "2.1.0"
    assert state.boot(node.dir) is True  # the host reboots
    assert client.get("/redfish/v1/Systems/System_0")["BiosVersion"] == "2.3.1"
    assert _member(client, "HostBIOS_0")["Version"] == "2.3.1"


def test_a_host_image_at_the_running_version_is_skipped(host, tmp_path):
    _node, client = host
    image = artifacts.write_host_image(tmp_path / "art", "bmc", "24.01.1")
    task = _push(client, image, [f"{INV}/HostBMC_0"])
    assert any(m["MessageId"] == "NvidiaUpdate.1.0.ComponentUpdateSkipped" for m in task["Messages"])
    assert _member(client, "HostBMC_0")["Oem"]["Nvidia"]["InactiveFirmwareSlot"]["FirmwareState"] == "Active"


def test_a_bios_image_aimed_at_the_bmc_changes_nothing(host, tmp_path):
    node, client = host
    image = artifacts.write_host_image(tmp_path / "art", "bios", "2.3.1")
    status, _h, doc = client.request("POST", "/redfish/v1/UpdateService/update-multipart", b"", headers={})
    assert status == 400  # not multipart at all
    before = node.state["gpu_firmware"]["components"]
    boundary = "b0"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"UpdateParameters\"\r\n\r\n"
            f"{json.dumps({'Targets': [f'{INV}/HostBMC_0']})}\r\n--{boundary}\r\nContent-Disposition: form-data; "
            f"name=\"UpdateFile\"; filename=\"x\"\r\n\r\n").encode() + image.read_bytes() + f"\r\n--{boundary}--\r\n".encode()
    status, _h, doc = client.request("POST", "/redfish/v1/UpdateService/update-multipart", body,
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert status == 400 and "holds no firmware for this system" in doc["error"]["message"], doc
    assert node.state["gpu_firmware"]["components"] == before


def test_spec_sets_host_bmc_and_bios_per_node_and_rejects_a_bad_version():
    base = {"fleet": {"name": "t", "loopback": 90, "slurm_port": 17750},
            "skus": {"h": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "nvswitch": True}}}
    doc = dict(base, nodes=[{"names": ["n1"], "sku": "h", "bmc_firmware": "23.09.4"},
                            {"names": ["n2"], "sku": "h", "bios": "1.9.0"}])
    fleet = spec.parse(doc)
    n1, n2 = (p.spec for p in fleet.nodes)
    assert (n1.get("bmc_firmware"), n1.get("bios"), n2.get("bmc_firmware"), n2.get("bios")) == ("23.09.4", None, None, "1.9.0")
    s1 = state.new_node_state(n1)["gpu_firmware"]["components"]
    assert (s1["HostBMC_0"]["version"], s1["HostBIOS_0"]["version"]) == ("23.09.4", "2.1.0")
    for bad in ("24.01\n", "", 7, "a b"):
        with pytest.raises(spec.SpecError, match=r"nodes\[0\]\.bmc_firmware|bmc_firmware"):
            spec.parse(dict(base, nodes=[{"names": ["n1"], "sku": "h", "bmc_firmware": bad}]))


def test_write_host_image_refuses_an_unknown_component(tmp_path):
    with pytest.raises(ValueError, match="'bmc' or 'bios'"):
        artifacts.write_host_image(tmp_path, "nic", "1.0")
