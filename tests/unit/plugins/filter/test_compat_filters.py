"""The compatibility filters, checked row by row against NVIDIA's own tables.

Tables 2 and 3 are parsed from the real capture of the CUDA 13.2 Update 2 release notes
(../shared/fixtures/real/cuda-driver/), independently of the transcription in _compat_data.py:
every row the capture holds must come back from the filters.
"""

from __future__ import annotations

import datetime
import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter.compat import FilterModule

from tests.conftest import REAL, real_files, real_params

F = FilterModule().filters()
CAPTURE = "cuda-driver/cuda_13.2u2_release_notes_Table2_Table3_CAPTURE.txt"

_T3_ROW = re.compile(r"^CUDA (?P<label>.+?)\s*\|\s*>=\s*(?P<linux>[\d.]+)\s*\|\s*(?:>=\s*(?P<windows>[\d.]+)|N/A)\s*$")
_T2_ROW = re.compile(r"^(?P<major>\d+)\.x\s*\|\s*>=\s*(?P<min>\d+)\s*\|\s*(?:<\s*(?P<max>\d+)|N/A)\s*$")
_FOOTNOTE_11 = re.compile(r"Tesla Recommended Drivers ([\d.]+) \(Linux\) / ([\d.]+) \(Windows\)")


def _section(text, title):
    """Lines of one table of the capture, from its title to the next blank line after rows."""
    start = text.index(title)
    return text[start:].split("\n\n")[0].splitlines()


def _query_for(label):
    """The CUDA version a user would write for a Table 3 row label."""
    inner = re.search(r"\((\d+\.\d+\.\d+)", label)
    if inner:
        return inner.group(1)
    match = re.match(r"^(\d+\.\d+)(\.\d+)?(?: (GA|RC|Update (\d+)))?$", label)
    assert match, f"unexpected Table 3 label {label!r}"
    if match.group(2):
        return match.group(1) + match.group(2)
    if match.group(4):
        return f"{match.group(1)}.{match.group(4)}"
    return match.group(1)


def _table3(path):
    lines = _section(path.read_text(), "Table 3 CUDA Toolkit and Corresponding Driver Versions")
    candidates = [line for line in lines if re.match(r"^CUDA \d", line)]
    rows = [_T3_ROW.match(line) for line in candidates]
    assert all(rows), [line for line, row in zip(candidates, rows) if not row]
    assert len(rows) == 64  # counted by eye in the capture: 13.2 Update 2 down to 7.0
    return [(row.group("label"), row.group("linux"), row.group("windows")) for row in rows]


def _below(version):
    """A driver version just below `version` (last component minus one)."""
    parts = [int(part) for part in version.split(".")]
    parts[-1] -= 1
    return ".".join(str(part) for part in parts)


# --- Table 3 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", real_params(CAPTURE))
def test_every_table3_row_linux_and_windows(path):
    for label, linux, windows in _table3(path):
        cuda = _query_for(label)
        assert F["cuda_min_driver"](cuda) == linux, label
        assert F["cuda_min_driver"](cuda, os="linux", compat="toolkit") == linux, label
        assert F["driver_supports_cuda"](linux, cuda) is True, label
        assert F["driver_supports_cuda"](_below(linux), cuda) is False, label
        if windows is None:
            with pytest.raises(AnsibleFilterError, match=rf"gpufleet\.lifecycle\.cuda_min_driver: .*'{re.escape(cuda)}'.*N/A"):
                F["cuda_min_driver"](cuda, os="windows")
            with pytest.raises(AnsibleFilterError, match=r"gpufleet\.lifecycle\.driver_supports_cuda"):
                F["driver_supports_cuda"]("999.1", cuda, os="windows")
        else:
            assert F["cuda_min_driver"](cuda, os="windows") == windows, label
            assert F["driver_supports_cuda"](windows, cuda, os="windows") is True, label
            assert F["driver_supports_cuda"](_below(windows), cuda, os="windows") is False, label


