"""Tests of the Xid / SXid kernel log parser and of the Xid catalog."""

from __future__ import annotations

import csv

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _xid_catalog
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.xid import normalize_pci_bus_id, parse_kernel_log, summarize

from tests.conftest import OWN, REAL, real_files, real_params

# Xid codes each real capture holds, in order, read from the files by hand. Files holding no Xid
# line (reference text, the nvidia-smi error, the kmsg capture of NVSwitch open messages) give [].
REAL_CODES = {
    "xid/akash209_dmesgT_535.161.07_xid79_multiline.txt": [79],
    "xid/akash209_nvidia-smi_unable-to-determine-device-handle.txt": [],
    "xid/bumblebee677_old-format_xid32_31_2015.txt": [32, 32, 31],
    "xid/dmesg_decode_iso_xid13_xid43_gpud.log": [13] * 16 + [43],
    "xid/driver-source_format_examples_xid94_95.txt": [94, 94, 95],
    "xid/gpud-pr46_dmesg_ctime_xid13_109.txt": [13, 13, 13, 109],
    "xid/gpud_sxid_README_xid79_sxid20034.md": [79] + [20034] * 8,
    "xid/kmsg_raw_dev_kmsg_nvswitch_gpud.log": [],
    "xid/ogkm1150_journal_xid45_caused_by_previous_xid145_149.txt": [45] * 7,
    "xid/ogkm1151_journal_xid79_rtx5080_595.71.05.txt": [79],
    "xid/pastebin_xJaypMZt_very-old-format_no-PCI-prefix.txt": [3],
    "xid/xid119-120_GSP_GB10-DGX-Spark_incident-report.txt": [119, 120],
    "xid/xid64_row-remapper-bank-full_and_xid94_lines_python-doctest.txt": [94, 64],
    "xid/xid74_nvlink_fatal_message_format_NVSentinel.txt": [74],
    "xid/xid_145_149_154_GB200-style_gpud-tests.txt": [
        *(145, 145, 145, 149, 149, 149, 149, 149, 154),  # PCI 0008:01:00
        *(149, 149, 149, 154),  # 0009:01:00
        *(145, 145, 149, 149, 149, 154),  # 0018:01:00
        *(145, 145, 149, 154),  # 0019:01:00
    ],
    "xid/xid_31_48_dmesgT_gcm-test.txt": [31, 48],
    "xid/xid_48_63_94_dmesg_H100-class_550.90.07.txt": [48, 63, 94],
    "xid/DRIVER-SOURCE_xid63-64_ECC-RAS_message_formats_ras_events.c.txt": [],
    "xid/NVSentinel_xiderrorsmapping.csv": [],
    "xid/XID_REFERENCE_merged_DERIVED.csv": [],
    "stas00/xid63_line_A100.txt": [63],
    "stas00/FULL_compute_accelerator_nvidia_debug.md": [63],  # one quoted log line among prose that names Xids
}


def _read(path):
    return path.read_text(encoding="utf-8", errors="replace")


def _events(relative):
    path = REAL / relative
    if not path.is_file():
        pytest.skip(f"{relative}: ../shared/fixtures/real is absent")
    return parse_kernel_log(_read(path))


@pytest.mark.parametrize("path", real_params("xid/*") + real_params("stas00/*xid*") + real_params("stas00/FULL_*.md"))
def test_real_capture_codes_in_order(path):
    relative = str(path.relative_to(REAL))
    assert relative in REAL_CODES, f"{relative}: a new real fixture needs its expected Xid codes here"
    assert [event["xid"] for event in parse_kernel_log(_read(path))] == REAL_CODES[relative]


