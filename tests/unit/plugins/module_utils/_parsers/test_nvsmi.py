"""Tests of the nvidia-smi parsers against real captures (../shared/fixtures/real) and own fixtures.

Expected values below were read from the fixture files by hand, not produced by the parser.
"""

from __future__ import annotations

import re

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import nvsmi
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError

from tests.conftest import OWN, REAL, real_files, real_params

MASKED_UUID = "GPU-00000000-0000-0000-0000-000000000000"
CAPTURES = "nvgpuexp_captures"


def _read(path):
    return path.read_text(encoding="utf-8")


def _need(path):
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared/fixtures/real not checked out)")
    return _read(path)


def capture_sections(text):
    """Split an nvidia_gpu_exporter FULL__ capture into [(title, command, body)] by its banners.

    A banner is a '####' line, '# <title>', optionally '# $ <command>', and a closing '####' line.
    """
    lines = text.splitlines()
    sections = []
    current = None
    i = 0
    while i < len(lines):
        if lines[i].startswith("#####") and i + 1 < len(lines) and lines[i + 1].startswith("# "):
            j = i + 1
            title = command = None
            while j < len(lines) and not lines[j].startswith("#####"):
                if lines[j].startswith("# $ "):
                    command = lines[j][4:].strip()
                elif title is None:
                    title = lines[j][2:].strip()
                j += 1
            current = [title, command, []]
            sections.append(current)
            i = j + 1
            continue
        if current is not None:
            current[2].append(lines[i])
        i += 1
    return [(title, command, "\n".join(body)) for title, command, body in sections]


def section(path, title):
    for found_title, command, body in capture_sections(_need(path)):
        if found_title == title:
            return command, body
    raise AssertionError(f"no section {title!r} in {path.name}")


def split_index(folder):
    """{file name: command} from a split_*/_INDEX.txt."""
    index = {}
    for line in _need(folder / "_INDEX.txt").splitlines():
        name, _sep, command = line.partition(" | ")
        index[name] = command.strip()
    return index


def query_fields(command):
    return re.search(r"--query-[a-z-]+=(\S+)", command).group(1).split(",")


# --------------------------------------------------------------------------- -q -x, real files

