"""Tests of the mokutil parsers (--sb-state, --list-enrolled), on every real capture under stack/secureboot and stack/dkms."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.secureboot import fingerprint_matches, parse_list_enrolled, parse_sb_state

from tests.conftest import real_params

# --sb-state: (state, enforcing, setup mode) of each capture that holds mokutil's answer; every other file is refused.
SB_STATE = {
    "mokutil_sb-state_enabled_and_list-enrolled_VERBOSE-key1-format_Canonical-Master-CA_blog.txt": ("enabled", True, False),
    "mokutil_sb-state_disabled_Platform-is-in-Setup-Mode_system76-firmware-open-pr388_deindented.txt": ("disabled", False, True),
    # mokutil --import prints the same stderr line as --sb-state on a BIOS boot.
    "mokutil_import_EFI-variables-are-not-supported-on-this-system_azurelinux5831.txt": ("not_supported", False, False),
}
# --list-enrolled: the (sha1, CN) of each key; the short form gives the first ten hex digits only.
LIST_ENROLLED = {
    "mokutil_sb-state_enabled_and_list-enrolled_VERBOSE-key1-format_Canonical-Master-CA_blog.txt": [
        ("76a092065800bf376901c372cd55a90e1fded2e0", "Canonical Ltd. Master Certificate Authority")
    ],
    "mokutil_list-enrolled_SHORT-format_mokutil-0.7_secureblue1043.txt": [("2bb010e24d", "fedoraca"), ("68447cfc17", "secureblue secureboot key")],
}
# References (mokutil's and the installer's source, DKMS's README) quote the messages: not a node's output.
REFERENCES = ("TOOL-SOURCE_", "DRIVER-SOURCE_", "DOCS_")


@pytest.mark.parametrize("path", real_params("stack/secureboot/*") + real_params("stack/dkms/*"))
def test_real_sb_state(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    expected = SB_STATE.get(path.name)
    if path.name.startswith(REFERENCES):
        pytest.skip("a reference that quotes mokutil's messages, not its output")
    if expected is None:
        with pytest.raises(ParseError, match="mokutil --sb-state"):
            parse_sb_state(text)
        return
    result = parse_sb_state(text)
    assert (result["state"], result["enforcing"], result["setup_mode"]) == expected


@pytest.mark.parametrize("path", real_params("stack/secureboot/*"))
def test_real_list_enrolled(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.name.startswith(REFERENCES):
        pytest.skip("a reference that quotes mokutil's messages, not its output")
    expected = LIST_ENROLLED.get(path.name)
    if expected is None:
        with pytest.raises(ParseError, match="mokutil --list-enrolled"):
            parse_list_enrolled(text)
        return
    assert [(key["sha1"], key["cn"]) for key in parse_list_enrolled(text)] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SecureBoot enabled\nSecureBoot validation is disabled in shim\n", ("enabled", False, False)),
        ("This system doesn't support Secure Boot\n", ("not_supported", False, False)),
        ("Cannot determine secure boot state.\n", ("unknown", False, False)),
    ],
)
def test_sb_state_forms(text, expected):
    result = parse_sb_state(text)
    assert (result["state"], result["enforcing"], result["setup_mode"]) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SecureBoot enab", "no 'SecureBoot enabled'"),  # cut: never read as enabled or disabled
        ("SecureBoot enabled\nSecureBoot disabled\n", "says disabled and enabled"),
        ("", "no 'SecureBoot enabled'"),
    ],
)
def test_sb_state_refused(text, message):
    with pytest.raises(ParseError, match=message):
        parse_sb_state(text)


def test_list_enrolled_cut_fingerprint_refused():
    with pytest.raises(ParseError, match="no whole 'SHA1 Fingerprint:'"):
        parse_list_enrolled("[key 1]\nSHA1 Fingerprint: 76:a0:92")
    assert parse_list_enrolled("MokListRT is empty\n") == []


@pytest.mark.parametrize(
    ("enrolled", "wanted", "expected"),
    [
        ("76a092065800bf376901c372cd55a90e1fded2e0", "76:A0:92:06:58:00:BF:37:69:01:C3:72:CD:55:A9:0E:1F:DE:D2:E0", True),
        ("76a0920658", "76a092065800bf376901c372cd55a90e1fded2e0", True),
        ("2bb010e24d", "76a092065800bf376901c372cd55a90e1fded2e0", False),
        ("76a092065800bf376901c372cd55a90e1fded2e1", "76a092065800bf376901c372cd55a90e1fded2e0", False),
        ("76a0920658", "76a0920658", False),  # a wanted fingerprint must be whole
    ],
)
def test_fingerprint_matches(enrolled, wanted, expected):
    assert fingerprint_matches(enrolled, wanted) is expected
