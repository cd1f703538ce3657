# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parsers for the NVIDIA (Mellanox) NIC firmware tools (private: may change without notice).

mlxfwmanager / mlxup query and update output (text and ``--query-format XML``), ``flint q``
(and ``mstflint q``), ``mlxfwreset query`` and ``reset``, ``mst status [-v]`` and
``mlxconfig query``. Pure functions: text in, plain dicts out, ``ParseError`` when what
matters (a device block, a firmware version, a PSID) cannot be read, or when a line the parser
reads is the last one and no newline ends it (its value may be cut short: see _common.cut_line).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import (
    ParseError,
    cut_line,
    cut_short,
    text_or_none,
)

# "Device #3:" on a line of its own starts a query block; "Device #3: Updating FW ..." does not.
_DEVICE_HEADER = re.compile(r"^\s*Device #(\d+):\s*$")
_UPDATING = re.compile(r"^\s*Device #(\d+): Updating FW \.\.\.")
# Values are stripped afterwards: a lazy ".*?" before "\s*$" is quadratic in a run of spaces.
_FIELD = re.compile(r"^\s{1,4}([A-Za-z][A-Za-z0-9 ]*?):\s*(.*)$")
_VERSION_ROW = re.compile(r"^\s{3,}([A-Za-z][A-Za-z0-9_]*)\s+(\S+)(?:\s+(\S+))?\s*$")
_BDF = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
_STEP = re.compile(r"^\s*(\S.*?)[ \t]{1,64}-[ \t]{1,64}(OK|FAILED|Failed|failed|\d+%.*)$")
# ConnectX / BlueField firmware is always xx.yy.zzzz (2.42.5000, 28.44.1036): "24.99" is a cut-off 24.99.0932.
_FW_VERSION = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}\.[0-9]{4}")
# Rows whose versions always have that form (PXE 3.6.0502, UEFI 14.26.0017 too).
_WHOLE_FORM_ROWS = frozenset(("FW", "PXE", "UEFI"))
# What mlxfwmanager prints in the fields of a device it could not read.
_NO_VALUE = frozenset(("--", "---"))
_QUERY_FAILURE = re.compile(r"fail|error|unable|cannot|can't|not open|no access", re.IGNORECASE)


def _lines(text):
    if text is None:
        raise ParseError("mlx: no output to parse")
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _refuse_cut(text, tool, field):
    """cut_short when the last line of ``text`` has no newline and holds something (its values may be cut short)."""
    cut = cut_line(text)
    if cut and cut.strip():
        raise cut_short(tool, field, cut)


# mlxup's question waits for an answer with no newline after it: a cut line that is only the question holds no value.
_PROMPT = re.compile(r"\[y/N\]:?\s*$")


def _pci_address(name):
    """Full domain:bus:dev.fn for a PCI address, None for an MST device name."""
    match = _BDF.match(name or "")
    if not match:
        return None
    domain = match.group(1) or "0000"
    return f"{domain.lower().zfill(4)}:{match.group(2).lower()}:{match.group(3).lower()}.{match.group(4)}"


def _update_required(status):
    """True / False from mlxfwmanager's status line, None when it says neither."""
    if status is None:
        return None
    lowered = status.lower()
    if "update required" in lowered:
        return True
    if lowered.strip() == "up to date":
        return False
    return None


def _value(text):
    """text_or_none, with mlxfwmanager's '--' (a device it could not read) as no value."""
    value = text_or_none(text)
    return None if value in _NO_VALUE else value


def fw_version(text, where, field):
    """A whole ConnectX firmware version (xx.yy.zzzz), None when absent, else ParseError naming the field."""
    value = _value(text)
    if value is not None and _FW_VERSION.fullmatch(value) is None:
        raise ParseError(f"{where}: {field} {value!r} is not a whole firmware version (xx.yy.zzzz, for example 28.43.1014): the output may be cut short")
    return value


