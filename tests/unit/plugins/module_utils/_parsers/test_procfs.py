"""Tests of the /proc/driver/nvidia, modinfo, lsmod and nvidia-container-cli parsers."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.procfs import (
    parse_container_cli_info,
    parse_driver_version,
    parse_gpus_information,
    parse_lsmod,
    parse_modinfo,
    parse_nvidia_params,
)

from tests.conftest import OWN, REAL, real_files, real_params


def _read(path):
    return path.read_text(encoding="utf-8", errors="replace")


# Read from the files by hand.
DRIVER_VERSIONS = {
    "proc_version_open_525.60.11_arch.txt": {
        "version": "525.60.11",
        "flavor": "open",
        "arch": "x86_64",
        "build_date": None,  # this build printed no date, only the builder
        "compiler": "gcc version 12.2.0 (GCC)",
    },
    "proc_version_open_555.58_localized-date.txt": {
        "version": "555.58",
        "flavor": "open",
        "arch": "x86_64",
        "build_date": "\u0421\u0431 29 \u0438\u044e\u043d 2024 14:36:22 MSK",  # a Russian-localized date, kept as text
        "compiler": None,  # first line only
    },
    "proc_version_open_aarch64_jetson_35.3.1.txt": {
        "version": "35.3.1",  # the L4T release, not a desktop driver branch
        "flavor": "open",
        "arch": "aarch64",
        "build_date": "Sun Mar 19 08:09:33 PDT 2023",
        "compiler": "gcc version 9.3.0 (Buildroot 2020.08)",
    },
    "proc_version_proprietary_384.98.txt": {
        "version": "384.98",
        "flavor": "proprietary",
        "arch": "x86_64",
        "build_date": "Thu Oct 26 15:16:01 PDT 2017",
        "compiler": "gcc version 7.2.0 (Ubuntu 7.2.0-8ubuntu3)",
    },
}


@pytest.mark.parametrize("path", real_params("proc-driver/proc_version_*"))
def test_driver_version_real(path):
    assert path.name in DRIVER_VERSIONS, f"{path.name}: a new real fixture needs its expected values here"
    assert parse_driver_version(_read(path)) == DRIVER_VERSIONS[path.name]


def test_driver_version_own_proprietary_535():
    result = parse_driver_version((OWN / "procfs" / "proc_version_proprietary_535.161.08.txt").read_text())
    assert result == {
        "version": "535.161.08",
        "flavor": "proprietary",
        "arch": "x86_64",
        "build_date": "Tue Mar  5 22:42:15 UTC 2024",
        "compiler": "gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)",
    }


@pytest.mark.parametrize(
    "text",
    [
        "",
        "GCC version:  gcc version 12.2.0 (GCC)\n",
        "cat: /proc/driver/nvidia/version: No such file or directory\n",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  \n",  # version lost
        "NVRM version:   525.105.17\n",  # nvidia-container-cli's line, not the kernel module's
    ],
)
def test_driver_version_without_nvrm_line_raises(text):
    with pytest.raises(ParseError, match="/proc/driver/nvidia/version"):
        parse_driver_version(text)


def test_driver_version_rejects_other_real_outputs():
    for path in real_files("proc-driver/nvidia-container-cli_info_*") + real_files("proc-driver/modinfo_*"):
        with pytest.raises(ParseError):
            parse_driver_version(_read(path))


# ---- modinfo ----

MODINFO = {
    # TRUNCATED paste, complete up to the parm lines: everything that matters is there.
    "modinfo_nvidia_open_590.44.01_PARTIAL.txt": {
        "version": "590.44.01",
        "license": "Dual MIT/GPL",
        "flavor": "open",
        "filename": "/lib/modules/6.8.0-90-generic/updates/dkms/nvidia.ko",
        "firmware": ["nvidia/590.44.01/gsp_tu10x.bin", "nvidia/590.44.01/gsp_ga10x.bin"],
        "vermagic": "6.8.0-90-generic SMP preempt mod_unload modversions",
        "srcversion": "6AB346C68F15FDDC88B47F1",
        "depends": ["ecc"],
        "signer": None,
    },
    # The paste lost the first character ("ilename:"): filename is unknown, the rest is right.
    "modinfo_nvidia_open_515.48.07_PARTIAL_first-char-lost.txt": {
        "version": "515.48.07",
        "license": "Dual MIT/GPL",
        "flavor": "open",
        "filename": None,
        "firmware": ["nvidia/515.48.07/gsp.bin"],
        "vermagic": "4.9.2-3.0.0.std7b.el7.5.x86_64 SMP mod_unload",
        "srcversion": "FAF867C627FC8DEDD45D08A",
        "depends": ["drm"],
        "signer": None,
    },
}


@pytest.mark.parametrize("path", real_params("proc-driver/modinfo_*"))
def test_modinfo_real_partial_results(path):
    assert path.name in MODINFO, f"{path.name}: a new real fixture needs its expected values here"
    assert parse_modinfo(_read(path)) == MODINFO[path.name]


def test_modinfo_own_proprietary_signed():
    result = parse_modinfo((OWN / "procfs" / "modinfo_nvidia_proprietary_535.161.08_signed.txt").read_text())
    assert (result["version"], result["license"], result["flavor"]) == ("535.161.08", "NVIDIA", "proprietary")
    assert result["depends"] == []
    assert result["signer"] == "DKMS module signing key"
    assert len(result["firmware"]) == 2


def test_modinfo_module_not_found():
    with pytest.raises(ParseError, match="Module nvidia not found"):
        parse_modinfo((OWN / "procfs" / "modinfo_module_not_found.txt").read_text())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no 'key: value'"),
        ("ersion:        515.48.07\nlicense:        Dual MIT/GPL\n", "no 'version:'"),  # first character lost on the version line
        ("version:        515.48\x00\nlicense:        NVIDIA\n", "not a whole driver version"),
        ("version:        550.90.07\nlicense:        Proprietary\n", "unknown license"),
    ],
)
def test_modinfo_damaged_raises(text, message):
    with pytest.raises(ParseError, match=message):
        parse_modinfo(text)


def test_modinfo_without_license_gives_no_flavor():
    assert parse_modinfo("version:        550.90.07\n")["flavor"] is None


# ---- lsmod ----


def test_lsmod_own_nvidia_stack():
    modules = parse_lsmod((OWN / "procfs" / "lsmod_nvidia_open_550.txt").read_text())
    assert modules["nvidia"] == {"size": 8650752, "used_by_count": 62, "used_by": ["nvidia_uvm", "nvidia_peermem", "nvidia_modeset"]}
    assert modules["nvidia_uvm"] == {"size": 4972544, "used_by_count": 4, "used_by": []}
    assert modules["nvidia_modeset"]["used_by"] == ["nvidia_drm"]
    assert modules["ipmi_msghandler"]["used_by"] == ["ipmi_devintf", "ipmi_si"]  # [permanent] is not a module
    assert len(modules) == 13


def test_lsmod_without_nvidia():
    modules = parse_lsmod((OWN / "procfs" / "lsmod_no_nvidia.txt").read_text())
    assert set(modules) == {"nvme", "nvme_core"}
    assert "nvidia" not in modules


def test_lsmod_header_only_is_empty():
    assert parse_lsmod("Module                  Size  Used by\n") == {}


@pytest.mark.parametrize("text", ["", "lsmod: command not found\n", "Module                  Size  Used by\nnvidia  big  3\n"])
def test_lsmod_garbage_raises(text):
    with pytest.raises(ParseError, match="lsmod"):
        parse_lsmod(text)


# ---- /proc/driver/nvidia/gpus/*/information ----


def test_gpus_information_real_two_blocks():
    files = real_files("proc-driver/proc_gpus_information_*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    assert [path.name for path in files] == ["proc_gpus_information_2x_geforce_old-driver.txt"]
    first, second = parse_gpus_information(_read(files[0]))
    assert first == {
        "model": "GeForce GTX 1080 Ti",
        "irq": 63,
        "uuid": "GPU-e953c3c5-dba7-029e-ce44-7b51417131df",
        "vbios_version": "86.02.40.00.48",
        "bus_type": "PCIe",
        "dma_size_bits": 47,
        "dma_mask": "0x7fffffffffff",
        "pci_bus_id": "0000:17:00.0",
        "device_minor": 0,
        "gpu_firmware": None,
        "excluded": False,  # read from the old "Blacklisted: No"
    }
    assert (second["model"], second["pci_bus_id"], second["device_minor"], second["dma_size_bits"]) == ("GeForce GTX TITAN X", "0000:65:00.0", 1, 40)


def test_gpus_information_own_newer_driver():
    (gpu,) = parse_gpus_information((OWN / "procfs" / "gpus_information_h100_550.90.07.txt").read_text())
    assert (gpu["model"], gpu["gpu_firmware"], gpu["excluded"], gpu["irq"]) == ("NVIDIA H100 80GB HBM3", "550.90.07", False, 0)
    assert gpu["pci_bus_id"] == "0000:18:00.0"


@pytest.mark.parametrize("text", ["", "IRQ: 63\nBus Type: PCIe\n", "cat: /proc/driver/nvidia/gpus/*/information: No such file or directory\n"])
def test_gpus_information_without_model_raises(text):
    with pytest.raises(ParseError, match="Model"):
        parse_gpus_information(text)


# ---- nvidia-container-cli info ----


@pytest.mark.parametrize("path", real_params("proc-driver/nvidia-container-cli_info_*"))
def test_container_cli_info_real(path):
    assert path.name == "nvidia-container-cli_info_525.105.17_gtx1070.txt"
    assert parse_container_cli_info(_read(path)) == {
        "driver_version": "525.105.17",
        "cuda_version": "12.0",
        "devices": [
            {
                "index": 0,
                "minor": 0,
                "model": "NVIDIA GeForce GTX 1070",
                "brand": "GeForce",
                "uuid": "GPU-38ab400c-8953-69b1-5460-f70aefd40f8b",
                "pci_bus_id": "00000000:0b:00.0",
                "architecture": "6.1",
            }
        ],
    }


def test_container_cli_info_error_raises():
    with pytest.raises(ParseError, match="nvidia-container-cli"):
        parse_container_cli_info("nvidia-container-cli: initialization error: nvml error: driver not loaded\n")


def test_every_real_proc_driver_file_is_covered():
    files = real_files("proc-driver/*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    covered = set(DRIVER_VERSIONS) | set(MODINFO) | {"proc_gpus_information_2x_geforce_old-driver.txt", "nvidia-container-cli_info_525.105.17_gtx1070.txt"}
    assert {path.name for path in files} <= covered
    assert (REAL / "proc-driver").is_dir()


def _cut_versions(parse, text, field):
    """The versions a parser returns for every character prefix of text (ParseError: None)."""
    versions = set()
    for end in range(len(text)):
        try:
            versions.add(parse(text[:end])[field])
        except ParseError:
            versions.add(None)
    return versions


@pytest.mark.parametrize("path", real_params("proc-driver/proc_version_*"))
def test_driver_version_cut_at_any_character_is_never_a_shorter_version(path):
    """Issue 8: a cut /proc/driver/nvidia/version gave 384.9 for 384.98."""
    text = _read(path)
    assert _cut_versions(parse_driver_version, text, "version") <= {None, parse_driver_version(text)["version"]}


def test_driver_version_cut_names_the_field():
    with pytest.raises(ParseError, match=r"/proc/driver/nvidia/version: NVRM version '384\.9' is not a whole driver version"):
        parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.9")
    with pytest.raises(ParseError, match=r"NVRM version '525\.60' has no patch part"):
        parse_driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  525.60")


@pytest.mark.parametrize("path", real_params("proc-driver/modinfo_*"))
def test_modinfo_cut_at_any_character_is_never_a_shorter_version(path):
    """Issue 8: a cut modinfo gave 515.4 for 515.48.07."""
    text = _read(path)
    assert _cut_versions(parse_modinfo, text, "version") <= {None, parse_modinfo(text)["version"]}


def test_container_cli_cut_at_any_character_is_never_a_shorter_version(real_dir):
    text = _read(real_dir / "proc-driver/nvidia-container-cli_info_525.105.17_gtx1070.txt")
    assert _cut_versions(parse_container_cli_info, text, "driver_version") <= {None, "525.105.17"}


def test_lsmod_used_by_after_a_long_run_of_spaces():
    line = "nvidia_uvm           1437696  2" + " " * 5000 + "nvidia_peermem\n"
    assert parse_lsmod(line)["nvidia_uvm"]["used_by"] == ["nvidia_peermem"]


# ---- a last line without its newline (cut short) ----


def _line_cuts(text, needle):
    """Every prefix of text that ends inside the line holding needle, after its start."""
    start = text.index(needle)
    end = text.find("\n", start)
    return [text[:cut] for cut in range(start + len(needle), end if end >= 0 else len(text))]


def test_driver_version_line_cut_in_its_build_date_is_an_error():
    # "...535.161.08  Tue Mar  5 22" read with build_date "Tue Mar  5 22".
    text = (OWN / "procfs" / "proc_version_proprietary_535.161.08.txt").read_text()
    for prefix in _line_cuts(text, "535.161.08"):
        with pytest.raises(ParseError, match=r"^/proc/driver/nvidia/version: the output was cut short in the build date of the NVRM version line"):
            parse_driver_version(prefix)


def test_driver_version_gcc_line_cut_is_left_out():
    text = (OWN / "procfs" / "proc_version_proprietary_535.161.08.txt").read_text()
    for prefix in _line_cuts(text, "GCC version:"):
        assert parse_driver_version(prefix) == dict(parse_driver_version(text), compiler=None)


@pytest.mark.parametrize(("needle", "key"), [("license:", "license"), ("depends:", "depends"), ("signer:", "signer"), ("firmware:", "firmware")])
def test_modinfo_field_cut_is_an_error(needle, key):
    text = (OWN / "procfs" / "modinfo_nvidia_proprietary_535.161.08_signed.txt").read_text()
    for prefix in _line_cuts(text, needle)[1:]:
        with pytest.raises(ParseError, match=rf"^modinfo nvidia: the output was cut short in {key}: \(its last line"):
            parse_modinfo(prefix)


def test_modinfo_cut_in_a_line_not_read_changes_nothing():
    text = (OWN / "procfs" / "modinfo_nvidia_proprietary_535.161.08_signed.txt").read_text()
    assert parse_modinfo(text[:-10]) == parse_modinfo(text)  # inside the last "parm:" line


def test_lsmod_row_cut_is_an_error():
    # "ipmi_msghandler 77824 3 ipmi_devintf,ipmi_s": a module used by "ipmi_s"; or a count 1 of 12.
    text = (OWN / "procfs" / "lsmod_nvidia_open_550.txt").read_text()
    for prefix in _line_cuts(text, "ipmi_msghandler"):
        with pytest.raises(ParseError, match=r"^lsmod: the output was cut short in module 'ipmi_msghandler' \(its last line"):
            parse_lsmod(prefix)


@pytest.mark.parametrize("needle", ["Bus Location:", "GPU UUID:", "GPU Excluded:"])
def test_gpus_information_field_cut_is_an_error(needle):
    # "Bus Location: 0000:18:0", "GPU UUID: GPU-5e3b", "GPU Excluded: N" (read as not excluded).
    text = (OWN / "procfs" / "gpus_information_h100_550.90.07.txt").read_text()
    for prefix in _line_cuts(text, needle):
        with pytest.raises(ParseError, match=rf"^/proc/driver/nvidia/gpus/\*/information: the output was cut short in {needle} \(its last line"):
            parse_gpus_information(prefix)


def test_container_cli_field_cut_is_an_error(real_dir):
    text = _read(real_dir / "proc-driver/nvidia-container-cli_info_525.105.17_gtx1070.txt")
    for needle, key in (("CUDA version:", "CUDA version"), ("Bus Location:", "Bus Location"), ("GPU UUID:", "GPU UUID")):
        for prefix in _line_cuts(text, needle):
            with pytest.raises(ParseError, match=rf"^nvidia-container-cli info: the output was cut short in {key}: \(its last line"):
                parse_container_cli_info(prefix)


# --- /proc/driver/nvidia/params: CDMM (issue 23) -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", real_params("gb200/cdmm/*"))
def test_real_params_cdmm(path):
    """The real capture keeps its `$ grep Coherent ...` prompt line: skipped, the mode read."""
    result = parse_nvidia_params(path.read_text(encoding="utf-8"))
    assert (result["cdmm_mode"], result["cdmm"], result["params"]) == ("driver", True, {"CoherentGPUMemoryMode": "driver"})


def test_own_params_cdmm():
    result = parse_nvidia_params((OWN / "procfs" / "proc_driver_nvidia_params_cdmm-driver.txt").read_text())
    assert result["cdmm"] is True and result["params"]["RegistryDwords"] == "" and result["params"]["ResmanDebugLevel"] == "4294967295"


@pytest.mark.parametrize(
    ("text", "mode", "cdmm"),
    [
        ("ResmanDebugLevel: 4294967295\n", None, None),  # before R580: no such parameter, not "off"
        ('CoherentGPUMemoryMode: "numa"\n', "numa", False),
        ('CoherentGPUMemoryMode: "Driver"\n', "Driver", True),
        ("CoherentGPUMemoryMode: driver\n", "driver", True),
    ],
)
def test_params_cdmm_table(text, mode, cdmm):
    result = parse_nvidia_params(text)
    assert (result["cdmm_mode"], result["cdmm"]) == (mode, cdmm)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('CoherentGPUMemoryMode: "driv', "cut short"),
        ('CoherentGPUMemoryMode: "driv\n', "CoherentGPUMemoryMode"),
        ("garbage line\n", "line 1"),
        ("", "no 'Name: value'"),
        ("$ grep Coherent /proc/driver/nvidia/params\n", "no 'Name: value'"),
    ],
)
def test_params_bad(text, field):
    with pytest.raises(ParseError, match=field):
        parse_nvidia_params(text)