@pytest.mark.parametrize("path", real_params(CAPTURE))
def test_table3_ga_rows_answer_for_major_minor_and_dot_zero(path):
    for label, linux, _windows in _table3(path):
        if label.endswith(" GA") and re.match(r"^\d+\.\d+ GA$", label) and int(label.split(".")[0]) >= 11:
            assert F["cuda_min_driver"](label.split()[0] + ".0") == linux, label


@pytest.mark.parametrize("path", real_params(CAPTURE))
def test_max_cuda_for_driver_reaches_every_table3_row(path):
    for label, linux, windows in _table3(path):
        major_minor = tuple(int(part) for part in _query_for(label).split(".")[:2])
        answer = tuple(int(part) for part in F["max_cuda_for_driver"](linux).split("."))
        assert answer >= major_minor, label
        if windows is not None:
            answer = tuple(int(part) for part in F["max_cuda_for_driver"](windows, os="windows").split("."))
            assert answer >= major_minor, label


@pytest.mark.parametrize("path", real_params(CAPTURE))
def test_linux_and_windows_drivers_of_a_row_share_a_branch(path):
    for label, linux, windows in _table3(path):
        if windows is not None:
            assert F["driver_branch"](windows) == F["driver_branch"](linux) == f"R{linux.split('.')[0]}", label


@pytest.mark.parametrize(
    ("cuda", "expected"),
    [("12.4", "550.54.14"), ("12.4.1", "550.54.15"), ("12.4.0", "550.54.14"), ("11.0", "450.51.05"), ("11.0.1", "450.36.06"),
     ("10.1", "418.39"), ("10.1.243", "418.39"), ("9.2", "396.26"), ("8.0", "367.48"), (12.4, "550.54.14")],
)
def test_cuda_min_driver_examples(cuda, expected):
    assert F["cuda_min_driver"](cuda) == expected


@pytest.mark.parametrize(
    ("driver", "os", "compat", "expected"),
    [("570.26", "linux", "toolkit", "12.8"), ("570.124.06", "linux", "toolkit", "12.8"), ("575.57.08", "linux", "toolkit", "12.9"),
     ("580.65.06", "linux", "toolkit", "13.0"), ("595.71.05", "linux", "toolkit", "13.2"), ("346.46", "linux", "toolkit", "7.0"),
     ("550.100.1", "linux", "toolkit", "12.4"), ("595.84", "windows", "toolkit", "12.9"), ("595.84", "windows", "minor", "13.2"),
     ("530.30.02", "linux", "minor", "12.9"), ("450.51.06", "linux", "minor", "11.0"), ("450.80.02", "linux", "minor", "11.8")],
)
def test_max_cuda_for_driver(driver, os, compat, expected):
    assert F["max_cuda_for_driver"](driver, os=os, compat=compat) == expected


def test_versions_compare_numerically_not_as_text():
    # As text "550.100.1" < "550.54.14"; as numbers it is newer.
    assert F["driver_supports_cuda"]("550.100.1", "12.4") is True
    assert F["driver_supports_cuda"]("550.9.99", "12.4") is False
    assert F["driver_supports_cuda"]("1000.1", "12.4") is True


# --- Table 2 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", real_params(CAPTURE))
def test_every_table2_row(path):
    text = path.read_text()
    lines = _section(text, "Table 2 CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version Compatibility")
    rows = [_T2_ROW.match(line) for line in lines if re.match(r"^\d+\.x", line)]
    assert len(rows) == 3
    assert all(rows)
    footnote = _FOOTNOTE_11.search(text)
    assert footnote
    for row in rows:
        major, minimum = int(row.group("major")), row.group("min")
        for os, refined in (("linux", footnote.group(1)), ("windows", footnote.group(2))):
            # Footnote *** refines the 11.x minimum; the other rows are used as printed.
            expected = refined if major == 11 else minimum
            assert F["cuda_min_driver"](f"{major}.0", compat="minor", os=os) == expected
            assert F["driver_branch"](expected) == f"R{minimum}"
            last_of_family = {11: "11.8", 12: "12.9", 13: "13.2"}[major]
            assert F["driver_supports_cuda"](expected, last_of_family, compat="minor", os=os) is True
            assert F["driver_supports_cuda"](_below(expected) if "." in expected else f"{int(expected) - 1}.99", last_of_family, compat="minor", os=os) is False
        if row.group("max"):
            # Max is where the next family starts, not a ceiling: newer drivers still run it.
            assert F["driver_supports_cuda"](row.group("max"), f"{major}.0", compat="minor") is True
            assert F["cuda_min_driver"](f"{major + 1}.0", compat="minor") == row.group("max")


