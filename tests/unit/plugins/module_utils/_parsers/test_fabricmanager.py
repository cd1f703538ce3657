"""Tests of the NVIDIA Fabric Manager parsers."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.fabricmanager import parse_mismatch, parse_start_failure, parse_version

from tests.conftest import OWN, real_files, real_params

MISMATCH_TEXT = (
    "fabric manager NVIDIA GPU driver interface version {fm} don't match with driver version {driver}. Please update with matching NVIDIA driver package"
)

# What each real file shows, read by hand: version printed, mismatch (driver, fabric manager), start failure reason.
REAL = {
    "nv-fabricmanager_version_450.102.04.txt": ("450.102.04", None, None),
    "nv-fabricmanager_version_535.161.08_gpud-test-input.txt": ("535.161.08", None, None),
    "fm_mismatch_525.85.12-vs-530.41.03_siderolabs720.txt": (None, ("530.41.03", "525.85.12"), "version_mismatch"),
    "fm_mismatch_journal_530.30.02-vs-530.41.03_gpu-operator544.txt": (None, ("530.41.03", "530.30.02"), "version_mismatch"),
    "fm_mismatch_systemctl_status_550.127.05-vs-550.120_akash.txt": (None, ("550.120", "550.127.05"), "version_mismatch"),
    "fm_start_fail_NV_WARN_NOTHING_TO_DO_no-nvswitch_cube-studio29.txt": (None, None, "no_nvswitch"),
    "fm_start_script_usage_NVL5_gpu-operator1595.txt": (None, None, "start_script_usage"),
    "fabricmanager_log_multicast_gpud.log": (None, None, None),  # a healthy fabric manager's log
}


def _read(path):
    return path.read_text(encoding="utf-8", errors="replace")


def test_every_real_file_is_read():
    files = real_files("fabricmanager/*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    assert {path.name for path in files} == set(REAL)


@pytest.mark.parametrize("path", real_params("fabricmanager/*"))
def test_real_version(path):
    expected = REAL[path.name][0]
    if expected is None:
        with pytest.raises(ParseError, match="nv-fabricmanager --version"):
            parse_version(_read(path))
    else:
        assert parse_version(_read(path)) == expected


@pytest.mark.parametrize("path", real_params("fabricmanager/*"))
def test_real_mismatch(path):
    expected = REAL[path.name][1]
    result = parse_mismatch(_read(path))
    if expected is None:
        assert result is None
    else:
        driver, fabricmanager = expected
        assert (result["driver_version"], result["fabricmanager_version"]) == (driver, fabricmanager)
        assert result["message"].startswith(MISMATCH_TEXT.format(fm=fabricmanager, driver=driver))


@pytest.mark.parametrize("path", real_params("fabricmanager/*"))
def test_real_start_failure(path):
    expected = REAL[path.name][2]
    result = parse_start_failure(_read(path))
    assert (result or {}).get("reason") == expected


def test_mismatch_message_from_journal_has_no_prefix():
    files = real_files("fabricmanager/fm_mismatch_systemctl_status_*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    result = parse_mismatch(_read(files[0]))
    assert result["message"] == MISMATCH_TEXT.format(fm="550.127.05", driver="550.120") + "."


def test_no_nvswitch_message():
    files = real_files("fabricmanager/fm_start_fail_NV_WARN_NOTHING_TO_DO_*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    assert parse_start_failure(_read(files[0])) == {
        "reason": "no_nvswitch",
        "message": "request to query NVSwitch device information from NVSwitch driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]",
    }


def test_start_script_usage_message():
    files = real_files("fabricmanager/fm_start_script_usage_*")
    if not files:
        pytest.skip("../shared/fixtures/real is absent")
    assert parse_start_failure(_read(files[0]))["message"] == "Unknown option: /usr/share/nvidia/nvswitch/fabricmanager.cfg"


def test_docs_rewrite_of_the_mismatch_message_is_recognised():
    # The akash docs PR reworded the message ("doesn't match with the driver version"); read it too.
    # The line ends (newline) after "550.120.": text cut right after the dot could be a cut-off 550.120.05.
    text = "nv-fabricmanager[1]: fabric manager NVIDIA GPU driver interface version 550.127.05 doesn't match with the driver version 550.120.\n"
    assert parse_mismatch(text)["driver_version"] == "550.120"


def test_own_active_service_shows_no_failure():
    text = (OWN / "fabricmanager" / "systemctl_status_active_535.161.08.txt").read_text()
    assert parse_start_failure(text) is None
    assert parse_mismatch(text) is None


def test_own_version_error_raises():
    with pytest.raises(ParseError, match="libnvidia-nscq"):
        parse_version((OWN / "fabricmanager" / "nv-fabricmanager_version_error.txt").read_text())


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            'Jun 04 08:01:12 node nvidia-fabricmanager-start.sh[9]: "/usr/bin/nv-fabricmanager -c /etc/fm.cfg" failed! Exit code: 3\n',
            "exited",
        ),
        ("Jun 04 08:01:12 node systemd[1]: nvidia-fabricmanager.service: Failed with result 'exit-code'.\n", "service_failed"),
    ],
)
def test_generic_failures(text, reason):
    assert parse_start_failure(text)["reason"] == reason


@pytest.mark.parametrize("text", ["", None, "Fabric Manager version is : \n", "Fabric Manager version is : unknown\n"])
def test_version_missing_raises(text):
    with pytest.raises(ParseError):
        parse_version(text)


@pytest.mark.parametrize("text", ["", None, "fabric manager NVIDIA GPU driver interface version  don't match\n"])
def test_no_mismatch(text):
    assert parse_mismatch(text) is None
    assert parse_start_failure(text) is None


@pytest.mark.parametrize("path", real_params("fabricmanager/nv-fabricmanager_version_*"))
def test_version_cut_at_any_character_is_never_a_shorter_version(path):
    """Issue 8: a cut-off '535.161' of 535.161.08 is not a version; the error names the field."""
    text = _read(path)
    whole = parse_version(text)
    for end in range(len(text)):
        try:
            assert parse_version(text[:end]) == whole, f"prefix {text[:end]!r}"
        except ParseError as exc:
            assert "nv-fabricmanager --version" in str(exc)


def test_version_without_patch_names_the_field():
    with pytest.raises(ParseError, match=r"nv-fabricmanager --version: version '535\.161' has no patch part"):
        parse_version("Fabric Manager version is : 535.161")


@pytest.mark.parametrize("path", real_params("fabricmanager/fm_mismatch_*"))
def test_mismatch_cut_at_any_character_is_never_a_shorter_version(path):
    text = _read(path)
    whole = parse_mismatch(text)
    versions = (whole["driver_version"], whole["fabricmanager_version"])
    for end in range(len(text)):
        try:
            result = parse_mismatch(text[:end])
        except ParseError as exc:
            assert "version mismatch message" in str(exc)
            continue
        if result is not None:
            assert (result["driver_version"], result["fabricmanager_version"]) == versions, f"prefix {text[:end]!r}"


@pytest.mark.parametrize("apostrophe", ["\u2019", "'"])
def test_mismatch_with_typographic_apostrophe(apostrophe):
    """Issue 8: some releases print a typographic apostrophe (U+2019) in "don't match"."""
    text = (
        "Nov 05 13:55:26 node1 nv-fabricmanager[104230]: fabric manager NVIDIA GPU driver interface version 550.127.05 "
        f"don{apostrophe}t match with driver version 550.120. Please update with matching NVIDIA driver package.\n"
    )
    result = parse_mismatch(text)
    assert (result["driver_version"], result["fabricmanager_version"]) == ("550.120", "550.127.05")
    assert result["message"].startswith(f"fabric manager NVIDIA GPU driver interface version 550.127.05 don{apostrophe}t match")
    assert parse_start_failure(text)["reason"] == "version_mismatch"


MISMATCH_LOG = (
    "Nov 05 13:55:25 node1 systemd[1]: Starting NVIDIA fabric manager service...\n"
    "Nov 05 13:55:26 node1 nv-fabricmanager[104230]: fabric manager NVIDIA GPU driver interface version 550.127.05 "
    "don't match with driver version 550.120. Please update with matching NVIDIA driver package.\n"
)


def test_a_cut_last_line_is_no_message():
    """A log cut inside its last line: no mismatch or failure is read from it (its message would be cut short)."""
    start = MISMATCH_LOG.index("\n") + 1
    for end in range(start + 1, len(MISMATCH_LOG) - 1):
        assert parse_mismatch(MISMATCH_LOG[:end]) is None, MISMATCH_LOG[:end]
        assert parse_start_failure(MISMATCH_LOG[:end]) is None, MISMATCH_LOG[:end]
    assert parse_mismatch(MISMATCH_LOG)["message"].endswith("Please update with matching NVIDIA driver package.")


@pytest.mark.parametrize("path", real_params("fabricmanager/fm_*"))
def test_real_log_cut_in_its_failure_line_reads_only_whole_lines(path):
    # "...Nothing to do [NV_WARN_NOTHING_TO_DO" of "...[NV_WARN_NOTHING_TO_DO]": the message of the whole line or nothing.
    text = _read(path)
    whole = parse_start_failure(text)
    if whole is None:
        pytest.skip(f"{path.name}: no failure in it")
    line = next(line for line in text.splitlines(keepends=True) if whole["message"] in line)
    start = text.index(line)
    for end in range(start + 1, start + len(line) - 1):
        result = parse_start_failure(text[:end])
        assert result is None or result["message"] in text[:start], text[start:end]
