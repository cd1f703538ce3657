# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parsers of NVIDIA IMEX output (private: may change without notice).

IMEX (``nvidia-imex``, one daemon per GB200/GB300 compute tray) shares GPU memory across the trays of an
NVLink domain. It refuses to start when its version differs from the loaded driver's.

* parse_version(text): ``nvidia-imex --version`` (``IMEX version is: 570.148.08``).
* parse_log_version(text): the daemon log's ``IMEX version 570.124.06 is running ...`` line.
* parse_ctl_nodes(text): ``nvidia-imex-ctl -N``, older (no version column) and newer legends.
* parse_ctl_nodes_json(text): ``nvidia-imex-ctl -N -j``.
* parse_nodes_config(text): ``/etc/nvidia-imex/nodes_config.cfg`` (one address or host name a line).

The node state (READY...), its version, the connectivity marks (``C`` connected, ``!V!`` version
mismatch, ``!M!`` node-map mismatch: "communication disabled") and the domain state (``UP``) are
returned as the tool prints them; what they mean for a rollout is decided elsewhere.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import (
    ParseError,
    cut_line,
    cut_short,
    driver_version,
    json_document,
    whole_lines,
)

VERSION_TOOL = "nvidia-imex --version"
LOG_TOOL = "nvidia-imex log"
CTL_TOOL = "nvidia-imex-ctl -N"
CTL_JSON_TOOL = "nvidia-imex-ctl -N -j"
CONFIG_FILE = "nodes_config.cfg"

# Connectivity marks of the -N legend: the newer legend adds !V! and !M!.
MARKS = {
    "I": "invalid",
    "N": "never_connected",
    "R": "recovering",
    "D": "disconnected",
    "A": "authenticating",
    "!V!": "version_mismatch",
    "!M!": "node_map_mismatch",
    "C": "connected",
}
# The -j form spells them out.
_JSON_MARKS = {
    "INVALID": "invalid",
    "NEVER_CONNECTED": "never_connected",
    "RECOVERING": "recovering",
    "DISCONNECTED": "disconnected",
    "AUTHENTICATING": "authenticating",
    "VERSION_MISMATCH": "version_mismatch",
    "NODE_MAP_MISMATCH": "node_map_mismatch",
    "CONNECTED": "connected",
}

_VERSION_LINE = re.compile(r"IMEX version is:[ \t]*(?P<version>\S*)(?P<after>\s?)")
_LOG_VERSION = re.compile(r"IMEX version (?P<version>\S+) is running")
_NODE = re.compile(r"^Node #(?P<id>\d+)\s+-\s+(?P<address>\S+)\s+-\s+(?P<state>[A-Z_]+)(?:\s+-\s+Version:[ \t]*(?P<version>\S+))?[ \t]*$")
_DOMAIN = re.compile(r"^Domain State:[ \t]*(?P<state>[A-Z_]+)[ \t]*$", re.MULTILINE)
_MATRIX_HEADER = re.compile(r"^\s*Nodes From\\To((?:\s+\d+)+)\s*$")
_STATE = re.compile(r"^[A-Z][A-Z_]*$")
_HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


def _version(text, tool, terminated):
    return driver_version(text, tool, "version", terminated=terminated)


def parse_version(text):
    """``nvidia-imex --version`` -> ``"570.148.08"``.

    ParseError when no ``IMEX version is:`` line is printed, or its version is not whole (a last
    line without its newline may be cut: ``570.148`` of 570.148.08).
    """
    match = _VERSION_LINE.search(text or "")
    if not match:
        raise ParseError(f"{VERSION_TOOL}: no 'IMEX version is: <version>' line in {(text or '').strip()[:200]!r}")
    return _version(match.group("version"), VERSION_TOOL, terminated=match.group("after") != "")


def parse_log_version(text):
    """The version from the IMEX daemon log's ``IMEX version <v> is running`` line, None when there is none.

    The last time the daemon started counts (a log holds every start). A last line that no newline
    ends is not read (the log was cut there).
    """
    found = None
    for match in _LOG_VERSION.finditer(whole_lines(text or "")):
        found = match
    if found is None:
        return None
    return {"version": _version(found.group("version"), LOG_TOOL, terminated=True)}


def _summary(nodes, matrix, domain_state):
    marks = sorted({mark for row in matrix.values() for mark in row.values()})
    return {
        "nodes": nodes,
        "connectivity": matrix,
        "domain_state": domain_state,
        "domain_up": domain_state == "UP",
        "version_mismatch": "version_mismatch" in marks,
        "node_map_mismatch": "node_map_mismatch" in marks,
        "versions": sorted({node["version"] for node in nodes if node["version"]}),
    }


