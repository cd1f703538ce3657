"""_parsers.packages: dpkg-query, rpm -q and dnf versionlock list output, on the saved outputs of tests/fixtures/driver."""

from __future__ import annotations

import pathlib

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.packages import (
    is_locked,
    parse_dpkg_query,
    parse_rpm_query,
    parse_versionlock_list,
    upstream_version,
)

DRIVER = pathlib.Path(__file__).resolve().parents[4] / "fixtures" / "driver"
RPM_NAMES = ["nvidia-driver", "kmod-nvidia-open-dkms", "kmod-nvidia-latest-dkms", "nvidia-fabricmanager"]


def test_dpkg_query_held_and_removed_packages():
    assert parse_dpkg_query((DRIVER / "dpkg_query_535_held.txt").read_text()) == [
        {"name": "nvidia-driver-535-open", "version": "535.161.08-0ubuntu1", "upstream": "535.161.08", "installed": True, "held": True},
        {"name": "nvidia-fabricmanager-535", "version": "535.161.08-1", "upstream": "535.161.08", "installed": True, "held": True},
        {"name": "nvidia-driver-470", "version": "470.256.02-0ubuntu1", "upstream": "470.256.02", "installed": False, "held": False},
    ]


def test_dpkg_query_known_but_never_installed_package_has_no_version():
    [package] = parse_dpkg_query("nvidia-driver-550  un \n")
    assert (package["installed"], package["version"], package["upstream"]) == (False, "", None)


def test_dpkg_query_reinstall_required_flag_and_no_output():
    [package] = parse_dpkg_query("nvidia-driver-550-open 550.90.07-1 iiR\n")
    assert package["installed"] is True
    assert parse_dpkg_query("") == []


@pytest.mark.parametrize(
    "text",
    ["nvidia-driver-550-open 550.90.07-1\n", "dpkg-query: no packages found matching nvidia-driver-*\n",
     "nvidia-driver-550-open 550.90.07-1 zz \n", "nvidia-driver-550-open  ii \n"],
    ids=["no-status", "message-on-stdout", "bad-status", "installed-without-version"],
)
def test_dpkg_query_unexpected_lines_are_errors(text):
    with pytest.raises(ParseError, match=r"^dpkg-query: line 1 "):
        parse_dpkg_query(text)


@pytest.mark.parametrize(("version", "upstream"), [("1:550.90.07-0ubuntu1", "550.90.07"), ("550.90.07-1", "550.90.07"), ("550.90.07", "550.90.07")])
def test_upstream_version(version, upstream):
    assert upstream_version(version) == upstream


def test_rpm_query_fixture():
    assert parse_rpm_query((DRIVER / "rpm_q_535.txt").read_text(), RPM_NAMES) == {
        "nvidia-driver": "535.161.08", "kmod-nvidia-open-dkms": "535.161.08", "nvidia-fabricmanager": "535.161.08",
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nvidia-driver 550.90.07\nnvidia-driver 535.161.08\n", "nvidia-driver is installed twice"),
        ("error: rpmdb open failed\n", "line 1 is not '<name> <version>'"),
        ("some-other-package 1.0\n", "line 1 is not '<name> <version>' of a queried package"),
    ],
)
def test_rpm_query_unexpected_output_is_an_error(text, message):
    with pytest.raises(ParseError, match=message):
        parse_rpm_query(text, RPM_NAMES)


def test_versionlock_list_fixture_and_is_locked():
    entries = parse_versionlock_list((DRIVER / "dnf_versionlock_list_535.txt").read_text())
    assert entries == ["nvidia-driver-3:535.161.08-1.el9.*", "kmod-nvidia-open-dkms-3:535.161.08-1.el9.*", "nvidia-fabricmanager-535.161.08-1.*"]
    assert is_locked("nvidia-driver", entries) and is_locked("nvidia-fabricmanager", entries)
    assert not is_locked("kmod-nvidia-latest-dkms", entries)
    # nvidia-driver-cuda-3:... pins another package, not nvidia-driver itself.
    assert not is_locked("nvidia-driver", ["nvidia-driver-cuda-3:550.90.07-1.el9.*"])


def test_versionlock_list_refuses_what_is_not_a_lock():
    with pytest.raises(ParseError, match=r"^dnf versionlock list: line 2 is not a lock entry"):
        parse_versionlock_list("Last metadata expiration check: 0:01:00 ago.\nNo such command: versionlock.\n")


def test_parsers_are_linear_in_their_input():
    """A 20,000-line answer parses (no quadratic backtracking on long or many lines)."""
    lines = "".join(f"nvidia-driver-{i}-open {i}.90.07-1 ii \n" for i in range(20000))
    assert len(parse_dpkg_query(lines)) == 20000
    with pytest.raises(ParseError):
        parse_dpkg_query("a" * 200000 + " x\n")


@pytest.mark.parametrize(
    ("parse", "name", "tool", "what"),
    [
        (parse_dpkg_query, "dpkg_query_535_held.txt", "dpkg-query", "the last package"),
        (lambda text: parse_rpm_query(text, RPM_NAMES), "rpm_q_535.txt", "rpm -q", "the last package"),
        (parse_versionlock_list, "dnf_versionlock_list_535.txt", "dnf versionlock list", "the last lock entry"),
    ],
    ids=["dpkg-query", "rpm", "versionlock"],
)
def test_last_line_cut_short_is_an_error(parse, name, tool, what):
    # rpm "nvidia-fabricmanager 535.161" of 535.161.08, a lock "nvidia-fabricmanager-535.16": versions that look whole.
    text = (DRIVER / name).read_text()
    start = text.rstrip("\n").rindex("\n") + 1
    for end in range(start + 1, len(text) - 1):
        with pytest.raises(ParseError, match=rf"^{tool}: the output was cut short in {what} \(its last line"):
            parse(text[:end])
    assert parse(text)
