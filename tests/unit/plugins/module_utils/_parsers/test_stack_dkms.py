"""Tests of the dkms status parser, on every real capture under stack/dkms."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.dkms import kernels_of, parse_status

from tests.conftest import real_files, real_params

# (module, version, kernel, state, format) of each entry, and the number of Error! messages. None: refused (a build
# log or a document, no dkms status line).
REAL = {
    "dkms_status_BROKEN_could-not-locate-dkms.conf_nvidia-390.48_negativo17-issue56.txt": ([], 1),
    "dkms_status_WARNING-Diff-between-built-and-installed_i915-sriov-issue274.txt": (
        [("i915-sriov-dkms", "2025.03.26", "6.11.11-2-pve", "installed", "dkms3")],
        0,
    ),
    "dkms_status_nvidia_396.45_installed_original_module-exists_negativo17-issue56.txt": (
        [("nvidia", "396.45", "4.17.14-202.fc28.x86_64", "installed", "dkms2")],
        0,
    ),
    "dkms_status_nvidia_535.86.05_NEW-dkms3-slash-format_morrownr-rtl8852bu-issue7.txt": (
        [
            ("nvidia", "535.86.05", "6.5.0-060500rc5-generic", "installed", "dkms3"),
            ("rtl8852bu", "1.19.3", "6.5.0-060500rc5-generic", "installed", "dkms3"),
        ],
        0,
    ),
    "dkms_status_nvidia_OLD-dkms2-comma-format_396.45_3-kernels_negativo17-issue56.txt": (
        [("nvidia", "396.45", f"4.17.{k}.fc28.x86_64", "installed", "dkms2") for k in ("11-200", "12-200", "14-202")],
        0,
    ),
    # The author's markdown quotes each output line with "> ": read without it (see test_real_built_for_an_older_kernel).
    "dkms_status_nvidia_580.126.20_installed-for-OLD-kernel_after-kernel-update_Debian13_annotated.txt": None,
    # A failed dkms install prints the same Error! line dkms status does.
    "dkms_install_nvidia_470.86_BUILD-FAILED_bad-return-status_M-Bab-issue101.txt": ([], 1),
}
REFERENCES = ("DOCS_", "TEST-EXPECTED_")


def _entries(result):
    return [(m["module"], m["version"], m["kernel"], m["state"], m["format"]) for m in result["modules"]]


@pytest.mark.parametrize("path", real_params("stack/dkms/*"))
def test_real(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.name.startswith(REFERENCES):
        pytest.skip("a reference (documentation, a test's template), not a node's output")
    expected = REAL.get(path.name)
    if expected is None:
        with pytest.raises(ParseError, match="dkms status"):
            parse_status(text)
        return
    result = parse_status(text)
    assert (_entries(result), len(result["errors"])) == expected


def test_real_broken_tree_names_the_file():
    files = real_files("stack/dkms/dkms_status_BROKEN_*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    [error] = parse_status(files[0].read_text())["errors"]
    assert error.startswith("Could not locate dkms.conf file.") and "/var/lib/dkms/nvidia/390.48/source/dkms.conf" in error


def test_real_built_for_an_older_kernel():
    files = real_files("stack/dkms/dkms_status_nvidia_580.126.20_installed-for-OLD-kernel_*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    lines = files[0].read_text().splitlines()
    output = "".join(line[2:].rstrip() + "\n" for line in lines[lines.index("sudo dkms status    ") + 1 :] if line.startswith("> "))
    running = lines[1][2:].strip()
    status = parse_status(output)
    assert running == "6.12.73+deb13-amd64"
    assert kernels_of(status, "nvidia") == {"installed": ["6.12.69+deb13-amd64"], "versions": ["580.126.20"]}
    assert running not in kernels_of(status, "nvidia")["installed"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("nvidia/535.86.05: added\n", [("nvidia", "535.86.05", None, "added", "dkms3")]),
        ("nvidia, 396.45: added\n", [("nvidia", "396.45", None, "added", "dkms2")]),
        ("nvidia/580.95.05, 6.8.0-90-generic, x86_64: built\n", [("nvidia", "580.95.05", "6.8.0-90-generic", "built", "dkms3")]),
        # A cut last line is not read ("install" of "installed").
        ("nvidia/535.86.05: added\nnvidia/580.95.05, 6.8.0-90-generic, x86_64: install", [("nvidia", "535.86.05", None, "added", "dkms3")]),
        ("", []),
    ],
)
def test_forms(text, expected):
    assert _entries(parse_status(text)) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nvidia/580.95.05, 6.8.0-90-generic, x86_64: exploded\n", "state 'exploded'"),
        ("nvidia/580.95.05: installed\n", "names no kernel"),
        ("garbage here\n", "no '<module>/<version>"),
        ("nvidia/580.95.05, 6.8.0-90-generic, x86_64: install", "no '<module>/<version>"),  # cut short, nothing whole
    ],
)
def test_refused(text, message):
    with pytest.raises(ParseError, match=message):
        parse_status(text)
