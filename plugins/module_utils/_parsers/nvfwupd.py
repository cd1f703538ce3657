# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parsers for NVIDIA nvfwupd output (private: may change without notice).

``show_version`` (table, ``-s`` staged table, ``-j`` JSON, parallel ``-c`` output with one
block per system), ``update_fw`` (monitored Redfish task, ``-d`` message table, NVOS switch
jobs, ``-b -j`` JSON) and ``show_update_progress`` (text and ``-j``).

Up-To-Date is reported as printed and never trusted alone: nvfwupd prints "Yes" when the
system is newer than the package, and "No" when both versions are equal on some platforms,
so both versions are always kept for the caller to compare.

A cut line is not a whole value (nvfwupd ends every line it prints with a newline): a text
``show_version`` whose last line has no newline is refused (a cut row would be a shorter version,
a missing one a component not planned); in ``update_fw`` / ``show_update_progress`` text such a
line is read as if it were not there (``Task Id: H`` of ``HGX_0``). A JSON document is whole by
its closing bracket, wherever the output ends.
"""

from __future__ import annotations

import ast
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import (
    JsonAt,
    ParseError,
    cut_line,
    cut_short,
    json_document,
    text_or_none,
    whole_lines,
)

_SYSTEM_KEYS = {
    "system model": "model",
    "part number": "part_number",
    "serial number": "serial",
    "packages": "packages",
    "connection status": "connection_status",
    "system ip": "bmc_ip",
    "error code": "error_code",
}
_COLUMN_KEYS = {
    "ap name": "ap",
    "sys version": "sys_version",
    "staged version": "staged_version",
    "pkg version": "pkg_version",
    "up-to-date": "up_to_date",
}
# Cells are separated by two spaces or more: "AP Name" and "0x00 0x0b 0x03 0x04" hold one.
_CELL = re.compile(r"\S+(?: \S+)*")


def _text(text, tool):
    if text is None:
        raise ParseError(f"nvfwupd {tool}: no output to parse")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _yes_no(value, ap):
    if isinstance(value, bool):
        return value
    if value is not None and not isinstance(value, str):
        raise ParseError(f"nvfwupd show_version: Up-To-Date of {ap} is {type(value).__name__} {value!r}, expected Yes or No")
    value = (value or "").strip()
    if value.lower() == "yes":
        return True
    if value.lower() == "no":
        return False
    if text_or_none(value) is None:
        return None
    raise ParseError(f"nvfwupd show_version: Up-To-Date of {ap} is {value!r}, expected Yes or No")


def _literal(value):
    """ast.literal_eval that answers None for anything it cannot read (deep nesting included)."""
    try:
        return ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _packages(value):
    """A package list printed as a Python list ("['A', 'B']") or a JSON list -> names."""
    if isinstance(value, list):
        return [str(item) for item in value]
    if value is not None and not isinstance(value, str):
        raise ParseError(f"nvfwupd: the package list is {type(value).__name__} {value!r}, expected a list of names")
    value = (value or "").strip()
    parsed = _literal(value)
    if isinstance(parsed, (list, tuple)):
        return [str(item).strip() for item in parsed]
    return re.findall(r"'([^'\n]*)'", value) or ([value] if value else [])


def _int_or_none(value):
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _json_text(obj, key, tool):
    """obj[key] when it is text, None when absent or null; ParseError for another JSON type."""
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ParseError(f"nvfwupd {tool}: {key} is {type(value).__name__} {value!r}, expected text")


def _system_field(system, key, value):
    name = _SYSTEM_KEYS.get(key.strip().lower(), re.sub(r"[^a-z0-9]+", "_", key.strip().lower()).strip("_"))
    if name == "packages":
        system[name] = _packages(value)
    elif name == "error_code":
        system[name] = _int_or_none(value)
    elif value is None or isinstance(value, str):
        system[name] = text_or_none(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        system[name] = value
    else:
        raise ParseError(f"nvfwupd show_version: {key} is {type(value).__name__} {value!r}, expected text")


def _split_row(line, starts):
    """Cells of a table row, given the header's column starts.

    Cells are separated by two spaces or more (values such as "0x00 0x0b 0x03 0x04" hold
    single spaces); where a value fills its column, only one space separates it from the
    next, so a single space also splits when the next word starts at a column (within 2).
    """
    chunks = [(m.start(), m.group(0)) for m in _CELL.finditer(line)]
    if len(chunks) == len(starts):
        return [chunk for _start, chunk in chunks]
    cells = []
    for start, chunk in chunks:
        words = [(start + m.start(), m.group(0)) for m in re.finditer(r"\S+", chunk)]
        current_start, current = words[0]
        for word_start, word in words[1:]:
            if any(abs(word_start - column) <= 2 for column in starts[1:]):
                cells.append((current_start, current))
                current_start, current = word_start, word
            else:
                current = current + " " + word
        cells.append((current_start, current))
    if len(cells) != len(starts):
        return None
    return [cell for _start, cell in cells]


def _cell_text(cells, key, ap):
    value = cells.get(key)
    if value is None or isinstance(value, str):
        return text_or_none(value)
    raise ParseError(f"nvfwupd show_version: {key} of {ap!r} is {type(value).__name__} {value!r}, expected text")


def _component(cells, ap_hint=None):
    ap = _cell_text(cells, "ap", None)
    if ap is None:
        raise ParseError("nvfwupd show_version: a component row has no AP Name%s" % (ap_hint or ""))
    return {
        "ap": ap,
        "sys_version": _cell_text(cells, "sys_version", ap),
        "pkg_version": _cell_text(cells, "pkg_version", ap),
        "staged_version": _cell_text(cells, "staged_version", ap),
        "up_to_date": _yes_no(cells.get("up_to_date"), ap),
    }


def _systems_from_text(text):
    lines = text.split("\n")
    systems = []
    system = None
    table = None  # (keys, starts) while reading rows
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if table is not None:
            if not stripped or set(stripped) <= {"-", " "}:
                if stripped and " " not in stripped and len(stripped) > 20:
                    table = None  # one long dashed line closes the table; "----  ----" underlines the header
                continue
            if stripped.startswith("Error Code:") or stripped.startswith("System Model:"):
                table = None
            else:
                cells = _split_row(line, table[1])
                if cells is None:
                    raise ParseError(f"nvfwupd show_version: line {number} does not split into the {len(table[1])} table columns: {stripped!r}")
                system["components"].append(_component(dict(zip(table[0], cells)), f" (line {number})"))
                continue
        if stripped.startswith("AP Name") and system is not None:
            headers = [(m.start(), m.group(0)) for m in _CELL.finditer(line)]
            keys = []
            for _start, header in headers:
                key = _COLUMN_KEYS.get(header.lower())
                if key is None:
                    raise ParseError(f"nvfwupd show_version: unknown table column {header!r}")
                keys.append(key)
            if "sys_version" not in keys or "up_to_date" not in keys:
                raise ParseError("nvfwupd show_version: table header lacks Sys Version or Up-To-Date")
            table = (keys, [start for start, _header in headers])
            system["table_seen"] = True
            continue
        match = re.match(r"^\s*([A-Za-z][A-Za-z -]*?):\s*(.*?)\s*$", line)
        if not match:
            continue
        key, value = match.group(1), match.group(2)
        if key == "System Model":
            system = {"system": {}, "components": [], "table_seen": False}
            systems.append(system)
        if system is None:
            continue
        if key == "Firmware Devices":
            continue
        if key.strip().lower() in _SYSTEM_KEYS:
            _system_field(system["system"], key, value)
    return systems


def _systems_from_json(document):
    objects = document if isinstance(document, list) else [document]
    systems = []
    for obj in objects:
        if not isinstance(obj, dict) or "Firmware Devices" not in obj:
            raise ParseError("nvfwupd show_version -j: no 'Firmware Devices' in the JSON output")
        system = {}
        for key, value in obj.items():
            if key != "Firmware Devices":
                _system_field(system, key, value)
        components = []
        rows = obj.get("Firmware Devices") or []
        if not isinstance(rows, list):
            raise ParseError(f"nvfwupd show_version -j: 'Firmware Devices' is {type(rows).__name__}, expected a list")
        for row in rows:
            if not isinstance(row, dict):
                raise ParseError(f"nvfwupd show_version -j: a 'Firmware Devices' entry is {type(row).__name__} {row!r}, expected an object")
            cells = {_COLUMN_KEYS.get(k.lower()): v for k, v in row.items() if _COLUMN_KEYS.get(k.lower())}
            components.append(_component(cells))
        systems.append({"system": system, "components": components, "table_seen": True})
    return systems


def _json_document(text):
    """The JSON document nvfwupd -j printed (after a prompt line, maybe); ParseError naming the first failure.

    Decoded in place (no copy of the rest of the text per candidate line: that was quadratic).
    """
    read_until = 0  # a failed decode read up to here: a candidate before it is part of that broken text
    first_failure = None
    for match in re.finditer(r"(?m)^[ \t]*[\[{]", text):
        if match.end() - 1 < read_until:
            continue
        try:
            document, _end = json_document(text, "nvfwupd show_version -j", match.end() - 1)
        except JsonAt as exc:
            read_until = exc.end
            first_failure = first_failure or exc
            continue
        return document
    if first_failure is not None:
        raise ParseError(str(first_failure)) from None
    raise ParseError("nvfwupd show_version -j: the JSON output does not parse")


def _describe_row(component):
    staged = f"Staged Version {component['staged_version']}, " if component["staged_version"] is not None else ""
    up_to_date = {True: "Yes", False: "No"}.get(component["up_to_date"], "N/A")
    return f"Sys Version {component['sys_version'] or 'N/A'}, {staged}Pkg Version {component['pkg_version'] or 'N/A'}, Up-To-Date {up_to_date}"


def _once(components):
    """Each component once: a row repeated as it was is counted once; the same AP Name with other
    versions or another Up-To-Date is a ParseError (which one the system runs cannot be told)."""
    seen = {}
    kept = []
    for component in components:
        earlier = seen.get(component["ap"])
        if earlier is None:
            seen[component["ap"]] = component
            kept.append(component)
        elif earlier != component:
            raise ParseError(
                f"nvfwupd show_version lists {component['ap']} twice with different versions "
                f"({_describe_row(earlier)}; and {_describe_row(component)}): which one the system runs cannot be told"
            )
    return kept


def parse_show_version_systems(text):
    """Every system block of ``show_version`` (``-c`` parallel output has one per system).

    Returns ``[{"system": {"model", "part_number", "serial", "packages", "connection_status",
    "bmc_ip", "error_code"...}, "components": [...]}]``.
    """
    text = _text(text, "show_version")
    stripped = text.strip()
    systems = None
    if stripped.startswith(("{", "[")) or '"Firmware Devices"' in text:
        systems = _systems_from_json(_json_document(text))
    else:
        cut = cut_line(text)
        if cut is not None and cut.strip():
            raise cut_short("nvfwupd show_version", "its table", cut)
        systems = _systems_from_text(text)
    systems = [s for s in systems if s["table_seen"]]
    if not systems:
        raise ParseError("nvfwupd show_version: no 'Firmware Devices' table in the output")
    return [{"system": s["system"], "components": _once(s["components"])} for s in systems]


def parse_show_version_full(text):
    """``show_version`` of one system: ``{"system": {...}, "components": [...]}``.

    ``system`` holds what was printed above the table (``model``, ``part_number``,
    ``serial``, ``packages``, ``connection_status``, ``bmc_ip`` in JSON mode) plus
    ``error_code``. Output with several systems is an error: use parse_show_version_systems.
    """
    systems = parse_show_version_systems(text)
    if len(systems) != 1:
        raise ParseError(f"nvfwupd show_version: the output holds {len(systems)} systems; read it with parse_show_version_systems")
    system = systems[0]
    error_code = re.findall(r"(?m)^[ \t]*Error Code:[ \t]*(-?\d+)", whole_lines(_text(text, "show_version")))
    if "error_code" not in system["system"] and error_code:
        system["system"]["error_code"] = int(error_code[-1])
    return system


def parse_show_version(text):
    """``show_version [-p PKG...] [-s] [-j]`` -> ``[{"ap", "sys_version", "pkg_version",
    "staged_version", "up_to_date"}]``; N/A versions are None, Up-To-Date is True/False
    (None when not printed). Compare the versions: Up-To-Date alone is not reliable.
    A component listed twice counts once when both rows are alike; otherwise it is a ParseError.
    """
    return parse_show_version_full(text)["components"]


# --------------------------------------------------------------------------- update_fw

_FAILED_STATES = frozenset(("exception", "killed", "cancelled", "canceled", "interrupted"))
_RUNNING_STATES = frozenset(("new", "starting", "running", "pending", "stopping", "suspended", "service", "cancelling", "start"))


def _task_status(state, task_status):
    """Redfish TaskState/TaskStatus (or an NVOS job state) -> done | failed | running | unknown."""
    state = (state or "").strip().lower()
    task_status = (task_status or "").strip().lower()
    if task_status == "critical" or state in _FAILED_STATES or "fail" in state or "error" in state:
        return "failed"
    if state in ("completed", "action_success"):
        return "done"
    if state in _RUNNING_STATES:
        return "running"
    return "unknown"


def _task_id(obj, tool):
    task_id = obj.get("Id")
    if task_id is None or isinstance(task_id, str) or (isinstance(task_id, int) and not isinstance(task_id, bool)):
        return task_id
    raise ParseError(f"nvfwupd {tool}: task Id is {type(task_id).__name__} {task_id!r}, expected text")


def _new_task(tasks, order, task_id, target=None):
    key = str(task_id) if task_id is not None else f"#{len(order)}"
    if key not in tasks:
        tasks[key] = {
            "task_id": None if task_id is None else str(task_id),
            "target": target,
            "state": None,
            "task_status": None,
            "percent_complete": None,
            "start_time": None,
            "end_time": None,
            "message": None,
            "messages": [],
        }
        order.append(key)
    elif target and not tasks[key]["target"]:
        tasks[key]["target"] = target
    return tasks[key]


def _apply_redfish_task(task, obj, tool):
    for key, name in (("TaskState", "state"), ("TaskStatus", "task_status"), ("StartTime", "start_time"), ("EndTime", "end_time")):
        if key in obj:
            task[name] = _json_text(obj, key, tool)
    if obj.get("PercentComplete") is not None:
        task["percent_complete"] = _int_or_none(obj.get("PercentComplete"))
    messages = obj.get("Messages")
    if messages is not None and not isinstance(messages, list):
        raise ParseError(f"nvfwupd {tool}: Messages of task {obj.get('Id')!r} is {type(messages).__name__}, expected a list")
    if isinstance(messages, list):
        task["messages"] = [_message(m, tool) for m in messages if isinstance(m, dict)]


def _message(obj, tool):
    args = obj.get("MessageArgs") or []
    if not isinstance(args, list):
        raise ParseError(f"nvfwupd {tool}: MessageArgs is {type(args).__name__} {args!r}, expected a list")
    return {
        "message_id": _json_text(obj, "MessageId", tool),
        "message": _json_text(obj, "Message", tool),
        "message_args": [arg if isinstance(arg, str) else str(arg) for arg in args],
        "resolution": _json_text(obj, "Resolution", tool),
        "severity": _json_text(obj, "Severity", tool),
    }


def _component_results(messages):
    """Per-component outcome from Redfish message ids (Update.1.0.*, NvidiaUpdate.*)."""
    results = {}
    order = []
    for message in messages:
        message_id = message.get("message_id") or ""
        name = message_id.rsplit(".", 1)[-1]
        args = message.get("message_args") or []
        text = message.get("message") or ""
        target = None
        status = None
        if name == "TargetDetermined" and args:
            target, status = args[0], "pending"
        elif name == "UpdateSuccessful" and args:
            target, status = args[0], "updated"
        elif name == "AwaitToActivate" and len(args) > 1:
            target, status = args[1], "awaiting_activation"
        elif name == "ComponentUpdateSkipped" and args:
            target, status = args[0], "skipped"
        elif (name.endswith("Failed") or name in ("ActivateFailed", "VerificationFailed")) and args:
            target, status = args[0], "failed"
        if not args:
            quoted = re.findall(r"'([^']*)'", text)
            if name == "UpdateSuccessful" and quoted:
                target, status = quoted[0], "updated"
            elif name == "AwaitToActivate" and len(quoted) > 1:
                target, status = quoted[1], "awaiting_activation"
            elif name == "ComponentUpdateSkipped" and quoted:
                target, status = quoted[0], "skipped"
            elif name == "TargetDetermined" and quoted:
                target, status = quoted[0], "pending"
            elif name.endswith("Failed") and quoted:
                target, status = quoted[0], "failed"
        if target is None:
            continue
        if target not in results:
            results[target] = {"target": target, "status": status, "message": text, "resolution": None}
            order.append(target)
        entry = results[target]
        # awaiting_activation follows updated; failed wins over everything
        rank = {"pending": 0, "skipped": 1, "updated": 2, "awaiting_activation": 3, "failed": 4}
        if rank[status] >= rank.get(entry["status"], 0):
            entry["status"] = status
            entry["message"] = text
            if status == "awaiting_activation":
                entry["resolution"] = message.get("resolution")
    return [results[target] for target in order]


def _detail_table_messages(lines):
    """Messages of update_fw -d's grid table (+----+ rows, wrapped cells)."""
    messages = []
    row = None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("+") and set(stripped) <= {"+", "-", "="}:
            if row is not None and (row[0] or row[1]):
                if row[0] != ["MessageId"]:
                    messages.append(
                        {
                            "message_id": "".join(row[0]),
                            "message": " ".join(row[1]),
                            "message_args": [],
                            "resolution": None,
                            "severity": None,
                        }
                    )
            row = [[], []]
            continue
        if row is not None and stripped.startswith("|") and stripped.endswith("|"):
            cells = [cell.strip() for cell in stripped[1:-1].split("|")]
            if len(cells) == 2:
                if cells[0]:
                    row[0].append(cells[0])
                if cells[1]:
                    row[1].append(cells[1])
            continue
        row = None
    return messages


