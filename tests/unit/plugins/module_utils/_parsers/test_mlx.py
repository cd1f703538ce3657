"""Tests of the mlxfwmanager / mlxup / flint / mlxfwreset / mst / mlxconfig parsers."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import mlx
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError

from tests.conftest import OWN, REAL, real_params

# Per file, read by hand: [(pci as printed, psid, fw current, fw available, pxe current, uefi current, status)].
QUERY_EXPECTED = {
    "mlxfwmanager_query_BlueField2_24.99.0932_sonic-test-fixture.txt": [
        ("/dev/mst/mt41686_pciconf0", "MT_0000000767", "24.99.0932", None, None, None, "No matching image found"),
    ],
    "mlxfwmanager_query_CX3_MCX354A-FCB_2.42.5000_no-matching-image.txt": [
        ("0000:02:00.0", "MT_1090120019", "2.42.5000", None, "3.4.0752", None, "No matching image found"),
    ],
    "mlxfwmanager_query_CX4LX_14.20.1010_no-matching-image_blog.txt": [
        ("/dev/mst/mt4117_pciconf0", "MT_2430110032", "14.20.1010", None, "3.5.0210", None, "No matching image found"),
    ],
    "mlxfwmanager_query_CX4_MCX455A-ECA_12.28.2040_no-matching-image.txt": [
        ("/dev/mst/mt4115_pciconf0", "MT_2180110032", "12.28.2040", None, "3.6.0102", "14.21.0017", "No matching image found"),
    ],
    "mlxfwmanager_query_CX7_MCX755106AS-HEA_28.44.1036_device13_partial.txt": [
        ("/dev/mst/mt4129_pciconf0", "MT_0000000834", "28.44.1036", None, "3.7.0500", "14.37.0014", "No matching image found"),
    ],
    "mlxfwmanager_query_HP-CX3Pro_2.42.5044_CLP_windows_partial.txt": [
        ("mt4103_pci_cr0", "HP_1370110017", "2.42.5044", None, "3.4.0754", "14.11.0048", "No matching image found"),
    ],
    "mlxfwmanager_update_CX6DX_22.31.1014-to-22.33.1048_via-mlnx-en-5.6-install.txt": [
        ("d2:00.0", "MT_0000000359", "22.31.1014", "22.33.1048", "3.6.0403", "14.24.0013", "Update required"),
    ],
    "mlxup_online_query_then_decline_CX6LX_empovit.txt": [
        ("/dev/mst/mt4127_pciconf0", "MT_0000000575", "26.33.1048", "26.43.1014", "3.6.0502", "14.26.0017", "Update required"),
    ],
    "mlxup_query_HP-CX3Pro_2.42.5700_mlxup4.22.1.txt": [
        ("/dev/mst/mt4103_pci_cr0", "HP_1380110017", "2.42.5700", None, None, None, "No matching image found"),
    ],
    "mlxup_query_and_update_2xCX7_28.42.1000-to-28.43.1014_schmaustech.txt": [
        ("/dev/mst/mt4129_pciconf1", "MT_0000001244", "28.42.1000", "28.43.1014", "3.7.0500", "14.35.0015", "Update required"),
        ("/dev/mst/mt4129_pciconf0", "MT_0000001244", "28.42.1000", "28.43.1014", "3.7.0500", "14.35.0015", "Update required"),
    ],
    "mlxup_query_text_2xCX7_28.40.1000_update-required_sigitp.txt": [
        ("/dev/mst/mt4129_pciconf1", "MT_0000000834", "28.40.1000", "28.43.1014", "3.7.0300", "14.33.0010", "Update required"),
        ("/dev/mst/mt4129_pciconf0", "MT_0000000834", "28.40.1000", "28.43.1014", "3.7.0300", "14.33.0010", "Update required"),
    ],
    "mlxup_query_text_CX6LX_26.33.1048_update-required_empovit.txt": [
        ("0002:01:00.0", "MT_0000000575", "26.33.1048", "26.43.1014", "3.6.0502", "14.26.0017", "Update required"),
    ],
    "mlxup_update_2xCX7_28.40.1000-to-28.43.1014_sigitp.txt": [
        ("/dev/mst/mt4129_pciconf1", "MT_0000000834", "28.40.1000", "28.43.1014", "3.7.0300", "14.33.0010", "Update required"),
        ("/dev/mst/mt4129_pciconf0", "MT_0000000834", "28.40.1000", "28.43.1014", "3.7.0300", "14.33.0010", "Update required"),
    ],
}


def _rows(devices):
    return [(d["pci"], d["psid"], d["fw_current"], d["fw_available"], d["pxe_current"], d["uefi_current"], d["status"]) for d in devices]


def _lines(path, first, last):
    """Lines first..last (1-based, inclusive) of a real file, each with its newline: one output block of a FULL_ page."""
    return "".join(line + "\n" for line in path.read_text().split("\n")[first - 1 : last])


@pytest.mark.parametrize("path", real_params("mellanox/mlxfwmanager_*") + real_params("mellanox/mlxup_*"))
def test_fwmanager_text_real(path):
    devices = mlx.parse_fwmanager_text(path.read_text())
    assert _rows(devices) == QUERY_EXPECTED[path.name]
    for device in devices:
        assert device["update_required"] is {"Update required": True, "No matching image found": None}[device["status"]]


def test_fwmanager_text_details(real_dir):
    device = mlx.parse_fwmanager_text((real_dir / "mellanox/mlxup_query_text_CX6LX_26.33.1048_update-required_empovit.txt").read_text())[0]
    assert device["index"] == 1
    assert device["type"] == "ConnectX6LX"
    assert device["part_number"] == "MCX631102AS-ADA_Ax"
    assert device["pci_address"] == "0002:01:00.0"
    assert device["device"] is None
    assert device["base_guid"] == "e8ebd3030070cf12"
    assert device["base_mac"] == "e8ebd370cf12"
    assert device["uefi_available"] == "14.36.0016"
    assert device["description"].startswith("ConnectX-6 Lx EN adapter card; 25GbE")


def test_fwmanager_text_short_bdf_and_mst_names(real_dir):
    update = (real_dir / "mellanox/mlxfwmanager_update_CX6DX_22.31.1014-to-22.33.1048_via-mlnx-en-5.6-install.txt").read_text()
    device = mlx.parse_fwmanager_text(update)[0]
    assert (device["pci"], device["pci_address"], device["device"]) == ("d2:00.0", "0000:d2:00.0", None)
    bf2 = mlx.parse_fwmanager_text((real_dir / "mellanox/mlxfwmanager_query_BlueField2_24.99.0932_sonic-test-fixture.txt").read_text())[0]
    assert (bf2["pci_address"], bf2["device"]) == (None, "/dev/mst/mt41686_pciconf0")


def test_fwmanager_text_cx3_port_fields(real_dir):
    cx3 = mlx.parse_fwmanager_text((real_dir / "mellanox/mlxfwmanager_query_CX3_MCX354A-FCB_2.42.5000_no-matching-image.txt").read_text())[0]
    assert cx3["base_mac"] is None  # ConnectX-3 prints Port1/Port2 MAC, no Base MAC: nothing is invented
    assert cx3["port_macs"] == ["248a0723bd75", "248a0723bd76"]
    hp = mlx.parse_fwmanager_text((real_dir / "mellanox/mlxfwmanager_query_HP-CX3Pro_2.42.5044_CLP_windows_partial.txt").read_text())[0]
    assert hp["port_guids"] == ["9cdc71ffff5aae91", "9cdc71ffff5aae92"]
    assert hp["versions"]["CLP"] == {"current": "8025", "available": None}


def test_fwmanager_text_device13_partial(real_dir):
    devices = mlx.parse_fwmanager_text((real_dir / "mellanox/mlxfwmanager_query_CX7_MCX755106AS-HEA_28.44.1036_device13_partial.txt").read_text())
    assert [d["index"] for d in devices] == [13]


@pytest.mark.parametrize(
    ("name", "first", "last", "expected"),
    [
        # mlxup query blocks inside the AWS lab log (script log lines around them)
        ("FULL_sigitp_example-lab-execution_CX7_aws.txt", 573, 612, ["5c2573a98bd4", "5c257331e4dc"]),
        ("FULL_sigitp_example-lab-execution_CX7_aws.txt", 614, 660, ["5c2573a98bd4", "5c257331e4dc"]),
        ("FULL_schmaustech_nvidia-tools-image_README.md", 516, 567, ["e09d73125fc4", "e09d73126474"]),
    ],
)
def test_fwmanager_text_full_pages(real_dir, name, first, last, expected):
    devices = mlx.parse_fwmanager_text(_lines(real_dir / "mellanox" / name, first, last))
    assert [d["base_mac"] for d in devices] == expected
    assert all(d["update_required"] is True for d in devices)


def test_fwmanager_update_full_page(real_dir):
    result = mlx.parse_fwmanager_update(_lines(real_dir / "mellanox/FULL_sigitp_example-lab-execution_CX7_aws.txt", 663, 735))
    assert [(r["index"], r["pci"], r["status"]) for r in result["results"]] == [
        (1, "/dev/mst/mt4129_pciconf1", "done"),
        (2, "/dev/mst/mt4129_pciconf0", "done"),
    ]
    assert result["reboot_required"] is True
    assert result["log_file"] == "/tmp/mlxup_workdir/mlxup-20250825_021257_166516.log"


@pytest.mark.parametrize(
    ("name", "confirmed", "results", "log_file"),
    [
        (
            "mlxup_update_2xCX7_28.40.1000-to-28.43.1014_sigitp.txt",
            True,
            [(1, "/dev/mst/mt4129_pciconf1", "done"), (2, "/dev/mst/mt4129_pciconf0", "done")],
            "/tmp/mlxup_workdir/mlxup-20250825_021257_166516.log",
        ),
        (
            "mlxup_query_and_update_2xCX7_28.42.1000-to-28.43.1014_schmaustech.txt",
            True,
            [(1, "/dev/mst/mt4129_pciconf1", "done"), (2, "/dev/mst/mt4129_pciconf0", "done")],
            "/tmp/mlxup_workdir/mlxup-20250109_190606_17886.log",
        ),
        ("mlxfwmanager_update_CX6DX_22.31.1014-to-22.33.1048_via-mlnx-en-5.6-install.txt", None, [(1, "d2:00.0", "done")], "/tmp/e4ByYilJE_"),
    ],
)
def test_fwmanager_update_real(real_dir, name, confirmed, results, log_file):
    result = mlx.parse_fwmanager_update((real_dir / "mellanox" / name).read_text())
    assert result["confirmed"] is confirmed
    assert [(r["index"], r["pci"], r["status"]) for r in result["results"]] == results
    assert result["reboot_required"] is True
    assert result["log_file"] == log_file
    assert result["to_update"] == len(results)
    assert all(step["result"] == "OK" for r in result["results"] for step in r["steps"])
    assert [s["name"] for s in result["results"][0]["steps"]] == ["FSMST_INITIALIZE", "Writing Boot image component"]


def test_fwmanager_update_warning_kept(real_dir):
    name = "mellanox/mlxfwmanager_update_CX6DX_22.31.1014-to-22.33.1048_via-mlnx-en-5.6-install.txt"
    result = mlx.parse_fwmanager_update((real_dir / name).read_text())
    assert result["results"][0]["warnings"] == ["DMA burning is not supported due to BME is unset (Bus primary Enable)."]


def test_fwmanager_update_declined(real_dir):
    result = mlx.parse_fwmanager_update((real_dir / "mellanox/mlxup_online_query_then_decline_CX6LX_empovit.txt").read_text())
    assert result["confirmed"] is False
    assert result["results"] == []
    assert result["reboot_required"] is False
    assert result["to_update"] == 1


def test_fwmanager_update_failed_own():
    result = mlx.parse_fwmanager_update((OWN / "mlx/mlxfwmanager_update_failed_own.txt").read_text())
    [only] = result["results"]
    assert only["status"] == "failed"
    assert only["message"] == "Burning FS4 image failed: Bad parameter"
    # One of two queried devices was updated: which one "Device #1" is stays unsaid.
    assert only["pci"] is None
    assert result["reboot_required"] is False
    assert [d["update_required"] for d in result["devices"]] == [True, False]


def test_fwmanager_xml_own():
    devices = mlx.parse_fwmanager_xml((OWN / "mlx/mlxfwmanager_query_CX7_CX6DX_own.xml").read_text())
    assert _rows(devices) == [
        ("/dev/mst/mt4129_pciconf0", "MT_0000000834", "28.40.1000", "28.43.1014", "3.7.0300", "14.33.0010", "Update required"),
        ("0000:0d:00.0", "MT_0000000359", "22.43.1014", "22.43.1014", None, None, "Up to date"),
    ]
    assert [d["update_required"] for d in devices] == [True, False]
    assert [d["base_mac"] for d in devices] == ["5c257331e4dc", "08c0eba27bc8"]
    assert devices[0]["part_number"] == "MCX755106AS-HEA_Ax"
    assert devices[1]["pci_address"] == "0000:0d:00.0"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "-E- No devices found or specified, mst might be stopped, run 'mst start' to load MST modules",
        "<?xml version='1.0'?><Devices><Device pciName='x'",
        "<Devices><Device pciName='0000:01:00.0' psid='MT_1'><Versions/></Device></Devices>",
    ],
)
def test_fwmanager_xml_errors(text):
    with pytest.raises(ParseError, match="mlxfwmanager"):
        mlx.parse_fwmanager_xml(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Querying Mellanox devices firmware ...\n",
        # cut inside the versions table: no FW row
        "Device #1:\n----------\n\n  Device Type:      ConnectX7\n  PSID:             MT_0000000834\n  Versions:         Current        Available\n",
        # no PSID
        "Device #1:\n----------\n  Versions:         Current        Available\n     FW             28.40.1000     N/A\n\n  Status:           Up to date\n",
    ],
)
def test_fwmanager_text_errors(text):
    with pytest.raises(ParseError, match="mlxfwmanager"):
        mlx.parse_fwmanager_text(text)


def test_fwmanager_text_truncated_real_block(real_dir):
    text = (real_dir / "mellanox/mlxup_query_text_CX6LX_26.33.1048_update-required_empovit.txt").read_text()
    cut = text[: text.index("     FW ")]
    with pytest.raises(ParseError, match="no FW current version"):
        mlx.parse_fwmanager_text(cut)


FLINT_EXPECTED = {
    # file: (fw_version, psid, image_type, product_version, base_guid, base_mac, release date, rom types)
    "flint_query_CX6LX_26.33.1048_empovit.txt": (
        "26.33.1048",
        "MT_0000000575",
        "FS4",
        "26.33.1048",
        "e8ebd3030070cf12",
        "e8ebd370cf12",
        "29.4.2022",
        ["UEFI", "PXE"],
    ),
    "flint_query_CX7_28.43.1014_schmaustech.txt": (
        "28.43.1014",
        "MT_0000001244",
        "FS4",
        "28.43.1014",
        "e09d730300126744",
        "e09d73126744",
        "7.11.2024",
        ["UEFI", "PXE"],
    ),
    "flint_query_full_HP-CX3Pro_2.42.5044_FS2_windows.txt": (
        "2.42.5044",
        "HP_1370110017",
        "FS2",
        "02.42.50.44",
        "9cdc71ffff5aae90",
        None,
        "21.10.2018",
        ["CLP", "UEFI", "PXE"],
    ),
    "mstflint_q_CX6LX_26.33.1048_with-lspci_empovit.txt": (
        "26.33.1048",
        "MT_0000000575",
        "FS4",
        "26.33.1048",
        "e8ebd3030070cf12",
        "e8ebd370cf12",
        "29.4.2022",
        ["UEFI", "PXE"],
    ),
    "mlxfwreset_reset_y_then_flint_query_CX7_schmaustech.txt": (
        "28.43.1014",
        "MT_0000001244",
        "FS4",
        "28.43.1014",
        "e09d730300126474",
        "e09d73126474",
        "7.11.2024",
        ["UEFI", "PXE"],
    ),
    "mlxfwreset_reset_y_then_flint_query_CX7_card2_schmaustech.txt": (
        "28.43.1014",
        "MT_0000001244",
        "FS4",
        "28.43.1014",
        "e09d730300125fc4",
        "e09d73125fc4",
        "7.11.2024",
        ["UEFI", "PXE"],
    ),
}


@pytest.mark.parametrize("path", real_params("mellanox/*flint_q*"))
def test_flint_query_real(path):
    q = mlx.parse_flint_query(path.read_text())
    got = (
        q["fw_version"],
        q["psid"],
        q["image_type"],
        q["product_version"],
        q["base_guid"],
        q["base_mac"],
        q["fw_release_date"],
        [r["type"] for r in q["rom_info"]],
    )
    assert got == FLINT_EXPECTED[path.name]


def test_flint_query_details(real_dir):
    q = mlx.parse_flint_query((real_dir / "mellanox/flint_query_CX7_28.43.1014_schmaustech.txt").read_text())
    assert q["rom_info"] == [
        {"type": "UEFI", "version": "14.36.16", "cpu": "AMD64,AARCH64"},
        {"type": "PXE", "version": "3.7.500", "cpu": "AMD64"},
    ]
    assert (q["guids_number"], q["macs_number"]) == (16, 16)
    assert q["security_attributes"] == "secure-fw"
    assert q["image_vsd"] is None
    assert q["part_number"] is None  # flint q does not print one
    fs2 = mlx.parse_flint_query((real_dir / "mellanox/flint_query_full_HP-CX3Pro_2.42.5044_FS2_windows.txt").read_text())
    assert fs2["rom_info"][0] == {"version_id": "8025", "type": "CLP"}
    assert fs2["macs"] == ["9cdc715aae91", "9cdc715aae92"]
    assert fs2["device_id"] == "4103"


def test_flint_query_health_check_fragment(real_dir):
    # The lab script greps FW Version / Product Version / Description / PSID out of flint q.
    q = mlx.parse_flint_query(_lines(real_dir / "mellanox/FULL_sigitp_example-lab-execution_CX7_aws.txt", 878, 881))
    assert (q["fw_version"], q["psid"], q["image_type"], q["rom_info"]) == ("28.43.1014", "MT_0000000834", None, [])


@pytest.mark.parametrize("text", ["", "Image type:            FS4\nPSID:                  MT_0000000575\n", "FW Version:            26.33.1048\n"])
def test_flint_query_errors(text):
    with pytest.raises(ParseError, match="flint"):
        mlx.parse_flint_query(text)


def test_fwreset_query_real_blockquote_stripped(real_dir):
    q = mlx.parse_fwreset_query((real_dir / "mellanox/mlxfwreset_query_BlueField3-DPU_j3soon_blockquote-stripped.txt").read_text())
    assert [(r["level"], r["supported"], r["default"]) for r in q["levels"]] == [(0, True, True), (1, False, False), (3, True, False), (4, True, False)]
    assert q["levels"][2]["description"] == "Driver restart and PCI reset"
    assert [(r["type"], r["supported"]) for r in q["reset_types"]] == [(0, True), (1, False), (2, False), (3, False), (4, False)]
    # "-Not supported" (lower-case s) in the sync section reads the same as "-Not Supported"
    assert [(r["sync"], r["supported"], r["default"]) for r in q["reset_syncs"]] == [(0, False, False), (1, True, True)]
    assert q["default_level"] == 0
    assert q["requires_reboot"] is False


def test_fwreset_query_old_format_reboot_only():
    text = (
        "Supported reset levels for device, /dev/mst/mt4115_pciconf0:\n\n"
        '0: Driver, PCI link, network link will remain up ("live-Patch")  -Not Supported\n'
        "3: Driver restart and PCI reset                                  -Not Supported\n"
        "4: Warm Reboot                                                   -Supported     (default)\n"
    )
    q = mlx.parse_fwreset_query(text)
    assert q["default_level"] == 4
    assert q["requires_reboot"] is True
    assert q["reset_types"] == []


def test_fwreset_query_error():
    with pytest.raises(ParseError, match="mlxfwreset"):
        mlx.parse_fwreset_query("-E- Failed to open device: /dev/mst/mt4129_pciconf0\n")


@pytest.mark.parametrize("path", real_params("mellanox/mlxfwreset_reset_y_*"))
def test_fwreset_reset_real(path):
    r = mlx.parse_fwreset_reset(path.read_text())
    card = "1" if "card2" in path.name else "0"
    assert r["device"] == f"/dev/mst/mt4129_pciconf{card}"
    assert (r["level"], r["description"]) == (3, "Driver restart and PCI reset")
    assert [s["name"] for s in r["steps"]] == ["Sending Reset Command To Fw", "Stopping Driver", "Resetting PCI", "Starting Driver", "Restarting MST"]
    assert r["completed"] is True


def test_mst_status_v_real(real_dir):
    s = mlx.parse_mst_status((real_dir / "mellanox/mst_status_v_CX7-SRIOV_schmaustech.txt").read_text())
    assert s["modules"] == ["MST PCI module is not loaded", "MST PCI configuration module is not loaded"]
    assert len(s["devices"]) == 9
    pfs = [(d["pci"], d["rdma"]) for d in s["devices"] if d["device_type"]]
    assert pfs == [("37:00.0", "mlx5_1"), ("0d:00.0", "mlx5_0")]
    assert [d["net"] for d in s["devices"] if d["net"]] == ["net-net1"]
    assert {d["numa"] for d in s["devices"]} == {"0"}


def test_mst_status_plain_full_page(real_dir):
    s = mlx.parse_mst_status(_lines(real_dir / "mellanox/FULL_sigitp_example-lab-execution_CX7_aws.txt", 290, 303))
    assert [(d["mst"], d["pci"]) for d in s["devices"]] == [
        ("/dev/mst/mt4129_pciconf0", "0000:05:00.0"),
        ("/dev/mst/mt4129_pciconf1", "0001:05:00.0"),
    ]
    assert s["modules"][1] == "MST PCI configuration module loaded"


def test_mlxconfig_query_real(real_dir):
    q = mlx.parse_mlxconfig_query((real_dir / "mellanox/mlxconfig_query_egrep_CX7_MCX715105AS-WEAT_schmaustech.txt").read_text())
    assert (q["device_type"], q["name"]) == ("ConnectX7", "MCX715105AS-WEAT_Ax")
    assert q["config"] == {"NUM_OF_VFS": "8", "SRIOV_EN": "True(1)", "LINK_TYPE_P1": "ETH(2)"}


def test_other_tools_are_not_mistaken(real_dir):
    """Each parser refuses another tool's output instead of returning something."""
    flint = (real_dir / "mellanox/flint_query_CX7_28.43.1014_schmaustech.txt").read_text()
    query = (real_dir / "mellanox/mlxup_query_text_CX6LX_26.33.1048_update-required_empovit.txt").read_text()
    with pytest.raises(ParseError):
        mlx.parse_fwmanager_text(flint)
    with pytest.raises(ParseError):
        mlx.parse_flint_query(query)
    with pytest.raises(ParseError):
        mlx.parse_fwreset_query(flint)
    with pytest.raises(ParseError):
        mlx.parse_mlxconfig_query(query)
    assert REAL.is_dir()


