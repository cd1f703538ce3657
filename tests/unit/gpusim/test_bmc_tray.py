"""The BMC of a simulated GB200 NVL72 compute tray (issue 23), held to NVIDIA's own sources: the GB300 compute flow
files of open-nvfwupd's FactoryMode (component ids, Chassis/BMC_0's Oem NvidiaChassis.AuxPowerReset with ResetType
AuxPowerCycle) and nvfwupd's GB200 target (staged updates: Oem.Nvidia.UpdateOption StageOnly / StageAndActivate,
accepted only where UpdateService lists them in MultipartHttpPushUriOptions.UpdateOptionSupport).

A staged image waits for the tray's AC power cycle: a host reboot or a GPU reset activates nothing; the power cycle
takes the BMC away for timing.aux_power_cycle seconds. The last test drives NVIDIA's real nvfwupd client (update_fw -u)
against it, skipping with a reason where ../shared/tools/open-nvfwupd is absent.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from gpusim import artifacts, firmware, opennvfwupd, state
from gpusim.bmc import cert, server
from test_bmc import PASSWORD, USER, Client, _wait_task
from test_tools_support import node_factory

INV = "/redfish/v1/UpdateService/FirmwareInventory"
AUX = "/redfish/v1/Chassis/BMC_0/Actions/Oem/NvidiaChassis.AuxPowerReset"
GB200 = {"name": "nvl-a1", "sku": "gb200", "gpu_model": "NVIDIA GB200", "gpu_count": 4, "nvswitch": False,
         "fabricmanager": None, "driver": "580.95.05"}
# The HMC components the GB300 compute flow checks (expected_versions), and the tray's four GPUs.
FLOW_IDS = {"HGX_FW_BMC_0", "HGX_FW_CPLD_0", "HGX_FW_FPGA_0", "HGX_FW_FPGA_1", "HGX_FW_ERoT_BMC_0", "HGX_FW_ERoT_CPU_0",
            "HGX_FW_ERoT_CPU_1", "HGX_FW_ERoT_FPGA_0", "HGX_FW_ERoT_FPGA_1", "HGX_FW_GPU_0", "HGX_FW_GPU_1"}


def _serve(tmp_path, node, lines=None):
    certfile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.make_self_signed(certfile, keyfile, ["127.0.0.1"], [], "test")
    srv = server.Server([server.Endpoint(node.dir.name, node.dir, "127.0.0.1", 0)], USER, PASSWORD, certfile, keyfile,
                        log=(lines if lines is not None else []).append, workers=4)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    return srv, thread


@pytest.fixture
def tray(tmp_path):
    """(node, client, log lines) of a GB200 compute tray whose BMC serves on 127.0.0.1; a power cycle keeps the BMC
    away for 0.6 s."""
    node = node_factory(tmp_path)(**GB200, timing={"flash": 0.2, "aux_power_cycle": 0.6})
    lines: list[str] = []
    srv, thread = _serve(tmp_path, node, lines)
    yield node, Client(*srv.bound[node.dir.name]), lines
    srv.stop()
    thread.join(5)


def _multipart(pkg, params):
    boundary = "gpusimtray"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"UpdateParameters\"\r\n"
            f"Content-Type: application/json\r\n\r\n{json.dumps(params)}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"UpdateFile\"; filename=\"{pkg.name}\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + pkg.read_bytes() + f"\r\n--{boundary}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def _stage(client, tmp_path, option=None, gpu="97.00.C5.00.01", hmc="HGX-25.06-1"):
    pkg = artifacts.write_fwpkg(tmp_path / "art", hmc, components={"HMC": hmc, "GPU_SXM": gpu},
                                gpu_models=("NVIDIA GB200",))
    params = {"Targets": []}
    if option:
        params["Oem"] = {"Nvidia": {"UpdateOption": option}}
    body, headers = _multipart(pkg, params)
    return client.request("POST", "/redfish/v1/UpdateService/update-multipart", body, headers=headers)


def _states(client):
    items = [client.get(m["@odata.id"]) for m in client.get(INV)["Members"]]
    return {i["Id"]: (i["Version"], i["Oem"]["Nvidia"]["InactiveFirmwareSlot"]["FirmwareState"]) for i in items}


def _wait_gone(client, timeout=5.0):
    """True once the BMC stops answering (the power cycle took it away)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            client.request("GET", "/redfish/v1/", auth=None, timeout=0.3)
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_the_tray_lists_the_flow_files_components_and_offers_staged_updates_and_the_aux_power_cycle(tray):
    _node, client, _lines = tray
    ids = set(_states(client))
    assert FLOW_IDS <= ids and {"HGX_FW_GPU_2", "HGX_FW_GPU_3", "HGX_FW_CPU_0", "HGX_FW_CPU_1"} <= ids, ids
    assert not any("SXM" in i for i in ids), ids
    options = client.get("/redfish/v1/UpdateService")["Oem"]["Nvidia"]["MultipartHttpPushUriOptions"]
    assert options["UpdateOptionSupport"] == ["StageAndActivate", "StageOnly"]
    bmc = client.get("/redfish/v1/Chassis/BMC_0")
    action = bmc["Actions"]["Oem"]["#NvidiaChassis.AuxPowerReset"]
    assert (action["target"], action["ResetType@Redfish.AllowableValues"]) == (AUX, ["AuxPowerCycle"])
    # nvfwupd picks its GB200 target from this chassis's Model ("gb200 nvl" in it).
    assert "gb200 nvl" in bmc["Model"].lower()
    # The tray's reset is the aux power cycle, not the HGX baseboard's Chassis.Reset.
    assert "Actions" not in client.get("/redfish/v1/Chassis/HGX_Chassis_0")
    status, _h, _doc = client.request("POST", "/redfish/v1/Chassis/HGX_Chassis_0/Actions/Chassis.Reset",
                                      {"ResetType": "PowerCycle"})
    assert status == 404


