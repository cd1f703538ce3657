"""Tests of the nvfwupd show_version / update_fw / show_update_progress parsers.

The examples are the output blocks of NVIDIA's own open-nvfwupd documentation (README and the
firmware update guide), cut out of the real files by line range and dedented here.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import nvfwupd
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError

from tests.conftest import OWN

DOCS = "nvfwupd/open-nvfwupd/firmware_update_guide/docs/"


def _block(real_dir, path, first, last):
    """Lines first..last (1-based, inclusive) of a real file, dedented as the tool prints them (each line with its newline)."""
    lines = (real_dir / path).read_text().split("\n")[first - 1 : last]
    return textwrap.dedent("\n".join(lines)) + "\n"


def _by_ap(components):
    return {c["ap"]: c for c in components}


# (file, first, last): [(model, serial, packages, number of components)] read from the docs.
SHOW_VERSION_BLOCKS = {
    ("nvfwupd/open-nvfwupd/README.md", 39, 81): [("GB200 NVL", "1333124010099", ["GB200-P4975_0009_241117.1.0_custom"], 32)],
    (DOCS + "examples/gb200NVL.rst", 189, 225): [
        ("NVIDIA HGX H100", "$TRAY_SERIAL_NUMBER", ["GB200-P4972_0004_240808.1.1_custom", "GB200-P4975_0004_240808.1.0_custom"], 27)
    ],
    (DOCS + "examples/gb200NVL.rst", 301, 327): [
        ("N5110_LD", "MT2438X01107", ["GB200-P4978_0004_250213.1.0", "GB200-P4978_0006_250205.1.0", "GB200-P4978_0007_250121.1.2_custom"], 16)
    ],
    (DOCS + "examples/gb300NVL.rst", 191, 233): [("GB300 NVL", "1330425200012", ["GB300-P4058_0000_250422.1.0", "GB300-P4059_0002_250422.1.0_custom"], 32)],
    (DOCS + "appendix/spi-staged.rst", 39, 70): [("GB200 NVL", "1333124010358", ["GB200-P4972_0011_250404.1.0"], 21)],
    (DOCS + "appendix/unknown-errors.rst", 14, 56): [("GB200 NVL", "1333124010099", ["GB200-P4975_0009_241117.1.0_custom"], 32)],
    (DOCS + "appendix/json-options.rst", 11, 479): [("DGXH100", "1664923000019", ["DGX_0003_241205.1.0_custom"], 76)],
    (DOCS + "appendix/parallel-update.rst", 87, 149): [
        ("N5200_LD", "MT2446600UNE", ["GB200-P4978_0004_241209.1.7"], 16),
        ("GB200 NVL", "$TRAY_SERIAL_NUMBER", ["GB200-P4972_0004_240808.1.1_custom"], 27),
    ],
    (DOCS + "appendix/full-rack-parallel-update.rst", 55, 117): [
        ("N5200_LD", "MT2446600UNE", ["GB200-P4978_0004_241209.1.7"], 16),
        ("GB200 NVL", "$TRAY_SERIAL_NUMBER", ["GB200-P4972_0004_240808.1.1_custom"], 27),
    ],
    (DOCS + "appendix/full-rack-parallel-update.rst", 227, 289): [
        ("N5200_LD", "MT2446600UNE", ["GB200-P4978_0004_241209.1.7"], 16),
        ("GB200 NVL", "$TRAY_SERIAL_NUMBER", ["GB200-P4975_0004_240808.1.0_custom"], 27),
    ],
}


@pytest.mark.parametrize("block", list(SHOW_VERSION_BLOCKS), ids=lambda b: f"{b[0].rsplit('/', 1)[-1]}:{b[1]}")
def test_show_version_doc_blocks(real_dir, block):
    systems = nvfwupd.parse_show_version_systems(_block(real_dir, *block))
    got = [(s["system"]["model"], s["system"]["serial"], s["system"]["packages"], len(s["components"])) for s in systems]
    assert got == SHOW_VERSION_BLOCKS[block]
    for system in systems:
        assert system["system"]["connection_status"] == "Successful"
        for component in system["components"]:
            assert component["up_to_date"] in (True, False)


def test_show_version_readme_extract(real_dir):
    text = (real_dir / "nvfwupd/nvfwupd_show_version_GB200NVL_README.txt").read_text()
    full = nvfwupd.parse_show_version_full(text)
    assert full["system"] == {
        "model": "GB200 NVL",
        "part_number": "699-24764-0001-TS3",
        "serial": "1333124010099",
        "packages": ["GB200-P4975_0009_241117.1.0_custom"],
        "connection_status": "Successful",
        "error_code": 0,
    }
    components = _by_ap(nvfwupd.parse_show_version(text))
    assert components["CX7_0"] == {"ap": "CX7_0", "sys_version": "28.42.1230", "pkg_version": None, "staged_version": None, "up_to_date": False}
    # a version with single spaces inside stays one value
    assert components["FW_CPLD_2"]["sys_version"] == "0x00 0x10 0x01 0x0f"
    # "Yes" while the system is NEWER than the package: both versions are kept for the caller
    assert (components["HGX_FW_BMC_0"]["sys_version"], components["HGX_FW_BMC_0"]["pkg_version"]) == ("GB200Nvl-25.01-E", "GB200Nvl-24.10-9")
    assert components["HGX_FW_BMC_0"]["up_to_date"] is True
    assert components["HGX_FW_GPU_3"]["pkg_version"] == "97.00.52.00.02"
    assert list(components)[-1] == "HGX_PCIeSwitchConfig_0"


def test_show_version_narrow_columns(real_dir):
    # 'FW_ERoT_BMC_0        01.03.0183.0000_n04         01.03.0183.0000_n04 Yes': the package
    # version fills its column and one space separates it from Up-To-Date.
    components = _by_ap(nvfwupd.parse_show_version(_block(real_dir, DOCS + "examples/gb200NVL.rst", 189, 225)))
    assert components["FW_ERoT_BMC_0"]["pkg_version"] == "01.03.0183.0000_n04"
    assert components["FW_ERoT_BMC_0"]["up_to_date"] is True
    assert (components["HGX_FW_GPU_0"]["sys_version"], components["HGX_FW_GPU_0"]["pkg_version"]) == ("97.00.0c.00.00", "97.00.0D.00.00")
    assert components["HGX_FW_GPU_0"]["up_to_date"] is False
    assert (components["HGX_FW_CPLD_0"]["sys_version"], components["HGX_FW_CPLD_0"]["pkg_version"]) == ("0.112", "0.1C")


def test_show_version_gb300(real_dir):
    components = _by_ap(nvfwupd.parse_show_version(_block(real_dir, DOCS + "examples/gb300NVL.rst", 191, 233)))
    assert (components["FW_CPLD_3"]["sys_version"], components["FW_CPLD_3"]["pkg_version"]) == ("0x00 0x0c 0x06 0x04", "C_06_04")
    assert components["HGX_FW_CPU_0"]["sys_version"] == "3.0.4_dot"
    assert components["SMA_0"]["pkg_version"] == "0010.00.0145.0000"
    assert components["HGX_SXM_MCU_3"]["up_to_date"] is False


def test_show_version_staged(real_dir):
    # Staged table: "GB200Nvl-25.02 GB200Nvl-25.02" are two cells one space apart.
    components = nvfwupd.parse_show_version(_block(real_dir, DOCS + "appendix/spi-staged.rst", 39, 70))
    bmc = _by_ap(components)["FW_BMC_0"]
    assert bmc == {"ap": "FW_BMC_0", "sys_version": "GB200Nvl-25.01", "staged_version": "GB200Nvl-25.02", "pkg_version": "GB200Nvl-25.02", "up_to_date": False}
    assert _by_ap(components)["Full_FW_Image_NIC_Slot_7"]["staged_version"] is None


def test_show_version_json(real_dir):
    text = _block(real_dir, DOCS + "appendix/json-options.rst", 11, 479)
    full = nvfwupd.parse_show_version_full(text)
    assert full["system"]["bmc_ip"] == "1.1.1.1"
    assert full["system"]["part_number"] == "965-24387-0002-001"
    assert full["system"]["error_code"] == 0
    components = _by_ap(full["components"])
    assert components["PCIeRetimer_0"]["up_to_date"] is True
    # equal versions and "No": Up-To-Date alone is not to be trusted
    assert (components["PSU_3"]["sys_version"], components["PSU_3"]["pkg_version"], components["PSU_3"]["up_to_date"]) == (
        "0204.0201.0204",
        "0204.0201.0204",
        False,
    )
    # the same with the command line above it, as a captured run would hold it
    with_prompt = _block(real_dir, DOCS + "appendix/json-options.rst", 10, 479)
    assert nvfwupd.parse_show_version(with_prompt) == full["components"]


def test_show_version_json_list_of_systems():
    one = {"System Model": "A", "Firmware Devices": [{"AP Name": "X", "Sys Version": "1", "Pkg Version": "N/A", "Up-To-Date": "No"}]}
    systems = nvfwupd.parse_show_version_systems(json.dumps([one, dict(one, **{"System Model": "B"})]))
    assert [s["system"]["model"] for s in systems] == ["A", "B"]


def test_show_version_multi_system_is_not_flattened(real_dir):
    text = _block(real_dir, DOCS + "appendix/parallel-update.rst", 87, 149)
    with pytest.raises(ParseError, match="2 systems"):
        nvfwupd.parse_show_version(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Connection Status: Failed\nError Code: 1\n",
        # Up-To-Date neither Yes nor No
        "System Model: X\nFirmware Devices:\nAP Name     Sys Version     Pkg Version     Up-To-Date\n"
        "-------     -----------     -----------     ----------\nBMC         1.0             1.1             Maybe\n",
        # a row cut short (paste damage)
        "System Model: X\nFirmware Devices:\nAP Name     Sys Version     Pkg Version     Up-To-Date\n"
        "-------     -----------     -----------     ----------\nBMC         1.0\n",
        '{"System Model": "X"}',
        '{"Firmware Devices": [{"AP Name": "X", "Sys Version": "1",',
    ],
)
def test_show_version_errors(text):
    with pytest.raises(ParseError, match="nvfwupd show_version"):
        nvfwupd.parse_show_version(text)


# (file, first, last): (task ids, task statuses, elapsed), read from the docs.
UPDATE_BLOCKS = {
    ("nvfwupd/nvfwupd_update_fw_GB200NVL_README.txt", 1, 25): (["HGX_0"], ["done"], "0:09:46"),
    (DOCS + "examples/gb200NVL.rst", 43, 63): (["0"], ["done"], "0:10:41"),
    (DOCS + "examples/gb200NVL.rst", 95, 115): (["HGX_0"], ["done"], "0:09:46"),
    (DOCS + "examples/gb200NVL.rst", 147, 168): (["0"], ["done"], "0:10:38"),
    (DOCS + "examples/gb200NVL.rst", 245, 267): (["HGX_3"], ["done"], "0:09:50"),
    (DOCS + "examples/gb200NVL.rst", 345, 540): (["2", "3", "4"], ["done"] * 3, None),
    (DOCS + "examples/gb200NVL.rst", 548, 662): (["2", "3"], ["done"] * 2, None),
    (DOCS + "examples/gb200NVL.rst", 670, 751): (["35"], ["done"], None),
    (DOCS + "examples/gb200NVL.rst", 771, 817): (["10"], ["done"], None),
    (DOCS + "examples/gb300NVL.rst", 44, 64): (["1"], ["done"], "0:10:35"),
    (DOCS + "examples/gb300NVL.rst", 96, 116): (["HGX_1"], ["done"], "0:11:20"),
    (DOCS + "examples/gb300NVL.rst", 153, 174): (["0"], ["done"], "0:10:38"),
    (DOCS + "examples/gb300NVL.rst", 254, 276): (["HGX_3"], ["done"], "0:09:50"),
    (DOCS + "appendix/spi-staged.rst", 12, 32): (["0"], ["done"], "0:11:35"),
    (DOCS + "appendix/spi-staged.rst", 78, 98): (["1"], ["done"], "0:01:15"),
    (DOCS + "appendix/platform-agnostic-updates.rst", 112, 144): (["2"], ["done"], "0:24:38"),
    (DOCS + "appendix/parallel-update.rst", 175, 450): (["2", "5"], ["done", "done"], "0:05:14"),
    (DOCS + "appendix/output-formatting.rst", 15, 121): (["HGX_9"], ["done"], "0:10:58"),
    (DOCS + "appendix/json-options.rst", 577, 607): (["2"], ["running"], None),
}


@pytest.mark.parametrize("block", list(UPDATE_BLOCKS), ids=lambda b: f"{b[0].rsplit('/', 1)[-1]}:{b[1]}")
def test_update_fw_doc_blocks(real_dir, block):
    result = nvfwupd.parse_update_fw(_block(real_dir, *block))
    ids, statuses, elapsed = UPDATE_BLOCKS[block]
    assert [t["task_id"] for t in result["tasks"]] == ids
    assert [t["status"] for t in result["tasks"]] == statuses
    assert result["elapsed"] == elapsed
    # the -d example is shown without its last lines ("Error Code: 0")
    assert result["error_code"] == (None if "output-formatting" in block[0] else 0)
    # nothing in these outputs says RebootRequired / FirmwareLoadAction explicitly
    assert result["reboot_required"] is None
    assert result["firmware_load_action"] is None


def test_update_fw_readme_extract_broken_json(real_dir):
    # The README's Task line is not valid JSON ('"TaskState": Running"'): the task still comes
    # from "FW update started, Task Id:" and the TaskState triples.
    result = nvfwupd.parse_update_fw((real_dir / "nvfwupd/nvfwupd_update_fw_GB200NVL_README.txt").read_text())
    [task] = result["tasks"]
    assert (task["task_id"], task["state"], task["task_status"], task["percent_complete"]) == ("HGX_0", "Completed", "OK", 100)
    assert result["status"] == "done"
    assert result["packages"] == ["nvfw_GB200-P4975_0009_241117.1.0_custom_dbg-signed.fwpkg"]


def test_update_fw_switch_jobs(real_dir):
    result = nvfwupd.parse_update_fw(_block(real_dir, DOCS + "examples/gb200NVL.rst", 345, 540))
    assert [(t["target"], t["state"]) for t in result["tasks"]] == [("BMC", "action_success"), ("EROT", "action_success"), ("FPGA", "action_success")]
    assert result["tasks"][0]["message"] == "Firmware nvfw_GB200-P4978_0004_240926.1.0_dbg-signed.fwpkg installed successfully"
    assert result["status"] == "done"


def test_update_fw_detail_table(real_dir):
    result = nvfwupd.parse_update_fw(_block(real_dir, DOCS + "appendix/output-formatting.rst", 15, 121))
    results = {r["target"]: r["status"] for r in result["results"]}
    assert results["HGX_FW_CPU_0"] == "awaiting_activation"
    assert results["HGX_FW_BMC_0"] == "awaiting_activation"
    assert results["HGX_PCIeSwitchConfig_0"] == "updated"
    assert results["MAX10 CPLD"] == "updated"
    assert results["HGX_FW_ERoT_BMC_0"] == "skipped"
    assert ("HGX_FW_Debug_Token_Erase", "failed") in results.items()
    assert result["activation_required"] is True
    # a failed debug-token erase is reported, and fails the run as a whole
    assert result["status"] == "failed"
    assert result["tasks"][0]["messages"][0]["message_id"] == "TaskEvent.1.0.3.TaskStarted"


def test_update_fw_background_json(real_dir):
    result = nvfwupd.parse_update_fw(_block(real_dir, DOCS + "appendix/json-options.rst", 577, 607))
    assert result["tasks"][0]["state"] == "New"
    assert result["status"] == "running"
    assert result["errors"] == []


def test_update_fw_exception_own():
    result = nvfwupd.parse_update_fw((OWN / "nvfwupd/nvfwupd_update_fw_exception_own.txt").read_text())
    [task] = result["tasks"]
    assert (task["task_id"], task["state"], task["task_status"], task["status"]) == ("HGX_4", "Exception", "Critical", "failed")
    assert result["error_code"] == 1
    assert result["status"] == "failed"


def test_update_fw_explicit_reboot_keys():
    # DeepOps reads these two keys from a JSON line; they are taken only when printed.
    text = 'FW update started, Task Id: 7\n{"RebootRequired": true, "FirmwareLoadAction": "DC Power Cycle", "State": "Done"}\nError Code: 0\n'
    result = nvfwupd.parse_update_fw(text)
    assert result["reboot_required"] is True
    assert result["firmware_load_action"] == "DC Power Cycle"


def test_update_fw_json_errors():
    text = json.dumps({"Error": ["Firmware package is not valid"], "Error Code": 1, "Output": []})
    result = nvfwupd.parse_update_fw(text)
    assert result["status"] == "failed"
    assert result["errors"] == ["Firmware package is not valid"]


@pytest.mark.parametrize("text", ["", "Ok to proceed with firmware update? <Y/N>\nn\n"])
def test_update_fw_errors(text):
    with pytest.raises(ParseError, match="nvfwupd update_fw"):
        nvfwupd.parse_update_fw(text)


def test_update_progress_json(real_dir):
    result = nvfwupd.parse_update_progress(_block(real_dir, DOCS + "appendix/json-options.rst", 614, 755))
    [task] = result["tasks"]
    assert (task["task_id"], task["state"], task["percent_complete"], task["status"]) == ("2", "Completed", 100, "done")
    assert task["end_time"] == "2025-01-14T00:02:39+00:00"
    assert result["results"] == [
        {
            "target": "PCIeRetimer_1",
            "status": "updated",
            "message": "Device 'PCIeRetimer_1' successfully updated with image '2.07.19'.",
            "resolution": None,
        }
    ]


def test_update_progress_text(real_dir):
    result = nvfwupd.parse_update_progress(_block(real_dir, DOCS + "appendix/platform-agnostic-updates.rst", 148, 215))
    [task] = result["tasks"]
    assert (task["task_id"], task["state"], task["task_status"], task["start_time"]) == ("0", "Completed", "OK", "2024-01-20T02:46:15+00:00")
    assert result["elapsed"] == "0:00:02"
    assert [m["message_id"] for m in task["messages"]][-1] == "TaskEvent.1.0.1.TaskCompletedOK"
    assert result["status"] == "done"


def test_update_progress_awaiting_activation(real_dir):
    # The GB200 system of the parallel run: the BMC image waits for a power cycle.
    result = nvfwupd.parse_update_fw(_block(real_dir, DOCS + "appendix/parallel-update.rst", 175, 450))
    assert {r["target"]: (r["status"], r["resolution"]) for r in result["results"]} == {
        "FW_BMC_0": ("awaiting_activation", "DC power cycle or AC power cycle"),
    }


def test_update_progress_errors():
    with pytest.raises(ParseError, match="show_update_progress"):
        nvfwupd.parse_update_progress("Error Code: 0\n")


# ---------------------------------------------------------------- issue 8: odd JSON is a ParseError, never a crash

_ROW = {"AP Name": "X", "Sys Version": "1", "Pkg Version": "N/A", "Up-To-Date": "No"}


@pytest.mark.parametrize(
    "document",
    [
        {"System Model": "A", "Firmware Devices": "X"},
        {"System Model": "A", "Firmware Devices": [["X"]]},
        {"System Model": "A", "Firmware Devices": [dict(_ROW, **{"AP Name": 5})]},
        {"System Model": "A", "Firmware Devices": [dict(_ROW, **{"Sys Version": ["1"]})]},
        {"System Model": "A", "Firmware Devices": [dict(_ROW, **{"Up-To-Date": 1})]},
        {"System Model": ["A"], "Firmware Devices": [_ROW]},
        {"Packages": 7, "Firmware Devices": [_ROW]},
    ],
)
def test_show_version_odd_json_is_a_parse_error(document):
    """Issue 8: parse_show_version_systems raised TypeError / AttributeError on odd JSON."""
    with pytest.raises(ParseError, match="nvfwupd"):
        nvfwupd.parse_show_version_systems(json.dumps(document))


def test_show_version_json_boolean_up_to_date():
    document = {"System Model": "A", "Firmware Devices": [dict(_ROW, **{"Up-To-Date": True})]}
    assert nvfwupd.parse_show_version(json.dumps(document))[0]["up_to_date"] is True


_TASK = {"Id": "HGX_4", "TaskState": "Running", "TaskStatus": "OK", "Messages": []}


@pytest.mark.parametrize(
    "document",
    [
        dict(_TASK, TaskState=5),
        dict(_TASK, TaskState=["Completed"]),
        dict(_TASK, TaskStatus={"x": 1}),
        dict(_TASK, Messages="done"),
        dict(_TASK, Messages=[{"MessageId": 3, "MessageArgs": []}]),
        dict(_TASK, Messages=[{"MessageId": "Update.1.0.UpdateSuccessful", "MessageArgs": "BMC"}]),
        dict(_TASK, Messages=[{"MessageId": "Update.1.0.UpdateSuccessful", "Message": ["x"]}]),
        dict(_TASK, Id={"a": 1}),
        {"Error": [], "Error Code": "abc", "Output": []},
        {"Error": [], "Error Code": 0, "Output": [{"Messages": [{"MessageId": "TaskEvent.1.0.Task.1.0.New", "MessageArgs": 5}]}]},
    ],
)
def test_update_fw_odd_json_is_a_parse_error(document):
    """Issue 8: parse_update_fw raised TypeError / AttributeError / ValueError on odd JSON."""
    try:
        result = nvfwupd.parse_update_fw(json.dumps(document))
    except ParseError as exc:
        assert str(exc).startswith("nvfwupd update_fw")
        return
    assert result["status"] in ("done", "failed", "running", "unknown")


def test_update_fw_deep_json_is_a_parse_error():
    with pytest.raises(ParseError, match="nvfwupd update_fw"):
        nvfwupd.parse_update_fw('{"Output": ' * 3000 + "[]" + "}" * 3000)


# One component listed twice: the same row counts once; contradictory rows are an error, in both forms.
_TWICE_TABLE = (
    "System Model: NVIDIA HGX H100 80GB HBM3 8-GPU\nFirmware Devices:\n"
    "AP Name              Sys Version        Pkg Version        Up-To-Date\n"
    "-------              -----------        -----------        ----------\n"
    "HGX_FW_BMC_0         HGX-24.04-2        HGX-24.04-2        Yes\n"
    "HGX_FW_GPU_SXM_1     96.00.A5.00.01     96.00.AF.00.01     No\n"
    "HGX_FW_GPU_SXM_1     {second}     96.00.AF.00.01     {up}\n"
    "-----------------------------------------------------------------------\n"
    "Error Code: 0\n"
)


def _twice_json(second, up):
    rows = [
        {"AP Name": "HGX_FW_BMC_0", "Sys Version": "HGX-24.04-2", "Pkg Version": "HGX-24.04-2", "Up-To-Date": "Yes"},
        {"AP Name": "HGX_FW_GPU_SXM_1", "Sys Version": "96.00.A5.00.01", "Pkg Version": "96.00.AF.00.01", "Up-To-Date": "No"},
        {"AP Name": "HGX_FW_GPU_SXM_1", "Sys Version": second, "Pkg Version": "96.00.AF.00.01", "Up-To-Date": up},
    ]
    return json.dumps({"Error Code": 0, "System Model": "NVIDIA HGX H100 80GB HBM3 8-GPU", "Firmware Devices": rows})


_TWICE = [lambda second, up: _TWICE_TABLE.format(second=second, up=up), _twice_json]


@pytest.mark.parametrize("form", _TWICE, ids=["table", "json"])
def test_show_version_component_listed_twice_with_other_versions_is_an_error(form):
    with pytest.raises(ParseError, match="nvfwupd show_version") as caught:
        nvfwupd.parse_show_version(form("96.00.AF.00.01", "Yes"))
    message = str(caught.value)
    assert "HGX_FW_GPU_SXM_1" in message and "96.00.A5.00.01" in message and "96.00.AF.00.01" in message and "twice" in message
    with pytest.raises(ParseError, match="HGX_FW_GPU_SXM_1"):  # same version, another Up-To-Date: contradictory too
        nvfwupd.parse_show_version(form("96.00.A5.00.01", "Yes"))


@pytest.mark.parametrize("form", _TWICE, ids=["table", "json"])
def test_show_version_component_listed_twice_alike_counts_once(form):
    components = nvfwupd.parse_show_version(form("96.00.A5.00.01", "No"))
    assert [c["ap"] for c in components] == ["HGX_FW_BMC_0", "HGX_FW_GPU_SXM_1"]
    assert components[1]["sys_version"] == "96.00.A5.00.01" and components[1]["up_to_date"] is False


def test_show_version_same_component_on_two_systems_is_no_duplicate():
    one = {"System Model": "A", "Firmware Devices": [{"AP Name": "X", "Sys Version": "1", "Pkg Version": "N/A", "Up-To-Date": "No"}]}
    other = {"System Model": "B", "Firmware Devices": [{"AP Name": "X", "Sys Version": "2", "Pkg Version": "N/A", "Up-To-Date": "No"}]}
    systems = nvfwupd.parse_show_version_systems(json.dumps([one, other]))
    assert [s["components"][0]["sys_version"] for s in systems] == ["1", "2"]


def test_show_version_nested_too_deeply_says_so():
    with pytest.raises(ParseError, match=r"nvfwupd show_version -j: .*nested too deeply"):
        nvfwupd.parse_show_version('{"Firmware Devices": ' + "[" * 100000 + "]" * 100000 + "}")


# --- a cut line is not a whole value (issue 21) ---------------------------------------------------------------------------

_CUT_TABLE = """System Model: NVIDIA HGX H100 80GB HBM3 8-GPU
Packages: ['HGX-24.04-2']
Connection Status: Successful