def parse_ctl_nodes(text):
    """``nvidia-imex-ctl -N`` -> ``{"nodes", "connectivity", "domain_state", "domain_up", "version_mismatch", ...}``.

    ``nodes``: ``[{"id", "address", "state", "version"}]`` (``version`` None with the older output);
    ``connectivity``: ``{from id: {to id: mark name}}`` (MARKS); ``domain_state``: the ``Domain
    State:`` value (``UP``...). Lines before the legend and after the domain state (``-q`` / ``-s``
    output in one capture) are ignored. ParseError naming the field when the node list, the table
    or the domain state is missing, cut short or garbled: a domain is never reported UP from a part.
    """
    text = text or ""
    last = cut_line(text)
    whole = whole_lines(text)
    domain = _DOMAIN.search(whole)
    if not domain:
        if last and last.lstrip().startswith("Domain State"):
            raise cut_short(CTL_TOOL, "Domain State", last)
        raise ParseError(f"{CTL_TOOL}: no 'Domain State: <state>' line: the output is cut short or not nvidia-imex-ctl -N")
    lines = whole[: domain.start()].splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Nodes:")
    except StopIteration:
        raise ParseError(f"{CTL_TOOL}: no 'Nodes:' list before the Domain State line") from None
    nodes = []
    matrix = {}
    columns = None
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if not line.strip():
            continue
        header = _MATRIX_HEADER.match(line)
        if header:
            columns = [int(column) for column in header.group(1).split()]
            continue
        if columns is None:
            node = _NODE.match(line.strip())
            if not node:
                raise ParseError(f"{CTL_TOOL}: node line {number} {line.strip()[:120]!r} is not 'Node #<id> - <address> - <state>[ - Version: <v>]'")
            version = node.group("version")
            nodes.append(
                {
                    "id": int(node.group("id")),
                    "address": node.group("address"),
                    "state": node.group("state"),
                    "version": None if version is None else _version(version, CTL_TOOL, terminated=True),
                }
            )
            continue
        cells = line.split()
        if not cells[0].isdigit() or len(cells) != len(columns) + 1:
            raise ParseError(f"{CTL_TOOL}: connectivity row {number} {line.strip()[:120]!r} does not have a mark for each of the {len(columns)} nodes")
        row = {}
        for column, cell in zip(columns, cells[1:]):
            if cell not in MARKS:
                raise ParseError(f"{CTL_TOOL}: connectivity mark {cell[:8]!r} (row {cells[0]}, node {column}) is none of {sorted(MARKS)}")
            row[column] = MARKS[cell]
        matrix[int(cells[0])] = row
    if not nodes:
        raise ParseError(f"{CTL_TOOL}: the 'Nodes:' list is empty")
    ids = [node["id"] for node in nodes]
    if columns is None or sorted(matrix) != sorted(ids) or sorted(columns) != sorted(ids):
        raise ParseError(f"{CTL_TOOL}: the connectivity table does not cover the nodes {ids}: the output is cut short or garbled")
    return _summary(nodes, matrix, domain.group("state"))


def _json_field(value, key, kind, where):
    item = value.get(key) if isinstance(value, dict) else None
    if not isinstance(item, kind):
        raise ParseError(f"{CTL_JSON_TOOL}: {where}.{key} is {type(item).__name__}, expected {kind.__name__}")
    return item


def parse_ctl_nodes_json(text):
    """``nvidia-imex-ctl -N -j``: the same result as parse_ctl_nodes.

    ParseError naming the field when the document does not parse (an abridged one with ``{...}``),
    or a node, its status, version or a connection is missing or of another type.
    """
    text = text or ""
    start = text.find("{")
    if start < 0:
        raise ParseError(f"{CTL_JSON_TOOL}: no JSON document in the output")
    document, _end = json_document(text, CTL_JSON_TOOL, start)
    domain_state = _json_field(document, "status", str, "document")
    if not _STATE.match(domain_state):
        raise ParseError(f"{CTL_JSON_TOOL}: document.status {domain_state[:40]!r} is not a domain state")
    raw_nodes = _json_field(document, "nodes", dict, "document")
    nodes = []
    matrix = {}
    for key, node in raw_nodes.items():
        where = f"nodes.{key}"
        if not key.isdigit():
            raise ParseError(f"{CTL_JSON_TOOL}: node id {key[:20]!r} is not a number")
        state = _json_field(node, "status", str, where)
        if not _STATE.match(state):
            raise ParseError(f"{CTL_JSON_TOOL}: {where}.status {state[:40]!r} is not a node state")
        version = node.get("version")
        if version is not None:
            version = _version(_json_field(node, "version", str, where), CTL_JSON_TOOL, terminated=True)
        nodes.append({"id": int(key), "address": _json_field(node, "host", str, where), "state": state, "version": version})
        row = {}
        for target, connection in _json_field(node, "connections", dict, where).items():
            mark = _json_field(connection, "status", str, f"{where}.connections.{target}")
            if not target.isdigit() or mark not in _JSON_MARKS:
                raise ParseError(f"{CTL_JSON_TOOL}: {where}.connections.{target[:20]} status {mark[:40]!r} is none of {sorted(_JSON_MARKS)}")
            row[int(target)] = _JSON_MARKS[mark]
        matrix[int(key)] = row
    if not nodes:
        raise ParseError(f"{CTL_JSON_TOOL}: document.nodes is empty")
    return _summary(sorted(nodes, key=lambda node: node["id"]), matrix, domain_state)


def _address(entry):
    try:
        ipaddress.ip_address(entry)
    except ValueError:
        return _HOST_NAME.match(entry) is not None
    return True


def parse_nodes_config(text):
    """``/etc/nvidia-imex/nodes_config.cfg`` -> ``["10.0.0.1", "tray-02", ...]`` in file order.

    One IP address or host name a line; blank lines and ``#`` comments are skipped. ParseError
    naming the line for anything else (a log line, a file name), a repeated entry, an empty file,
    or a last line that no newline ends (an address may be cut short: ``10.115.131.1`` of
    ``10.115.131.13``; a reader of the whole file adds the newline).
    """
    text = text or ""
    last = cut_line(text)
    if last is not None and last.strip():
        raise cut_short(CONFIG_FILE, "the last address", last)
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        if not _address(entry):
            raise ParseError(f"{CONFIG_FILE}: line {number} {entry[:80]!r} is not an IP address or host name (one node a line)")
        if entry in entries:
            raise ParseError(f"{CONFIG_FILE}: line {number} repeats {entry!r}: every node must be listed once")
        entries.append(entry)
    if not entries:
        raise ParseError(f"{CONFIG_FILE}: no node address in the file")
    return entries