# file -> expected values, read from each file
XML_EXPECTED = {
    "nvsmi_qx_a10g_515.105.01_telegraf.xml": {
        "top": {"driver_version": "515.105.01", "cuda_version": "11.7", "dtd_version": 11, "attached_gpus": 1},
        "gpu": {
            "name": "NVIDIA A10G",
            "uuid": "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94",
            "serial": "0000000000000",
            "pci_bus_id": "00000000:00:1E.0",
            "vbios_version": "94.02.75.00.01",
            "product_architecture": "Ampere",
            "persistence_mode": "Disabled",
            "ecc_mode_current": "Enabled",
            "temperature_c": 17,
            "temperature_slowdown_c": 95,
            "power_draw_w": 25.58,
            "power_limit_w": 300.0,
            "memory_total_mib": 23028,
            "memory_used_mib": 22,
            "utilization_gpu_pct": 0,
            "mig_mode_current": None,
        },
        "ecc": {"volatile_sbe": 0, "volatile_dbe": 0, "aggregate_sbe": 0, "aggregate_dbe": 0},
        "active": ["gpu_idle"],
        "pcie": {"gen_max": 4, "gen_current": 1, "width_max": 16, "width_current": 8},
        "retired_pages": None,
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "histogram_max": 192,
        "processes": [(725, "/usr/lib/xorg/Xorg", "G", 22)],
    },
    "nvsmi_qx_gtx-1660-ti_418.43_telegraf.xml": {
        "top": {"driver_version": "418.43", "cuda_version": "10.1", "dtd_version": None, "attached_gpus": 1},
        "gpu": {
            "name": "Graphics Device",
            "uuid": "GPU-304a277d-3545-63b8-3a36-dfde3c992989",
            "serial": None,
            "pci_bus_id": "00000000:43:00.0",
            "vbios_version": "90.16.25.00.4C",
            "product_architecture": None,
            "ecc_mode_current": None,
            "temperature_c": 40,
            "temperature_slowdown_c": 93,
            "power_draw_w": 8.93,
            "power_limit_w": 130.0,
            "memory_total_mib": 5912,
        },
        "ecc": {"volatile_sbe": None, "volatile_dbe": None, "aggregate_sbe": None, "aggregate_dbe": None},
        "active": ["gpu_idle"],
        "pcie": {"gen_max": 3, "gen_current": 1, "width_max": 16, "width_current": 16},
        "retired_pages": None,
        "remapped_rows": None,
        "processes": [],
    },
    "nvsmi_qx_quadro-p2000_525.125.06_telegraf.xml": {
        "top": {"driver_version": "525.125.06", "cuda_version": "12.0", "dtd_version": 12, "attached_gpus": 1},
        "gpu": {
            "name": "Quadro P2000",
            "uuid": "GPU-396caaed-39ca-3199-2e68-717cdb786ec6",
            "serial": "0322218049033",
            "pci_bus_id": "00000000:17:00.0",
            "vbios_version": "86.06.3F.00.30",
            "product_architecture": "Pascal",
            "temperature_c": 34,
            "temperature_slowdown_c": 101,
            "power_draw_w": 4.61,
            "power_limit_w": 75.0,
            "memory_total_mib": 5120,
        },
        "ecc": {"volatile_sbe": None, "volatile_dbe": None, "aggregate_sbe": None, "aggregate_dbe": None},
        "active": ["gpu_idle"],
        "pcie": {"gen_max": 3, "gen_current": 1, "width_max": 16, "width_current": 8},
        "retired_pages": None,
        "remapped_rows": None,
        "processes": [],
    },
    "nvsmi_qx_quadro-p400_418.43_telegraf.xml": {
        "top": {"driver_version": "418.43", "cuda_version": "10.1", "dtd_version": None, "attached_gpus": 1},
        "gpu": {
            "name": "Quadro P400",
            "uuid": "GPU-8f750be4-dfbc-23b9-b33f-da729a536494",
            "serial": "0424418054852",
            "pci_bus_id": "00000000:43:00.0",
            "vbios_version": "86.07.3B.00.4A",
            "temperature_c": 33,
            "temperature_slowdown_c": 100,
            "power_draw_w": None,
            "power_limit_w": None,
            "memory_total_mib": 1998,
            "fan_speed_pct": 34,
        },
        "ecc": {"volatile_sbe": None, "volatile_dbe": None, "aggregate_sbe": None, "aggregate_dbe": None},
        "active": ["gpu_idle"],
        "pcie": {"gen_max": 3, "gen_current": 1, "width_max": 16, "width_current": 16},
        "retired_pages": None,
        "remapped_rows": None,
        "processes": [],
    },
    "nvsmi_qx_rtx-2080_516.59_win_netdata.xml": {
        "top": {"driver_version": "516.59", "cuda_version": "11.7", "dtd_version": 11, "attached_gpus": 1},
        "gpu": {
            "name": "NVIDIA GeForce RTX 2080",
            "uuid": "GPU-fbd55ed4-1eec-4423-0a47-ad594b4333e3",
            "serial": None,
            "pci_bus_id": "00000000:0A:00.0",
            "vbios_version": "90.04.23.00.db",
            "minor_number": None,
            "persistence_mode": None,
            "driver_model_current": "WDDM",
            "temperature_c": 29,
            "temperature_slowdown_c": 97,
            "power_draw_w": 14.5,
            "power_limit_w": 275.0,
            "memory_used_mib": 862,
            "utilization_gpu_pct": 2,
        },
        "ecc": {"volatile_sbe": None, "volatile_dbe": None, "aggregate_sbe": None, "aggregate_dbe": None},
        "active": ["gpu_idle"],
        "pcie": {"gen_max": 3, "gen_current": 3, "width_max": 16, "width_current": 8},
        "retired_pages": None,
        "remapped_rows": None,
        # WDDM: no per-process memory; one process has an empty name
        "process_count": 26,
        "processes_first": (7724, "C:\\Program Files\\WindowsApps\\Microsoft.YourPhone_1.22062.543.0_x64__8wekyb3d8bbwe\\PhoneExperienceHost.exe", "C+G", None),
        "processes_has": (10808, None, "C+G", None),
    },
    "nvsmi_qx_rtx-3060-laptop_515.65.01_netdata.xml": {
        "top": {"driver_version": "515.65.01", "cuda_version": "11.7", "dtd_version": 11, "attached_gpus": 1},
        "gpu": {
            "name": "NVIDIA GeForce RTX 3060 Laptop GPU",
            "uuid": "GPU-473d8d0f-d462-185c-6b36-6fc23e23e571",
            "pci_bus_id": "00000000:01:00.0",
            "vbios_version": "94.06.19.00.51",
            "temperature_c": 45,
            "temperature_slowdown_c": 102,
            "power_draw_w": 8.7,
            "power_limit_w": None,
            "fan_speed_pct": None,
        },
        "ecc": {"volatile_sbe": None, "volatile_dbe": None, "aggregate_sbe": None, "aggregate_dbe": None},
        "active": ["gpu_idle"],
        "pcie": {"gen_max": 4, "gen_current": 1, "width_max": 16, "width_current": 8},
        "retired_pages": None,
        "remapped_rows": None,
        "processes": [(28543, "/usr/libexec/Xorg", "G", 4)],
    },
    "nvsmi_qx_rtx-3060_570.124.04_telegraf.xml": {
        "top": {"driver_version": "570.124.04", "cuda_version": "12.8", "dtd_version": 12, "attached_gpus": 1},
        "gpu": {
            "name": "NVIDIA GeForce RTX 3060",
            "uuid": "GPU-d6889ff6-2523-9142-ca3c-1ca3f396a625",
            "pci_bus_id": "00000000:2D:00.0",
            "vbios_version": "94.04.71.00.69",
            "temperature_c": 42,
            "temperature_slowdown_c": 95,
            "power_draw_w": 11.6,
            "power_limit_w": 170.0,
            "memory_total_mib": 12288,
            "memory_used_mib": 116,
        },
        # DTD v12 with SRAM parity / SEC-DED split, all N/A on a GeForce
        "ecc": {"volatile_sbe": None, "volatile_dbe": None, "aggregate_sbe": None, "aggregate_dbe": None},
        "active": ["gpu_idle"],
        "pcie": {"gen_max": 4, "gen_current": 1, "width_max": 16, "width_current": 16},
        "retired_pages": None,
        "remapped_rows": None,
        "processes": [],
    },
    "nvsmi_qx_rtx-3080_536.40_win_telegraf.xml": {
        "top": {"driver_version": "536.40", "cuda_version": "12.2", "dtd_version": 12, "attached_gpus": 1},
        "gpu": {
            "name": "NVIDIA GeForce RTX 3080",
            "uuid": "GPU-19d6d965-2acc-f646-00f8-4c76979aabb4",
            "pci_bus_id": "00000000:04:00.0",
            "vbios_version": "94.02.71.40.72",
            "driver_model_current": "WDDM",
            "reset_required": False,
            "temperature_c": 31,
            "temperature_slowdown_c": 95,
            "power_draw_w": 22.78,
            "power_limit_w": 336.0,
            "memory_total_mib": 10240,
            "memory_used_mib": 1128,
        },
        "ecc": {"volatile_sbe": None, "volatile_dbe": None, "aggregate_sbe": None, "aggregate_dbe": None},
        "active": ["gpu_idle"],
        "pcie": {"gen_max": 4, "gen_current": 4, "width_max": 16, "width_current": 16},
        "retired_pages": None,
        "remapped_rows": None,
        "process_count": 5,
        "processes_first": (835, "/usr/lib/Xorg", "G", 550),
    },
    "nvsmi_qx_rtx-3090_525.147.05_telegraf.xml": {
        "top": {"driver_version": "525.147.05", "cuda_version": "12.0", "dtd_version": 12, "attached_gpus": 1},
        "gpu": {
            "name": "NVIDIA GeForce RTX 3090",
            "uuid": "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
            "pci_bus_id": "00000000:00:10.0",
            "vbios_version": "94.02.71.40.72",
            "temperature_c": 37,
            "temperature_slowdown_c": 95,
            "power_draw_w": 27.23,
            "power_limit_w": 200.0,
            "memory_total_mib": 24576,
        },
        "ecc": {"volatile_sbe": None, "volatile_dbe": None, "aggregate_sbe": None, "aggregate_dbe": None},
        "active": ["gpu_idle"],
        "pcie": {"gen_max": 4, "gen_current": 1, "width_max": 16, "width_current": 16},
        "retired_pages": None,
        "remapped_rows": None,
        "processes": [],
    },
    "nvsmi_qx_rtx-4000-sff-ada_595.84_telegraf.xml": {
        "top": {"driver_version": "595.84", "cuda_version": "13.2", "dtd_version": 13, "attached_gpus": 1},
        "gpu": {
            "name": "NVIDIA RTX 4000 SFF Ada Generation",
            "uuid": "GPU-37037c3f-65c8-ec4d-24a9-420204ad8026",
            "serial": "REDACTED",
            "pci_bus_id": "00000000:06:00.0",
            "vbios_version": "95.04.53.00.01",
            "product_architecture": "Ada Lovelace",
            "ecc_mode_current": "Disabled",
            "temperature_c": 38,
            # only T.Limit offsets in v13: no absolute slowdown temperature
            "temperature_slowdown_c": None,
            "temperature_tlimit_c": 49,
            "power_draw_w": 8.81,
            "power_draw_instant_w": 8.44,
            "power_limit_w": 70.0,
            "memory_total_mib": 20475,
            "memory_used_mib": 3534,
            "gsp_firmware_version": "595.84",
        },
        "ecc": {"volatile_sbe": None, "volatile_dbe": None, "aggregate_sbe": None, "aggregate_dbe": None},
        "active": ["gpu_idle"],
        "pcie": {"gen_max": 4, "gen_current": 1, "width_max": 16, "width_current": 16},
        "retired_pages": None,
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "correctable_inactive": 0, "uncorrectable_inactive": 0, "pending": False, "failure": False},
        "histogram_max": 96,
        "process_count": 4,
        "processes_first": (1842, "cosmic-comp", "G", 410),
    },
    "nvsmi_qx_rtx-4090_535.86.05_netdata.xml": {
        "top": {"driver_version": "535.86.05", "cuda_version": "12.2", "dtd_version": 12, "attached_gpus": 1},
        "gpu": {
            "name": "NVIDIA GeForce RTX 4090",
            "uuid": "GPU-71d1acc2-662d-2166-bf9f-65272d2fc437",
            "pci_bus_id": "00000000:84:00.0",
            "vbios_version": "95.02.18.80.5F",
            "ecc_mode_current": "Disabled",
            "reset_required": False,
            "temperature_c": 40,
            "temperature_slowdown_c": None,
            "temperature_tlimit_c": 43,
            "power_draw_w": 26.84,
            "power_limit_w": 450.0,
            "memory_total_mib": 24564,
            "memory_used_mib": 2,
        },
        "ecc": {"volatile_sbe": None, "volatile_dbe": None, "aggregate_sbe": None, "aggregate_dbe": None},
        "active": ["gpu_idle"],
        "pcie": {"gen_max": 3, "gen_current": 1, "width_max": 16, "width_current": 16},
        "retired_pages": None,
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "histogram_max": 192,
        "processes": [],
    },
    "nvsmi_qx_tesla-p100-pcie-16gb_510.47.03_netdata.xml": {
        "top": {"driver_version": "510.47.03", "cuda_version": "11.6", "dtd_version": 11, "attached_gpus": 1},
        "gpu": {
            "name": "Tesla P100-PCIE-16GB",
            "uuid": "GPU-d3da8716-eaab-75db-efc1-60e88e1cd55e",
            "serial": "0324217145110",
            "pci_bus_id": "00000000:00:04.0",
            "vbios_version": "86.00.52.00.02",
            "ecc_mode_current": "Enabled",
            "temperature_c": 38,
            "temperature_slowdown_c": 82,
            "power_draw_w": 26.16,
            "power_limit_w": 250.0,
            "memory_total_mib": 16384,
        },
        # old single_bit / double_bit layout: aggregate single_bit total is 3
        "ecc": {"volatile_sbe": 0, "volatile_dbe": 0, "aggregate_sbe": 3, "aggregate_dbe": 0},
        "active": ["gpu_idle"],
        "pcie": {"gen_max": 3, "gen_current": 3, "width_max": 16, "width_current": 16},
        "retired_pages": {"single_bit": 0, "double_bit": 0, "pending_blacklist": False, "pending_retirement": False, "pending": False},
        "remapped_rows": None,
        "processes": [],
    },
    "nvsmi_qx_tesla-t4_515.105.01_telegraf.xml": {
        "top": {"driver_version": "515.105.01", "cuda_version": "11.7", "dtd_version": 11, "attached_gpus": 1},
        "gpu": {
            "name": "Tesla T4",
            "uuid": "GPU-d37e67a5-91dd-3774-a5cb-99096249601a",
            "pci_bus_id": "00000000:00:1E.0",
            "vbios_version": "90.04.84.00.06",
            "ecc_mode_current": "Enabled",
            "temperature_c": 40,
            "temperature_slowdown_c": 93,
            "power_draw_w": 26.78,
            "power_limit_w": 70.0,
            "memory_total_mib": 15360,
            "memory_used_mib": 1032,
        },
        "ecc": {"volatile_sbe": 0, "volatile_dbe": 0, "aggregate_sbe": 0, "aggregate_dbe": 0},
        # clocks_throttle_reasons (older name), every reason Not Active
        "active": [],
        "pcie": {"gen_max": 3, "gen_current": 3, "width_max": 16, "width_current": 8},
        "retired_pages": {"single_bit": 0, "double_bit": 0, "pending_blacklist": False, "pending_retirement": False, "pending": False},
        "remapped_rows": None,
        "processes": [(675, "/usr/lib/xorg/Xorg", "G", 22), (5762, "python", "C", 1005)],
    },
}

PARTIAL_XML = "nvsmi_qx_gtx-1070-ti_telegraf.xml"  # telegraf trimmed it: no driver_version


def test_every_real_xml_file_has_expectations(real_dir):
    files = {path.name for path in real_dir.glob("nvsmi_qx_*.xml")}
    assert files == set(XML_EXPECTED) | {PARTIAL_XML}


