# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parse nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ``sendrecv_perf``...) (private).

Two table layouts exist:

* current: ``size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong``;
  ``#wrong`` is a count of wrong elements, ``N/A`` when validation is off (``-c 0``);
* old: no ``root`` column and an ``error`` column (the largest error seen, a float, not a count).

A log may hold several runs, each starting with a ``# nThread ... nGpus ...`` line:
``parse_runs`` reads them all, ``parse_tests`` reads a log with exactly one.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, finite, whole_lines

# "#" is optional: Markdown pastes lose it on some lines.
# "[ \t]" rather than "\s": "\s*#?\s*" (two adjacent unbounded runs) is quadratic in a run of
# spaces, and "\s" would also cross blank lines from every line start.
_RUN_START = re.compile(r"^[ \t]*(?:#[ \t]*)?nThread[ \t]+\d+[ \t]+nGpus[ \t]+\d+", re.MULTILINE)
_DEVICE = re.compile(
    r"^[ \t]*(?:#[ \t]*)?Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)\s+"
    r"device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s+(?P<name>.*)$"
)
_COLUMNS = re.compile(r"^\s*#\s*size\s+count\s+type\s+redop\s+(?P<root>root\s+)?time\s+algbw\s+busbw\s+(?P<check>#wrong|error)\b")
_OUT_OF_BOUNDS = re.compile(r"^\s*#\s*Out of bounds values\s*:\s*(?P<n>\d{1,19})")
_AVG_BUSBW = re.compile(r"^\s*#\s*Avg bus bandwidth\s*:\s*(?P<bw>\S+)\s*$")
_NCCL_VERSION = re.compile(r"NCCL version\s+(?P<version>\d+\.\d+\.\d+)")
_NCCL_LIBRARY = re.compile(r"nccl-library=(?P<code>\d{1,19})")
_FAILURE = re.compile(r"Test (?:NCCL |CUDA )?failure\b.*$", re.MULTILINE)
_INT = re.compile(r"^-?\d{1,19}$")  # a count or size: more digits is no count (and int() refuses 4,300)
_FLOAT = re.compile(r"^-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$")


def _float(token, what, line):
    if not _FLOAT.match(token):
        raise ParseError(f"nccl-tests: {what} {token!r} is not a number in row {line.strip()!r}")
    return finite(float(token), "nccl-tests", f"{what} {token!r} in row {line.strip()[:200]!r}")


def _check_value(token, old, line):
    """(wrong, error) of one half-row: #wrong is an element count, the old 'error' a float; N/A is None."""
    if token.upper() == "N/A":
        return None, None
    if old:
        return None, _float(token, "error", line)
    if not _INT.match(token):
        raise ParseError(f"nccl-tests: #wrong {token!r} is not a count in row {line.strip()!r}")
    return int(token), None


def _half(tokens, old, line):
    wrong, error = _check_value(tokens[3], old, line)
    return {
        "time_us": _float(tokens[0], "time", line),
        "algbw_gbps": _float(tokens[1], "algbw", line),
        "busbw_gbps": _float(tokens[2], "busbw", line),
        "wrong": wrong,
        "error": error,
    }


def _row(line, layout):
    """One result row, or None when the line is not a result row. layout: 'current', 'old' or None (guess)."""
    tokens = line.split()
    if len(tokens) < 2 or not _INT.match(tokens[0]) or not _INT.match(tokens[1]):
        return None
    if layout is None:
        layout = {13: "current", 12: "old"}.get(len(tokens))
        if layout is None:
            raise ParseError(f"nccl-tests: a result row has {len(tokens)} columns, expected 12 or 13: {line.strip()!r}")
    expected = 13 if layout == "current" else 12
    if len(tokens) != expected:
        raise ParseError(f"nccl-tests: a result row has {len(tokens)} columns, expected {expected}: {line.strip()!r}")
    old = layout == "old"
    root = None
    if not old:
        if not _INT.match(tokens[4]):
            raise ParseError(f"nccl-tests: root {tokens[4]!r} is not a number in row {line.strip()!r}")
        root = int(tokens[4])
    rest = tokens[4:] if old else tokens[5:]
    return {
        "size_bytes": int(tokens[0]),
        "count": int(tokens[1]),
        "type": tokens[2],
        "redop": tokens[3],
        "root": root,
        "oop": _half(rest[0:4], old, line),
        "ip": _half(rest[4:8], old, line),
    }