# ---------------------------------------------------------------- issue 8: whole versions, unreadable devices

_FW_KEYS = ("fw_current", "fw_available")


@pytest.mark.parametrize("path", real_params("mellanox/mlxfwmanager_query_*") + real_params("mellanox/mlxup_query_text_*"))
def test_fwmanager_text_cut_at_any_character_is_never_a_shorter_version(path):
    """Issue 8: mlxfwmanager text cut inside '24.99.0932' gave firmware 24.99."""
    text = path.read_text()
    whole = {(device["index"], key, device[key]) for device in mlx.parse_fwmanager_text(text) for key in _FW_KEYS}
    for end in range(len(text)):
        try:
            devices = mlx.parse_fwmanager_text(text[:end])
        except ParseError as exc:
            assert str(exc).startswith("mlxfwmanager: ")
            continue
        for device in devices:
            for key in _FW_KEYS:
                assert device[key] is None or (device["index"], key, device[key]) in whole, f"{key} {device[key]!r} from prefix {text[:end]!r}"


def test_fwmanager_text_cut_firmware_names_the_field():
    text = "Device #1:\n----------\n  PSID:             MT_0000000767\n  Versions:         Current        Available\n     FW             24.99\n"
    with pytest.raises(ParseError, match=r"mlxfwmanager: Device #1: FW current '24\.99' is not a whole firmware version"):
        mlx.parse_fwmanager_text(text)