def test_a_staged_image_waits_for_the_power_cycle_while_the_tray_serves(tray, tmp_path):
    node, client, lines = tray
    before = node.state["gpus"][0]["vbios"]
    status, _h, doc = _stage(client, tmp_path, "StageOnly")
    assert status == 202, doc
    task = _wait_task(client, doc["Id"])
    assert task["TaskState"] == "Completed", task
    resets = [m["MessageArgs"] for m in task["Messages"] if m["MessageId"].endswith("ResetRequired")]
    assert resets == [[AUX, "AuxPowerCycle"]], task["Messages"]
    assert _states(client)["HGX_FW_GPU_0"] == (before, "Staged")
    assert not (node.dir / state.REBOOT_REQUEST).exists()  # staged only: nothing restarts the tray
    # Neither a host reboot nor a GPU reset activates a tray's staged firmware.
    assert state.boot(node.dir) is True
    state.update(node.dir, lambda s: firmware.activate(s, "gpu_reset"))
    assert node.state["gpus"][0]["vbios"] == before and node.state["gpus"][0]["staged_vbios"] == "97.00.C5.00.01"
    status, _h, _doc = client.request("POST", AUX, {"ResetType": "AuxPowerCycle"})
    assert status == 204
    request = json.loads((node.dir / state.REBOOT_REQUEST).read_text())
    assert request["action"] == "powercycle"
    assert _wait_gone(client), "the BMC kept answering through the tray's power cycle"
    assert any("AuxPowerCycle" in line for line in lines), lines
    assert state.boot(node.dir, power_cycle=True) is True  # what the fleet's supervisor does with the request
    time.sleep(0.7)
    after = _states(client)
    assert after["HGX_FW_GPU_0"] == ("97.00.C5.00.01", "Active") and after["HGX_FW_BMC_0"] == ("HGX-25.06-1", "Active")


def test_stage_and_activate_power_cycles_the_tray_itself(tray, tmp_path):
    node, client, _lines = tray
    status, _h, doc = _stage(client, tmp_path, "StageAndActivate")
    assert status == 202, doc
    deadline = time.monotonic() + 5
    while not (node.dir / state.REBOOT_REQUEST).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.loads((node.dir / state.REBOOT_REQUEST).read_text())["action"] == "powercycle"
    task = node.state["gpu_firmware"]["tasks"][doc["Id"]]
    assert task["state"] == "Completed"
    assert not [m for m in task["messages"] if m["MessageId"].endswith("ResetRequired")]  # the BMC does it


@pytest.mark.parametrize(("body", "status", "words"), [
    ({"ResetType": "PowerCycle"}, 400, "AuxPowerCycle"),
    ({}, 400, "ResetType"),
])
def test_the_aux_power_cycle_refuses_other_reset_types(tray, body, status, words):
    node, client, _lines = tray
    got, _h, doc = client.request("POST", AUX, body)
    assert got == status and words in doc["error"]["message"], doc
    assert not (node.dir / state.REBOOT_REQUEST).exists()