def _nccl_version(chunk):
    match = _NCCL_VERSION.search(chunk)
    if match:
        return match.group("version")
    match = _NCCL_LIBRARY.search(chunk)
    if match:
        # NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch
        code = int(match.group("code"))
        if code >= 20900:
            return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return None


def _parse_run(chunk):
    layout = None
    rows = []
    devices = []
    out_of_bounds = None
    avg = None
    for line in chunk.splitlines():
        columns = _COLUMNS.match(line)
        if columns:
            layout = "current" if columns.group("root") and columns.group("check") == "#wrong" else "old"
            continue
        device = _DEVICE.match(line)
        if device:
            devices.append(
                {
                    "rank": int(device.group("rank")),
                    "host": device.group("host"),
                    "device": int(device.group("device")),
                    "bus_id": device.group("bus"),
                    "name": device.group("name").strip(),
                }
            )
            continue
        match = _OUT_OF_BOUNDS.match(line)
        if match:
            out_of_bounds = int(match.group("n"))
            continue
        match = _AVG_BUSBW.match(line)
        if match:
            avg = _float(match.group("bw"), "'# Avg bus bandwidth'", line)
            continue
        if line.lstrip().startswith("#"):
            continue
        row = _row(line, layout)
        if row is not None:
            rows.append(row)
    known = [half["wrong"] for row in rows for half in (row["oop"], row["ip"]) if half["wrong"] is not None]
    failure = _FAILURE.search(chunk)
    return {
        "avg_busbw_gbps": avg,
        "rows": rows,
        "wrong": sum(known) if known else None,
        "out_of_bounds": out_of_bounds,
        "devices": devices,
        "nccl_version": _nccl_version(chunk),
        "error": failure.group(0).strip() if failure else None,
    }


def parse_runs(text):
    """Parse every nccl-tests run in text (one per ``# nThread`` header) into a list of ``parse_tests`` dicts.

    A last line that no newline ends is not read: a row, ``# Avg bus bandwidth : 23.1`` (of 23.19) or a
    failure message cut short there is no value; the lines before it are read as a log cut at that point.
    """
    if text is None or not text.strip():
        raise ParseError("nccl-tests: empty output")
    text = whole_lines(text)
    if not text.strip():
        raise ParseError("nccl-tests: no whole line in the output (its only line has no newline: cut short)")
    starts = [match.start() for match in _RUN_START.finditer(text)]
    if not starts:
        if re.search(r"^[ \t]*USAGE:", text, re.MULTILINE):
            raise ParseError("nccl-tests: this is the help text (USAGE: ...), not the output of a test run")
        starts = [0]
    chunks = [text[start:end] for start, end in zip(starts, [*starts[1:], len(text)])]
    runs = [_parse_run(chunk) for chunk in chunks]
    for run in runs:
        if not run["rows"] and run["avg_busbw_gbps"] is None and run["error"] is None:
            raise ParseError("nccl-tests: no result rows, no '# Avg bus bandwidth' line and no failure message in a run")
    return runs


def parse_tests(text):
    """Parse the output of one nccl-tests run (``all_reduce_perf`` and friends).

    Returns ``{"avg_busbw_gbps", "rows": [{"size_bytes", "count", "type", "redop", "root",
    "oop": {"time_us", "algbw_gbps", "busbw_gbps", "wrong", "error"}, "ip": {...}}], "wrong",
    "out_of_bounds", "devices": [{"rank", "host", "device", "bus_id", "name"}], "nccl_version",
    "error"}``. ``wrong`` is the total of the ``#wrong`` counts, None when none was reported
    (validation off, or the old layout whose ``error`` column is a float). ``avg_busbw_gbps`` comes
    only from the ``# Avg bus bandwidth`` line. ``error`` is the ``Test NCCL failure`` message of a
    run that failed. Raises ParseError on help text, on text without results, and on a log with
    several runs (read those with ``parse_runs``).
    """
    runs = parse_runs(text)
    if len(runs) != 1:
        raise ParseError(f"nccl-tests: the text holds {len(runs)} runs; read them with parse_runs")
    return runs[0]