@pytest.mark.parametrize("path", real_params("mellanox/flint_query_*"))
def test_flint_cut_at_any_character_is_never_a_shorter_version(path):
    text = path.read_text()
    whole = mlx.parse_flint_query(text)["fw_version"]
    for end in range(len(text)):
        try:
            version = mlx.parse_flint_query(text[:end])["fw_version"]
        except ParseError:
            continue
        assert version == whole, f"prefix {text[:end]!r}"


def test_fwmanager_xml_device_that_failed_to_open():
    """Issue 8: a device mlxfwmanager could not open is reported with its status; the healthy ones still parse."""
    devices = mlx.parse_fwmanager_xml((OWN / "mlx/mlxfwmanager_query_one-device-failed-to-open_own.xml").read_text())
    assert [(d["pci"], d["psid"], d["fw_current"], d["status"], d["query_failed"]) for d in devices] == [
        ("/dev/mst/mt4129_pciconf0", "MT_0000000834", "28.40.1000", "Update required", False),
        ("/dev/mst/mt4129_pciconf1", None, None, "Failed to open device", True),
        ("0000:0d:00.0", "MT_0000000359", "22.43.1014", "Up to date", False),
    ]
    failed = devices[1]
    assert (failed["part_number"], failed["description"], failed["base_mac"], failed["fw_available"]) == (None, None, None, None)
    assert failed["update_required"] is None