@pytest.mark.parametrize("path", real_params("nvsmi_qx_*.xml"))
def test_parse_xml_real(path):
    if path.name == PARTIAL_XML:  # details in test_parse_xml_partial_real
        with pytest.raises(ParseError, match="driver_version"):
            nvsmi.parse_xml(_read(path))
        return
    expected = XML_EXPECTED[path.name]
    result = nvsmi.parse_xml(_read(path))
    for key, value in expected["top"].items():
        assert result[key] == value, key
    assert len(result["gpus"]) == 1
    gpu = result["gpus"][0]
    assert gpu["index"] == 0
    for key, value in expected["gpu"].items():
        assert gpu[key] == value, key
    for key, value in expected["ecc"].items():
        assert gpu["ecc"][key] == value, key
    assert gpu["clocks_event_reasons_active"] == expected["active"]
    # all nine reasons are reported, under the stable short names, old name or new
    assert set(gpu["clocks_event_reasons"]) == set(nvsmi.CLOCKS_EVENT_REASON_NAMES.values())
    assert gpu["pcie"] == expected["pcie"]
    assert gpu["retired_pages"] == expected["retired_pages"]
    if expected["remapped_rows"] is None:
        assert gpu["remapped_rows"] is None
    else:
        for key, value in expected["remapped_rows"].items():
            assert gpu["remapped_rows"][key] == value, key
        assert gpu["remapped_rows"]["histogram"]["max"] == expected["histogram_max"]
    processes = [(p["pid"], p["name"], p["type"], p["used_memory_mib"]) for p in gpu["processes"]]
    if "processes" in expected:
        assert processes == expected["processes"]
    else:
        assert len(processes) == expected["process_count"]
        assert processes[0] == expected["processes_first"]
        if "processes_has" in expected:
            assert expected["processes_has"] in processes


def test_parse_xml_partial_real(real_dir):
    text = _read(real_dir / PARTIAL_XML)
    with pytest.raises(ParseError, match=r"nvidia-smi -q -x: .*driver_version"):
        nvsmi.parse_xml(text)
    # read as far as it goes: DTD v10, gpu_temp, fb_memory_usage, no power reading
    result = nvsmi.parse_xml(text, strict=False)
    assert result["driver_version"] is None
    assert result["dtd_version"] == 10
    gpu = result["gpus"][0]
    assert gpu["name"] == "GeForce GTX 1070 Ti"
    assert gpu["uuid"] == "GPU-f9ba66fc-a7f5-94c5-da19-019ef2f9c665"
    assert gpu["pci_bus_id"] == "00000000:01:00.0"  # from <gpu id=...>: no <pci_bus_id> element
    assert gpu["temperature_c"] == 39
    assert gpu["memory_total_mib"] == 4096
    assert gpu["memory_used_mib"] == 42
    assert gpu["power_draw_w"] is None
    assert gpu["pcie"] == {"gen_max": None, "gen_current": 1, "width_max": None, "width_current": 16}
    assert gpu["clocks_event_reasons"] == {}


def test_rtx4000_v13_sram_split_and_counters(real_dir):
    gpu = nvsmi.parse_xml(_read(real_dir / "nvsmi_qx_rtx-4000-sff-ada_595.84_telegraf.xml"))["gpus"][0]
    assert set(gpu["ecc"]["volatile"]) == {
        "sram_correctable",
        "sram_uncorrectable_parity",
        "sram_uncorrectable_secded",
        "dram_correctable",
        "dram_uncorrectable",
    }
    assert gpu["ecc"]["aggregate"]["sram_threshold_exceeded"] is None
    assert gpu["clocks_event_reasons"]["gpu_idle"] is True
    assert gpu["clocks_event_reasons"]["sw_thermal"] is False
    assert gpu["processes"][2] == {"pid": 4937, "name": "python", "type": "C", "used_memory_mib": 160, "gpu_instance_id": None, "compute_instance_id": None}


# --------------------------------------------------------------------------- -q -x, own fixtures


def test_parse_xml_two_gpus_pending_remap_and_dbe():
    result = nvsmi.parse_xml(_read(OWN / "nvsmi" / "qx_2gpu_remap-pending_dbe.xml"))
    assert result["driver_version"] == "550.90.07"
    assert result["attached_gpus"] == 2
    healthy, sick = result["gpus"]
    # index is the <gpu> order (nvidia-smi's index), minor_number is kept apart
    assert (healthy["index"], healthy["minor_number"]) == (0, 3)
    assert (sick["index"], sick["minor_number"]) == (1, 0)
    assert healthy["ecc"]["volatile_dbe"] == 0
    assert healthy["ecc"]["aggregate_sbe"] == 12
    assert healthy["remapped_rows"]["pending"] is False
    assert healthy["retired_pages"] is None  # all N/A: the GPU remaps rows instead
    assert healthy["clocks_event_reasons_active"] == ["gpu_idle"]

    assert sick["uuid"] == "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"
    assert sick["ecc"]["volatile_sbe"] == 5  # sram 1 + dram 4
    assert sick["ecc"]["volatile_dbe"] == 2
    assert sick["ecc"]["aggregate_dbe"] == 4  # sram 1 + dram 3
    assert sick["remapped_rows"]["uncorrectable"] == 3
    assert sick["remapped_rows"]["pending"] is True
    assert sick["remapped_rows"]["histogram"] == {"max": 637, "high": 3, "partial": 0, "low": 0, "none": 0}
    assert sick["clocks_event_reasons_active"] == ["hw_thermal", "sw_thermal"]
    assert sick["clocks_event_reasons"]["hw_power_brake"] is None  # [N/A]
    assert sick["reset_required"] is True
    assert sick["drain_and_reset_recommended"] is False
    assert (sick["mig_mode_current"], sick["mig_mode_pending"]) == ("Disabled", "Enabled")
    assert sick["pcie"] == {"gen_max": 4, "gen_current": 3, "width_max": 16, "width_current": 8}
    assert (sick["temperature_c"], sick["temperature_slowdown_c"], sick["temperature_shutdown_c"], sick["temperature_memory_c"]) == (88, 89, 92, 79)
    assert (sick["power_draw_w"], sick["power_limit_w"]) == (398.5, 400.0)
    assert sick["processes"] == [
        {"pid": 424242, "name": "python3", "type": "C", "used_memory_mib": 40950, "gpu_instance_id": None, "compute_instance_id": None}
    ]


def _doc(body, root="nvidia_smi_log"):
    return f'<?xml version="1.0" ?>\n<!DOCTYPE {root} SYSTEM "nvsmi_device_v13.dtd">\n<{root}>{body}</{root}>\n'


def test_parse_xml_skips_leading_noise_and_reads_kmd_version():
    # a hypothetical R610-style document (driver_version gone, kmd_version instead) after a warning line
    text = "WARNING: infoROM is corrupted at gpu 0000:01:00.0\n" + _doc(
        "<kmd_version>610.62</kmd_version><cuda_umd_version>13.3</cuda_umd_version><attached_gpus>1</attached_gpus>"
        '<gpu id="00000000:01:00.0"><minor_number>N/A</minor_number><temperature><gpu_temp>39 C</gpu_temp></temperature></gpu>'
    )
    result = nvsmi.parse_xml(text)
    assert (result["driver_version"], result["cuda_version"], result["dtd_version"]) == ("610.62", "13.3", 13)
    assert result["gpus"][0]["index"] == 0
    assert result["gpus"][0]["minor_number"] is None
    assert result["gpus"][0]["temperature_c"] == 39


def test_parse_xml_deprecation_note_in_driver_version():
    result = nvsmi.parse_xml(_doc("<driver_version>610.62 [Deprecated; use kmd_version]</driver_version>"))
    assert result["driver_version"] == "610.62"
    assert result["gpus"] == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty output"),
        ("   \n", "empty output"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "no <nvidia_smi_log> document"),
        ('<?xml version="1.0" ?><nvidia_smi_log><driver_version>535.1', "not well-formed"),
        (_doc("<driver_version>1</driver_version>", root="mlxfwmanager"), "root element is <mlxfwmanager>"),
        (_doc("<attached_gpus>1</attached_gpus>"), "no driver_version"),
        (_doc("<driver_version>N/A</driver_version>"), "no driver_version"),
        (_doc("<driver_version>garbage</driver_version>"), "driver_version 'garbage' is not a whole driver version"),
    ],
)
def test_parse_xml_errors(text, message):
    with pytest.raises(ParseError, match=re.escape(message)) as caught:
        nvsmi.parse_xml(text)
    assert str(caught.value).startswith("nvidia-smi -q -x: ")


def test_parse_xml_garbage_fixture():
    with pytest.raises(ParseError, match="nvidia-smi -q -x"):
        nvsmi.parse_xml(_read(OWN / "nvsmi" / "garbage_driver-not-loaded.txt"))


# --------------------------------------------------------------------------- -q (text)

SPLIT_Q = {
    # file: (driver, cuda, name, bus id, vbios, temperature, power draw, mig mode, processes, remapped rows pending, mig devices)
    "split_h100-80gb-hbm3__590.48.01/h100-80gb-hbm3__590.48.01__idle-query-q.txt": (
        "590.48.01",
        "13.1",
        "NVIDIA H100 80GB HBM3",
        "00000000:00:09.0",
        "96.00.A5.00.01",
        41,
        69.85,
        "Disabled",
        0,
        False,
        0,
    ),
    "split_h100-80gb-hbm3__590.48.01/h100-80gb-hbm3__590.48.01__load-query-q.txt": (
        "590.48.01",
        "13.1",
        "NVIDIA H100 80GB HBM3",
        "00000000:00:09.0",
        "96.00.A5.00.01",
        59,
        629.45,
        "Disabled",
        3,
        False,
        0,
    ),
    "split_h100-mig__590.48.01/h100-mig__590.48.01__idle-query-q.txt": (
        "590.48.01",
        "13.1",
        "NVIDIA H100 80GB HBM3",
        "00000000:00:09.0",
        "96.00.A5.00.01",
        42,
        71.27,
        "Enabled",
        0,
        None,
        4,
    ),
    "split_h100-mig__590.48.01/h100-mig__590.48.01__load-query-q.txt": (
        "590.48.01",
        "13.1",
        "NVIDIA H100 80GB HBM3",
        "00000000:00:09.0",
        "96.00.A5.00.01",
        53,
        432.21,
        "Enabled",
        3,
        None,
        4,
    ),
    "split_h200-mig__590.48.01/h200-mig__590.48.01__idle-query-q.txt": (
        "590.48.01",
        "13.1",
        "NVIDIA H200",
        "00000000:83:00.0",
        "96.00.A5.00.03",
        28,
        78.28,
        "Enabled",
        0,
        None,
        5,
    ),
    "split_h200-mig__590.48.01/h200-mig__590.48.01__load-query-q.txt": (
        "590.48.01",
        "13.1",
        "NVIDIA H200",
        "00000000:83:00.0",
        "96.00.A5.00.03",
        36,
        294.94,
        "Enabled",
        3,
        None,
        5,
    ),
    "split_l40s__595.80/l40s__595.80__idle-query-q.txt": (
        "595.80",
        "13.2",
        "NVIDIA L40S",
        "00000000:01:00.0",
        "95.02.66.00.02",
        64,
        183.28,
        None,
        0,
        False,
        0,
    ),
    "split_l40s__595.80/l40s__595.80__load-query-q.txt": (
        "595.80",
        "13.2",
        "NVIDIA L40S",
        "00000000:01:00.0",
        "95.02.66.00.02",
        54,
        110.24,
        None,
        2,
        False,
        0,
    ),
}


