# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parser of what an OFED install prints (private: may change without notice).

``mlnxofedinstall`` (MLNX_OFED), ``install`` (MLNX_EN) and the package manager installing DOCA-OFED print the same
firmware step when the ``mlnx-fw-updater`` package's post-install script runs: ``Attempting to perform Firmware
update...``, mlxfwmanager's device blocks, then ``Updating FW ...`` / ``Done`` (a burn), ``Status: Up to date``,
``The firmware for this device is not distributed inside Mellanox driver`` (an OEM PSID) or ``Failed to update
Firmware.``. With ``--without-fw-update`` the installer prints ``Skipping FW update.`` instead. The collection never
lets the installer flash (NIC firmware is the nic_firmware role's): this parser tells whether it tried.

The module judges an install by its exit status and by ``ofed_info -s`` afterwards, never by these English lines;
they only say what the firmware step did, so that an attempt to flash is caught and named.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, whole_lines

TOOL = "the OFED installer"

# What the firmware step did: skipped (--without-fw-update), not_run (no mlnx-fw-updater ran: a package install
# without it), up_to_date, updated (a burn), not_distributed (OEM PSID: nothing bundled), failed.
FIRMWARE_STEPS = ("skipped", "not_run", "up_to_date", "updated", "not_distributed", "failed")

# Markdown escapes of copied logs (``\--without-fw-update``, ``\[100%\]``) are undone before matching.
_ESCAPE = re.compile(r"\\([-\[\]#*_~<>'.!`()])")
_ATTEMPT = re.compile(r"^\s*Attempting to perform Firmware update\.\.\.\s*$", re.MULTILINE)
_SKIPPED = re.compile(r"^\s*Skipping FW update\.\s*$", re.MULTILINE)
_BURN = re.compile(r"^\s*Device #\d+: Updating FW \.\.\.", re.MULTILINE)
_UP_TO_DATE = re.compile(r"^\s*Status:\s+Up to date\s*$", re.MULTILINE)
_NOT_DISTRIBUTED = re.compile(
    r"^\s*The firmware for this device is not distributed inside (?:Mellanox|NVIDIA) driver: (?P<pci>\S+) \(PSID: (?P<psid>[^)\s]+)\)", re.MULTILINE
)
_FW_FAILED = re.compile(r"^\s*Failed to update Firmware\.\s*$", re.MULTILINE)
_RESTART = re.compile(r"^\s*Restart needed for updates to take effect\.\s*$", re.MULTILINE)
_ONBOOT = re.compile(r"Added '?RUN_FW_UPDATER_ONBOOT=(?P<value>\w+)")
_PASSED = re.compile(r"^\s*Installation (?:passed|finished) successfully\.?\s*$", re.MULTILINE)
_MISSING = re.compile(r"^\s*Error: One or more required packages for installing \S+ are missing\.\s*$", re.MULTILINE)
_ERROR = re.compile(r"^\s*(?:Error|ERROR|Failed)\b[: ].*$", re.MULTILINE)
_RELOAD = re.compile(r"^\s*(?P<command>/etc/init\.d/(?:openibd|mlnx-en\.d) restart)\s*", re.MULTILINE)
_LOGS = re.compile(r"^\s*Logs dir: (?P<dir>/\S+)\s*$", re.MULTILINE)
_DEVICE = re.compile(r"^\s*PSID:\s+(?P<psid>\S+)\s*$", re.MULTILINE)
_FW_ROW = re.compile(r"^\s*FW\s+(?P<current>[0-9]+\.[0-9]+\.[0-9]+)\s+(?P<available>[0-9]+\.[0-9]+\.[0-9]+|N/A)\s*$", re.MULTILINE)
_PCI_NAME = re.compile(r"^\s*PCI Device Name:\s+(?P<pci>\S+)\s*$", re.MULTILINE)
_STATUS = re.compile(r"^\s*Status:\s+(?P<status>.+?)\s*$", re.MULTILINE)
_BLOCK = re.compile(r"^\s*Device #\d+:\s*\n\s*-{5,}", re.MULTILINE)


def _devices(text):
    """The mlxfwmanager device blocks of the firmware step: ``[{"psid", "pci", "fw_current", "fw_available", "status"}]``."""
    starts = [match.start() for match in _BLOCK.finditer(text)]
    devices = []
    for index, start in enumerate(starts):
        block = text[start : starts[index + 1] if index + 1 < len(starts) else len(text)]
        psid, row = _DEVICE.search(block), _FW_ROW.search(block)
        if not psid or not row:
            continue
        pci, status = _PCI_NAME.search(block), _STATUS.search(block)
        devices.append({
            "psid": psid.group("psid"),
            "pci": pci.group("pci") if pci else None,
            "fw_current": row.group("current"),
            "fw_available": None if row.group("available") == "N/A" else row.group("available"),
            "status": status.group("status") if status else None,
        })
    return devices


def parse_install_output(text):
    """What an OFED install printed -> ``{"result", "firmware", "devices", "not_distributed", "restart_needed",
    "fw_updater_onboot", "reload_command", "missing_packages", "logs_dir"}``.

    ``result``: ``passed`` (``Installation passed/finished successfully``), ``failed`` (an ``Error:`` line after the
    last success, or missing prerequisites) or None (neither printed: a cut log). ``firmware``: one of FIRMWARE_STEPS
    (a burn outranks every other line: the firmware changed). ParseError when the text holds none of the installer's
    lines at all (another tool's output).
    """
    text = _ESCAPE.sub(r"\1", whole_lines(str(text or "")))
    passed = list(_PASSED.finditer(text))
    missing = list(_MISSING.finditer(text))
    attempted = _ATTEMPT.search(text)
    skipped = _SKIPPED.search(text)
    onboot = _ONBOOT.search(text)
    reload = _RELOAD.search(text)
    logs = _LOGS.search(text)
    if not (passed or missing or attempted or skipped or onboot or reload or logs):
        shown = text.strip()[:200]
        raise ParseError(f"{TOOL}: none of its lines (Logs dir, Installation passed, the firmware step, the reload command) in {shown!r}")
    last_pass = passed[-1].end() if passed else -1
    errors = [match for match in _ERROR.finditer(text) if match.start() > last_pass]
    if missing and (not passed or missing[-1].start() > last_pass):
        result = "failed"
    elif passed and not errors:
        result = "passed"
    elif passed and all(_FW_FAILED.match(match.group(0)) for match in errors):
        result = "passed"  # the software installed; only the (refused) firmware step failed
    else:
        result = "failed" if errors else None
    not_distributed = [{"pci": match.group("pci"), "psid": match.group("psid")} for match in _NOT_DISTRIBUTED.finditer(text)]
    if _BURN.search(text):
        firmware = "updated"
    elif _FW_FAILED.search(text):
        firmware = "failed"
    elif not_distributed:
        firmware = "not_distributed"
    elif attempted and _UP_TO_DATE.search(text):
        firmware = "up_to_date"
    elif attempted:
        firmware = "failed"  # an attempt whose end was not printed: treat as the worst that is not a burn seen
    elif skipped:
        firmware = "skipped"
    else:
        firmware = "not_run"
    missing_line = None
    if missing:
        after = text[missing[-1].end() :]
        command = re.search(r"^\s*((?:yum|dnf|apt-get|apt|zypper) install [^\n]+?)\s*$", after, re.MULTILINE)
        missing_line = command.group(1) if command else None
    return {
        "result": result,
        "firmware": firmware,
        "devices": _devices(text) if attempted else [],
        "not_distributed": not_distributed,
        "restart_needed": bool(_RESTART.search(text)),
        "fw_updater_onboot": onboot.group("value") if onboot else None,
        "reload_command": reload.group("command") if reload else None,
        "missing_packages": missing_line,
        "logs_dir": logs.group("dir") if logs else None,
    }


def firmware_attempted(parsed):
    """True when the install ran its firmware step (mlnx-fw-updater queried the adapters, and may have burnt them)."""
    return parsed["firmware"] not in ("skipped", "not_run")