def test_fwmanager_text_device_that_failed_to_open():
    text = (
        "Device #1:\n----------\n\n  Device Type:      ConnectX7\n  Part Number:      --\n  Description:      --\n"
        "  PSID:             \n  PCI Device Name:  /dev/mst/mt4129_pciconf1\n  Base MAC:         --\n"
        "  Versions:         Current        Available\n     FW             --             --\n\n"
        "  Status:           Failed to open device\n"
    )
    (device,) = mlx.parse_fwmanager_text(text)
    assert (device["pci"], device["psid"], device["fw_current"], device["status"], device["query_failed"]) == (
        "/dev/mst/mt4129_pciconf1",
        None,
        None,
        "Failed to open device",
        True,
    )


def test_fwmanager_xml_device_without_psid_and_no_failure_status_still_raises():
    text = '<Devices><Device pciName="0000:0d:00.0" psid=""><Versions><FW current="22.43.1014"/></Versions><Status>Up to date</Status></Device></Devices>'
    with pytest.raises(ParseError, match="has no PSID"):
        mlx.parse_fwmanager_xml(text)


def test_fwmanager_xml_complete_empty_device_list_is_a_node_without_connectx():
    assert mlx.parse_fwmanager_xml('<?xml version="1.0" encoding="UTF-8" ?>\n<Devices>\n</Devices>\n') == []
    assert mlx.parse_fwmanager_xml("<Devices/>\n") == []