def test_every_split_q_file_has_expectations(real_dir):
    files = {str(path.relative_to(real_dir / CAPTURES)) for path in real_dir.glob(f"{CAPTURES}/split_*/*-query-q.txt")}
    assert files == set(SPLIT_Q)


@pytest.mark.parametrize("path", real_params(f"{CAPTURES}/split_*/*-query-q.txt"))
def test_parse_query_text_split_real(path):
    driver, cuda, name, bus_id, vbios, temp, power, mig, n_processes, pending, n_mig = SPLIT_Q[str(path.relative_to(REAL / CAPTURES))]
    result = nvsmi.parse_query_text(_read(path))
    assert (result["driver_version"], result["cuda_version"], result["attached_gpus"]) == (driver, cuda, 1)
    (gpu,) = result["gpus"]
    assert (gpu["name"], gpu["uuid"], gpu["serial"], gpu["pci_bus_id"], gpu["vbios_version"]) == (name, MASKED_UUID, "0000000000000", bus_id, vbios)
    assert gpu["temperature_c"] == temp
    assert gpu["temperature_slowdown_c"] is None  # these drivers print T.Limit offsets only
    assert gpu["power_draw_w"] == power
    assert gpu["ecc_mode_current"] == "Enabled"
    assert (gpu["ecc"]["volatile_dbe"], gpu["ecc"]["aggregate_dbe"], gpu["ecc"]["aggregate_sbe"]) == (0, 0, 0)
    assert gpu["mig_mode_current"] == mig
    assert len(gpu["processes"]) == n_processes
    assert len(gpu["mig_devices"]) == n_mig
    assert gpu["retired_pages"] is None  # Single/Double Bit ECC and Pending Page Blacklist all N/A
    if pending is None:
        assert gpu["remapped_rows"] is None  # "Remapped Rows : N/A" under MIG
    else:
        assert gpu["remapped_rows"]["pending"] is pending
        assert gpu["remapped_rows"]["uncorrectable"] == 0


def test_parse_query_text_h200_mig_details(real_dir):
    text = _need(real_dir / CAPTURES / "split_h200-mig__590.48.01" / "h200-mig__590.48.01__load-query-q.txt")
    gpu = nvsmi.parse_query_text(text)["gpus"][0]
    assert gpu["memory_total_mib"] == 143771
    assert gpu["memory_used_mib"] == 16959
    assert gpu["utilization_gpu_pct"] is None  # N/A in MIG mode
    assert gpu["temperature_tlimit_c"] == 46
    assert gpu["power_limit_w"] == 700.0
    assert gpu["mig_devices"][2] == {
        "index": 2,
        "gpu_instance_id": 3,
        "compute_instance_id": 0,
        "multiprocessor_count": 32,
        "memory_total_mib": 33280,
        "memory_used_mib": 17,
    }
    assert gpu["processes"][2] == {"pid": 12267, "name": "./gpu_burn", "type": "C", "used_memory_mib": 13526, "gpu_instance_id": 2, "compute_instance_id": 1}
    assert gpu["clocks_event_reasons_active"] == []
    assert gpu["pcie"] == {"gen_max": 5, "gen_current": 5, "width_max": 16, "width_current": 16}


def test_parse_query_text_l40s_inactive_rows_and_histogram(real_dir):
    text = _need(real_dir / CAPTURES / "split_l40s__595.80" / "l40s__595.80__load-query-q.txt")
    rows = nvsmi.parse_query_text(text)["gpus"][0]["remapped_rows"]
    assert rows == {
        "correctable": 0,
        "uncorrectable": 0,
        "correctable_inactive": 0,
        "uncorrectable_inactive": 0,
        "pending": False,
        "failure": False,
        "histogram": {"max": 192, "high": 0, "partial": 0, "low": 0, "none": 0},
    }


FULL_Q = {
    # capture: idle (-q) section: (driver, cuda, name, bus id, vbios, temperature, slowdown, driver model, processes)
    "FULL__linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt": (
        "595.71.05",
        "13.2",
        "NVIDIA GeForce RTX 2080 SUPER",
        "00000000:0C:00.0",
        "90.04.7A.40.73",
        40,
        97,
        None,
        2,
    ),
    "FULL__linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt": (
        "595.71.05",
        "13.2",
        "NVIDIA GeForce RTX 4080 SUPER",
        "00000000:01:00.0",
        "95.03.44.00.B2",
        43,
        96,
        None,
        5,
    ),
    "FULL__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt": (
        "590.48.01",
        "13.1",
        "NVIDIA H100 80GB HBM3",
        "00000000:00:09.0",
        "96.00.A5.00.01",
        41,
        None,
        None,
        0,
    ),
    "FULL__linux-x86_64__nvidia-h100-mig__590.48.01.txt": (
        "590.48.01",
        "13.1",
        "NVIDIA H100 80GB HBM3",
        "00000000:00:09.0",
        "96.00.A5.00.01",
        42,
        None,
        None,
        0,
    ),
    "FULL__linux-x86_64__nvidia-h200-mig__590.48.01.txt": ("590.48.01", "13.1", "NVIDIA H200", "00000000:83:00.0", "96.00.A5.00.03", 28, None, None, 0),
    "FULL__linux-x86_64__nvidia-l40s__595.80.txt": ("595.80", "13.2", "NVIDIA L40S", "00000000:01:00.0", "95.02.66.00.02", 64, None, None, 0),
    "FULL__windows-x86_64__nvidia-geforce-rtx-2080-super__591.86.txt": (
        "591.86",
        "13.1",
        "NVIDIA GeForce RTX 2080 SUPER",
        "00000000:0C:00.0",
        "90.04.7a.40.73",
        40,
        97,
        "WDDM",
        10,
    ),
    # R610: "Driver Version : 610.62 [Deprecated; ...]" + "KMD Version : 610.62" + "CUDA UMD Version : 13.3"
    "FULL__windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt": (
        "610.62",
        "13.3",
        "NVIDIA GeForce RTX 2080 SUPER",
        "00000000:0C:00.0",
        "90.04.7a.40.73",
        39,
        97,
        "WDDM",
        19,
    ),
}


def test_every_full_capture_has_expectations(real_dir):
    assert {path.name for path in (real_dir / CAPTURES).glob("FULL__*")} == set(FULL_Q)


@pytest.mark.parametrize("path", real_params(f"{CAPTURES}/FULL__*.txt"))
def test_parse_query_text_full_capture_idle(path):
    driver, cuda, name, bus_id, vbios, temp, slowdown, driver_model, n_processes = FULL_Q[path.name]
    command, body = section(path, "idle :: query (-q)")
    assert command == "nvidia-smi -q"
    result = nvsmi.parse_query_text(body)
    assert (result["driver_version"], result["cuda_version"], result["attached_gpus"]) == (driver, cuda, 1)
    (gpu,) = result["gpus"]
    assert (gpu["name"], gpu["uuid"], gpu["pci_bus_id"], gpu["vbios_version"]) == (name, MASKED_UUID, bus_id, vbios)
    assert (gpu["temperature_c"], gpu["temperature_slowdown_c"]) == (temp, slowdown)
    assert gpu["driver_model_current"] == driver_model
    assert len(gpu["processes"]) == n_processes


def test_parse_query_text_r610_windows_details(real_dir):
    path = real_dir / CAPTURES / "FULL__windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt"
    _title, body = section(path, "idle :: query (-q)")
    gpu = nvsmi.parse_query_text(body)["gpus"][0]
    assert gpu["serial"] is None
    assert gpu["minor_number"] is None
    assert gpu["persistence_mode"] is None
    assert gpu["power_draw_w"] == 37.21  # average N/A, instantaneous 37.21 W
    assert gpu["power_draw_average_w"] is None
    assert gpu["power_limit_w"] == 250.0  # nested under "GPU Ceiling Power Limit" in R610
    assert gpu["clocks_event_reasons_active"] == ["gpu_idle"]
    assert gpu["ecc"]["volatile_dbe"] is None
    assert gpu["remapped_rows"] is None
    assert gpu["retired_pages"] is None
    first = gpu["processes"][0]
    assert first == {
        "pid": 2140,
        "name": "C:\\Windows\\System32\\dwm.exe",
        "type": "C+G",
        "used_memory_mib": None,
        "gpu_instance_id": None,
        "compute_instance_id": None,
    }