def test_minor_compat_example_and_refusal_before_cuda_11():
    assert F["cuda_min_driver"]("12.4", compat="minor") == "525"
    assert F["driver_supports_cuda"]("525.60.13", "12.8", compat="minor") is True
    assert F["driver_supports_cuda"]("525.60.13", "12.8") is False
    with pytest.raises(AnsibleFilterError, match=r"gpufleet\.lifecycle\.cuda_min_driver: CUDA '10\.2' has no minor version compatibility"):
        F["cuda_min_driver"]("10.2", compat="minor")


# --- branches ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("driver", "branch"),
    [("570.172.08", "R570"), ("572.61", "R570"), ("535.104.05", "R535"), ("537.13", "R535"), ("418.39", "R418"), ("591.86", "R590"),
     ("610.62", "R610"), ("595.84", "R595"), ("581.15", "R580"), ("470.82.01", "R470")],
)
def test_driver_branch(driver, branch):
    assert F["driver_branch"](driver) == branch


@pytest.mark.parametrize(
    ("branch", "kind", "eol", "has", "lacks"),
    [("R580", "lts", "2028-06", ["Maxwell", "Pascal", "Volta", "Turing", "Hopper", "Blackwell"], ["Kepler"]),
     ("R470", "lts", "2024-07", ["Kepler", "Volta", "Ampere"], ["Ada Lovelace", "Hopper", "Blackwell"]),
     ("R535", "lts", "2026-06", ["Volta", "Ampere", "Ada Lovelace", "Hopper"], ["Kepler", "Blackwell"]),
     ("R570", "production", "2026-02", ["Blackwell", "Volta"], ["Kepler"]),
     ("595", "production", "2027-03", ["Turing", "Blackwell"], ["Maxwell", "Pascal", "Volta"]),
     ("R590", "new feature", None, ["Turing"], ["Kepler", "Maxwell", "Pascal", "Volta"]),
     ("r450", "lts", "2023-07", ["Ampere", "Kepler"], ["Ada Lovelace"])],
)
def test_branch_info(branch, kind, eol, has, lacks):
    info = F["branch_info"](branch)
    assert info["branch"] == "R" + branch.lstrip("Rr")
    assert info["type"] == kind
    assert info["end_of_life"] == eol
    assert set(has) <= set(info["supported_architectures"])
    assert not set(lacks) & set(info["supported_architectures"])


# --- GPUs --------------------------------------------------------------------------------------

EXPECTED_CC = {
    "NVIDIA H100 80GB HBM3": "9.0",
    "NVIDIA H200": "9.0",
    "NVIDIA H800": "9.0",
    "NVIDIA B200": "10.0",
    "NVIDIA GB200": "10.0",
    "NVIDIA L40S": "8.9",
    "NVIDIA A100-SXM4-80GB": "8.0",
    "NVIDIA A100 80GB PCIe": "8.0",
    "A100-SXM4-40GB": "8.0",
    "NVIDIA A10G": "8.6",
    "Tesla V100-SXM2-32GB": "7.0",
    "Tesla V100-PCIE-16GB": "7.0",
    "Tesla T4": "7.5",
    "Tesla P100-PCIE-16GB": "6.0",
    "Quadro P2000": "6.1",
    "Quadro P400": "6.1",
    "NVIDIA GeForce RTX 4090": "8.9",
    "NVIDIA GeForce RTX 4080 SUPER": "8.9",
    "NVIDIA RTX 4000 SFF Ada Generation": "8.9",
    "NVIDIA GeForce RTX 3090": "8.6",
    "NVIDIA GeForce RTX 3080": "8.6",
    "NVIDIA GeForce RTX 3060": "8.6",
    "NVIDIA GeForce RTX 3060 Laptop GPU": "8.6",
    "NVIDIA RTX A500 Embedded GPU": "8.6",
    "NVIDIA RTX A2000 Embedded GPU": "8.6",
    "NVIDIA GeForce RTX 2080 SUPER": "7.5",
    "NVIDIA GeForce RTX 2080": "7.5",
    "NVIDIA GeForce GTX 1080": "6.1",
    "NVIDIA GeForce GTX 1070": "6.1",
    "GeForce GTX 1070 Ti": "6.1",
    "GeForce GTX 1080 Ti": "6.1",
    "GeForce GTX TITAN X": "5.2",
}
ARCHITECTURE = {"3": "Kepler", "5": "Maxwell", "6": "Pascal", "7.0": "Volta", "7.5": "Turing", "8.0": "Ampere", "8.6": "Ampere",
                "8.9": "Ada Lovelace", "9.0": "Hopper", "10.0": "Blackwell"}