def test_fwmanager_xml_cut_before_the_first_device_is_an_error():
    with pytest.raises(ParseError, match="XML output does not parse"):
        mlx.parse_fwmanager_xml('<?xml version="1.0" encoding="UTF-8" ?>\n<Devices>\n')


# --- issue 21: a cut line is not a whole value; text the XML parser cannot take is a ParseError -------------------------

_FWMANAGER_BLOCK = (
    "Device #1:\n"
    "----------\n"
    "  Device Type:      ConnectX7\n"
    "  Part Number:      MCX755106AS-HEA_Ax\n"
    "  PCI Device Name:  /dev/mst/mt4129_pciconf0\n"
    "  PSID:             MT_0000000834\n"
    "  Versions:         Current        Available\n"
    "     FW             28.40.1000     28.43.1014\n"
    "\n"
    "  Status:           Update required\n"
)
_FLINT = "Image type:            FS4\nFW Version:            28.43.1014\nPSID:                  MT_0000000834\n"
_RESET_QUERY = (
    "Reset-levels:\n"
    '0: Driver, PCI link, network link will remain up ("live-Patch")  -Supported     (default)\n'
    "3: Driver restart and PCI reset       -Supported\n"
)
_RESET = (
    "The reset level for device, /dev/mst/mt4129_pciconf0 is:\n\n3: Driver restart and PCI reset\n"
    "-I- Sending Reset Command To Fw             -Done\n"
    "-I- Resetting PCI                           -Done\n"
)
_MST = (
    "MST modules:\n------------\n    MST PCI module loaded\n\nMST devices:\n------------\n"
    "/dev/mst/mt4129_pciconf0         - PCI configuration cycles access.\n"
)
_MLXCONFIG = (
    "Device type:        ConnectX7\nConfigurations:                              Next Boot\n"
    "         SRIOV_EN                            True(1)\n"
    "         NUM_OF_VFS                          16\n"
)
_UPDATING = _FWMANAGER_BLOCK + "\nDevice #1: Updating FW ...\n"


