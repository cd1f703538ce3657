"""The OFED install output and openibd restart parsers, on every real capture under stack/ (others refused)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.ofed_install import firmware_attempted, parse_install_output
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.openibd import parse_restart

from tests.conftest import real_params

# (result, firmware step, devices in the firmware step, onboot, reload command, missing packages command)
INSTALLS = {
    "doca-ofed_3.2.1_install_mlnx-fw-updater_AUTO-FW-UPDATE_CX7-DGX-Spark_28.45.4028-to-28.47.1088_ofed_info-s_OFED-internal-25.10_aerial-docs.txt": (
        None, "updated", [("NVD0000000087", "28.45.4028", "28.47.1088", "Update required")], None, None, None),
    "mlnx-en_5.0-1.0.0.0_install_FW-UPDATED_CX3_2.33.5220-to-2.42.5000_Restart-needed.txt": (
        "passed", "updated", [("MT_1170110023", "2.33.5220", "2.42.5000", "Update required")], None, "/etc/init.d/mlnx-en.d restart", None),
    "mlnxofedinstall_23.10-1.1.9.0_TAIL_Installation-passed_partial_DaoCloud-docs_deindented.txt": (
        "passed", "not_run", [], None, "/etc/init.d/openibd restart", None),
    "mlnxofedinstall_23.10-1.1.9.0_Ubuntu22.04_package-list-and-prompt_DaoCloud-docs_deindented.txt": (None, "not_run", [], None, None, None),
    "mlnxofedinstall_23.10-1.1.9.0_rhel7.9_without-fw-update_Skipping-FW-update_rpm-set_openibd-restart_modinfo-mlx5_core-signer_CX6Dx"
    "_CN-OneNote-export_md-escaped_WHITESPACE-NORMALIZED_ANNOTATED.txt": (
        "passed", "skipped", [], "no", "/etc/init.d/openibd restart", "yum install libusbx tcl fuse-libs tk"),
    "mlnxofedinstall_4.7-3.2.9.0_Ubuntu_mlnx-fw-updater_FW-Up-to-date_BlueField_RUN_FW_UPDATER_ONBOOT_excerpt.txt": (
        None, "up_to_date", [("MT_0000000230", "18.26.4012", "18.26.4012", "Up to date")], "no", None, None),
    "mlnxofedinstall_5.5-1.0.3.2_rhel8.1-aarch64_FW-NOT-UPDATED_not-distributed-inside-Mellanox-driver_OEM-PSID_tail_patched-installer.txt": (
        "passed", "failed", [], "no", "/etc/init.d/openibd restart", None),
}

# ok, holders, modules in use
RESTARTS = {
    "openibd_restart_OK_MLNX_OFED-23.10_DaoCloud-docs_deindented.txt": (True, [], []),
    "openibd_restart_FAIL_opensm-still-running_MLNX_OFED-23.10_DaoCloud-docs_deindented.txt": (
        False, [("opensm", 1632, "issm0"), ("opensm", 1632, "umad0")], []),
    "openibd_restart_FAIL_mlx_compat-in-use-by-nvme_MLNX_OFED-23.10_DaoCloud-docs_deindented.txt": (
        False, [], [("mlx_compat", ["nvme_core", "nvme_fabrics"])]),
    # the restart at the end of the rhel7.9 install note
    next(name for name in INSTALLS if name.startswith("mlnxofedinstall_23.10-1.1.9.0_rhel7.9")): (True, [], []),
}

STACK = real_params("stack/*/*")


@pytest.mark.parametrize("path", STACK)
def test_install_output_of_every_real_capture(path):
    expected = INSTALLS.get(path.name)
    text = path.read_text(encoding="utf-8", errors="replace")
    if expected is None:
        with pytest.raises(ParseError, match="the OFED installer"):
            parse_install_output(text)
        return
    parsed = parse_install_output(text)
    result, firmware, devices, onboot, reload, missing = expected
    assert parsed["result"] == result
    assert parsed["firmware"] == firmware
    assert [(d["psid"], d["fw_current"], d["fw_available"], d["status"]) for d in parsed["devices"]] == devices
    assert parsed["fw_updater_onboot"] == onboot
    assert parsed["reload_command"] == reload
    assert parsed["missing_packages"] == missing
    assert firmware_attempted(parsed) == (firmware not in ("skipped", "not_run"))


def test_oem_psid_named_when_nothing_is_bundled(real_dir):
    name = next(n for n in INSTALLS if "not-distributed" in n)
    parsed = parse_install_output((real_dir / "stack" / "ofed" / name).read_text())
    assert parsed["not_distributed"] == [{"pci": "01:00.0", "psid": "HUA0020040036"}, {"pci": "81:00.0", "psid": "HUA0020040036"}]


@pytest.mark.parametrize("path", STACK)
def test_openibd_restart_of_every_real_capture(path):
    expected = RESTARTS.get(path.name)
    text = path.read_text(encoding="utf-8", errors="replace")
    if expected is None:
        with pytest.raises(ParseError, match="openibd restart"):
            parse_restart(text)
        return
    parsed = parse_restart(text)
    ok, holders, in_use = expected
    assert parsed["ok"] is ok
    assert [(h["process"], h["pid"], h["device"]) for h in parsed["holders"]] == holders
    assert [(m["module"], m["users"]) for m in parsed["in_use"]] == in_use


@pytest.mark.parametrize(
    ("text", "firmware", "result"),
    [
        ("Logs dir: /tmp/x\nInstallation passed successfully\nSkipping FW update.\n", "skipped", "passed"),
        ("Logs dir: /tmp/x\nError: The installation failed\n", "not_run", "failed"),
        # a success followed by a later error is a failure
        ("Installation passed successfully\nError: could not configure\n", "not_run", "failed"),
        # an attempt whose end was not printed: not taken as harmless
        ("Logs dir: /tmp/x\nAttempting to perform Firmware update...\n", "failed", None),
        ("Setting up mlnx-fw-updater (25.10-1.7.1) ...\nAttempting to perform Firmware update...\nDevice #1: Updating FW ...\nDone\n", "updated", None),
    ],
)
def test_install_output_shapes(text, firmware, result):
    parsed = parse_install_output(text)
    assert (parsed["firmware"], parsed["result"]) == (firmware, result)


@pytest.mark.parametrize("text", ["", "Reading package lists...\n", "garbage \x00\x01", "Installing ofed-scripts-5.0...\n"])
def test_install_output_refuses_other_text(text):
    with pytest.raises(ParseError):
        parse_install_output(text)


@pytest.mark.parametrize("text", ["", "Restarting\n", "[  OK  ]\n"])
def test_openibd_refuses_other_text(text):
    with pytest.raises(ParseError):
        parse_restart(text)


def test_openibd_please_stop_without_holder_lines_still_names_the_process():
    parsed = parse_restart('Please stop "opensm" and all applications running over InfiniBand.\n')
    assert parsed["ok"] is False
    assert parsed["holders"] == [{"process": "opensm", "pid": None, "device": None}]