# TaskEvent message ids that end a task: they settle a state the last poll left at Running.
_TASK_END_EVENTS = {
    "TaskCompletedOK": ("Completed", "OK"),
    "TaskCompletedWarning": ("Completed", "Warning"),
    "TaskAborted": ("Exception", "Critical"),
    "TaskCancelled": ("Cancelled", "Warning"),
}


def _state_from_messages(task):
    if (task["state"] or "Running").lower() not in _RUNNING_STATES:
        return
    for message in task["messages"]:
        event = (message.get("message_id") or "").rsplit(".", 1)[-1]
        if event in _TASK_END_EVENTS:
            task["state"], task["task_status"] = _TASK_END_EVENTS[event]


# A job status dict is a few lines: looking further for its "}" would rescan the output per job line.
_DICT_LINES = 64


def _python_dict_after(lines, number):
    """The pprint'ed dict that starts on lines[number] ("{'detail': ..."), or None."""
    if number >= len(lines) or not lines[number].lstrip().startswith("{"):
        return None
    block = []
    for line in lines[number : number + _DICT_LINES]:
        block.append(line.strip())
        if line.rstrip().endswith("}"):
            value = _literal(" ".join(block))
            return value if isinstance(value, dict) else None
    return None


def _json_object_at(text, offset, tool):
    """(the JSON object at offset or None, how far the decoder read)."""
    try:
        value, end = json_document(text, tool, offset)
    except JsonAt as exc:
        return None, exc.end
    return (value if isinstance(value, dict) else None), end


