# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parsers of the DCGM version outputs (private: may change without notice).

* parse_dcgmi_version(text): ``dcgmi --version`` (a blank line, ``dcgmi  version: 4.7.0``, a blank line).
* parse_build_info(text): ``nv-hostengine --version`` (``Version : 4.7.0``, ``Build ID : ...``,
  ``Branch Name : v4.7.0``...) and ``dcgmi -v``, which prints the same keys twice, under ``Local build
  info:`` (the dcgmi client) and ``Hostengine build info:`` (the running host engine: a version skew
  between the two shows here).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, whole_lines

DCGMI_VERSION = "dcgmi --version"
BUILD_INFO = "nv-hostengine --version"

# 3.3.9, 4.7.0; some builds add a fourth part.
_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(?:\.[0-9]+)?")
_DCGMI_LINE = re.compile(r"^dcgmi[ \t]+version:[ \t]*(?P<version>\S*)[ \t]*$", re.MULTILINE)
_BUILD_KEYS = {"Version": "version", "Build ID": "build_id", "Build Date": "build_date", "Commit ID": "commit_id", "Branch Name": "branch"}
_BUILD_LINE = re.compile(r"^(?P<key>[A-Z][A-Za-z ]*?)[ \t]+:[ \t]*(?P<value>.*?)[ \t]*$")
_SECTIONS = {"Local build info:": "local", "Hostengine build info:": "hostengine"}


def _version(value, tool, field):
    if not _VERSION.fullmatch(value or ""):
        raise ParseError(f"{tool}: {field} {value!r} is not a DCGM version (for example 4.7.0)")
    return value


def parse_dcgmi_version(text):
    """``dcgmi --version`` -> ``"4.7.0"``; a last line that no newline ends is not read (``4.7`` of 4.7.0)."""
    versions = {match.group("version") for match in _DCGMI_LINE.finditer(whole_lines(text or ""))}
    if not versions:
        raise ParseError(f"{DCGMI_VERSION}: no 'dcgmi version: <version>' line in {(text or '').strip()[:200]!r}")
    if len(versions) > 1:
        raise ParseError(f"{DCGMI_VERSION}: more than one version printed ({', '.join(sorted(versions))})")
    return _version(versions.pop(), DCGMI_VERSION, "version")


def parse_build_info(text):
    """``nv-hostengine --version`` or ``dcgmi -v`` -> ``{"hostengine": {...} or None, "local": {...} or None}``.

    Each block is ``{"version", "build_id", "build_date", "commit_id", "branch"}``; ``nv-hostengine
    --version`` (no section header) fills ``hostengine``. ParseError when no block has a ``Version :``
    line, a key is printed twice within a block, or a version is not whole.
    """
    blocks = {}
    section = "hostengine"
    for line in whole_lines(text or "").splitlines():
        stripped = line.strip()
        if stripped in _SECTIONS:
            section = _SECTIONS[stripped]
            continue
        match = _BUILD_LINE.match(line)
        if not match or match.group("key") not in _BUILD_KEYS:
            continue
        key = _BUILD_KEYS[match.group("key")]
        block = blocks.setdefault(section, {})
        if key in block:
            raise ParseError(f"{BUILD_INFO}: '{match.group('key')}' is printed twice in the {section} build info: read one tool's output")
        block[key] = match.group("value")
    if not any("version" in block for block in blocks.values()):
        raise ParseError(f"{BUILD_INFO}: no 'Version : <version>' line in {(text or '').strip()[:200]!r}")
    result = {"hostengine": None, "local": None}
    for section, block in blocks.items():
        if "version" not in block:
            raise ParseError(f"{BUILD_INFO}: the {section} build info has no 'Version :' line: the output was cut short")
        _version(block["version"], BUILD_INFO, f"{section} version")
        result[section] = {key: block.get(key) for key in _BUILD_KEYS.values()}
    return result