def _device_record(index, fields, versions, where):
    pci = fields.get("pci device name")
    status = _value(fields.get("status"))
    fw = versions.get("FW")
    psid = _value(fields.get("psid"))
    fw_current = _value(fw["current"]) if fw else None
    # A device mlxfwmanager could not open: empty PSID, "--" everywhere, the reason in Status. It is
    # reported (and never flashed) rather than failing the whole query.
    query_failed = (psid is None or fw_current is None) and status is not None and _QUERY_FAILURE.search(status) is not None
    if not query_failed:
        if fw_current is None:
            raise ParseError(f"mlxfwmanager: {where} has no FW current version")
        if psid is None:
            raise ParseError(f"mlxfwmanager: {where} has no PSID")
    address = _pci_address(pci)

    def version(name, which):
        row = versions.get(name)
        if row is None:
            return None
        if name in _WHOLE_FORM_ROWS:
            return fw_version(row[which], f"mlxfwmanager: {where}", f"{name} {which}")
        return _value(row[which])

    port_macs = [fields[key] for key in sorted(fields) if re.match(r"port\d+ mac$", key)]
    port_guids = [fields[key] for key in sorted(fields) if re.match(r"port\d+ guid$", key)]
    return {
        "index": index,
        "pci": text_or_none(pci),
        "pci_address": address,
        "device": text_or_none(pci) if address is None else None,
        "type": _value(fields.get("device type")),
        "psid": psid,
        "part_number": _value(fields.get("part number")),
        "description": _value(fields.get("description")),
        "fw_current": version("FW", "current"),
        "fw_available": version("FW", "available"),
        "pxe_current": version("PXE", "current"),
        "pxe_available": version("PXE", "available"),
        "uefi_current": version("UEFI", "current"),
        "uefi_available": version("UEFI", "available"),
        "versions": {name: {"current": _value(row["current"]), "available": _value(row["available"])} for name, row in versions.items()},
        "status": status,
        "update_required": None if query_failed else _update_required(status),
        "query_failed": query_failed,
        "base_mac": _value(fields.get("base mac")),
        "base_guid": _value(fields.get("base guid")),
        "port_macs": port_macs,
        "port_guids": port_guids,
    }


def _parse_blocks(lines, cut=False):
    """(devices, index of the line after the last block) from mlxfwmanager/mlxup text.

    ``cut``: the last line has no newline; a block that reaches it is refused (a PSID, version or
    status on it may be cut short: "Update requ", "28.4").
    """
    last = len(lines) - 1 if cut else None
    devices = []
    i = 0
    end = 0
    while i < len(lines):
        header = _DEVICE_HEADER.match(lines[i])
        if not header:
            i += 1
            continue
        if i == last:
            raise cut_short("mlxfwmanager", f"the header of {lines[i].strip()!r}", lines[i])
        index = int(header.group(1))
        where = f"Device #{index}"
        fields = {}
        versions = {}
        in_versions = False
        i += 1
        while i < len(lines):
            line = lines[i]
            stripped = line.strip()
            if _DEVICE_HEADER.match(line) or _UPDATING.match(line):
                break
            if stripped and not line[0].isspace() and not set(stripped) <= {"-"}:
                break  # prompt, log line or the next section: the block is over
            if i == last and stripped:
                raise cut_short("mlxfwmanager", where, line)
            if not stripped or set(stripped) <= {"-"}:
                if not stripped:
                    in_versions = False
                if stripped and fields:
                    break  # "---------" before "Found N device(s)"
                i += 1
                continue
            field = _FIELD.match(line)
            if field and not (in_versions and len(line) - len(line.lstrip()) >= 3):
                key = field.group(1).strip().lower()
                fields[key] = field.group(2).strip()
                in_versions = key == "versions"
                i += 1
                if key == "status":
                    break
                continue
            row = _VERSION_ROW.match(line)
            if in_versions and row:
                versions[row.group(1)] = {"current": row.group(2), "available": row.group(3)}
                i += 1
                continue
            raise ParseError(f"mlxfwmanager: unexpected line in {where}: {stripped!r}")
        devices.append(_device_record(index, fields, versions, where))
        end = i
    return devices, end