@pytest.mark.parametrize(
    ("parse", "text", "field"),
    [
        (mlx.parse_flint_query, _FLINT[:-8], "'PSID'"),  # PSID MT_00000 of MT_0000000834
        (mlx.parse_flint_query, _FLINT + "Rom Info:              type=UEFI version=14.3", "'Rom Info'"),
        (mlx.parse_fwmanager_text, _FWMANAGER_BLOCK[:-5], "Device #1"),  # "Update requ": read as no update required
        (mlx.parse_fwmanager_text, _FWMANAGER_BLOCK.split("  Status", maxsplit=1)[0][:-1] + "\n  PSID:             MT_00000", "Device #1"),
        (mlx.parse_fwmanager_update, _UPDATING + "Initializing image partition   -OK\nWriting Boot image component   -", "update log"),
        (mlx.parse_fwmanager_update, _UPDATING + "Done\nRestart needed for upd", "update log"),
        (mlx.parse_fwreset_query, _RESET_QUERY[:-5], "reset levels"),  # "-Supp": level 3 lost, reboot required read
        (mlx.parse_fwreset_query, _RESET_QUERY.split("(default)", maxsplit=1)[0], "reset levels"),  # the default level read as none
        (mlx.parse_fwreset_reset, _RESET[:-20], "reset steps"),  # "-I- Resetting PC": the steps before read as complete
        (mlx.parse_mst_status, _MST[:-20], "device list"),
        (mlx.parse_mlxconfig_query, _MLXCONFIG[:-2], "configuration"),  # NUM_OF_VFS 1 of 16
    ],
)
def test_a_cut_last_line_is_refused_naming_the_field(parse, text, field):
    assert parse(text + "\n")  # the same text with its newline reads: the cut, not the content, is refused
    with pytest.raises(ParseError, match=rf"cut short in .*{field}"):
        parse(text)