def test_parse_query_text_stas00_remapped_rows_excerpt(real_dir):
    text = _need(real_dir / "stas00" / "nvsmi_q_excerpt_A100-SXM4-80GB_510.73.08_remapped-rows-pending.txt")
    result = nvsmi.parse_query_text(text)
    assert (result["driver_version"], result["cuda_version"], result["attached_gpus"]) == ("510.73.08", "11.6", 8)
    (gpu,) = result["gpus"]  # excerpt: one of eight GPUs, the rest elided
    assert gpu["name"] == "NVIDIA A100-SXM4-80GB"
    assert gpu["pci_bus_id"] == "00000000:10:1C.0"
    assert gpu["uuid"] is None  # elided
    assert (gpu["ecc"]["volatile_sbe"], gpu["ecc"]["volatile_dbe"], gpu["ecc"]["aggregate_sbe"], gpu["ecc"]["aggregate_dbe"]) == (177, 0, 177, 0)
    assert gpu["retired_pages"] is None
    assert gpu["remapped_rows"]["correctable"] == 1
    assert gpu["remapped_rows"]["uncorrectable"] == 0
    assert gpu["remapped_rows"]["pending"] is True
    assert gpu["remapped_rows"]["histogram"] == {"max": 639, "high": 1, "partial": 0, "low": 0, "none": 0}


def test_parse_query_text_stas00_sram_excerpt(real_dir):
    text = _need(real_dir / "stas00" / "nvsmi_q_excerpt_ecc_sram_uncorrectable.txt")
    with pytest.raises(ParseError, match="nvidia-smi -q: no 'Driver Version'"):
        nvsmi.parse_query_text(text)
    (gpu,) = nvsmi.parse_query_text(text, strict=False)["gpus"]
    assert (gpu["ecc"]["volatile_sbe"], gpu["ecc"]["volatile_dbe"]) == (0, 1)
    # the excerpt stops before Aggregate/DRAM Uncorrectable: SRAM 5 is all it shows
    assert gpu["ecc"]["aggregate_dbe"] == 5
    assert "dram_uncorrectable" not in gpu["ecc"]["aggregate"]


def test_parse_query_text_stas00_retired_pages_excerpt(real_dir):
    text = _need(real_dir / "stas00" / "nvsmi_q_excerpt_retired-pages-pending.txt")
    with pytest.raises(ParseError, match="nvidia-smi -q"):
        nvsmi.parse_query_text(text)
    (gpu,) = nvsmi.parse_query_text(text, strict=False)["gpus"]
    # "Retired pages" (lower-case p) and a ragged colon column, as pasted
    assert gpu["retired_pages"] == {"single_bit": 2, "double_bit": 0, "pending_blacklist": True, "pending_retirement": None, "pending": True}


def test_parse_query_text_stas00_grep_output(real_dir):
    text = _need(real_dir / "stas00" / "nvsmi_q_grep_correctable.txt")
    with pytest.raises(ParseError, match="nvidia-smi -q"):
        nvsmi.parse_query_text(text)
    # grep dropped the Volatile/Aggregate context: the 1 and 5 must not be attributed
    (gpu,) = nvsmi.parse_query_text(text, strict=False)["gpus"]
    assert gpu["ecc"]["volatile_dbe"] is None
    assert gpu["ecc"]["aggregate_dbe"] is None


def test_parse_query_text_annotated_row_remapper(real_dir):
    text = _need(real_dir / "nvidia-smi" / "nvsmi_q_d_ECC_ROW_REMAPPER_i_52-00.0_550.90.07_remap-pending_ANNOTATED.txt")
    result = nvsmi.parse_query_text(text)
    assert (result["driver_version"], result["cuda_version"], result["attached_gpus"]) == ("550.90.07", "12.4", 8)
    (gpu,) = result["gpus"]  # -i 52:00.0 selects one of eight
    assert gpu["pci_bus_id"] == "00000000:52:00.0"
    assert gpu["ecc_mode_current"] is None  # "Unknown Error"
    assert gpu["ecc"]["volatile_dbe"] is None
    assert gpu["remapped_rows"]["uncorrectable"] == 1
    assert gpu["remapped_rows"]["correctable"] == 0
    # the author appended "<===" to "Pending : Yes": unknown, never a wrong False
    assert gpu["remapped_rows"]["pending"] is None
    assert gpu["remapped_rows"]["histogram"]["max"] == 2559


def test_parse_query_text_two_gpus_old_layout():
    result = nvsmi.parse_query_text(_read(OWN / "nvsmi" / "q_2gpu_old-ecc-layout_throttle.txt"))
    assert (result["driver_version"], result["cuda_version"], result["attached_gpus"]) == ("418.67", "10.1", 2)
    first, second = result["gpus"]
    assert (first["index"], first["minor_number"], second["index"]) == (0, 1, 1)
    assert first["pci_bus_id"] == "00000000:3B:00.0"
    assert (first["ecc"]["volatile_sbe"], first["ecc"]["volatile_dbe"], first["ecc"]["aggregate_sbe"], first["ecc"]["aggregate_dbe"]) == (2, 1, 9, 1)
    assert first["ecc"]["volatile"]["double_bit_device_memory"] == 1
    assert first["retired_pages"]["pending"] is True
    assert first["retired_pages"]["double_bit"] == 1
    assert first["clocks_event_reasons_active"] == ["sw_power_cap", "sw_thermal"]
    assert first["clocks_event_reasons"]["hw_thermal"] is False
    assert (first["temperature_c"], first["temperature_slowdown_c"], first["temperature_shutdown_c"]) == (84, 87, 90)
    assert (first["power_draw_w"], first["power_limit_w"]) == (249.1, 250.0)
    assert first["utilization_gpu_pct"] == 100
    assert first["processes"][0]["pid"] == 31337
    assert first["processes"][0]["used_memory_mib"] == 14990
    # the second GPU shows only a few lines: its bus id comes from the section header
    assert second["pci_bus_id"] == "00000000:86:00.0"
    assert second["uuid"] == "GPU-aaaaaaaa-bbbb-cccc-dddd-000000000002"
    assert second["temperature_c"] == 35
    assert second["processes"] == []
    assert second["ecc"]["volatile_dbe"] is None


@pytest.mark.parametrize(
    "text",
    ["", "\n\n", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "Driver Version : not-a-version\n"],
)
def test_parse_query_text_errors(text):
    with pytest.raises(ParseError, match=r"^nvidia-smi -q: "):
        nvsmi.parse_query_text(text)


def test_parse_query_text_garbage_fixture():
    with pytest.raises(ParseError, match="nvidia-smi -q: no 'Driver Version'"):
        nvsmi.parse_query_text(_read(OWN / "nvsmi" / "garbage_driver-not-loaded.txt"))


# --------------------------------------------------------------------------- CSV


def test_parse_query_csv_netdata_p100(real_dir):
    text = _read(real_dir / "nvsmi_csv_tesla-p100_netdata.csv")
    fields = [
        "name", "uuid", "fan.speed", "pstate", "memory.reserved", "memory.used", "memory.free", "utilization.gpu", "utilization.memory",
        "temperature.gpu", "power.draw", "clocks.current.graphics", "clocks.current.sm", "clocks.current.memory", "clocks.current.video",
    ]  # fmt: skip
    expected = {
        "name": "Tesla P100-PCIE-16GB",
        "uuid": "GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6",
        "fan.speed": None,  # [N/A]
        "pstate": "P0",
        "memory.reserved": 103,
        "memory.used": 0,
        "memory.free": 16280,
        "utilization.gpu": 0,
        "utilization.memory": 0,
        "temperature.gpu": 37,
        "power.draw": 28.16,
        "clocks.current.graphics": 405,
        "clocks.current.sm": 405,
        "clocks.current.memory": 715,
        "clocks.current.video": 835,
    }
    # Saved without the newline nvidia-smi ends every row with: its last value may be cut short (835 of 8350).
    assert not text.endswith("\n")
    with pytest.raises(ParseError, match=r"^nvidia-smi --query-gpu: the output was cut short in 'clocks.current.video' of the last row"):
        nvsmi.parse_query_csv(text, fields)
    text += "\n"
    assert nvsmi.parse_query_csv(text, fields) == [expected]
    # the header (with " [MiB]" units) names the fields when none are given
    assert nvsmi.parse_query_csv(text) == [expected]
    # noheader form: the data line alone
    assert nvsmi.parse_query_csv(text.splitlines(keepends=True)[1], fields) == [expected]