Firmware Devices:
AP Name                                  Sys Version                    Pkg Version                    Up-To-Date
-------                                  -----------                    -----------                    ----------
HGX_FW_BMC_0                             HGX-22.10-1                    HGX-24.04-2                    No
HGX_FW_GPU_SXM_1                         96.00.A5.00.01                 96.00.AF.00.01                 No
------------------------------------------------------------------------------------------------------------------------
Error Code: 0
"""


@pytest.mark.parametrize(
    "cut",
    [
        "HGX_FW_GPU_SXM_1                         96.00.A5",  # a shorter installed version
        "HGX_FW_GPU_SXM_1                         96.00.A5.00.01                 96.00",  # a shorter package version
        "Error Code: ",  # a code not printed yet
    ],
)
def test_show_version_text_cut_inside_its_last_line_is_refused(cut):
    text = _CUT_TABLE[: _CUT_TABLE.index(cut) + len(cut)]
    with pytest.raises(ParseError, match=r"nvfwupd show_version: the output was cut short .* has no newline"):
        nvfwupd.parse_show_version_full(text)
    assert nvfwupd.parse_show_version_full(_CUT_TABLE)["components"][1]["sys_version"] == "96.00.A5.00.01"


def test_show_version_json_is_whole_by_its_bracket_without_a_newline():
    text = json.dumps({"Error Code": 0, "Firmware Devices": [{"AP Name": "X", "Sys Version": "1.2", "Pkg Version": "N/A", "Up-To-Date": "No"}]})
    assert nvfwupd.parse_show_version(text)[0]["sys_version"] == "1.2"


@pytest.mark.parametrize("parse", [nvfwupd.parse_update_fw, nvfwupd.parse_update_progress])
def test_update_text_cut_inside_its_last_line_is_read_without_it(parse):
    whole = "FW update started, Task Id: HGX_0\nTaskState: Running\nPercentComplete: 40\nTaskStatus: OK\nError Code: 13\n"
    cut = parse(whole[: whole.index("Error Code: 13") + len("Error Code: 1")])
    assert cut["error_code"] is None and [t["task_id"] for t in cut["tasks"]] == ["HGX_0"]  # not Error Code 1
    assert parse(whole)["error_code"] == 13
    with pytest.raises(ParseError, match="no task"):  # "Task Id: H" of HGX_0 is no task
        parse(whole[: whole.index("HGX_0") + 1])