_NAME_FORMS = (
    re.compile(r"<product_name>(.*?)</product_name>"),
    re.compile(r"^\s*Product Name\s*:\s*(.+?)\s*$", re.M),
    re.compile(r"^GPU \d+: (.+?) \(UUID", re.M),
    re.compile(r"^\|\s+\d+\s+(\S.*?)\s+(?:On|Off)\s+\|", re.M),
    re.compile(r"^Model:\s+(.+?)\s*$", re.M),
    re.compile(r"\| Name: (.+?)\s+\|"),
    re.compile(r"device\s+\d+ \[0x[0-9a-f]+\] (.+?)\s*$", re.M),
)


def _fixture_gpu_names():
    names = {}
    for path in real_files("**/*"):
        if not path.is_file() or path.suffix not in (".xml", ".txt", ".log", ".md", ".csv"):
            continue
        text = path.read_text(errors="replace")
        for form in _NAME_FORMS:
            for name in form.findall(text):
                names.setdefault(name, str(path.relative_to(REAL)))
    return names


@pytest.mark.parametrize(("name", "capability"), sorted(EXPECTED_CC.items()))
def test_gpu_compute_capability_and_architecture(name, capability):
    assert F["gpu_compute_capability"](name) == capability
    arch = ARCHITECTURE.get(capability) or ARCHITECTURE[capability.split(".")[0]]
    assert F["gpu_architecture"](name) == arch
    assert F["gpu_compute_capability"]("  " + name.upper() + " ") == capability  # case and spacing do not matter


def test_every_gpu_name_in_the_real_fixtures_resolves_or_fails_cleanly(real_dir):
    names = _fixture_gpu_names()
    for must in ("NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB", "NVIDIA B200", "NVIDIA A10G", "Quadro P2000"):
        assert must in names
    for name, source in sorted(names.items()):
        if name in EXPECTED_CC:
            assert F["gpu_compute_capability"](name) == EXPECTED_CC[name], source
        elif "..." in name:
            # The table view of nvidia-smi cuts long names ("NVIDIA GeForce RTX 2080 ..."): refused.
            with pytest.raises(AnsibleFilterError, match=r"gpufleet\.lifecycle\.gpu_compute_capability: GPU name .* is truncated"):
                F["gpu_compute_capability"](name)
        else:
            # Not a name we vouch for ("Graphics Device"): it must be refused, never guessed.
            with pytest.raises(AnsibleFilterError, match=r"gpufleet\.lifecycle\.gpu_compute_capability: GPU .* is unknown"):
                F["gpu_compute_capability"](name)


@pytest.mark.parametrize("name", ["Graphics Device", "NVIDIA Foo 9000", "", "A1000000", "NVIDIA A1"])
def test_unknown_gpu_names_raise(name):
    with pytest.raises(AnsibleFilterError, match=r"gpufleet\.lifecycle\.gpu_architecture: GPU"):
        F["gpu_architecture"](name)


