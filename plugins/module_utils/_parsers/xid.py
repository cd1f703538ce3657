# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parse NVIDIA Xid (GPU) and SXid (NVSwitch) events out of kernel log text (private).

Reads every form the kernel log reaches us in: ``dmesg`` (monotonic ``[ 123.456]``),
``dmesg -T`` / ``--ctime`` (``[Fri Apr  5 21:29:39 2024]``), ``dmesg --time-format=iso``
(``kern  :warn  : 2025-01-21T04:41:44,283302+00:00``), syslog / journalctl lines with a
hostname and ``kernel:`` tag, raw ``/dev/kmsg`` records (``6,1234,5678,-;``), Markdown
block quotes, and the driver's own variants: ``Xid (PCI:0000:52:00): 48, pid=..., name=...``,
MIG (``Xid (PCI:0000:01:00 GPU-I:05): 94``), the old form without ``PCI:`` and without
pid/name, and ``nvidia-nvswitchN: SXid (PCI:0000:05:00.0): 20034, ...``.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import whole_lines

# The part every Xid/SXid line shares; what follows the number is the message. Every quantifier
# that a search restarts at each "Xid (" of a line is bounded (a location is "PCI:0000:01:00 GPU-I:05"),
# so a line of repeated "Xid (" costs linear time, not quadratic.
_EVENT = re.compile(
    r"\b(?P<sxid>S?)Xid[ \t]{0,8}\((?P<location>[^)\n]{0,64})\):[ \t]{0,8}(?P<code>[^\s,]{1,16})[ \t]{0,8}(?:,\s*|$)(?P<body>.*)$",
)
_LOCATION = re.compile(r"^(?:PCI:)?(?P<bus>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)(?:\s+GPU-I:\s*(?P<gi>\d+))?")
_PID = re.compile(r"^pid=(?P<pid>'[^']{0,64}'|[^\s,]{1,64})\s*(?:,\s*|$)")
# Process names may contain spaces ("KMS thread") and colons ("ray::WorkerDict"): up to the next comma.
_NAME = re.compile(r"^name=(?P<name>[^,]{0,256}?)\s*(?:,\s*|$)")

_KMSG = re.compile(r"^\d+,\d+,(?P<usec>\d+),[^;]*;")
_BRACKET = re.compile(r"\[[ \t]{0,16}(?P<ts>[^\]]{0,64}?)[ \t]{0,16}\]")
_DMESG_DECODE = re.compile(r"^[a-z]+\s*:\s*[a-z]+\s*:\s*")  # "kern  :warn  : " from dmesg --decode
_TAG = re.compile(r"[\w.-]{1,64}:[ \t]*$")  # the "NVRM: " or "nvidia-nvswitch0: " just before "Xid"
_ISO = re.compile(r"^(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)")
_SYSLOG = re.compile(r"^(?P<ts>[A-Z][a-z]{2}\s+\d{1,2}\s+\d\d:\d\d:\d\d)")
_UNKNOWN = frozenset(("<unknown>", "'<unknown>'", "unknown", ""))


def _timestamp(prefix):
    """The time stamp in the text before the ``NVRM:`` tag, as printed (None when there is none).

    A wall-clock time (syslog, journal, ISO, ``dmesg -T``) wins over the monotonic
    ``[ 269.516977]`` that syslog lines may also carry; a raw kmsg record gives its
    microseconds since boot in dmesg's seconds form.
    """
    prefix = _TAG.sub("", prefix).lstrip("> \t")
    kmsg = _KMSG.match(prefix)
    if kmsg:
        usec = int(kmsg.group("usec"))
        return f"{usec // 1000000}.{usec % 1000000:06d}"
    bracket = _BRACKET.match(prefix)
    if bracket:
        return bracket.group("ts") or None
    prefix = _DMESG_DECODE.sub("", prefix, count=1)
    for pattern in (_ISO, _SYSLOG):
        match = pattern.match(prefix)
        if match:
            return match.group("ts")
    bracket = _BRACKET.search(prefix)
    if bracket and bracket.group("ts"):
        return bracket.group("ts")
    return None


def _pid(value):
    if value in _UNKNOWN:
        return None
    try:
        return int(value.strip("'"))
    except ValueError:
        return None


def _parse_line(line):
    match = _EVENT.search(line)
    if not match:
        return None
    code = match.group("code")
    if not code.isdigit():
        return None  # starts like an Xid line but carries no number: not an event we can count
    location = _LOCATION.match(match.group("location").strip())
    body = match.group("body").strip()
    pid = process = None
    pid_match = _PID.match(body)
    if pid_match:
        pid = _pid(pid_match.group("pid"))
        body = body[pid_match.end() :]
        name_match = _NAME.match(body)
        if name_match:
            name = name_match.group("name").strip()
            process = None if name in _UNKNOWN else name
            body = body[name_match.end() :]
    return {
        "xid": int(code),
        "kind": "sxid" if match.group("sxid") else "xid",
        "pci_bus_id": location.group("bus") if location else None,
        "gpu_instance": int(location.group("gi")) if location and location.group("gi") else None,
        "pid": pid,
        "process": process,
        "message": body.strip(),
        "timestamp": _timestamp(line[: match.start()]),
    }


def parse_kernel_log(text):
    """Every Xid and SXid event in kernel log text, in input order.

    Returns a list of ``{"xid": int, "kind": "xid" | "sxid", "pci_bus_id": str | None,
    "gpu_instance": int | None, "pid": int | None, "process": str | None, "message": str,
    "timestamp": str | None}``. ``pci_bus_id`` is as printed without the ``PCI:`` prefix
    (``"0000:a1:00"``; SXid lines carry the function, ``"0000:05:00.0"``); compare ids with
    :func:`normalize_pci_bus_id`. ``pid`` and ``process`` are None where the driver printed
    ``<unknown>`` or nothing. Lines that are not Xid lines are ignored, as is a line that looks
    like one but whose code is not an integer, and a last line that no newline ends: it may be cut
    short (``Xid 7`` of ``Xid 79``, half a PCI bus id), and the next read has it whole. Never raises
    on odd input.
    """
    events = []
    for line in whole_lines(text).splitlines():
        if "Xid" not in line:
            continue
        event = _parse_line(line.rstrip())
        if event is not None:
            events.append(event)
    return events


def summarize(events, kind="xid"):
    """``{code: count}`` over parsed events; ``kind="sxid"`` counts NVSwitch SXids, ``None`` both."""
    counts = {}
    for event in events:
        if kind is not None and event.get("kind", "xid") != kind:
            continue
        counts[event["xid"]] = counts.get(event["xid"], 0) + 1
    return counts


def normalize_pci_bus_id(bus_id):
    """A comparable form of a PCI address: ``"0000:a1:00.0"``.

    Accepts the forms NVIDIA tools print: ``PCI:0000:A1:00`` (Xid), ``00000000:A1:00.0``
    (nvidia-smi), ``0000:a1:00.0`` (sysfs). The function defaults to 0. None for text that is
    not a PCI address.
    """
    if not bus_id:
        return None
    match = re.match(r"^(?:PCI:)?([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.([0-7]))?$", bus_id.strip())
    if not match:
        return None
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.{function or '0'}"