def parse_fwmanager_text(text):
    """Devices from ``mlxfwmanager --query`` / ``mlxup --query`` text output.

    Returns a list of dicts: ``index``, ``pci`` (the PCI Device Name as printed, what ``-d``
    takes back), ``pci_address`` (domain:bus:dev.fn when that name is an address, else None),
    ``device`` (the MST device name when it is not an address, else None), ``type``, ``psid``,
    ``part_number``, ``description``, ``fw_current``, ``fw_available``, ``pxe_*``, ``uefi_*``,
    ``versions`` (every row of the table), ``status`` as printed, ``update_required``
    (True / False, None for "No matching image found"), ``base_mac``, ``base_guid``,
    ``port_macs``, ``port_guids``. Versions printed as N/A are None. Prompts, log lines and
    the update part that may follow are ignored; mlxfwmanager's exit code is not looked at.
    """
    devices, _end = _parse_blocks(_lines(text), cut=bool((cut_line(text) or "").strip()))
    if not devices:
        raise ParseError("mlxfwmanager: no 'Device #N:' block in the output")
    return devices


def parse_fwmanager_update(text):
    """The query part, the per-device results and the restart notice of an update run.

    Returns ``{"devices": [...as parse_fwmanager_text...], "to_update": N or None,
    "confirmed": True/False/None, "results": [{"index", "pci", "device", "status":
    "done" | "failed" | "incomplete", "steps": [{"name", "result"}], "warnings", "errors",
    "message"}], "reboot_required": bool, "log_file"}``.
    A result's ``pci``/``device`` is filled only when every queried device was updated (the
    update numbers its devices among those it updates, so the mapping is otherwise unsure).
    """
    lines = _lines(text)
    cut = cut_line(text)
    devices, end = _parse_blocks(lines, cut=bool((cut or "").strip()))
    if not devices:
        raise ParseError("mlxfwmanager: no 'Device #N:' block in the update output")
    if cut and cut.strip():
        # A step, "Done", "-E- ..." or "Restart needed" cut short reads as another result: refused, but
        # the question waiting for its answer (no newline after it) says nothing yet and is dropped.
        if not _PROMPT.search(cut):
            raise cut_short("mlxfwmanager", "the update log", cut)
        lines = lines[:-1]
    to_update = None
    confirmed = None
    reboot_required = False
    log_file = None
    results = {}
    order = []
    current = None
    for line in lines[end:]:
        stripped = line.strip()
        found = re.match(r"Found (\d+) device\(s\) requiring firmware update", stripped)
        if found:
            to_update = int(found.group(1))
            continue
        answer = re.match(r"Perform FW update\? \[y/N\]:\s*(\S*)", stripped)
        if answer:
            confirmed = answer.group(1).lower().startswith("y")
            continue
        updating = _UPDATING.match(line)
        if updating:
            index = int(updating.group(1))
            if index not in results:
                order.append(index)
            # mlxup redraws "Device #N: Updating FW ..." while it writes: start the steps again
            results[index] = {"index": index, "steps": [], "warnings": [], "errors": [], "done": False}
            current = results[index]
            continue
        if stripped.startswith("Restart needed for updates to take effect"):
            reboot_required = True
            current = None
            continue
        if stripped.startswith("Log File:"):
            log_file = text_or_none(stripped.split(":", 1)[1])
            continue
        if current is None or not stripped:
            continue
        if stripped == "Done":
            current["done"] = True
        elif stripped.startswith("-W-"):
            current["warnings"].append(stripped[3:].strip())
        elif stripped.startswith("-E-"):
            current["errors"].append(stripped[3:].strip())
        else:
            step = _STEP.match(stripped)
            if step and "%" not in step.group(2):
                current["steps"].append({"name": step.group(1), "result": step.group(2)})
    mapped = len(devices) == len(order) and (to_update is None or to_update == len(devices))
    by_index = {device["index"]: device for device in devices}
    out = []
    for index in order:
        result = results[index]
        failed = result["errors"] or any(step["result"].lower() == "failed" for step in result["steps"])
        status = "failed" if failed else ("done" if result["done"] else "incomplete")
        target = by_index.get(index) if mapped else None
        out.append(
            {
                "index": index,
                "pci": target["pci"] if target else None,
                "device": target["device"] if target else None,
                "status": status,
                "steps": result["steps"],
                "warnings": result["warnings"],
                "errors": result["errors"],
                "message": result["errors"][-1] if result["errors"] else None,
            }
        )
    return {
        "devices": devices,
        "to_update": to_update,
        "confirmed": confirmed,
        "results": out,
        "reboot_required": reboot_required,
        "log_file": log_file,
    }


