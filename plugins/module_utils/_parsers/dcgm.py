# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parse ``dcgmi`` output (private): ``diag`` (text tables and ``-j`` JSON), ``nvlink -s``, ``nvlink -e``, ``discovery -l``.

``dcgmi diag`` text tables differ by release:

* DCGM 2.x: a ``Blacklist`` row, no Metadata block, ``Pass - All`` per plugin;
* DCGM 3.x: a Metadata block (``DCGM Version``...), ``Denylist``; per-plugin results as
  ``Pass - All``, ``Skip - All`` or split lists (``Pass - GPUs: 1, 2`` then ``Fail - GPU: 0``);
  ``Warning`` / ``Info`` / ``Error`` rows after a result carry the messages, wrapped at 45 characters;
* DCGM 4.x: lower-case plugin names (``software``, ``memory``...), an overall ``Pass`` and one
  ``GPU0: Pass`` row per entity.

``-j`` JSON has two shapes: ``"DCGM GPU Diagnostic"`` (3.x, results with ``gpu_ids``) and
``"DCGM Diagnostic"`` (4.x, results with ``entity_group`` / ``entity_id``, ``metadata``).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, cut_line, cut_short, json_document, whole_lines

RESULTS = ("pass", "fail", "warn", "skip")
# Worst first: the result of a test with mixed per-GPU results is its worst one.
_SEVERITY = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}
_STATUS_WORDS = {
    "pass": "pass",
    "passed": "pass",
    "fail": "fail",
    "failed": "fail",
    "warn": "warn",
    "warning": "warn",
    "skip": "skip",
    "skipped": "skip",
    "not run": "skip",
    "not_run": "skip",
}

# dcgmi wraps a message into cells of this many characters (DATA_INFO_TAG_LEN in dcgmi/Diag.cpp).
_WRAP = 45

_ROW = re.compile(r"^\s*\|(?P<name>[^|]*)\|(?P<value>.*)$")
# The border dcgmi prints under the last row: without it the table may be cut short.
_CLOSING_BORDER = re.compile(r"^\s*\+-{3,}\+-{3,}\+\s*$")
_SECTION = re.compile(r"^\s*[|+]-{3,}[ \t]{1,16}(?P<name>[A-Za-z][A-Za-z ]{0,64}?)[ \t]{1,16}-+\+-*[|+]\s*$")
_HEADER = re.compile(r"^\s*\|\s*Diagnostic\s*\|\s*Result\s*\|\s*$")
_STATUS = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip)(?:\s*-\s*(?P<scope>All|GPUs?:\s*(?P<gpus>\d+(?:\s*,\s*\d+)*)))?\s*$")
_ENTITY_STATUS = re.compile(r"^(?P<kind>GPU|CPU|NvSwitch|Switch)\s*(?P<id>\d+)\s*:\s*(?P<status>Pass|Fail|Warn|Skip)\s*$", re.IGNORECASE)
_MESSAGE_LABEL = re.compile(r"^(?P<kind>Warning|Error|Info)(?:\s*:\s*(?P<entity>.*))?$")
_CODE_ROW = re.compile(r"^Code:\s*\(\d+\)$")
_LEVEL = re.compile(r"dcgmi[ \t]+diag\b[^\n]{0,200}?(?:-r|--run)[ \t=]{1,8}['\"]?(?P<level>[1-4])\b")
_ERROR_LINE = re.compile(r"^[ \t]*Error:[ \t]*(?P<msg>.+)$", re.MULTILINE)

_LINK_STATES = {"U": "up", "D": "down", "X": "disabled", "_": "not_supported"}


def _whole_table_line(line):
    """True for a table line dcgmi closed: a row with both cells ("| name | value |"), a border or section with both ("+---+---+")."""
    stripped = line.strip()
    if stripped.endswith("+"):
        return stripped.startswith("+") and stripped.count("+") >= 3
    return stripped.startswith(("|", "+")) and stripped.endswith("|") and stripped.count("|") + stripped.count("+") >= 3


def _table_text(text):
    """``text`` without a last line that no newline ends, unless that line is a whole table line: a cut cell is no value."""
    cut = cut_line(text)
    return whole_lines(text) if cut and not _whole_table_line(cut) else text


def _status(text):
    """A DCGM status word as one of RESULTS, or None."""
    if text is None:
        return None
    return _STATUS_WORDS.get(str(text).strip().lower())


