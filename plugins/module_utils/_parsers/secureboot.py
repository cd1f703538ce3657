# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parsers of ``mokutil`` (private: may change without notice).

* parse_sb_state(text): ``mokutil --sb-state``. mokutil (src/mokutil.c) prints ``SecureBoot enabled``
  (exit 0, optionally ``SecureBoot validation is disabled in shim``), ``SecureBoot disabled`` (exit 1,
  optionally ``Platform is in Setup Mode``), ``Cannot determine secure boot state.``, and on stderr
  ``EFI variables are not supported on this system`` (a BIOS boot) or ``This system doesn't support
  Secure Boot``.
* parse_list_enrolled(text): ``mokutil --list-enrolled``, the verbose form (``[key 1]`` + ``SHA1
  Fingerprint: aa:bb:...``, the default but in 0.7.1) and the short one (``2bb010e24d fedoraca``: the
  first five SHA1 bytes and the CN; the default in 0.7.1 and ``--short`` since).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, whole_lines

SB_STATE = "mokutil --sb-state"
LIST_ENROLLED = "mokutil --list-enrolled"

ENABLED = "enabled"
DISABLED = "disabled"
NOT_SUPPORTED = "not_supported"
UNKNOWN = "unknown"

_STATE = re.compile(r"^SecureBoot (?P<state>enabled|disabled)[ \t]*$", re.MULTILINE)
_NOT_SUPPORTED = re.compile(r"^(?:EFI variables are not supported on this system|This system doesn't support Secure Boot)[ \t]*$", re.MULTILINE)
_UNDETERMINED = re.compile(r"^Cannot determine secure boot state\.[ \t]*$", re.MULTILINE)
_SETUP_MODE = re.compile(r"^Platform is in Setup Mode[ \t]*$", re.MULTILINE)
_SHIM_VALIDATION_OFF = re.compile(r"^SecureBoot validation is disabled in shim[ \t]*$", re.MULTILINE)


def parse_sb_state(text):
    """``mokutil --sb-state`` (stdout and stderr) -> ``{"state", "enforcing", "setup_mode", "shim_validation"}``.

    ``state``: ``enabled``, ``disabled``, ``not_supported`` (no EFI variables: a BIOS boot, or a system
    without Secure Boot) or ``unknown`` (mokutil could not tell). ``enforcing``: the firmware and shim
    check signatures (enabled, and shim's validation not turned off). A last line that no newline ends
    is not read. ParseError when none of mokutil's state lines is printed, or two contradict each other.
    """
    text = whole_lines(text or "")
    states = {match.group("state") for match in _STATE.finditer(text)}
    if _NOT_SUPPORTED.search(text):
        states.add(NOT_SUPPORTED)
    if _UNDETERMINED.search(text):
        states.add(UNKNOWN)
    if not states:
        raise ParseError(f"{SB_STATE}: no 'SecureBoot enabled' / 'SecureBoot disabled' line in {text.strip()[:200]!r}")
    if len(states) > 1:
        raise ParseError(f"{SB_STATE}: the output says {' and '.join(sorted(states))}: read it again alone")
    state = states.pop()
    shim_off = bool(_SHIM_VALIDATION_OFF.search(text))
    return {
        "state": state,
        "enforcing": state == ENABLED and not shim_off,
        "setup_mode": bool(_SETUP_MODE.search(text)),
        "shim_validation": None if state != ENABLED else not shim_off,
    }


_KEY_HEAD = re.compile(r"^\[key (?P<index>\d+)\][ \t]*$")
_FINGERPRINT = re.compile(r"^SHA1 Fingerprint:[ \t]*(?P<sha1>(?:[0-9a-fA-F]{2}:){19}[0-9a-fA-F]{2})[ \t]*$")
_SUBJECT_CN = re.compile(r"^[ \t]+Subject:.*?CN[ \t]*=[ \t]*(?P<cn>[^,/\n]+?)[ \t]*(?:,|$)")
_SHORT = re.compile(r"^(?P<sha1>[0-9a-f]{10})[ \t]+(?P<cn>\S.*?)[ \t]*$")
_NO_KEYS = re.compile(r"^MokListRT is empty[ \t]*$", re.MULTILINE)


def parse_list_enrolled(text):
    """``mokutil --list-enrolled`` -> ``[{"sha1", "cn"}]``, ``sha1`` lower case without colons.

    In the short form ``sha1`` is the first ten hex digits only (see fingerprint_matches). ``MokListRT
    is empty`` gives []. ParseError when no key and no such line is printed, or when a verbose
    ``[key N]`` has no whole ``SHA1 Fingerprint`` line (the output was cut).
    """
    text = whole_lines(text or "")
    keys = []
    current = None
    for line in text.splitlines():
        if _KEY_HEAD.match(line):
            if current is not None and current["sha1"] is None:
                raise ParseError(f"{LIST_ENROLLED}: key {len(keys)} has no 'SHA1 Fingerprint:' line")
            current = {"sha1": None, "cn": None}
            keys.append(current)
            continue
        fingerprint = _FINGERPRINT.match(line)
        if fingerprint and current is not None:
            current["sha1"] = fingerprint.group("sha1").replace(":", "").lower()
            continue
        subject = _SUBJECT_CN.match(line)
        if subject and current is not None and current["cn"] is None:
            current["cn"] = subject.group("cn")
            continue
        short = _SHORT.match(line)
        if short and current is None:
            keys.append({"sha1": short.group("sha1"), "cn": short.group("cn")})
    if keys and keys[-1]["sha1"] is None:
        raise ParseError(f"{LIST_ENROLLED}: key {len(keys)} has no whole 'SHA1 Fingerprint:' line: the output was cut short")
    if not keys and not _NO_KEYS.search(text):
        raise ParseError(f"{LIST_ENROLLED}: no '[key N]' block and no '<sha1> <CN>' line in {text.strip()[:200]!r}")
    return keys


def fingerprint_matches(enrolled_sha1, wanted_sha1):
    """True when an enrolled key's ``sha1`` (whole, or the short form's first ten hex digits) is ``wanted_sha1``."""
    wanted = (wanted_sha1 or "").replace(":", "").lower()
    enrolled = (enrolled_sha1 or "").lower()
    if len(wanted) != 40 or not enrolled:
        return False
    return wanted == enrolled if len(enrolled) == 40 else wanted.startswith(enrolled)