def _attr(element, *names):
    """An attribute by any of several names, case-insensitively."""
    if element is None:
        return None
    lowered = {key.lower(): value for key, value in element.attrib.items()}
    for name in names:
        value = lowered.get(name.lower())
        if value is not None:
            return value
    return None


def _child(element, name):
    for child in element:
        if child.tag.lower() == name.lower():
            return child
    return None


def parse_fwmanager_xml(text):
    """Devices from ``mlxfwmanager --query --query-format XML``, in parse_fwmanager_text's shape.

    Reads ``<Devices><Device pciName type psid partNumber><Versions><FW current available/>
    ...</Versions><MACs Base_Mac/><Status/><Description/></Device></Devices>``. Text before
    the XML (warnings; mlxfwmanager can exit non-zero and still print it) is skipped.
    """
    if text is None:
        raise ParseError("mlxfwmanager: no XML output to parse")
    start = text.find("<?xml")
    if start < 0:
        start = text.find("<Devices")
    if start < 0:
        raise ParseError("mlxfwmanager: no <Devices> XML document in the output")
    stop = text.rfind("</Devices>")
    document = text[start : stop + len("</Devices>")] if stop > start else text[start:]
    try:
        # The document is the local mlxfwmanager's output, and managed nodes have only the stdlib.
        root = ET.fromstring(document.encode("utf-8"))  # noqa: S314
    except (ET.ParseError, RecursionError, UnicodeError, ValueError) as exc:
        # UnicodeError: bytes that are no UTF-8 (kept as surrogates by the decoder) cannot be handed to the XML parser.
        raise ParseError(f"mlxfwmanager: XML output does not parse: {type(exc).__name__}: {str(exc)[:200]}") from exc
    if root.tag.lower() != "devices":
        raise ParseError(f"mlxfwmanager: XML root is <{root.tag}>, expected <Devices>")
    devices = []
    for position, element in enumerate(e for e in root if e.tag.lower() == "device"):
        versions = {}
        versions_element = _child(element, "Versions")
        for row in versions_element if versions_element is not None else []:
            versions[row.tag] = {"current": _attr(row, "current"), "available": _attr(row, "available")}
        macs = _child(element, "MACs")
        guids = _child(element, "GUIDs")
        status = _child(element, "Status")
        description = _child(element, "Description")
        fields = {
            "pci device name": _attr(element, "pciName"),
            "device type": _attr(element, "type"),
            "psid": _attr(element, "psid"),
            "part number": _attr(element, "partNumber"),
            "description": description.text if description is not None else None,
            "status": status.text if status is not None else None,
            "base mac": _attr(macs, "Base_Mac", "BaseMac"),
            "base guid": _attr(guids, "Base_Guid", "BaseGuid") or _attr(macs, "Base_Guid"),
        }
        index = position + 1
        devices.append(_device_record(index, fields, versions, f"XML device {index}"))
    # No <Device> in a document that parsed whole (a cut one does not parse): a node without ConnectX adapters.
    return devices


# --------------------------------------------------------------------------- flint query

_KEY_VALUE = re.compile(r"^([A-Za-z][A-Za-z0-9 ()/_.-]*?):(?:\s+(.*))?$")


def _rom_entry(text):
    entry = {}
    for token in text.split():
        if "=" in token:
            key, value = token.split("=", 1)
            entry[key] = value
    return entry