def _worst(results):
    known = [result for result in results if result is not None]
    if not known:
        return None
    return max(known, key=lambda result: _SEVERITY[result])


def _overall(tests, errors):
    """fail if any test fails (or dcgmi reported an error outside a test), warn, skip only if all skipped."""
    results = [test["result"] for test in tests]
    if errors or "fail" in results:
        return "fail"
    if "warn" in results:
        return "warn"
    if results and all(result == "skip" for result in results):
        return "skip"
    return "pass"


def _join_wrapped(chunks):
    """Join a message dcgmi cut into fixed-width cells (a cut can fall inside a word or after a space)."""
    if not chunks:
        return ""
    head = "".join(chunk[:_WRAP] for chunk in chunks[:-1])
    return (head + chunks[-1]).strip()


def _cell(raw):
    """The text of a value cell: dcgmi writes '| ' + text + padding + ' |'; drop the one leading space and the closing bar."""
    raw = raw.rstrip()
    if raw.endswith("|"):
        raw = raw[:-1]
    if raw.startswith(" "):
        raw = raw[1:]
    return raw


def _level(text):
    match = _LEVEL.search(text)
    return int(match.group("level")) if match else None


def _new_test(name, category):
    return {"name": name, "category": category, "result": None, "gpus": {}, "info": [], "warnings": []}


def _apply_status(test, value):
    """Read 'Pass - All', 'Fail - GPU: 0', 'Pass - GPUs: 1, 2', 'GPU0: Pass' or a bare 'Pass' into test."""
    match = _STATUS.match(value)
    if match:
        result = _status(match.group("status"))
        if match.group("gpus"):
            for index in match.group("gpus").split(","):
                test["gpus"][int(index)] = result
        test.setdefault("_seen", []).append(result)
        return True
    match = _ENTITY_STATUS.match(value)
    if match:
        result = _status(match.group("status"))
        if match.group("kind").upper() == "GPU":
            test["gpus"][int(match.group("id"))] = result
        test.setdefault("_seen", []).append(result)
        return True
    return _CODE_ROW.match(value) is not None


def _finish_message(state):
    message = state.pop("message", None)
    if not message:
        return
    kind, entity, chunks = message
    text = _join_wrapped(chunks)
    if entity:
        text = f"{entity}: {text}" if text else entity
    if not text:
        return
    test = state.get("test")
    if test is None:
        # An Error row with no test above it (an excerpt, or a run-level error): it still fails the run.
        state["errors"].append(text)
    elif kind == "Info":
        test["info"].append(text)
    else:
        # DCGM itself calls every per-test message a "warning" (the JSON key), errors included.
        test["warnings"].append(text)


def _parse_text(text):
    text = _table_text(text)  # a cut row ("Fail - GPUs: 1" of "1, 2", half a message) is not read
    state = {"test": None, "errors": [], "message": None}
    tests = []
    metadata = {}
    category = None
    saw_header = False
    closed = False  # the closing border came after the last row
    in_status = False  # the rows after a test row, until a message starts, are more of its statuses

    for line in text.splitlines():
        if _HEADER.match(line):
            saw_header = True
            continue
        if _CLOSING_BORDER.match(line):
            closed = closed or bool(tests or state["errors"] or state.get("message"))
            continue
        section = _SECTION.match(line)
        if section:
            _finish_message(state)
            category = section.group("name").strip()
            state["test"] = None
            in_status = False
            continue
        row = _ROW.match(line)
        if not row or set(line.strip()) <= set("+-=|"):
            continue
        closed = False  # rows after a border: a later table, which must be closed in turn
        name = row.group("name").strip()
        raw = _cell(row.group("value"))
        value = raw.strip()

        if category == "Metadata" and name:
            metadata[name] = value
            continue

        if not name:
            if state.get("message"):
                state["message"][2].append(raw)
            elif state["test"] is not None and in_status:
                _apply_status(state["test"], value)
            continue

        label = _MESSAGE_LABEL.match(name)
        if label:
            _finish_message(state)
            state["message"] = (label.group("kind").capitalize(), (label.group("entity") or "").strip(), [raw])
            in_status = False
            continue

        if _STATUS.match(value) or _ENTITY_STATUS.match(value):
            _finish_message(state)
            test = _new_test(name, category)
            tests.append(test)
            state["test"] = test
            _apply_status(test, value)
            in_status = True
            continue
        # Any other named row (discovery tables, nvlink counters...) is not part of a diag table.
        _finish_message(state)
        state["test"] = None
        in_status = False
    _finish_message(state)

    if not tests and not state["errors"]:
        if saw_header:
            raise ParseError("dcgmi diag: the result table has no test rows")
        error = _ERROR_LINE.search(text)
        if error:
            raise ParseError(f"dcgmi diag: no result table; dcgmi said: {error.group('msg').strip()}")
        raise ParseError("dcgmi diag: no result table (no '| Diagnostic | Result |' header and no test rows)")

    for test in tests:
        seen = test.pop("_seen", [])
        test["result"] = _worst(seen + list(test["gpus"].values())) or "skip"
    result = _overall(tests, state["errors"])
    if not closed and result != "fail":
        # Rows below the cut could fail: a FAIL seen is a failure, anything else is unknown.
        raise ParseError(
            f"dcgmi diag: the result table is cut short (no closing border after its last row, {len(tests)} tests read): "
            "the result is unknown; run dcgmi diag again"
        )
    return {
        "result": result,
        "level": _level(text),
        "dcgm_version": metadata.get("DCGM Version") or None,
        "driver_version": metadata.get("Driver Version Detected") or None,
        "tests": tests,
        "errors": state["errors"],
    }