SPLIT_CSV = {
    # file: {field: value}
    "split_h100-80gb-hbm3__590.48.01/h100-80gb-hbm3__590.48.01__idle-query-gpu-csv-what-the-exporter-parses.txt": {
        "driver_version": "590.48.01", "name": "NVIDIA H100 80GB HBM3", "serial": "0000000000000", "pci.bus_id": "00000000:00:09.0",
        "index": 0, "temperature.gpu": 41, "power.draw": 69.85, "memory.total": 81559, "memory.used": 0, "utilization.gpu": 0,
        "ecc.errors.uncorrected.volatile.total": 0, "remapped_rows.pending": "No", "remapped_rows.histogram.max": 2560,
        "clocks_event_reasons.active": "0x0000000000000001", "clocks_event_reasons.gpu_idle": "Active", "compute_cap": "9.0",
        "pci.bus": "0x00", "retired_pages.pending": None, "mig.mode.current": "Disabled", "pcie.link.gen.max": 5,
    },
    "split_h100-80gb-hbm3__590.48.01/h100-80gb-hbm3__590.48.01__load-query-gpu-csv-what-the-exporter-parses.txt": {
        "driver_version": "590.48.01", "temperature.gpu": 59, "power.draw": 631.95, "memory.used": 19818, "utilization.gpu": 100,
        "clocks_event_reasons.active": "0x0000000000000000", "clocks_event_reasons.gpu_idle": "Not Active",
    },
    "split_h100-mig__590.48.01/h100-mig__590.48.01__idle-query-gpu-csv-what-the-exporter-parses.txt": {
        "driver_version": "590.48.01", "temperature.gpu": 42, "power.draw": 71.15, "utilization.gpu": None, "mig.mode.current": "Enabled",
        "remapped_rows.pending": None, "remapped_rows.correctable": None, "remapped_rows.histogram.max": 2560,
    },
    "split_h100-mig__590.48.01/h100-mig__590.48.01__load-query-gpu-csv-what-the-exporter-parses.txt": {
        "temperature.gpu": 53, "power.draw": 433.78, "memory.used": 11125, "mig.mode.current": "Enabled",
    },
    "split_h200-mig__590.48.01/h200-mig__590.48.01__idle-query-gpu-csv-what-the-exporter-parses.txt": {
        "name": "NVIDIA H200", "pci.bus_id": "00000000:83:00.0", "temperature.gpu": 28, "power.draw": 78.28, "memory.total": 143771,
        "remapped_rows.histogram.max": 3072, "pci.device_id": "0x233510DE",
    },
    "split_h200-mig__590.48.01/h200-mig__590.48.01__load-query-gpu-csv-what-the-exporter-parses.txt": {
        "name": "NVIDIA H200", "temperature.gpu": 36, "power.draw": 295.01, "memory.used": 16959,
    },
    "split_l40s__595.80/l40s__595.80__idle-query-gpu-csv-what-the-exporter-parses.txt": {
        "driver_version": "595.80", "kmd_version": "595.80", "name": "NVIDIA L40S", "temperature.gpu": 63, "power.draw": 144.97,
        "compute_cap": "8.9", "utilization.gpu": 100, "clocks_event_reasons_counters.sw_power_cap": 200740215, "remapped_rows.pending": "No",
    },
    "split_l40s__595.80/l40s__595.80__load-query-gpu-csv-what-the-exporter-parses.txt": {
        "driver_version": "595.80", "kmd_version": "595.80", "temperature.gpu": 54, "power.draw": 110.23, "memory.used": 1235, "utilization.gpu": 9,
    },
}  # fmt: skip

SPLIT_APPS = {
    # file: [(pid, process_name, used_gpu_memory)]
    "split_h100-80gb-hbm3__590.48.01/h100-80gb-hbm3__590.48.01__idle-query-compute-apps-per-process.txt": [],
    "split_h100-80gb-hbm3__590.48.01/h100-80gb-hbm3__590.48.01__load-query-compute-apps-per-process.txt": [
        (11327, "/root/tools/memhog", 2566), (11328, "/root/tools/memhog", 1542), (11345, "./gpu_burn", 15690),
    ],
    "split_h100-mig__590.48.01/h100-mig__590.48.01__idle-query-compute-apps-per-process.txt": [],
    "split_h100-mig__590.48.01/h100-mig__590.48.01__load-query-compute-apps-per-process.txt": [
        (21180, "/root/tools/memhog", 2296), (21181, "/root/tools/memhog", 1272), (21198, "./gpu_burn", 7484),
    ],
    "split_h200-mig__590.48.01/h200-mig__590.48.01__idle-query-compute-apps-per-process.txt": [],
    "split_h200-mig__590.48.01/h200-mig__590.48.01__load-query-compute-apps-per-process.txt": [
        (12249, "/root/tools/memhog", 2194), (12250, "/root/tools/memhog", 1170), (12267, "./gpu_burn", 13526),
    ],
    "split_l40s__595.80/l40s__595.80__idle-query-compute-apps-per-process.txt": [],
    "split_l40s__595.80/l40s__595.80__load-query-compute-apps-per-process.txt": [(20037, "ffmpeg", 538), (20038, "ffmpeg", 681)],
}  # fmt: skip


def _split_commands(real_dir, flag):
    found = {}
    for folder in sorted((real_dir / CAPTURES).glob("split_*")):
        for name, command in split_index(folder).items():
            if flag in command:
                found[f"{folder.name}/{name}"] = command
    return found


def test_parse_query_csv_split_real(real_dir):
    commands = _split_commands(real_dir, "--query-gpu=")
    assert set(commands) == set(SPLIT_CSV)
    for name, command in commands.items():
        fields = query_fields(command)
        rows = nvsmi.parse_query_csv(_read(real_dir / CAPTURES / name), fields)
        assert len(rows) == 1, name
        assert list(rows[0]) == fields, name
        for key, value in SPLIT_CSV[name].items():
            assert rows[0][key] == value, (name, key)
        assert rows[0]["uuid"] == MASKED_UUID
        assert rows[0]["count"] == 1


def test_parse_compute_apps_csv_split_real(real_dir):
    commands = _split_commands(real_dir, "--query-compute-apps=")
    assert set(commands) == set(SPLIT_APPS)
    for name, command in commands.items():
        fields = query_fields(command)
        rows = nvsmi.parse_compute_apps_csv(_read(real_dir / CAPTURES / name), fields)
        assert [(r["pid"], r["process_name"], r["used_gpu_memory"]) for r in rows] == SPLIT_APPS[name], name
        assert all(r["gpu_serial"] == "0000000000000" and r["gpu_uuid"] == MASKED_UUID for r in rows)


FULL_CSV = {
    # capture: (idle --query-gpu values, idle compute-apps count, first app (pid, name, memory))
    "FULL__windows-x86_64__nvidia-geforce-rtx-2080-super__591.86.txt": (
        {"driver_version": "591.86", "serial": None, "driver_model.current": "WDDM", "temperature.gpu": 40, "power.draw": 38.92, "fan.speed": 37,
         "memory.used": 702, "vbios_version": "90.04.7a.40.73", "pstate": "P8", "platform.chassis_serial_number": None},
        10,
        (12444, "C:\\Windows\\SystemApps\\MicrosoftWindows.Client.CBS_cw5n1h2txyewy\\TextInputHost.exe", None),
    ),
    "FULL__windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt": (
        {"driver_version": "610.62", "kmd_version": "610.62", "driver_model.current": "WDDM", "temperature.gpu": 40, "power.draw": 39.25,
         "fan.speed": 38, "memory.used": 797, "compute_cap": "7.5"},
        19,
        (2140, "C:\\Windows\\System32\\dwm.exe", None),
    ),
    "FULL__linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt": (
        {"driver_version": "595.71.05", "temperature.gpu": 40, "power.draw": 39.32, "clocks_event_reasons.active": "0x0000000000000004"},
        0,
        None,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FULL_CSV))
def test_parse_csv_full_captures(real_dir, name):
    path = real_dir / CAPTURES / name
    expected, n_apps, first_app = FULL_CSV[name]
    command, body = section(path, "idle :: query-gpu (csv, what the exporter parses)")
    (row,) = nvsmi.parse_query_csv(body, query_fields(command))
    for key, value in expected.items():
        assert row[key] == value, key
    command, body = section(path, "idle :: query-compute-apps (per-process)")
    apps = nvsmi.parse_compute_apps_csv(body, query_fields(command))
    assert len(apps) == n_apps
    if first_app:
        assert (apps[0]["pid"], apps[0]["process_name"], apps[0]["used_gpu_memory"]) == first_app


def test_parse_query_csv_values_and_units():
    fields = ["index", "name", "serial", "driver_version", "pci.bus", "memory.used", "power.draw", "ecc.mode.current", "temperature.gpu"]
    text = (
        "index, name, serial, driver_version, pci.bus, memory.used [MiB], power.draw [W], ecc.mode.current, temperature.gpu\n"
        "0, NVIDIA H100 80GB HBM3, 0000000000000, 536.40, 0xAB, 81000 MiB, 699.12 W, Enabled, 71\n"
        "1, NVIDIA H100 80GB HBM3, 1652922012345, 536.40, 0x1C, [N/A], [Not Supported], [N/A], 68\n"
    )
    first, second = nvsmi.parse_query_csv(text, fields)
    # versions, serials and hex stay text: 536.40 is not 536.4, 0xAB is not 0
    assert first == {
        "index": 0, "name": "NVIDIA H100 80GB HBM3", "serial": "0000000000000", "driver_version": "536.40", "pci.bus": "0xAB",
        "memory.used": 81000, "power.draw": 699.12, "ecc.mode.current": "Enabled", "temperature.gpu": 71,
    }  # fmt: skip
    assert (second["memory.used"], second["power.draw"], second["ecc.mode.current"]) == (None, None, None)


def test_parse_query_csv_nounits_noheader_and_field_string():
    rows = nvsmi.parse_query_csv("0, 45, 312.50\n1, 47, 298.00\n", "index,temperature.gpu,power.draw")
    assert rows == [{"index": 0, "temperature.gpu": 45, "power.draw": 312.5}, {"index": 1, "temperature.gpu": 47, "power.draw": 298.0}]


def test_parse_compute_apps_csv_comma_in_process_name():
    fields = ["pid", "process_name", "used_gpu_memory"]
    rows = nvsmi.parse_compute_apps_csv("pid, process_name, used_gpu_memory [MiB]\n4242, python train.py --tags a,b, 1024 MiB\n", fields)
    assert rows == [{"pid": 4242, "process_name": "python train.py --tags a, b", "used_gpu_memory": 1024}]


def test_parse_compute_apps_csv_empty():
    assert nvsmi.parse_compute_apps_csv("", ["pid", "process_name"]) == []
    assert nvsmi.parse_compute_apps_csv("pid, process_name\n", ["pid", "process_name"]) == []