def test_a_cut_last_line_after_the_query_is_not_part_of_it():
    # A prompt or log line after the device blocks is not read by the query: cut or whole, the devices are the same.
    assert _rows(mlx.parse_fwmanager_text(_FWMANAGER_BLOCK + "\n[root@node ~]# mlxfw")) == _rows(mlx.parse_fwmanager_text(_FWMANAGER_BLOCK))
    assert mlx.parse_flint_query(_FLINT + "\n[root@node ~]# fli")["psid"] == "MT_0000000834"


def test_the_update_question_waiting_for_its_answer_is_dropped():
    # mlxup prints "Perform FW update? [y/N]: " with no newline and waits: no answer is read from it.
    result = mlx.parse_fwmanager_update(_FWMANAGER_BLOCK + "\nFound 1 device(s) requiring firmware update...\n\nPerform FW update? [y/N]: ")
    assert (result["to_update"], result["confirmed"], result["results"]) == (1, None, [])


@pytest.mark.parametrize(
    "text",
    [
        "<Devices>\udcff</Devices>",  # a byte that is no UTF-8, as run_command's surrogateescape keeps it
        "<Devices><Device pciName='\ud800'/></Devices>",
    ],
)
def test_fwmanager_xml_that_cannot_be_encoded_is_a_parse_error(text):
    with pytest.raises(ParseError, match="mlxfwmanager: XML output does not parse: UnicodeEncodeError"):
        mlx.parse_fwmanager_xml(text)


def test_flint_query_followed_by_a_prompt_without_newline_reads_the_query():
    assert mlx.parse_flint_query(_FLINT + "sh-5.1# ")["psid"] == "MT_0000000834"
