"""NVIDIA's real nvfwupd against gpusim's BMC (in-process, 127.0.0.1, the tool's port= option): show_version
(table and -j, parsed by the collection's own nvfwupd parser), update_fw, force_update, wrong password.

Skips with a reason where ../shared/tools/open-nvfwupd is absent or its requirements cannot be installed."""

from __future__ import annotations

import json
import threading
import time

import pytest
from gpusim import artifacts, opennvfwupd, state
from gpusim.bmc import cert, server
from test_tools_support import node_factory

USER, PASSWORD = "admin", "Tool-Pw-1"
WRONG = "not-the-password"


@pytest.fixture
def bmc(tmp_path, real_nvfwupd):
    node = node_factory(tmp_path)(timing={"flash": 0.2})
    certfile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.make_self_signed(certfile, keyfile, ["127.0.0.1"], [], "test")
    srv = server.Server([server.Endpoint("gpu-a01", node.dir, "127.0.0.1", 0)], USER, PASSWORD, certfile, keyfile)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    port = srv.bound["gpu-a01"][1]

    def nvfwupd(*args: str, password: str = PASSWORD):
        return opennvfwupd.run("-t", "ip=127.0.0.1", f"port={port}", f"user={USER}", f"password={password}",
                               "servertype=HGX", *args, timeout=120)

    yield node, nvfwupd
    srv.stop()
    thread.join(5)


def _parser():
    return pytest.importorskip("ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.nvfwupd")


def test_show_version_table_and_json_agree_with_the_node(bmc, tmp_path):
    node, nvfwupd = bmc
    parse = _parser()
    pkg = artifacts.write_fwpkg(tmp_path / "art", "HGX-24.04-2", components={"HMC": "HGX-24.04-2", "GPU_SXM": "96.00.AF.00.01"})
    done = nvfwupd("show_version", "-p", str(pkg), "-j")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["Packages"] == ["HGX-24.04-2"] and doc["System Model"] == "NVIDIA HGX H100 80GB HBM3 8-GPU"
    rows = {r["ap"]: r for r in parse.parse_show_version(done.stdout)}
    table = {r["ap"]: r for r in parse.parse_show_version(nvfwupd("show_version", "-p", str(pkg)).stdout)}
    assert rows == table
    for i, gpu in enumerate(node.state["gpus"]):
        row = rows[f"HGX_FW_GPU_SXM_{i + 1}"]
        assert (row["sys_version"], row["pkg_version"], row["up_to_date"]) == (gpu["vbios"], "96.00.AF.00.01", False)
    assert rows["HGX_FW_BMC_0"]["pkg_version"] == "HGX-24.04-2"
    assert rows["HGX_FW_NVSwitch_0"]["pkg_version"] is None  # N/A: the package has no NVSwitch image
    assert PASSWORD not in done.stdout + done.stderr


def test_update_fw_then_force_update_for_a_downgrade(bmc, tmp_path):
    node, nvfwupd = bmc
    new = artifacts.write_fwpkg(tmp_path / "art", "HGX-24.04-2", components={"GPU_SXM": "96.00.AF.00.01"})
    done = nvfwupd("update_fw", "-p", str(new), "-y", "-b")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FW update started, Task Id: 0" in done.stdout
    progress = nvfwupd("show_update_progress", "-i", "0")
    assert progress.returncode == 0 and "Update is successful." in progress.stdout, progress.stdout
    assert node.state["gpus"][0]["staged_vbios"] == "96.00.AF.00.01"
    assert state.boot(node.dir) is True and node.state["gpus"][0]["vbios"] == "96.00.AF.00.01"
    old = artifacts.write_fwpkg(tmp_path / "art", "HGX-22.10-1", components={"GPU_SXM": "96.00.A5.00.01"})
    assert nvfwupd("update_fw", "-p", str(old), "-y", "-b").returncode == 0
    assert node.state["gpus"][0]["staged_vbios"] is None  # a downgrade is skipped without ForceUpdate
    status = nvfwupd("force_update", "status")
    assert "ForceUpdate is set to False" in status.stdout, status.stdout
    assert "successfully set True" in nvfwupd("force_update", "enable").stdout
    assert nvfwupd("update_fw", "-p", str(old), "-y", "-b").returncode == 0
    deadline = time.monotonic() + 10  # -b returns once the task is created; it flashes for timing.flash
    while node.state["gpus"][0]["staged_vbios"] is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert node.state["gpus"][0]["staged_vbios"] == "96.00.A5.00.01"


def test_wrong_password_is_the_tools_error(bmc):
    _node, nvfwupd = bmc
    done = nvfwupd("show_version", "-j", password=WRONG)
    doc = json.loads(done.stdout)  # with -j the tool exits 0 and says so in the document
    assert doc["Error Code"] == 1 and doc["Output"] == [], doc
    assert "Error : Unable to access DUT ip=XXXX" in doc["Error"], doc
    table = nvfwupd("show_version", password=WRONG)
    assert table.returncode == 1 and "Connection Status: Failed" in table.stdout, table.stdout
    assert WRONG not in done.stdout + table.stdout