def test_every_real_xid_file_has_expectations():
    files = real_files("xid/*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    assert {str(path.relative_to(REAL)) for path in files} <= set(REAL_CODES)


def test_dmesg_T_multiline_keeps_the_xid_line():
    (event,) = _events("xid/akash209_dmesgT_535.161.07_xid79_multiline.txt")
    assert event == {
        "xid": 79,
        "kind": "xid",
        "pci_bus_id": "0000:a1:00",
        "gpu_instance": None,
        "pid": None,
        "process": None,
        "message": "GPU has fallen off the bus.",
        "timestamp": "Fri Apr  5 21:29:39 2024",
    }


def test_dmesg_ctime_pid_name_and_message():
    events = _events("xid/gpud-pr46_dmesg_ctime_xid13_109.txt")
    assert events[0]["message"] == "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"
    assert events[0]["pid"] is None and events[0]["process"] is None
    last = events[-1]
    assert (last["pid"], last["process"], last["timestamp"]) == (1797828, "pt_main_thread", "Fri Aug 30 11:43:14 2024")
    assert last["message"] == "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"


def test_dmesg_monotonic_timestamp():
    events = _events("xid/bumblebee677_old-format_xid32_31_2015.txt")
    assert [event["timestamp"] for event in events] == ["24128.828315", "24128.828608", "24128.834365"]
    assert events[2]["message"] == "Ch 00000003, engmask 00000101, intr 10000000"
    assert events[2]["pid"] is None


def test_dmesg_decode_iso_timestamp():
    events = _events("xid/dmesg_decode_iso_xid13_xid43_gpud.log")
    assert events[0]["timestamp"] == "2025-01-21T04:41:44,283302+00:00"
    assert events[-1]["pci_bus_id"] == "0000:38:00"
    assert (events[-1]["pid"], events[-1]["process"], events[-1]["message"]) == (2924364, "pt_main_thread", "Ch 00000008")


def test_very_old_form_without_pci_prefix_in_syslog():
    (event,) = _events("xid/pastebin_xJaypMZt_very-old-format_no-PCI-prefix.txt")
    assert event["pci_bus_id"] == "0000:01:00"
    assert event["timestamp"] == "Jan 18 11:38:05"  # the wall clock wins over the [ 269.516977] also printed
    assert event["message"] == "C 00000005 SC 00000007 M 00001ffc Data ffffffff"


def test_journal_without_hostname():
    (event,) = _events("xid/ogkm1151_journal_xid79_rtx5080_595.71.05.txt")
    assert (event["timestamp"], event["pci_bus_id"], event["message"]) == ("May 18 19:02:39", "0000:2b:00", "GPU has fallen off the bus.")


def test_journal_kernel_tag_only_and_caused_by_suffix():
    events = _events("xid/ogkm1150_journal_xid45_caused_by_previous_xid145_149.txt")
    assert events[0]["timestamp"] is None
    assert (events[0]["pid"], events[0]["process"]) == (1818990, "python3")
    assert events[0]["message"] == "Ch 00000001 caused by previous Xid 149"


def test_mig_gpu_instance_form():
    events = _events("xid/driver-source_format_examples_xid94_95.txt")
    assert (events[0]["pci_bus_id"], events[0]["gpu_instance"], events[0]["pid"]) == ("0000:01:00", 5, 7194)
    assert events[1]["gpu_instance"] is None
    assert events[2]["message"] == "Uncontained: LTC TAG (0x2,0x1). RST: Yes, D-RST: No"


def test_process_names_with_spaces_and_colons():
    events = _events("xid/xid119-120_GSP_GB10-DGX-Spark_incident-report.txt")
    assert (events[0]["process"], events[0]["pci_bus_id"]) == ("KMS thread", "000f:01:00")
    assert events[0]["message"] == "Timeout after 45s of waiting for RPC response from GPU0 GSP!"
    gb200 = _events("xid/xid_145_149_154_GB200-style_gpud-tests.txt")
    assert gb200[13]["process"] == "ray::WorkerDict"
    assert gb200[8]["message"] == "GPU recovery action changed from 0x4 (Drain and Reset) to 0x1 (GPU Reset Required)"


def test_sxid_lines_in_blockquoted_readme():
    events = _events("xid/gpud_sxid_README_xid79_sxid20034.md")
    assert events[0]["kind"] == "xid" and events[0]["timestamp"] == "6781741.548779"
    sxids = events[1:]
    assert {event["kind"] for event in sxids} == {"sxid"}
    assert [event["pci_bus_id"] for event in sxids[:3]] == ["0000:06:00.0", "0000:05:00.0", "0000:07:00.0"]
    assert sxids[0]["message"] == "Fatal, Link 48 LTSSM Fault Up"
    assert sxids[0]["timestamp"] == "6781753.400584"


def test_row_remapper_lines():
    events = _events("xid/xid64_row-remapper-bank-full_and_xid94_lines_python-doctest.txt")
    assert events[1]["message"] == "Row Remapper Error: (0x00000002eebc4100) - All reserved rows for bank are remapped"
    (a100,) = _events("stas00/xid63_line_A100.txt")
    assert (a100["pci_bus_id"], a100["pid"], a100["process"]) == ("0000:10:1c", 1896, None)


def test_own_raw_kmsg_records():
    events = parse_kernel_log((OWN / "xid" / "kmsg_raw_xid79_sxid20034.txt").read_text())
    assert [(event["xid"], event["kind"]) for event in events] == [(79, "xid"), (20034, "sxid")]
    assert events[0]["timestamp"] == "6781741.548779"  # microseconds since boot, in dmesg's form
    assert events[1]["pci_bus_id"] == "0000:06:00.0"


def test_own_journalctl_with_hostname_and_iso():
    events = parse_kernel_log((OWN / "xid" / "journalctl_hostname_xid48_63_mig94.txt").read_text())
    assert [event["xid"] for event in events] == [48, 63, 94, 43]
    assert events[0]["timestamp"] == "Jun 04 09:58:12"
    assert (events[2]["gpu_instance"], events[2]["message"], events[2]["pid"]) == (3, "Ch 00000001", None)
    assert (events[3]["timestamp"], events[3]["process"]) == ("2024-06-04T10:01:07+0000", "python3")


def test_malformed_lines_are_skipped_not_fatal():
    events = parse_kernel_log((OWN / "xid" / "malformed_and_prose_lines.txt").read_text())
    assert [(event["xid"], event["timestamp"]) for event in events] == [(13, "101.000005"), (31, "101.000006")]
    assert events[0]["process"] == "train.py"
    assert events[1]["message"] == ""


@pytest.mark.parametrize("text", ["", None, "\n\n", "NVRM: Xid", "Xid (", "\x00\xff garbage Xid ((((: 1"])
def test_odd_input_gives_no_events(text):
    assert parse_kernel_log(text) == []


def test_unclosed_timestamp_bracket_keeps_the_event():
    (event,) = parse_kernel_log("[24128.828315 NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000000 intr 00004000\n")
    assert (event["xid"], event["timestamp"], event["message"]) == (32, None, "Channel ID 00000000 intr 00004000")


CUT_LOG = (
    "[Fri Apr  5 21:29:31 2024] NVRM: Xid (PCI:0000:52:00): 48, pid=1234, name=python3, An uncorrectable double bit error\n"
    "[Fri Apr  5 21:29:39 2024] NVRM: Xid (PCI:0000:a1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
)


@pytest.mark.parametrize("end", range(CUT_LOG.index("\n") + 1, len(CUT_LOG) - 1))
def test_a_last_line_without_its_newline_is_no_event(end):
    """A log cut inside its last line ("Xid (PCI:0000:a1:00): 7" of 79, "PCI:0000:a", half a message) keeps only the whole lines."""
    assert [(event["xid"], event["pci_bus_id"]) for event in parse_kernel_log(CUT_LOG[:end])] == [(48, "0000:52:00")]
    assert parse_kernel_log(CUT_LOG[:end])[0] == parse_kernel_log(CUT_LOG)[0]


def test_the_last_line_counts_once_its_newline_is_there():
    assert [event["xid"] for event in parse_kernel_log(CUT_LOG)] == [48, 79]
    assert [event["xid"] for event in parse_kernel_log(CUT_LOG.replace("\n", "\r\n"))] == [48, 79]


def test_summarize_counts_by_kind():
    events = _events("xid/gpud_sxid_README_xid79_sxid20034.md")
    assert summarize(events) == {79: 1}
    assert summarize(events, kind="sxid") == {20034: 8}
    assert summarize(events, kind=None) == {79: 1, 20034: 8}
    assert summarize(_events("xid/dmesg_decode_iso_xid13_xid43_gpud.log")) == {13: 16, 43: 1}
    assert summarize([]) == {}


@pytest.mark.parametrize(
    ("printed", "expected"),
    [
        ("0000:a1:00", "0000:a1:00.0"),
        ("PCI:0000:A1:00", "0000:a1:00.0"),
        ("00000000:A1:00.0", "0000:a1:00.0"),
        ("0000:05:00.1", "0000:05:00.1"),
        ("not a bus id", None),
        (None, None),
    ],
)
def test_normalize_pci_bus_id(printed, expected):
    assert normalize_pci_bus_id(printed) == expected


# ---- the catalog ----


def _csv_rows(name, header):
    path = REAL / "xid" / name
    if not path.is_file():
        pytest.skip(f"xid/{name}: ../shared/fixtures/real is absent")
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        if header:
            next(reader)
        return {int(row[0]): [cell.strip() for cell in row[1:]] for row in reader if row}


@pytest.mark.parametrize("code", [8, 13, 31, 43, 46, 48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, 145, 149, 155, 158])
def test_catalog_agrees_with_both_csv_files(code):
    derived = _csv_rows("XID_REFERENCE_merged_DERIVED.csv", header=True)
    nvsentinel = _csv_rows("NVSentinel_xiderrorsmapping.csv", header=False)
    entry = _xid_catalog.XID_CATALOG[code]
    description, mnemonic, action, _fatality = derived[code]
    assert entry["name"] == description
    assert entry["mnemonic"] == mnemonic == nvsentinel[code][0]
    assert entry["action"] == action == nvsentinel[code][1]


def test_catalog_severity_follows_nvidia_fatality_and_azure_list():
    nvsentinel = _csv_rows("NVSentinel_xiderrorsmapping.csv", header=False)
    azure = {48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120}
    for code, (_mnemonic, action, _fatality) in nvsentinel.items():
        entry = _xid_catalog.XID_CATALOG.get(code)
        if entry is None:
            continue
        if code in azure or action in ("RESET_GPU", "RESTART_BM"):
            assert entry["severity"] == "critical", code
        elif action == "RESTART_APP":
            assert entry["severity"] == "warning", code
    assert azure <= set(_xid_catalog.DEFAULT_CRITICAL_XIDS)


def test_catalog_leaves_out_unused_codes():
    derived = _csv_rows("XID_REFERENCE_merged_DERIVED.csv", header=True)
    unused = {code for code, row in derived.items() if row[0] in ("Unused", "Reserved", "No Error")}
    assert unused  # the CSV does have them (5, 10, 14, 87, 90...)
    assert not unused & set(_xid_catalog.XID_CATALOG)


def test_catalog_shape():
    catalog = _xid_catalog.XID_CATALOG
    assert set(catalog[79]) == {"name", "mnemonic", "severity", "action"}
    assert catalog[79]["name"] == "GPU has fallen off the bus"
    assert catalog[13]["severity"] == "warning" and catalog[63]["severity"] == "critical"
    assert catalog[43]["severity"] == "info"
    assert {entry["severity"] for entry in catalog.values()} == {"critical", "warning", "info"}
    assert {entry["action"] for entry in catalog.values()} <= set(_xid_catalog.ACTIONS)
    critical = _xid_catalog.DEFAULT_CRITICAL_XIDS
    assert isinstance(critical, tuple) and list(critical) == sorted(critical)
    assert 79 in critical and 13 not in critical and 43 not in critical
    assert _xid_catalog.describe(79) is catalog[79] and _xid_catalog.describe(99999) is None


def test_real_log_critical_codes():
    """What a validation gate sees: the H100 DBE capture holds critical Xids, the app-fault one none."""
    critical = set(_xid_catalog.DEFAULT_CRITICAL_XIDS)
    assert set(summarize(_events("xid/xid_48_63_94_dmesg_H100-class_550.90.07.txt"))) & critical == {48, 63}
    assert not set(summarize(_events("xid/dmesg_decode_iso_xid13_xid43_gpud.log"))) & critical