def test_an_unknown_update_option_is_refused_and_flashes_nothing(tray, tmp_path):
    node, client, _lines = tray
    status, _h, doc = _stage(client, tmp_path, "ActivateLater")
    assert status == 400 and "StageOnly" in doc["error"]["message"], doc
    assert node.state["gpu_firmware"]["tasks"] == {}


def test_an_hgx_node_has_no_aux_power_cycle_nor_staged_update_option(tmp_path):
    node = node_factory(tmp_path)(timing={"flash": 0.2})
    srv, thread = _serve(tmp_path, node)
    try:
        client = Client(*srv.bound[node.dir.name])
        assert "Oem" not in client.get("/redfish/v1/UpdateService")
        status, _h, _doc = client.request("POST", AUX, {"ResetType": "AuxPowerCycle"})
        assert status == 404
        pkg = artifacts.write_fwpkg(tmp_path / "art", "HGX-24.04-2", components={"GPU_SXM": "96.00.AF.00.01"})
        body, headers = _multipart(pkg, {"Oem": {"Nvidia": {"UpdateOption": "StageOnly"}}})
        status, _h, doc = client.request("POST", "/redfish/v1/UpdateService/update-multipart", body, headers=headers)
        assert status == 400 and "not supported" in doc["error"]["message"], doc
    finally:
        srv.stop()
        thread.join(5)


def test_nvidias_nvfwupd_stages_on_the_tray_with_its_gb200_target(tmp_path, real_nvfwupd):
    node = node_factory(tmp_path)(**GB200, timing={"flash": 0.2, "aux_power_cycle": 0.5})
    srv, thread = _serve(tmp_path, node)
    try:
        port = srv.bound[node.dir.name][1]
        pkg = artifacts.write_fwpkg(tmp_path / "art", "HGX-25.06-1", components={"GPU_SXM": "97.00.C5.00.01"},
                                    gpu_models=("NVIDIA GB200",))
        done = opennvfwupd.run("-t", "ip=127.0.0.1", f"port={port}", f"user={USER}", f"password={PASSWORD}",
                               "update_fw", "-p", str(pkg), "-u", "-y", "-b", timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and node.state["gpus"][-1]["staged_vbios"] is None:
            time.sleep(0.1)
        assert [g["staged_vbios"] for g in node.state["gpus"]] == ["97.00.C5.00.01"] * 4
        assert not (node.dir / state.REBOOT_REQUEST).exists()  # -u: staged only, the tray keeps serving
        assert next(iter(node.state["gpu_firmware"]["tasks"].values()))["option"] == "StageOnly"
        assert PASSWORD not in done.stdout + done.stderr
    finally:
        srv.stop()
        thread.join(5)


@pytest.mark.parametrize("targets", [[], ["HGX_FW_GPU_1"]])
def test_the_modules_own_config_stages_only_with_or_without_targets(tmp_path, real_nvfwupd, targets):
    """What the nvfwupd module runs (its config file, update_fw -u): NVIDIA's client stages on the tray, also where the
    targets make it take the config's multipart path (the StageOnly option then travels in MultipartOptions)."""
    fw = pytest.importorskip("ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware.nvfwupd")
    node = node_factory(tmp_path)(**GB200, timing={"flash": 0.2, "aux_power_cycle": 0.5})
    srv, thread = _serve(tmp_path, node)
    try:
        bmc = {"address": "127.0.0.1", "user": USER, "password": PASSWORD, "port": srv.bound[node.dir.name][1],
               "servertype": "GB200"}
        pkg = artifacts.write_fwpkg(tmp_path / "art", "HGX-25.06-1", components={"GPU_SXM": "97.00.C5.00.01"},
                                    gpu_models=("NVIDIA GB200",))
        with fw.private_config(bmc, targets, str(tmp_path), stage_only=True) as (_folder, config):
            done = opennvfwupd.run("-c", config, "update_fw", "-p", str(pkg), "-u", "-y", "-b", "-j", timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        want = ["97.00.C5.00.01"] * 4 if not targets else [None, "97.00.C5.00.01", None, None]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and [g["staged_vbios"] for g in node.state["gpus"]] != want:
            time.sleep(0.1)
        assert [g["staged_vbios"] for g in node.state["gpus"]] == want
        task = next(iter(node.state["gpu_firmware"]["tasks"].values()))
        assert task["option"] == "StageOnly" and not task["activate"] and not (node.dir / state.REBOOT_REQUEST).exists()
        assert PASSWORD not in done.stdout + done.stderr
    finally:
        srv.stop()
        thread.join(5)