def parse_flint_query(text):
    """``flint -d DEV q`` / ``mstflint -d DEV q`` / ``flint -i IMG q`` (also ``query full``).

    Returns ``{"image_type", "fw_version", "fw_release_date", "product_version", "rom_info":
    [{"type", "version", "cpu"...}], "description", "base_guid", "base_mac", "guids_number",
    "macs_number", "guids", "macs", "psid", "part_number", "security_attributes",
    "image_vsd", "device_vsd", "device_id", "fields"}`` (``fields``: every line as printed).
    Lines before the query (prompts, lspci, mlxfwreset) are skipped.
    """
    lines = _lines(text)
    start = None
    for marker in ("Image type:", "FW Version:"):
        for number, line in enumerate(lines):
            if line.startswith(marker):
                start = number
                break
        if start is not None:
            break
    if start is None:
        raise ParseError("flint: no 'Image type:' or 'FW Version:' line in the output")
    cut = cut_line(text)
    last = len(lines) - 1 if cut and cut.strip() else None
    fields = {}
    rom_lines = []
    last_key = None
    for number, line in enumerate(lines[start:], start):
        if not line.strip():
            break
        if number == last and (line[0].isspace() or _KEY_VALUE.match(line)):
            # The query reaches a line with no newline: its value (a PSID, a GUID, "Rom Info") may be cut short.
            # (A last line that is no field, a shell prompt, ends the query as it would with its newline.)
            raise cut_short("flint", f"the value of {last_key!r}" if line[0].isspace() else repr(line.split(":", 1)[0].strip()), line)
        if line[0].isspace():
            if last_key == "Rom Info":
                rom_lines.append(line.strip())
            continue
        match = _KEY_VALUE.match(line)
        if not match:
            break
        last_key = match.group(1).strip()
        value = (match.group(2) or "").strip()
        fields[last_key] = value
        if last_key == "Rom Info" and value:
            rom_lines.append(value)
    firmware = fw_version(fields.get("FW Version"), "flint", "FW Version")
    if firmware is None:
        raise ParseError("flint: no FW Version in the query output")
    psid = text_or_none(fields.get("PSID"))
    if psid is None:
        raise ParseError("flint: no PSID in the query output")

    def first_and_count(key):
        parts = (fields.get(key) or "").split()
        value = text_or_none(parts[0]) if parts else None
        count = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
        return value, count

    base_guid, guids_number = first_and_count("Base GUID")
    base_mac, macs_number = first_and_count("Base MAC")
    guids = (fields.get("GUIDs") or "").split()
    macs = (fields.get("MACs") or "").split()
    if base_guid is None and guids:
        base_guid = guids[0]
    return {
        "image_type": text_or_none(fields.get("Image type")),
        "fw_version": firmware,
        "fw_release_date": text_or_none(fields.get("FW Release Date")),
        "product_version": text_or_none(fields.get("Product Version")),
        "rom_info": [_rom_entry(entry) for entry in rom_lines if _rom_entry(entry)],
        "description": text_or_none(fields.get("Description")),
        "base_guid": base_guid,
        "guids_number": guids_number,
        "base_mac": base_mac,
        "macs_number": macs_number,
        "guids": guids,
        "macs": macs,
        "psid": psid,
        "part_number": text_or_none(fields.get("Part Number")),
        "security_attributes": text_or_none(fields.get("Security Attributes")),
        "image_vsd": text_or_none(fields.get("Image VSD")),
        "device_vsd": text_or_none(fields.get("Device VSD")),
        "device_id": text_or_none(fields.get("Device ID")),
        "fields": fields,
    }


# --------------------------------------------------------------------------- mlxfwreset

# Greedy description (backtracks once from the line end): a lazy one before "\s+-" is quadratic in a run of spaces.
_RESET_ROW = re.compile(r"^\s*(\d+):[ \t]+(.*\S)[ \t]{1,64}-(Supported|Not [Ss]upported)[ \t]*(\(default\))?[ \t]*$")
_SECTION_KEYS = {"reset-levels": "levels", "reset-types": "reset_types", "reset-sync": "reset_syncs"}