@pytest.mark.parametrize(
    ("driver", "gpu", "expected"),
    [
        # Kepler: last in R470
        ("470.82.01", "Tesla K80", True), ("472.50", "Tesla K80", True), ("495.29.05", "Tesla K80", False),
        # Maxwell, Pascal, Volta: last in R580
        ("580.95.05", "Tesla M60", True), ("590.44.01", "Tesla M60", False),
        ("580.65.06", "Tesla P100-PCIE-16GB", True), ("590.48.01", "Quadro P2000", False), ("367.48", "NVIDIA GeForce GTX 1080", True),
        ("581.15", "Tesla V100-SXM2-32GB", True), ("590.48.01", "Tesla V100-SXM2-32GB", False),
        ("384.81", "Tesla V100-SXM2-32GB", True), ("375.26", "Tesla V100-SXM2-32GB", False),
        # Turing R410+, Ampere R450+, Ada and Hopper R520+, Blackwell R570+
        ("410.48", "Tesla T4", True), ("396.37", "Tesla T4", False), ("610.62", "Tesla T4", True),
        ("450.51.05", "NVIDIA A100-SXM4-80GB", True), ("440.33", "A100-SXM4-40GB", False),
        ("520.61.05", "NVIDIA L40S", True), ("515.65.01", "NVIDIA GeForce RTX 4090", False),
        ("520.61.05", "NVIDIA H100 80GB HBM3", True), ("525.60.13", "NVIDIA H200", True), ("515.105.01", "NVIDIA H100 80GB HBM3", False),
        ("570.26", "NVIDIA B200", True), ("570.158.01", "NVIDIA GB200", True), ("565.57.01", "NVIDIA B200", False),
        ("590.48.01", "NVIDIA B200", True),
    ],
)
def test_driver_supports_gpu(driver, gpu, expected):
    assert F["driver_supports_gpu"](driver, gpu) is expected


@pytest.mark.parametrize(
    ("cuda", "gpu", "expected"),
    [
        ("13.0", "Tesla V100-SXM2-32GB", False), ("12.9.1", "Tesla V100-SXM2-32GB", True), ("13.0", "Tesla T4", True),
        ("13.2", "Quadro P2000", False), ("13.0", "Tesla M60", False), ("12.0", "Tesla M60", True),
        ("12.0", "Tesla K80", False), ("11.8", "Tesla K80", True), ("11.0", "Tesla K10", False), ("10.2", "Tesla K10", True),
        ("12.8", "NVIDIA B200", True), ("12.6", "NVIDIA B200", False), ("11.8", "NVIDIA H100 80GB HBM3", True),
        ("11.7", "NVIDIA H100 80GB HBM3", False), ("11.0", "NVIDIA GeForce RTX 3090", False), ("11.1", "NVIDIA GeForce RTX 3090", True),
        ("11.0", "NVIDIA A100-SXM4-80GB", True), ("10.0", "Tesla T4", True), ("9.2", "Tesla T4", False),
    ],
)
def test_cuda_supports_gpu(cuda, gpu, expected):
    assert F["cuda_supports_gpu"](cuda, gpu) is expected


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "value"),
    [
        ("cuda_min_driver", ("12.7",), {}, "12.7"),
        ("cuda_min_driver", ("12.4.9",), {}, "12.4.9"),
        ("cuda_min_driver", ("twelve",), {}, "twelve"),
        ("cuda_min_driver", ("12",), {}, "12"),
        ("cuda_min_driver", (None,), {}, "None"),
        ("cuda_min_driver", ("12.4",), {"compat": "forward"}, "forward"),
        ("cuda_min_driver", ("12.4",), {"os": "macos"}, "macos"),
        ("driver_supports_cuda", ("570.x", "12.4"), {}, "570.x"),
        ("driver_supports_cuda", ("", "12.4"), {}, "''"),
        ("driver_supports_cuda", (True, "12.4"), {}, "True"),
        ("max_cuda_for_driver", ("345.1",), {}, "345.1"),
        ("max_cuda_for_driver", ("570.26",), {"os": "solaris"}, "solaris"),
        ("driver_branch", ("999.1",), {}, "999.1"),
        ("driver_branch", ("589.1",), {}, "589.1"),
        ("driver_branch", ({"version": "570"},), {}, "version"),
        ("branch_info", ("R999",), {}, "R999"),
        ("branch_info", ("Rfoo",), {}, "Rfoo"),
        ("driver_supports_gpu", ("570.26", "Graphics Device"), {}, "Graphics Device"),
        ("cuda_supports_gpu", ("12.7", "NVIDIA B200"), {}, "12.7"),
        ("gpu_compute_capability", (42,), {}, "42"),
        ("bom_violations", ({"driver": {}}, [], []), {}, "driver version"),
        ("bom_violations", ({"driver": "570.26"}, ["Foo GPU"], []), {}, "Foo GPU"),
        ("bom_violations", ({"driver": "570.26"}, [], ["12.8"]), {"today": "yesterday"}, "yesterday"),
        ("cuda_min_driver", ("12.4", "toolkit", "linux", "extra"), {}, "argument"),
    ],
)
def test_bad_input_raises_naming_filter_and_value(name, args, kwargs, value):
    with pytest.raises(AnsibleFilterError) as info:
        F[name](*args, **kwargs)
    message = str(info.value)
    assert message.startswith(f"gpufleet.lifecycle.{name}: ")
    assert value in message