def _find_key(obj, key):
    """Every value of ``key`` anywhere in a JSON document (iterative: documents can nest deep)."""
    found = []
    pending = [obj]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            for name, value in node.items():
                if name == key:
                    found.append(value)
                pending.append(value)
        elif isinstance(node, list):
            pending.extend(node)
    return found


# The per-line patterns of update_fw / show_update_progress output, compiled once.
_TASK_STARTED = re.compile(r"^FW update started, Task Id:\s*(\S+)")
_TASK_INFO = re.compile(r"^Task Info for Id:\s*(\S+)")
_TASK_CREATED = re.compile(r"^FW update task was created with ID\s*(\S+)")
_JOB_STATUS = re.compile(r"^Status for Job Id:?\s*(\S+?):?$")
_STARTING_FOR = re.compile(r"^Starting FW update for:\s*(.+)$")
_FW_PACKAGE = re.compile(r"^FW package:\s*(.+)$")
_TIME_TAKEN = re.compile(r"^Overall Time Taken:\s*(\S+)")
_TASK_PAIR = re.compile(r"^(TaskState|PercentComplete|TaskStatus|StartTime|EndTime):\s*(.*?)$")


def _parse_tasks(text, tool):
    """Tasks, component results and flags shared by update_fw and show_update_progress."""
    text = _text(text, tool)
    # A last line without its newline may be cut short ("Task Id: H" of HGX_0): read as if it were not there.
    lines = whole_lines(text).split("\n")
    tasks = {}
    order = []
    current = None
    reboot_required = None
    load_action = None
    json_documents = []
    errors = []
    packages = []
    targets = []
    elapsed = None
    error_codes = re.findall(r"(?m)^[ \t]*Error Code:[ \t]*(-?\d+)", whole_lines(text))
    read_until = 0
    offsets = []
    position = 0
    for line in lines:
        offsets.append(position)
        position += len(line) + 1
    for number, line in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            continue
        started = _TASK_STARTED.match(stripped)
        info = _TASK_INFO.match(stripped)
        created = _TASK_CREATED.match(stripped)
        job = _JOB_STATUS.match(stripped)
        if started or info or created:
            task_id = (started or info or created).group(1)
            current = _new_task(tasks, order, task_id, targets[-1] if created and targets else None)
            continue
        if job:
            current = _new_task(tasks, order, job.group(1))
            status = _python_dict_after(lines, number + 1)
            if status is not None:
                current["state"] = status.get("state") if isinstance(status.get("state"), str) else None
                message = status.get("status") or status.get("detail") or ""
                current["message"] = text_or_none(message) if isinstance(message, str) else None
                current["percent_complete"] = _int_or_none(status.get("percentage"))
            continue
        starting = _STARTING_FOR.match(stripped)
        if starting:
            targets.append(starting.group(1).strip())
            continue
        package = _FW_PACKAGE.match(stripped)
        if package:
            packages.extend(p.strip() for p in _packages(package.group(1)))
            continue
        took = _TIME_TAKEN.match(stripped)
        if took:
            elapsed = took.group(1)
            continue
        pair = _TASK_PAIR.match(stripped)
        if pair and current is not None:
            key, value = pair.group(1), pair.group(2)
            if key == "TaskState":
                current["state"] = value
            elif key == "TaskStatus":
                current["task_status"] = value
            elif key == "PercentComplete":
                current["percent_complete"] = _int_or_none(value)
            elif key == "StartTime":
                current["start_time"] = value
            else:
                current["end_time"] = value
            continue
        brace = line.find("{")
        if brace >= 0 and offsets[number] + brace >= read_until and ((stripped.startswith("{") and '"' in line) or stripped.startswith("Overall Task Status:")):
            # Lines inside a document already read (or a broken one already tried) are not read again.
            obj, read_until = _json_object_at(text, offsets[number] + brace, tool)
            if obj is None:
                continue
            json_documents.append(obj)
            if "TaskState" in obj or ("Messages" in obj and "Id" in obj):
                task_id = _task_id(obj, tool)
                task = current if task_id is None and current is not None else _new_task(tasks, order, task_id)
                _apply_redfish_task(task, obj, tool)
    if not json_documents and text.lstrip().startswith("{"):
        obj, _end = _json_object_at(text, text.find("{"), tool)
        if obj is not None:
            json_documents.append(obj)
    for document in json_documents:
        if "Output" in document and isinstance(document.get("Output"), list):
            if document.get("Error Code") is not None:
                code = _int_or_none(document.get("Error Code"))
                if code is None:
                    raise ParseError(f"nvfwupd {tool}: Error Code is {document.get('Error Code')!r}, expected a number")
                error_codes.append(str(code))
            if isinstance(document.get("Error"), list):
                errors.extend(str(error) for error in document["Error"])
            for output in document["Output"]:
                if not isinstance(output, dict):
                    continue
                if "TaskState" in output:
                    _apply_redfish_task(_new_task(tasks, order, _task_id(output, tool)), output, tool)
                messages = output.get("Messages") or []
                for message in messages if isinstance(messages, list) else []:
                    message_id = message.get("MessageId") if isinstance(message, dict) else None
                    if isinstance(message_id, str) and message_id.endswith("Task.1.0.New"):
                        args = message.get("MessageArgs") or []
                        for arg in args if isinstance(args, list) else []:
                            task = _new_task(tasks, order, str(arg).rstrip("/").rsplit("/", 1)[-1])
                            task["state"] = task["state"] or "New"  # created, not yet polled (-b)
        for value in _find_key(document, "RebootRequired"):
            if isinstance(value, bool):
                reboot_required = bool(reboot_required) or value
        for value in _find_key(document, "FirmwareLoadAction"):
            if isinstance(value, str):
                load_action = value
    detail_messages = _detail_table_messages(lines)
    task_list = [tasks[key] for key in order]
    for task in task_list:
        if detail_messages and not task["messages"] and len(task_list) == 1:
            task["messages"] = detail_messages
        _state_from_messages(task)
        task["status"] = _task_status(task["state"], task["task_status"])
    # Components from the last word on each task (task messages are cumulative).
    messages = [m for task in task_list for m in task["messages"]] or detail_messages
    results = _component_results(messages)
    error_code = int(error_codes[-1]) if error_codes else None
    return {
        "tasks": task_list,
        "results": results,
        "packages": packages,
        "targets": targets,
        "elapsed": elapsed,
        "error_code": error_code,
        "errors": errors,
        "reboot_required": reboot_required,
        "firmware_load_action": load_action,
        "activation_required": any(r["status"] == "awaiting_activation" for r in results) or None,
    }


