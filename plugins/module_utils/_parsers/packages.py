# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parse what the package managers say about installed packages (private).

- ``dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' PATTERN...`` (Debian, Ubuntu);
- ``rpm -q --qf '%{NAME} %{VERSION}\\n' NAME...`` (RHEL and friends);
- ``dnf versionlock list`` (dnf 4's python3-dnf-plugin-versionlock).

Pure functions, text in, plain values out; ParseError for a line that is none of the forms the tool prints,
and for a last line without its newline: the tool ends every line with one, so a version there may be cut
short (``550.90`` of 550.90.07, ``ii`` of ``iiR``).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, cut_line, cut_short

# ${db:Status-Abbrev}: desired action (unknown, install, hold, remove, purge), package status (not-installed,
# installed, config-files, unpacked, half-configured, half-installed, triggers-awaited, triggers-pending) and
# an error flag (R: reinstall required), blank when none.
_DPKG_LINE = re.compile(r"(?P<name>[a-z0-9][a-z0-9+.-]*) (?P<version>\S*) (?P<abbrev>[uihrp][ncUFHWti]R?)")
_RPM_LINE = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._+-]*) (?P<version>[A-Za-z0-9._+~^]+)")
_RPM_NOT_INSTALLED = re.compile(r"package (?P<name>\S+) is not installed")
_LOCK_ENTRY = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._+-]*?)-(?:\d+:)?\d[^\s]*")
_LOCK_NOISE = re.compile(r"Last metadata expiration check:.*|Updating Subscription Management repositories\.|#.*")


def _lines(text, tool, what="the last package"):
    cut = cut_line(str(text or ""))
    if cut and cut.strip():
        raise cut_short(tool, what, cut)
    return [line.rstrip() for line in str(text or "").splitlines() if line.strip()]


def upstream_version(version):
    """Debian or RPM version without epoch and release: ``1:550.90.07-0ubuntu1`` -> ``550.90.07``."""
    version = version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


def parse_dpkg_query(text):
    """dpkg-query lines -> ``[{"name", "version", "upstream", "installed", "held"}]`` in the order printed.

    ``installed`` is True only for the ``i`` (installed) package status: removed packages with their
    configuration files left (``rc``) or half-installed ones are listed but not installed. ``held`` is the
    ``h`` desired action of ``apt-mark hold``.
    """
    packages = []
    for number, line in enumerate(_lines(text, "dpkg-query"), 1):
        match = _DPKG_LINE.fullmatch(line)
        if not match:
            raise ParseError(f"dpkg-query: line {number} is not '<package> <version> <status>': {line[:200]!r}")
        abbrev = match.group("abbrev")
        installed = abbrev[1] == "i"
        if installed and not match.group("version"):
            raise ParseError(f"dpkg-query: line {number} lists installed package {match.group('name')} without a version")
        packages.append({
            "name": match.group("name"),
            "version": match.group("version"),
            "upstream": upstream_version(match.group("version")) if match.group("version") else None,
            "installed": installed,
            "held": abbrev[0] == "h",
        })
    return packages


def parse_rpm_query(text, names):
    """``rpm -q --qf '%{NAME} %{VERSION}\\n' NAME...`` -> ``{name: version}`` of the installed ones among ``names``.

    A name listed twice with different versions (two builds installed side by side) is a ParseError: which one
    is in use cannot be told from here.
    """
    versions = {}
    for number, line in enumerate(_lines(text, "rpm -q"), 1):
        if _RPM_NOT_INSTALLED.fullmatch(line):
            continue
        match = _RPM_LINE.fullmatch(line)
        if not match or match.group("name") not in names:
            raise ParseError(f"rpm -q: line {number} is not '<name> <version>' of a queried package: {line[:200]!r}")
        name, version = match.group("name"), match.group("version")
        if versions.get(name, version) != version:
            raise ParseError(f"rpm -q: {name} is installed twice ({versions[name]} and {version}): remove the one not in use")
        versions[name] = version
    return versions


def parse_versionlock_list(text):
    """``dnf versionlock list`` -> the lock entries (``nvidia-driver-3:550.90.07-1.el9.*``), metadata notices left out."""
    entries = []
    for number, raw in enumerate(_lines(text, "dnf versionlock list", "the last lock entry"), 1):
        line = raw.strip()
        if _LOCK_NOISE.fullmatch(line):
            continue
        if not _LOCK_ENTRY.fullmatch(line):
            raise ParseError(f"dnf versionlock list: line {number} is not a lock entry '<name>-[<epoch>:]<version>-<release>': {line[:200]!r}")
        entries.append(line)
    return entries


def is_locked(name, entries):
    """True when a versionlock entry pins ``name`` itself (``nvidia-driver-3:550...``), not a longer name (``nvidia-driver-cuda-...``)."""
    return any(entry.startswith(name + "-") and entry[len(name) + 1 : len(name) + 2].isdigit() for entry in entries)


__all__ = ["is_locked", "parse_dpkg_query", "parse_rpm_query", "parse_versionlock_list", "upstream_version"]