def _section_key(header):
    name = header.split("(", 1)[0].strip().rstrip(":").strip().lower()
    if name in _SECTION_KEYS:
        return _SECTION_KEYS[name]
    if name.startswith("supported reset levels"):
        return "levels"
    return re.sub(r"[^a-z0-9]+", "_", name).strip("_")


def parse_fwreset_query(text):
    """``mlxfwreset -d DEV query``: the reset levels, types and syncs it lists.

    Returns ``{"levels": [{"level", "description", "supported", "default"}], "reset_types":
    [{"type", ...}], "reset_syncs": [{"sync", ...}], "sections": {name: [{"value", ...}]} for
    any other section (reset methods on newer MFT), "default_level", "requires_reboot"}``.
    ``requires_reboot`` is True when no supported level below 4 exists (4 = warm reboot,
    5 = cold reboot in mlxfwreset's numbering), None when no level is listed.
    """
    lines = _lines(text)
    _refuse_cut(text, "mlxfwreset", "the reset levels (a level cut short loses its '-Supported' or '(default)')")
    sections = {}
    current = None
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        row = _RESET_ROW.match(line)
        if row:
            if current is None:
                current = "levels"  # older MFT prints the levels with no header
            sections.setdefault(current, []).append(
                {
                    "value": int(row.group(1)),
                    "description": row.group(2).strip(),
                    "supported": row.group(3).lower() == "supported",
                    "default": row.group(4) is not None,
                }
            )
            continue
        if stripped.endswith(":") or re.match(r"^Reset-[A-Za-z]+\b.*:\s*$", stripped):
            current = _section_key(stripped)
            continue
    levels = sections.pop("levels", [])
    if not levels:
        raise ParseError("mlxfwreset: no reset level ('N: ... -Supported') in the query output")

    def renamed(rows, key):
        return [dict({key: row["value"]}, **{k: v for k, v in row.items() if k != "value"}) for row in rows]

    default_level = next((row["value"] for row in levels if row["default"]), None)
    live = [row for row in levels if row["supported"] and row["value"] < 4]
    return {
        "levels": renamed(levels, "level"),
        "reset_types": renamed(sections.pop("reset_types", []), "type"),
        "reset_syncs": renamed(sections.pop("reset_syncs", []), "sync"),
        "sections": sections,
        "default_level": default_level,
        "requires_reboot": not live,
    }


def parse_fwreset_reset(text):
    """``mlxfwreset -d DEV reset -y``: ``{"device", "level", "description", "steps": [{"name",
    "result"}], "errors", "completed"}``; ``completed`` is True when every step printed -Done
    and no -E- line appeared.
    """
    lines = _lines(text)
    # A step cut short ("-I- Resetting PC") would be no step, and the steps before it read as complete.
    _refuse_cut(text, "mlxfwreset", "the reset steps")
    device = None
    level = None
    description = None
    steps = []
    errors = []
    awaiting_level = False  # the chosen level is the first "N: ..." line after the header
    for line in lines:
        stripped = line.strip()
        header = re.match(r"The reset level for device, (\S+) is:", stripped)
        if header:
            device = header.group(1)
            awaiting_level = True
            continue
        if awaiting_level:
            chosen = re.match(r"^(\d+):\s+(.*)$", stripped)
            if chosen:
                level = int(chosen.group(1))
                description = chosen.group(2)
                awaiting_level = False
        if stripped.startswith("-I-"):
            # "-I- Sending Reset Command To Fw             -Done": the result is the last " -word".
            rest = stripped[3:].strip()
            result = re.search(r"\s-(\w+)$", rest)
            if result and stripped[3:4].isspace():
                steps.append({"name": rest[: result.start()].strip(), "result": result.group(1)})
        elif stripped.startswith("-E-"):
            errors.append(stripped[3:].strip())
    if level is None and not steps and not errors:
        raise ParseError("mlxfwreset: no reset level, step or error in the reset output")
    return {
        "device": device,
        "level": level,
        "description": description,
        "steps": steps,
        "errors": errors,
        "completed": bool(steps) and not errors and all(step["result"].lower() == "done" for step in steps),
    }