# --- BOM ---------------------------------------------------------------------------------------

TODAY = datetime.date(2026, 7, 1)


def _rules(violations):
    for violation in violations:
        assert set(violation) == {"rule", "message"}
        assert violation["message"].startswith(violation["rule"] + ": ")
    return sorted(violation["rule"] for violation in violations)


def test_bom_sound():
    bom = {"driver": {"version": "580.95.05", "install": "runfile"}}
    assert F["bom_violations"](bom, ["NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB"], ["12.8", "12.4"], today=TODAY) == []


def test_bom_driver_cannot_run_cuda():
    violations = F["bom_violations"]({"driver_version": "535.104.05"}, ["NVIDIA H100 80GB HBM3"], ["12.2", "12.4"], today="2026-05-31")
    assert _rules(violations) == ["driver-cuda"]
    assert "CUDA 12.4" in violations[0]["message"]
    assert "550.54.14" in violations[0]["message"]
    # The same BOM under minor version compatibility is sound.
    assert F["bom_violations"]({"driver_version": "535.104.05", "cuda_compat": "minor"}, ["NVIDIA H100 80GB HBM3"], ["12.4"], today="2026-05-31") == []


def test_bom_driver_drops_architecture_and_cuda_13_drops_volta():
    violations = F["bom_violations"]({"driver": "590.48.01"}, [["Tesla V100-SXM2-32GB", "Tesla V100-SXM2-32GB"], ["NVIDIA H200"]], ["13.0"], today=TODAY)
    assert _rules(violations) == ["cuda-architecture", "driver-architecture"]
    by_rule = {violation["rule"]: violation["message"] for violation in violations}
    assert "dropped Volta (last supported in R580)" in by_rule["driver-architecture"]
    assert "compute capability 7.0" in by_rule["cuda-architecture"]


def test_bom_driver_predates_blackwell():
    violations = F["bom_violations"]({"driver": "565.57.01"}, ["NVIDIA B200"], [], today="2026-01-01")
    assert _rules(violations) == ["branch-eol", "driver-architecture"]
    assert "predates Blackwell (needs R570 or newer)" in next(v for v in violations if v["rule"] == "driver-architecture")["message"]


@pytest.mark.parametrize(
    ("driver", "today", "eol"),
    [("535.104.05", "2026-06-30", False), ("535.104.05", "2026-07-01", True), ("570.172.08", datetime.date(2026, 3, 1), True),
     ("570.172.08", datetime.datetime(2026, 2, 28, 23, 0), False), ("580.95.05", "2028-07-01", True), ("590.48.01", "2030-01-01", False),
     ("550.54.14", "2024-06-01", False), ("550.54.14", "2025-03-01", True)],
)
def test_bom_branch_end_of_life(driver, today, eol):
    violations = F["bom_violations"]({"driver": driver}, [], [], today=today)
    assert _rules(violations) == (["branch-eol"] if eol else [])


def test_bom_today_defaults_to_the_real_date():
    # R470 ended in 2024: whenever this runs, it is past.
    assert _rules(F["bom_violations"]({"driver": "470.82.01"}, [], [])) == ["branch-eol"]
