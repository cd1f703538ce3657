# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parse NVIDIA Fabric Manager output: its version, and why it refused to start (private).

``nv-fabricmanager --version``; the journal / ``systemctl status nvidia-fabricmanager`` /
``/var/log/fabricmanager.log`` text from a failed start. On NVSwitch systems the fabric manager
must be exactly the driver's version: a mismatch keeps it from starting and CUDA from running.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, driver_version, whole_lines

# The value is read as one token and checked whole afterwards: a cut-off "535.161" must not pass.
_VERSION = re.compile(r"Fabric Manager version is\s*:[ \t]*(?P<version>[^\s]*)")

# "fabric manager NVIDIA GPU driver interface version 530.30.02 don't match with driver version
# 530.41.03. Please update with matching NVIDIA driver package." The first version is the one the
# fabric manager was built for, the second the loaded driver's. Some releases print a typographic
# apostrophe (U+2019, "don\u2019t").
_MISMATCH = re.compile(
    r"fabric manager NVIDIA GPU driver interface version (?P<fabricmanager>[0-9.]*)"
    r" (?:don['\u2019\u02bc`]t|doesn['\u2019\u02bc`]t|do not|does not) match with (?:the )?driver version (?P<driver>[0-9.]*)",
    re.IGNORECASE,
)
TOOL = "nv-fabricmanager"

# Why a start failed, most specific first: (reason, pattern of the line that says so).
_START_FAILURES = (
    # No NVSwitch to manage (PCIe GPUs, or a Pre-NVL5 box without NVSwitch): not an error to fix by retrying.
    ("no_nvswitch", re.compile(r"^.*NV_WARN_NOTHING_TO_DO.*$", re.MULTILINE)),
    ("no_nvswitch", re.compile(r"^.*(?:no NVSwitch devices? (?:found|detected)|NVSwitch driver is not loaded).*$", re.IGNORECASE | re.MULTILINE)),
    # nvidia-fabricmanager-start.sh of drivers >= 570.158.01 takes options, not a bare config path.
    ("start_script_usage", re.compile(r"^.*Unknown option:.*$", re.MULTILINE)),
    ("start_script_usage", re.compile(r"^Usage: \S*nvidia-fabricmanager-start\.sh.*$", re.MULTILINE)),
    ("exited", re.compile(r"^.*nv-fabricmanager.*\bfailed!\s*Exit code:\s*\d+.*$", re.MULTILINE)),
    ("service_failed", re.compile(r"^.*nvidia-fabricmanager\.service: (?:Control process exited|Main process exited|Failed with result).*$", re.MULTILINE)),
)
# journal / syslog prefix ("Sep 18 03:19:01 host unit[pid]: ") dropped from the message.
_JOURNAL_PREFIX = re.compile(r"^(?:[A-Z][a-z]{2}\s+\d{1,2}\s+\d\d:\d\d:\d\d\s+\S+\s+)?[\w.@-]+(?:\[\d+\])?:\s+(?=\S)")


def parse_version(text):
    """``nv-fabricmanager --version`` -> ``"535.161.08"``.

    ParseError when no version is printed, or when it is not a whole three-part version: fabric
    manager exists for R450 and later data-center drivers only, which always print the patch, so
    ``535.161`` is a cut-off ``535.161.08``.
    """
    match = _VERSION.search(text or "")
    if not match:
        raise ParseError(f"nv-fabricmanager --version: no 'Fabric Manager version is : <version>' in {(text or '').strip()[:200]!r}")
    return driver_version(match.group("version").rstrip("."), f"{TOOL} --version", "version", three_parts=True)


def parse_mismatch(text):
    """The driver / fabric manager version mismatch reported in log text, or None when there is none.

    Returns ``{"driver_version", "fabricmanager_version", "message"}`` from the first mismatch
    line, wherever it sits (journal, ``systemctl status``, a bare message). ParseError when the
    message is cut inside a version: the fabric manager's own always has three parts, the
    driver's (``550.120`` exists) counts only when the text after it (". Please update...") shows
    it is whole. A last line that no newline ends is not read: the log was cut there, and its
    message (and versions) may be cut short; the next read has it whole.
    """
    text = whole_lines(text)
    match = _MISMATCH.search(text)
    if not match:
        return None
    what = f"{TOOL} version mismatch message"
    fabricmanager = driver_version(match.group("fabricmanager"), what, "fabric manager interface version", three_parts=True)
    # The sentence goes on after the version (". Please update..."): only then is a two-part one whole.
    driver = match.group("driver")
    if driver.endswith("."):
        driver = driver[:-1]
    following = text[match.end("driver") : match.end("driver") + 1]
    terminated = following.isspace() and following != ""
    driver = driver_version(driver, what, "driver version", terminated=terminated)
    line_end = text.find("\n", match.start())
    message = text[match.start() : line_end if line_end >= 0 else len(text)].strip()
    return {
        "driver_version": driver,
        "fabricmanager_version": fabricmanager,
        "message": message,
    }


def _message(line):
    return _JOURNAL_PREFIX.sub("", line.strip(), count=1).strip()


def parse_start_failure(text):
    """Why the fabric manager failed to start, or None when the text shows no failure.

    Returns ``{"reason", "message"}``; ``reason`` is one of ``"version_mismatch"`` (driver and
    fabric manager differ), ``"no_nvswitch"`` (NV_WARN_NOTHING_TO_DO: nothing to manage, the
    service should be disabled on this system), ``"start_script_usage"`` (the start script was
    called the pre-570.158 way), ``"exited"`` / ``"service_failed"`` (a failure with no known
    cause). ``message`` is the line that says so, without its journal prefix. A last line that no
    newline ends is not read (see parse_mismatch).
    """
    text = whole_lines(text)
    mismatch = parse_mismatch(text)
    if mismatch:
        return {"reason": "version_mismatch", "message": mismatch["message"]}
    for reason, pattern in _START_FAILURES:
        match = pattern.search(text)
        if match:
            return {"reason": reason, "message": _message(match.group(0))}
    return None