# --------------------------------------------------------------------------- mst status


def _columns(header):
    return [(match.start(), match.group(0)) for match in re.finditer(r"\S+", header)]


def parse_mst_status(text):
    """``mst status`` and ``mst status -v``.

    Returns ``{"modules": [lines under "MST modules:"], "devices": [{"mst", "pci",
    "device_type", "rdma", "net", "numa", "description"}]}`` with NA / missing as None.
    """
    lines = _lines(text)
    _refuse_cut(text, "mst status", "the device list")
    modules = []
    devices = []
    section = None
    columns = None
    for line in lines:
        stripped = line.strip()
        if stripped in ("MST modules:", "MST devices:", "PCI devices:"):
            section = stripped
            columns = None
            continue
        if not stripped or set(stripped) <= {"-"}:
            continue
        if section == "MST modules:":
            modules.append(stripped)
        elif section == "PCI devices:":
            if columns is None:
                if stripped.startswith("DEVICE_TYPE"):
                    columns = _columns(line)
                continue
            cells = {}
            for position, (start, name) in enumerate(columns):
                stop = columns[position + 1][0] if position + 1 < len(columns) else len(line)
                cells[name.lower()] = text_or_none(line[start:stop]) if start < len(line) else None
            devices.append(
                {
                    "mst": None if (cells.get("mst") or "NA") == "NA" else cells.get("mst"),
                    "pci": cells.get("pci"),
                    "device_type": None if (cells.get("device_type") or "NA") == "NA" else cells.get("device_type"),
                    "rdma": cells.get("rdma"),
                    "net": cells.get("net"),
                    "numa": cells.get("numa"),
                    "description": None,
                }
            )
        elif section == "MST devices:":
            entry = re.match(r"^(/dev/mst/\S+|\S+_pci\S*)[ \t]{1,64}-[ \t]+(.*)$", stripped)
            if entry and not line[0].isspace():
                devices.append(
                    {
                        "mst": entry.group(1),
                        "pci": None,
                        "device_type": None,
                        "rdma": None,
                        "net": None,
                        "numa": None,
                        "description": entry.group(2),
                    }
                )
                continue
            address = re.search(r"domain:bus:dev\.fn=(\S+)", stripped)
            if address and devices:
                devices[-1]["pci"] = address.group(1)
        elif section is not None and not line[0].isspace():
            section = None
    if not modules and not devices:
        raise ParseError("mst: no 'MST modules:', 'MST devices:' or 'PCI devices:' section in the output")
    return {"modules": modules, "devices": devices}


# --------------------------------------------------------------------------- mlxconfig


def parse_mlxconfig_query(text):
    """``mlxconfig -d DEV query`` (also grep-filtered): ``{"device_type", "name",
    "description", "config": {PARAM: value as printed}}``.
    """
    lines = _lines(text)
    _refuse_cut(text, "mlxconfig", "the configuration")
    header = {}
    config = {}
    in_config = False
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if in_config and line[0].isspace():
            parts = stripped.split(None, 1)
            if len(parts) == 2 and re.match(r"^[A-Z][A-Z0-9_]*(\[\d+(\.\.\d+)?\])?$", parts[0]):
                config[parts[0]] = parts[1].strip()
            continue
        match = re.match(r"^(Device type|Name|Description|Device|Configurations):\s*(.*)$", stripped)
        if match:
            if match.group(1) == "Configurations":
                in_config = True
            else:
                header[match.group(1)] = match.group(2)
    if "Device type" not in header and not config:
        raise ParseError("mlxconfig: no 'Device type:' or configuration line in the query output")
    return {
        "device_type": text_or_none(header.get("Device type")),
        "name": text_or_none(header.get("Name")),
        "description": text_or_none(header.get("Description")),
        "device": text_or_none(header.get("Device")),
        "config": config,
    }