JSON_TOOL = "dcgmi diag -j"


def _json_list(value, where):
    """A JSON list (None/absent: empty), else ParseError naming where it was."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ParseError(f"{JSON_TOOL}: {where} is {type(value).__name__}, expected a list")
    return value


def _json_object(value, where):
    if not isinstance(value, dict):
        raise ParseError(f"{JSON_TOOL}: {where} is {type(value).__name__}, expected an object")
    return value


def _json_messages(items, where):
    """Warnings / info in either shape: a string, a list of strings, or a list of {"warning": ...} objects."""
    if items is None:
        return []
    if isinstance(items, str):
        return [items] if items.strip() else []
    messages = []
    for item in _json_list(items, where):
        if isinstance(item, dict):
            text = item.get("warning") or item.get("message") or item.get("info")
        else:
            text = item
        if isinstance(text, str) and text.strip():
            messages.append(text.strip())
    return messages


def _json_gpu_ids(result, where):
    """The GPU indices a JSON result applies to (4.x entity_group/entity_id, 3.x gpu_ids / gpu_id)."""
    group = result.get("entity_group")
    if group is not None:
        if str(group).upper() != "GPU" or not isinstance(result.get("entity_id"), int):
            return []
        return [result["entity_id"]]
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if ids is None:
        return []
    if isinstance(ids, bool):
        raise ParseError(f"{JSON_TOOL}: {where} gpu_ids is {ids!r}, expected GPU indices")
    if isinstance(ids, int):
        return [ids]
    if isinstance(ids, list):
        return [int(i) for i in ids if (isinstance(i, int) and not isinstance(i, bool)) or (isinstance(i, str) and i.strip().isdigit())]
    if isinstance(ids, str):
        return [int(i) for i in re.split(r"[,\s]+", ids) if i.isdigit()]
    raise ParseError(f"{JSON_TOOL}: {where} gpu_ids is {type(ids).__name__}, expected GPU indices")


def _json_text(value):
    return value if isinstance(value, str) and value else None


def _parse_json(document):
    document = _json_object(document, "the document")
    body = document.get("DCGM Diagnostic")
    if body is None:
        body = document.get("DCGM GPU Diagnostic")
    if not isinstance(body, dict):
        raise ParseError(f"{JSON_TOOL}: no 'DCGM Diagnostic' (or 'DCGM GPU Diagnostic') object")
    errors = []
    runtime_error = body.get("runtime_error")
    if runtime_error is not None and not isinstance(runtime_error, str):
        raise ParseError(f"{JSON_TOOL}: runtime_error is {type(runtime_error).__name__}, expected a message")
    if runtime_error and runtime_error.strip():
        errors.append(runtime_error.strip())
    tests = []
    for number, raw_category in enumerate(_json_list(body.get("test_categories"), "'test_categories'")):
        category = _json_object(raw_category, f"test_categories[{number}]")
        category_name = category.get("category")
        for position, raw_entry in enumerate(_json_list(category.get("tests"), f"test_categories[{number}].tests")):
            entry = _json_object(raw_entry, f"test_categories[{number}].tests[{position}]")
            name = entry.get("name")
            if not isinstance(name, str):
                raise ParseError(f"{JSON_TOOL}: a test has no 'name'")
            test = _new_test(name, category_name if isinstance(category_name, str) else None)
            seen = []
            for index, raw_result in enumerate(_json_list(entry.get("results"), f"test {name!r} results")):
                where = f"test {name!r} results[{index}]"
                result = _json_object(raw_result, where)
                status = _status(result.get("status")) if isinstance(result.get("status"), str) else None
                if status is None:
                    raise ParseError(f"{JSON_TOOL}: test {name!r} has a result with an unknown status {result.get('status')!r}")
                seen.append(status)
                for gpu in _json_gpu_ids(result, where):
                    test["gpus"][gpu] = _worst([test["gpus"].get(gpu), status])
                test["warnings"].extend(_json_messages(result.get("warnings"), f"{where} warnings"))
                test["info"].extend(_json_messages(result.get("info"), f"{where} info"))
            summary = entry.get("test_summary") or {}
            summary_status = summary.get("status") if isinstance(summary, dict) else None
            summary_status = _status(summary_status) if isinstance(summary_status, str) else None
            test["result"] = _worst([summary_status, *seen])
            if test["result"] is None:
                raise ParseError(f"{JSON_TOOL}: test {name!r} has neither results nor a test_summary status")
            tests.append(test)
    if not tests and not errors:
        raise ParseError(f"{JSON_TOOL}: no tests in 'test_categories' and no runtime_error")
    metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    version = _json_text(metadata.get("version")) or _json_text(body.get("version")) or _json_text(document.get("version"))
    driver = _json_text(metadata.get("Driver Version Detected")) or _json_text(body.get("Driver Version Detected"))
    return {
        "result": _overall(tests, errors),
        "level": None,
        "dcgm_version": version,
        "driver_version": driver,
        "tests": tests,
        "errors": errors,
    }


def parse_diag(text):
    """Parse ``dcgmi diag`` output (text table of DCGM 2.x/3.x/4.x, or ``-j`` JSON).

    Returns ``{"result", "level", "dcgm_version", "driver_version", "tests": [{"name", "category",
    "result", "gpus": {index: result}, "info": [str], "warnings": [str]}], "errors": [str]}``.
    Results are ``pass``/``fail``/``warn``/``skip``. ``gpus`` lists only the GPUs that the output
    names (``Pass - All`` names none). ``errors`` holds messages dcgmi printed outside any test
    (a JSON ``runtime_error``); they make the run fail. ``level`` is known only when the command
    line (``dcgmi diag -r N``) is part of the text.
    """
    if text is None or not text.strip():
        raise ParseError("dcgmi diag: empty output")
    stripped = text.strip()
    start = stripped.find("{")
    if start != -1 and ('"DCGM Diagnostic"' in stripped or '"DCGM GPU Diagnostic"' in stripped):
        document, _end = json_document(stripped, JSON_TOOL, start)
        result = _parse_json(document)
        result["level"] = _level(stripped[:start])
        return result
    return _parse_text(text)


def parse_nvlink_status(text):
    """Parse ``dcgmi nvlink -s`` into ``{gpu_index: [state, ...]}``, one state per link in link order.

    States: ``up``, ``down``, ``disabled``, ``not_supported`` (the tool's ``U``, ``D``, ``X``, ``_``).
    """
    if text is None or "Link Status" not in text:
        raise ParseError("dcgmi nvlink -s: no 'NvLink Link Status' table")
    gpus = {}
    current = None
    in_gpus = False
    for line in whole_lines(text).splitlines():
        stripped = line.strip()
        if stripped == "GPUs:":
            in_gpus = True
            continue
        if stripped.startswith("NvSwitches:") or stripped.startswith("Key:"):
            in_gpus = False
            current = None
            continue
        if not in_gpus:
            continue
        match = re.match(r"^gpuId\s+(\d+):$", stripped)
        if match:
            current = int(match.group(1))
            gpus[current] = []
            continue
        if current is not None and stripped:
            tokens = stripped.split()
            if not all(token in _LINK_STATES for token in tokens):
                raise ParseError(f"dcgmi nvlink -s: unknown link state in {stripped!r} for GPU {current}")
            gpus[current].extend(_LINK_STATES[token] for token in tokens)
    cut = cut_line(text)
    if in_gpus and cut and cut.strip():
        # "U U" of a GPU's twelve links, or a GPU cut off: its links would be missing.
        raise cut_short("dcgmi nvlink -s", f"the links of GPU {current}" if current is not None else "the GPU list", cut)
    if not gpus:
        raise ParseError("dcgmi nvlink -s: no 'gpuId N:' entries under 'GPUs:'")
    return gpus


_NVLINK_COUNTERS = {
    "CRC FLIT Error": "crc_flit",
    "CRC Data Error": "crc_data",
    "Replay Error": "replay",
    "Recovery Error": "recovery",
}


def parse_nvlink_errors(text):
    """Parse ``dcgmi nvlink -e`` tables into ``{gpu_index: {link: {"crc_flit", "crc_data", "replay", "recovery"}}}``.

    A link cut short (``| head``) keeps the counters that were printed; a counter that is not a
    number is None. A last row that no newline ends is not read (``12`` of 123).
    """
    if text is None or "NVLINK Error Counts" not in text:
        raise ParseError("dcgmi nvlink -e: no 'NVLINK Error Counts' table")
    gpus = {}
    gpu = None
    link = None
    for line in _table_text(text).splitlines():
        row = _ROW.match(line)
        if not row:
            continue
        name = row.group("name").strip()
        value = _cell(row.group("value")).strip()
        match = re.match(r"^GPU\s+(\d+)$", name)
        if match:
            gpu = int(match.group(1))
            gpus.setdefault(gpu, {})
            link = None
            continue
        match = re.match(r"^Link\s+(\d+)$", name)
        if match and gpu is not None:
            link = int(match.group(1))
            gpus[gpu][link] = {}
            continue
        if name.startswith("->") and gpu is not None and link is not None:
            counter = name[2:].strip()
            key = _NVLINK_COUNTERS.get(counter, re.sub(r"[^a-z0-9]+", "_", counter.lower()).strip("_"))
            gpus[gpu][link][key] = int(value) if value.isdigit() else None
    if not gpus:
        raise ParseError("dcgmi nvlink -e: no 'GPU N' heading in the error-count table")
    return gpus


def parse_discovery(text):
    """Parse the GPU table of ``dcgmi discovery -l`` into ``[{"id", "name", "pci_bus_id", "uuid"}]``.

    Other entity tables (NvSwitches, ConnectX, CPUs) are not read. A GPU table row without its
    newline (``Device UUID: GPU-4f2c``, or a whole ``Name:`` row whose UUID row is missing) is a
    ParseError: the output was cut short.
    """
    if text is None or not re.search(r"\|\s*GPU ID\s*\|\s*Device Information\s*\|", text):
        raise ParseError("dcgmi discovery -l: no '| GPU ID | Device Information |' table")
    found = re.search(r"^\s*(\d+)\s+GPUs? found\.", text, re.MULTILINE)
    gpus = []
    current = None
    in_table = False
    cut = cut_line(text)
    for line in _table_text(text).splitlines():
        if re.match(r"^\s*\|\s*GPU ID\s*\|", line):
            in_table = True
            continue
        if not in_table:
            continue
        if not line.strip().startswith(("|", "+")):
            in_table = False
            break  # the next entity table's "N NvSwitches found." line ends the GPU table
        row = _ROW.match(line)
        if not row:
            continue
        ident = row.group("name").strip()
        info = _cell(row.group("value")).strip()
        if ident:
            if not ident.isdigit():
                raise ParseError(f"dcgmi discovery -l: GPU ID {ident!r} is not a number")
            current = {"id": int(ident), "name": None, "pci_bus_id": None, "uuid": None}
            gpus.append(current)
        if current is None or ":" not in info:
            continue
        key, _sep, val = info.partition(":")
        field = {"Name": "name", "PCI Bus ID": "pci_bus_id", "Device UUID": "uuid"}.get(key.strip())
        if field:
            current[field] = val.strip() or None
    # A cut row, or a whole one whose GPU's later rows (bus id, UUID) are missing; after a border the count tells.
    if in_table and cut and cut.strip().startswith(("|", "+")) and not (_whole_table_line(cut) and set(cut.strip()) <= set("+-=")):
        raise cut_short("dcgmi discovery -l", f"the GPU table (GPU {current['id']})" if current else "the GPU table", cut)
    if found and int(found.group(1)) != len(gpus):
        raise ParseError(f"dcgmi discovery -l: says {found.group(1)} GPUs found but the table lists {len(gpus)}")
    return gpus