def _overall(parsed):
    statuses = [task["status"] for task in parsed["tasks"]]
    if parsed["error_code"] not in (None, 0) or parsed["errors"] or "failed" in statuses or any(r["status"] == "failed" for r in parsed["results"]):
        return "failed"
    if "running" in statuses:
        return "running"
    if statuses and all(status == "done" for status in statuses):
        return "done"
    return "unknown"


def parse_update_fw(text):
    """``update_fw`` output: monitored (TaskState triples), ``-d`` table, NVOS switch jobs,
    ``-b -j`` JSON.

    Returns ``{"status": "done" | "failed" | "running" | "unknown", "tasks": [{"task_id",
    "target", "state", "task_status", "status", "percent_complete", "message", "messages"}],
    "results": [{"target", "status": "pending" | "updated" | "skipped" | "awaiting_activation"
    | "failed", "message", "resolution"}], "packages", "targets", "elapsed", "error_code",
    "errors" (the -j Error list), "reboot_required": bool or None (only from an explicit RebootRequired key),
    "firmware_load_action": str or None (only from an explicit FirmwareLoadAction key),
    "activation_required": True or None (a Redfish AwaitToActivate message)}``.
    ``status`` comes from TaskState / job state and the error code, never from prose.
    """
    parsed = _parse_tasks(text, "update_fw")
    if not parsed["tasks"] and parsed["error_code"] is None:
        raise ParseError("nvfwupd update_fw: no task id, job status or error code in the output")
    parsed["status"] = _overall(parsed)
    return parsed


def parse_update_progress(text):
    """``show_update_progress -i ID... [-j]``: the same shape as parse_update_fw."""
    parsed = _parse_tasks(text, "show_update_progress")
    if not parsed["tasks"]:
        raise ParseError("nvfwupd show_update_progress: no task in the output")
    parsed["status"] = _overall(parsed)
    return parsed
