"""gpu_validate with expected_stack (issue 24): the stack checks through the module, with the exact commands they run."""

from __future__ import annotations

import pathlib
import re

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import levels as _validate_levels
from ansible_collections.gpufleet.lifecycle.plugins.modules import gpu_validate

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures"
IDLE_XML = re.sub(r"\s*<process_info>.*?</process_info>", "", (FIXTURES / "validate" / "nvsmi_qx_2xH100_550.90.07_healthy.xml").read_text(), flags=re.DOTALL)
PROC_VERSION = (FIXTURES / "gpu_facts" / "proc_version_open_550.90.07.txt").read_text()
FM_VERSION = (FIXTURES / "gpu_facts" / "fm_version_550.90.07.txt").read_text()
KERNEL = "6.1.0-28-amd64"
IBSTAT = "".join(
    f"CA 'mlx5_{i}'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n\tPort 1:\n"
    f"\t\tState: {state}\n\t\tPhysical state: {physical}\n\t\tRate: {rate}\n\t\tLink layer: InfiniBand\n"
    for i, (state, physical, rate) in enumerate([("Active", "LinkUp", 400), ("Down", "Polling", 10)])
)
LSMOD = "Module                  Size  Used by\nnvidia_peermem         16384  0\nnvidia              56823808  2 nvidia_peermem\n"
MODINFO = f"filename:       /lib/modules/{KERNEL}/updates/dkms/nvidia-peermem.ko\nversion:        550.90.07\nname:           nvidia_peermem\n"
DCGMI_V = "\nLocal build info:\nVersion : 4.7.0\n\nHostengine build info:\nVersion : 4.7.0\n"
STACK = {"rdma_ports": [{"count": 2, "link_layer": "InfiniBand", "rate": 400}], "peermem": True, "dcgm": "4.7.0",
         "ofed": {"flavor": "doca-ofed", "version": "24.10-1.1.4.0.200"}}


@pytest.fixture
def node(tmp_path, monkeypatch):
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("b6c1a7f0-0000-4000-8000-000000000001\n")
    (tmp_path / "proc/sys/kernel/osrelease").write_text(KERNEL + "\n")
    (tmp_path / "proc/uptime").write_text("7200.00 100000.00\n")
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(PROC_VERSION)
    real_host = _validate_levels.Host
    monkeypatch.setattr(_validate_levels, "Host", lambda: real_host(str(tmp_path)))
    return tmp_path


@pytest.fixture
def tools(commands):
    paths = {name: commands.tool(name) for name in ("nvidia-smi", "nv-fabricmanager", "systemctl", "dmesg", "dcgmi", "ibstat", "lsmod", "modinfo")}
    commands.on([paths["nvidia-smi"], "-q", "-x"], stdout=IDLE_XML)
    commands.on([paths["nv-fabricmanager"], "--version"], stdout=FM_VERSION)
    commands.on([paths["systemctl"], "is-active", "nvidia-fabricmanager", "nvidia-persistenced"], stdout="active\nactive\n")
    commands.on([paths["dmesg"]], stdout="")
    commands.on([paths["ibstat"]], stdout=IBSTAT)
    commands.on([paths["lsmod"]], stdout=LSMOD)
    commands.on([paths["modinfo"], "nvidia_peermem"], stdout=MODINFO)
    commands.on([paths["dcgmi"], "-v"], stdout=DCGMI_V)
    return paths


def test_stack_checks_through_the_module_name_the_down_port_and_run_only_reads(node, tools, commands, run_module):
    result = run_module(gpu_validate.main, {"checks": ["ib_ports", "peermem", "dcgm"], "expected_stack": STACK, "fail_on": "never"})
    checks = {c["name"]: c for c in result["checks"]}
    assert [c["name"] for c in result["checks"]] == ["ib_ports", "peermem", "dcgm"]
    assert checks["ib_ports"]["status"] == "fail"
    assert checks["ib_ports"]["message"].startswith("mlx5_1/1 is Down/Polling, not Active/LinkUp")
    assert checks["ib_ports"]["observed"]["ports"] == {"mlx5_0/1": "Active/LinkUp 400 Gb/s", "mlx5_1/1": "Down/Polling"}
    assert (checks["peermem"]["status"], checks["peermem"]["observed"]["version"]) == ("pass", "550.90.07")
    assert (checks["dcgm"]["status"], checks["dcgm"]["observed"]["hostengine_version"]) == ("pass", "4.7.0")
    stack_calls = [call for call in commands.calls if call["argv"][0] in (tools["ibstat"], tools["lsmod"], tools["modinfo"], tools["dcgmi"])]
    # One process each, every one bounded by command_timeout (120 s by default).
    assert [call["argv"] for call in stack_calls] == [[tools["ibstat"]], [tools["lsmod"]], [tools["modinfo"], "nvidia_peermem"], [tools["dcgmi"], "-v"]]
    assert {call["timeout"] for call in stack_calls} == {120}


def test_a_bad_stack_fails_before_any_command_naming_the_key(node, tools, commands, run_module):
    result = run_module(gpu_validate.main, {"expected_stack": {"rdma_ports": [{"count": 8, "link_layer": "InfiniBand", "rate": "NDR"}]}})
    assert result["failed"] is True
    assert result["msg"].startswith("expected_stack (the BOM's stack section): BOM stack.rdma_ports[0].rate must be the port rate in Gb/s")
    assert commands.calls == []