@pytest.mark.parametrize(
    ("text", "fields", "message"),
    [
        ("", ["index"], "no GPU rows"),
        ("index, name\n", ["index", "name"], "no GPU rows"),
        ("0, NVIDIA A100, extra\n", ["index", "name", "uuid", "serial"], "has 3 values for 4 fields"),
        ("index, uuid\n0, GPU-1\n", ["index", "name"], "does not match the requested fields"),
        ("0, 45\n", None, "no field names given"),
    ],
)
def test_parse_query_csv_errors(text, fields, message):
    with pytest.raises(ParseError, match=re.escape(message)) as caught:
        nvsmi.parse_query_csv(text, fields)
    assert str(caught.value).startswith("nvidia-smi --query-gpu: ")


def test_parse_query_csv_garbage_fixture():
    text = _read(OWN / "nvsmi" / "garbage_driver-not-loaded.txt")
    with pytest.raises(ParseError, match="nvidia-smi --query-gpu"):
        nvsmi.parse_query_csv(text, ["index", "name", "uuid"])


# --------------------------------------------------------------------------- -L

LIST_EXPECTED = {
    "split_h100-80gb-hbm3__590.48.01": ("NVIDIA H100 80GB HBM3", []),
    "split_h100-mig__590.48.01": ("NVIDIA H100 80GB HBM3", ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]),
    "split_h200-mig__590.48.01": ("NVIDIA H200", ["1c.3g.71gb", "2c.3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]),
    "split_l40s__595.80": ("NVIDIA L40S", []),
}


@pytest.mark.parametrize("path", real_params(f"{CAPTURES}/split_*/*capabilities-list-l.txt"))
def test_parse_list_split_real(path):
    name, profiles = LIST_EXPECTED[path.parent.name]
    (gpu,) = nvsmi.parse_list(_read(path))
    assert (gpu["index"], gpu["name"], gpu["uuid"]) == (0, name, MASKED_UUID)
    assert [m["profile"] for m in gpu["mig"]] == profiles
    assert [m["index"] for m in gpu["mig"]] == list(range(len(profiles)))
    if profiles:
        assert gpu["mig"][1]["uuid"] == "MIG-00000001-0000-0000-0000-000000000001"


@pytest.mark.parametrize("path", real_params(f"{CAPTURES}/FULL__*.txt"))
def test_parse_list_full_captures(path):
    command, body = section(path, "capabilities :: list (-L)")
    assert command == "nvidia-smi -L"
    (gpu,) = nvsmi.parse_list(body)
    assert gpu["name"] == FULL_Q[path.name][2]
    assert gpu["uuid"] == MASKED_UUID


def test_parse_list_multi_gpu_and_old_mig_uuid():
    text = (
        "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f)\n"
        "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0)\n"
        "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-0a1b2c3d-0000-1111-2222-333344445555)\n"
    )
    gpus = nvsmi.parse_list(text)
    assert [(g["index"], g["uuid"]) for g in gpus] == [(0, "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f"), (1, "GPU-0a1b2c3d-0000-1111-2222-333344445555")]
    assert gpus[0]["mig"] == [{"index": 0, "profile": "1g.5gb", "uuid": "MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0"}]
    assert gpus[1]["mig"] == []


def test_parse_list_no_devices():
    assert nvsmi.parse_list("No devices were found\n") == []
    assert nvsmi.parse_list("") == []


@pytest.mark.parametrize(
    "text",
    ["  MIG 1g.5gb Device 0: (UUID: MIG-1)\n", "GPU 0: NVIDIA A100\n"],
)
def test_parse_list_errors(text):
    with pytest.raises(ParseError, match=r"^nvidia-smi -L: line 1"):
        nvsmi.parse_list(text)


def test_parse_list_garbage_fixture():
    with pytest.raises(ParseError, match="nvidia-smi -L"):
        nvsmi.parse_list(_read(OWN / "nvsmi" / "garbage_driver-not-loaded.txt"))


# --------------------------------------------------------------------------- names


def test_clock_event_reason_names_cover_both_generations(real_dir):
    # every reason element of every real XML (clocks_throttle_* and clocks_event_*) has a short name
    seen = set()
    for path in real_dir.glob("nvsmi_qx_*.xml"):
        seen.update(re.findall(r"<clocks_(?:event|throttle)_reason_([a-z_]+)>", _read(path)))
    assert seen
    assert seen <= set(nvsmi.CLOCKS_EVENT_REASON_NAMES)
    assert nvsmi.CLOCKS_EVENT_REASON_NAMES["sw_thermal_slowdown"] == "sw_thermal"
    assert nvsmi.CLOCKS_EVENT_REASON_NAMES["hw_thermal_slowdown"] == "hw_thermal"
    assert len(set(nvsmi.CLOCKS_EVENT_REASON_NAMES.values())) == len(nvsmi.CLOCKS_EVENT_REASON_NAMES)


def test_text_and_xml_give_the_same_keys():
    xml_gpu = nvsmi.parse_xml(_read(OWN / "nvsmi" / "qx_2gpu_remap-pending_dbe.xml"))["gpus"][0]
    text_gpu = nvsmi.parse_query_text(_read(OWN / "nvsmi" / "q_2gpu_old-ecc-layout_throttle.txt"))["gpus"][0]
    assert set(xml_gpu) == set(text_gpu)
    assert set(xml_gpu["ecc"]) == set(text_gpu["ecc"])


def test_parse_xml_v13_sram_parity_and_secded_add_up():
    # DTD v13 splits SRAM uncorrectable errors in two; both count as DBEs
    counters = (
        "<sram_correctable>4</sram_correctable><sram_uncorrectable_parity>1</sram_uncorrectable_parity>"
        "<sram_uncorrectable_secded>2</sram_uncorrectable_secded><dram_correctable>5</dram_correctable>"
        "<dram_uncorrectable>0</dram_uncorrectable>"
    )
    text = _doc(
        "<driver_version>595.84</driver_version>"
        f"<gpu><ecc_errors><volatile>{counters}</volatile><aggregate>{counters}"
        "<sram_threshold_exceeded>Yes</sram_threshold_exceeded></aggregate></ecc_errors></gpu>"
    )
    ecc = nvsmi.parse_xml(text)["gpus"][0]["ecc"]
    assert (ecc["volatile_sbe"], ecc["volatile_dbe"], ecc["aggregate_sbe"], ecc["aggregate_dbe"]) == (9, 3, 9, 3)
    assert ecc["aggregate"]["sram_threshold_exceeded"] is True


def test_parse_query_text_secded_label():
    text = (
        "Driver Version : 590.48.01\nGPU 00000000:00:09.0\n    ECC Errors\n        Volatile\n"
        "            SRAM Uncorrectable Parity : 0\n            SRAM Uncorrectable SEC-DED : 2\n"
        "            DRAM Uncorrectable : 1\n"
    )
    ecc = nvsmi.parse_query_text(text)["gpus"][0]["ecc"]
    assert ecc["volatile"]["sram_uncorrectable_secded"] == 2
    assert ecc["volatile_dbe"] == 3


def test_parse_query_csv_hex_values_stay_text():
    # "0xFF" must not read as 0 with an "xFF" unit
    rows = nvsmi.parse_query_csv("0xFF, 0x0000000000000001\n", ["clocks_event_reasons.active", "clocks_throttle_reasons.active"])
    assert rows == [{"clocks_event_reasons.active": "0xFF", "clocks_throttle_reasons.active": "0x0000000000000001"}]


@pytest.mark.parametrize("path", real_params("nvgpuexp_captures/split_*/*idle-query-q.txt"))
def test_query_text_cut_at_any_character_is_never_a_shorter_version(path):
    """Issue 8: 'Driver Version : 590.48' cut from 590.48.01 is no version; 595.80 with its newline is one."""
    head = "\n".join(path.read_text().split("\n")[:12])
    whole = nvsmi.parse_query_text(head + "\n", strict=False)["driver_version"]
    for end in range(len(head)):
        try:
            version = nvsmi.parse_query_text(head[:end], strict=False)["driver_version"]
        except ParseError as exc:
            assert str(exc).startswith("nvidia-smi -q: ")
            continue
        assert version in (None, whole), f"prefix {head[:end]!r}"


def test_query_text_two_part_version_with_its_newline():
    assert nvsmi.parse_query_text("Driver Version : 595.80\nCUDA Version : 13.2\n", strict=False)["driver_version"] == "595.80"
    with pytest.raises(ParseError, match=r"nvidia-smi -q: Driver Version '595\.80' has no patch part"):
        nvsmi.parse_query_text("Driver Version : 595.80", strict=False)


def test_inforom_image_version_from_xml_and_text(real_dir):
    """The audit compares a BOM's gpu.inforom with the InfoROM image version of every GPU."""
    xml = nvsmi.parse_xml((real_dir / "nvsmi_qx_tesla-t4_515.105.01_telegraf.xml").read_text())
    assert [g["inforom_version"] for g in xml["gpus"]] == ["G183.0200.00.02"]
    split = real_dir / "nvgpuexp_captures" / "split_h100-80gb-hbm3__590.48.01" / "h100-80gb-hbm3__590.48.01__idle-query-q.txt"
    text = nvsmi.parse_query_text(split.read_text())
    assert {g["inforom_version"] for g in text["gpus"]} == {"G520.0200.00.05"}


# --------------------------------------------------------------------------- output cut short


def test_query_text_cut_inside_a_line_is_an_error_not_a_shorter_value():
    """A UUID, a PCI bus id or a temperature cut short ('GPU-aaaa', '00000000:3B:0', '3' of 35 C) is no value."""
    text = _read(OWN / "nvsmi" / "q_2gpu_old-ecc-layout_throttle.txt")
    for label in ("GPU UUID", "Bus Id", "GPU Current Temp"):
        start = text.index(label)
        line_end = text.index("\n", start)
        for end in range(text.index(": ", start) + 3, line_end):
            with pytest.raises(ParseError, match=rf"^nvidia-smi -q: the output was cut short in '{label}' \(its last line"):
                nvsmi.parse_query_text(text[:end])
        nvsmi.parse_query_text(text[: line_end + 1])  # the line with its newline is whole


APPS = ["pid", "process_name", "gpu_uuid", "used_memory"]
UUID_A = "GPU-5c0b6e0e-8b8f-4c4b-9a53-0f1b2e1c3d4e"
UUID_B = "GPU-7d1e2f30-4a5b-4c6d-8e9f-a0b1c2d3e4f5"


@pytest.mark.parametrize(
    ("parse", "fields", "text"),
    [
        (nvsmi.parse_query_csv, ["index", "uuid", "clocks.sm"], f"0, {UUID_A}, 8350\n1, {UUID_B}, 83"),
        (nvsmi.parse_query_csv, ["index", "clocks.sm", "uuid"], f"0, 8350, {UUID_A}\n1, 8350, {UUID_B[:18]}"),
        (nvsmi.parse_query_csv, ["index", "clocks.sm", "pci.bus_id"], "0, 8350, 00000000:3B:00.0\n1, 8350, 00000000:5E:0"),
        (nvsmi.parse_compute_apps_csv, APPS, f"4242, python, {UUID_A}, 1024\n4243, python, {UUID_A}, 10"),
    ],
)
def test_csv_row_cut_short_is_an_error(parse, fields, text):
    """The last value of a cut row looks whole: 83 of 8350 MHz, half a UUID or PCI bus id, 10 of 1024 MiB."""
    with pytest.raises(ParseError, match=rf"^nvidia-smi --query-[a-z-]+: the output was cut short in '{fields[-1]}' of the last row"):
        parse(text, fields)
    assert len(parse(text + "\n", fields)) == 2  # the same row with its newline is whole


@pytest.mark.parametrize(
    "text",
    [
        "<?xml version='1.0'?><nvidia_smi_log>\udcff</nvidia_smi_log>",  # a byte that is no UTF-8, kept as a surrogate
        "<nvidia_smi_log><driver_version>550.90.07\ud800</driver_version></nvidia_smi_log>",
        "<nvidia_smi_log>" + "<gpu>" * 100_000 + "</gpu>" * 100_000 + "</nvidia_smi_log>",  # nested deep: no RecursionError
    ],
    ids=["surrogate", "surrogate-in-value", "nested-deep"],
)
def test_xml_the_parser_cannot_take_is_a_parse_error(text):
    """Issue 21: every XML parse ends in a result or a ParseError (UnicodeError and RecursionError included)."""
    with pytest.raises(ParseError, match=r"^nvidia-smi -q -x: "):
        nvsmi.parse_xml(text)


# --- Fabric block (GB200 / GB300 NVL72, HGX B200 / H100; issue 23) ----------------------------------------------------------

# Per real gb200 -q -x capture: (GPUs, addressing mode, (state, status, clique id, cluster uuid, health, multi_node) of every GPU).
GB200_XML = {
    "nvsmi_qx_4xGB200_p6e-gb200_580.173.02_k8s-test-infra_SCRUBBED-IDS.xml": (
        4,
        "ATS",
        ("Completed", "Success", 2, "00000001-0000-0000-0000-000000000001", "Healthy", True),
    ),
    "nvsmi_qx_8xB200_580.105.08_k8s-test-infra_SCRUBBED-IDS.xml": (
        8,
        None,
        ("Completed", "Success", 0, "00000000-0000-0000-0000-000000000000", "Healthy", False),
    ),
    "nvsmi_qx_8xH100-80GB-HBM3_580.105.08_k8s-test-infra_SCRUBBED-IDS.xml": (
        8,
        "HMM",
        ("Completed", "Success", 0, "00000000-0000-0000-0000-000000000000", None, False),
    ),
}
ZERO = nvsmi.ZERO_UUID
parse_xml = nvsmi.parse_xml
parse_query_text = nvsmi.parse_query_text
_FABRIC_KEYS = ("state", "status", "clique_id", "cluster_uuid", "health", "multi_node")


def test_every_gb200_xml_is_known():
    files = real_files("gb200/nvidia-smi/*.xml")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    assert {path.name for path in files} == set(GB200_XML)


@pytest.mark.parametrize("path", real_params("gb200/nvidia-smi/*.xml"))
def test_gb200_xml_fabric(path):
    count, addressing, fabric = GB200_XML[path.name]
    gpus = parse_xml(path.read_text(encoding="utf-8"))["gpus"]
    assert len(gpus) == count
    for gpu in gpus:
        assert gpu["addressing_mode"] == addressing
        assert tuple(gpu["fabric"][key] for key in _FABRIC_KEYS) == fabric


def _fabric_block(text):
    """The first GPU's Fabric block of a -q capture, whole lines."""
    lines = text[text.index("    Fabric\n") :].splitlines()
    end = next(i for i, line in enumerate(lines[1:], 1) if not line.startswith("        "))
    return "\n".join(lines[:end]) + "\n"


def test_fabric_insufficient_resources_text_excerpt():
    """The Azure excerpt (de-indented by its author): a failed join shows as Status, with CliqueId 0 and the zero UUID."""
    files = real_files("gb200/nvidia-smi/nvsmi_q_Fabric_Insufficient-Resources*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    text = files[0].read_text(encoding="utf-8")
    with pytest.raises(ParseError, match="Driver Version"):
        parse_query_text(text)  # an excerpt: never read as a whole nvidia-smi -q
    fabric = parse_query_text(text, strict=False)["gpus"][0]["fabric"]
    assert tuple(fabric[key] for key in _FABRIC_KEYS) == ("Completed", "Insufficient Resources", 0, "00000000-0000-0000-0000-000000000000", None, False)


def test_fabric_text_of_the_h100_capture_matches_its_xml_shape():
    files = real_files("nvgpuexp_captures/FULL__linux-x86_64__nvidia-h100-80gb-hbm3__*.txt")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    text = files[0].read_text(encoding="utf-8")
    block = _fabric_block(text)
    fabric = parse_query_text(block, strict=False)["gpus"][0]["fabric"]
    assert tuple(fabric[key] for key in _FABRIC_KEYS) == ("Completed", "Success", 0, "00000000-0000-0000-0000-000000000000", None, False)


def test_fabric_all_na_is_none():
    """Windows / no NVLink: every Fabric row N/A is no fabric, not a fabric in an unknown state."""
    files = real_files("nvgpuexp_captures/FULL__windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    text = files[0].read_text(encoding="utf-8")
    block = _fabric_block(text)
    assert parse_query_text(block, strict=False)["gpus"][0]["fabric"] is None


FABRIC_TEXT = """Fabric
    State                             : {state}
    Status                            : {status}
    CliqueId                          : {clique}
    ClusterUUID                       : {uuid}
    Health
        Summary                       : {health}
"""


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (("In Progress", "N/A", "0", "00000000-0000-0000-0000-000000000000", "N/A"), ("In Progress", None, 0, ZERO, None, False)),
        (
            ("Completed", "Success", "7", "6A1B2C3D-0000-4000-8000-00000000BEEF", "Unhealthy"),
            ("Completed", "Success", 7, "6a1b2c3d-0000-4000-8000-00000000beef", "Unhealthy", True),
        ),
        (("Completed", "Success", "N/A", "N/A", "Healthy"), ("Completed", "Success", None, None, "Healthy", None)),
    ],
)
def test_fabric_text_table(values, expected):
    state, status, clique, uuid, health = values
    text = FABRIC_TEXT.format(state=state, status=status, clique=clique, uuid=uuid, health=health)
    fabric = parse_query_text(text, strict=False)["gpus"][0]["fabric"]
    assert tuple(fabric[key] for key in _FABRIC_KEYS) == expected


@pytest.mark.parametrize(
    ("clique", "uuid", "field"),
    [
        ("2x", "00000001-0000-0000-0000-000000000001", "CliqueId"),
        ("-1", "00000001-0000-0000-0000-000000000001", "CliqueId"),
        ("2", "00000001-0000-0000-0000-00000000000", "ClusterUUID"),  # one digit short: garbled, never a different domain
        ("2", "00000001-0000-0000-0000", "ClusterUUID"),
    ],
)
def test_fabric_garbled_is_an_error_naming_the_field(clique, uuid, field):
    text = FABRIC_TEXT.format(state="Completed", status="Success", clique=clique, uuid=uuid, health="Healthy")
    with pytest.raises(ParseError, match=field):
        parse_query_text(text, strict=False)
    xml = (
        '<?xml version="1.0" ?><nvidia_smi_log><driver_version>580.95.05</driver_version><gpu id="00000008:01:00.0">'
        f"<fabric><state>Completed</state><status>Success</status><cliqueId>{clique}</cliqueId><clusterUuid>{uuid}</clusterUuid></fabric>"
        "</gpu></nvidia_smi_log>"
    )
    with pytest.raises(ParseError, match=field):
        parse_xml(xml)


def test_fabric_cut_inside_the_cluster_uuid_is_refused():
    text = "Driver Version : 580.95.05\n\nGPU 00000008:01:00.0\n" + "\n".join("    " + line for line in FABRIC_TEXT.splitlines())
    text = text.format(state="Completed", status="Success", clique="2", uuid="00000001-0000-0000-0000-000000000001", health="Healthy")
    cut = text[: text.index("000000000001") + 6]
    with pytest.raises(ParseError):
        parse_query_text(cut)
