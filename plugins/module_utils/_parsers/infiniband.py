# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parsers of the InfiniBand / RoCE port tools (private: may change without notice).

* parse_ibstat(text): ``ibstat`` (``CA 'mlx5_0'`` blocks, ``Port 1:`` blocks, ``State: Active``...).
* parse_ibstatus(text): ``ibstatus`` (``Infiniband device 'mlx5_0' port 1 status:`` blocks).
* parse_ibv_devinfo(text): ``ibv_devinfo`` (``hca_id:`` blocks, ``port:`` blocks); it prints no rate.

Each returns ``{"ports": [{"device", "port", "state", "physical_state", "rate_gbps", "link_layer", ...}],
"errors": [...]}`` with the states spelled as ibstat spells them (``Active``, ``Down``, ``LinkUp``,
``Polling``, ``Disabled``). A port that is not Active has no rate: the kernel reports the last or
lowest rate (``Rate: 10`` on a Down / Disabled port), so ``rate_gbps`` is None there (unknown), never a
number. A port block without its state, rate or link layer is refused (the output was cut short).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, cut_line, finite_float, whole_lines

IBSTAT = "ibstat"
IBSTATUS = "ibstatus"
IBV_DEVINFO = "ibv_devinfo"

# The IB port state and physical state numbers (IBA spec) and ibstat's names for them.
STATES = {1: "Down", 2: "Initializing", 3: "Armed", 4: "Active", 5: "ActiveDefer"}
PHYSICAL_STATES = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining", 5: "LinkUp", 6: "LinkErrorRecovery", 7: "PhyTest"}
LINK_LAYERS = ("InfiniBand", "Ethernet")
ACTIVE = "Active"

_NOT_FOUND = re.compile(r"(?:command not found|Command '[^']+' not found)")
_IBPANIC = re.compile(r"^ibpanic:[ \t]*(?P<message>.*\S)[ \t]*$", re.MULTILINE)


# The one value that cannot be cut into another valid one: a cut "InfiniBand" or "Ethernet" names no link layer.
_WHOLE_LAST_LINE = re.compile(r"^[ \t]+(?:Link layer|link_layer):[ \t]*(?:InfiniBand|Ethernet)$")


def _readable(text):
    """``text`` without a last line that no newline ends, unless that line is a whole link layer (ibstat ends with one)."""
    cut = cut_line(text)
    if cut is not None and _WHOLE_LAST_LINE.match(cut):
        return text
    return whole_lines(text)


def command_missing(text):
    """True when ``text`` is the shell's answer for a program that is not installed."""
    return bool(_NOT_FOUND.search(text or ""))


def _refuse_missing_command(text, tool):
    if command_missing(text) and tool in text:
        raise ParseError(f"{tool}: the command is not installed ({_NOT_FOUND.search(text).group(0)!r}): install the RDMA user-space tools")


def _state_name(value, tool, where, names, field):
    """``Active`` / ``4: ACTIVE`` / ``PORT_ACTIVE (4)`` -> ibstat's name; ParseError naming the field otherwise."""
    number = re.search(r"(?:^|\()\s*(\d+)\s*(?:[:)]|$)", value)
    if number and int(number.group(1)) in names:
        return names[int(number.group(1))]
    wanted = value.replace("PORT_", "").replace("_", "").lower()
    for name in names.values():
        if name.lower() == wanted:
            return name
    raise ParseError(f"{tool}: {where}: {field} {value!r} is not a port state it prints ({', '.join(names.values())})")


def _link_layer(value, tool, where):
    if value not in LINK_LAYERS:
        raise ParseError(f"{tool}: {where}: link layer {value!r} is neither InfiniBand nor Ethernet")
    return value


def _rate(value, tool, where):
    match = re.fullmatch(r"(?P<rate>[0-9]+(?:\.[0-9]+)?)(?:[ \t]+Gb/sec(?:[ \t]+\((?P<width>[^)]*)\))?)?", value)
    if not match:
        raise ParseError(f"{tool}: {where}: rate {value!r} is not a rate in Gb/s")
    rate = finite_float(match.group("rate"), tool, f"{where} rate")
    return int(rate) if rate.is_integer() else rate, match.group("width")


def _port(tool, device, port, fields, required, extra=None):
    where = f"{device} port {port}"
    for key, label in required:
        if key not in fields:
            raise ParseError(f"{tool}: {where} has no {label!r} line: the output was cut short, read it again whole")
    state = _state_name(fields["state"], tool, where, STATES, "state")
    physical = _state_name(fields["physical_state"], tool, where, PHYSICAL_STATES, "physical state") if "physical_state" in fields else None
    rate, width = _rate(fields["rate"], tool, where) if "rate" in fields else (None, None)
    result = {
        "device": device,
        "port": port,
        "state": state,
        "physical_state": physical,
        # A port that is not Active reports a rate it does not run at (Rate: 10 when Down): unknown.
        "rate_gbps": rate if state == ACTIVE else None,
        "width": width if state == ACTIVE else None,
        "link_layer": _link_layer(fields["link_layer"], tool, where),
        "active": state == ACTIVE and physical in (None, "LinkUp"),
    }
    result.update(extra or {})
    return result


_IBSTAT_KEYS = {"State": "state", "Physical state": "physical_state", "Rate": "rate", "Link layer": "link_layer"}
_IBSTAT_REQUIRED = (("state", "State"), ("physical_state", "Physical state"), ("rate", "Rate"), ("link_layer", "Link layer"))
_CA = re.compile(r"^CA '(?P<name>[^']+)'[ \t]*$")
_KEY_VALUE = re.compile(r"^[ \t]+(?P<key>[A-Za-z][A-Za-z ]*?):[ \t]*(?P<value>.*?)[ \t]*$")
_PORT = re.compile(r"^[ \t]+Port (?P<port>\d+):[ \t]*$")


def parse_ibstat(text):
    """``ibstat`` -> ``{"ports": [...], "errors": [...]}``; each port also has the CA's ``ca_type`` and ``firmware``.

    ``errors``: the ``ibpanic:`` lines ibstat prints for a device it could not read (it exits 255 after
    printing the others). ParseError when no CA is printed, a port lacks a line, or a CA shows fewer
    port blocks than its ``Number of ports``.
    """
    text = _readable(text or "")
    ports, cas = [], []
    ca = port = None
    for line in text.splitlines():
        head = _CA.match(line)
        if head:
            ca = {"name": head.group("name"), "fields": {}, "ports": []}
            cas.append(ca)
            port = None
            continue
        if ca is None:
            continue
        number = _PORT.match(line)
        if number:
            port = {"number": int(number.group("port")), "fields": {}}
            ca["ports"].append(port)
            continue
        pair = _KEY_VALUE.match(line)
        if not pair:
            if line.strip() and not _IBPANIC.match(line):
                ca = port = None  # a prompt or another tool's output: the CA ended
            continue
        key, value = pair.group("key"), pair.group("value")
        if port is not None and key in _IBSTAT_KEYS:
            port["fields"][_IBSTAT_KEYS[key]] = value
        elif port is None:
            ca["fields"][key] = value
    errors = [match.group("message") for match in _IBPANIC.finditer(text)]
    if not cas:
        if errors:
            return {"ports": [], "errors": errors}
        raise ParseError(f"{IBSTAT}: no \"CA '<name>'\" block in {text.strip()[:200]!r}")
    for ca in cas:
        declared = ca["fields"].get("Number of ports")
        if declared is None or not declared.isdigit():
            raise ParseError(f"{IBSTAT}: CA {ca['name']!r} has no whole 'Number of ports' line (got {declared!r}): the output was cut short")
        if len(ca["ports"]) != int(declared):
            raise ParseError(f"{IBSTAT}: CA {ca['name']!r} declares {declared} port(s) but shows {len(ca['ports'])}: the output was cut short")
        extra = {"ca_type": ca["fields"].get("CA type"), "firmware": ca["fields"].get("Firmware version")}
        for item in ca["ports"]:
            ports.append(_port(IBSTAT, ca["name"], item["number"], item["fields"], _IBSTAT_REQUIRED, extra))
    return {"ports": ports, "errors": errors}


_IBSTATUS_HEAD = re.compile(r"^Infiniband device '(?P<device>[^']+)' port (?P<port>\d+) status:[ \t]*$")
_IBSTATUS_KEYS = {"state": "state", "phys state": "physical_state", "rate": "rate", "link_layer": "link_layer"}
_IBSTATUS_REQUIRED = (("state", "state"), ("physical_state", "phys state"), ("rate", "rate"), ("link_layer", "link_layer"))
_IBSTATUS_FIELD = re.compile(r"^[ \t]+(?P<key>[a-z_ ]+?):[ \t]*(?P<value>.*?)[ \t]*$")
_IBSTATUS_FATAL = re.compile(r"^Fatal error:[ \t]*(?P<message>.*\S)[ \t]*$", re.MULTILINE)


def parse_ibstatus(text):
    """``ibstatus`` -> ``{"ports": [...], "errors": [...]}`` (``width``: ``2X NDR`` as printed after the rate).

    ``Fatal error:  device '*': sys files not found`` (no RDMA device registered: the driver is not
    loaded) gives no port and that message in ``errors``.
    """
    text = _readable(text or "")
    blocks = []
    current = None
    for line in text.splitlines():
        head = _IBSTATUS_HEAD.match(line)
        if head:
            current = {"device": head.group("device"), "port": int(head.group("port")), "fields": {}}
            blocks.append(current)
            continue
        pair = _IBSTATUS_FIELD.match(line)
        if current is not None and pair:
            key = _IBSTATUS_KEYS.get(pair.group("key"))
            if key:
                current["fields"][key] = pair.group("value")
        elif line.strip():
            current = None
    errors = [match.group("message") for match in _IBSTATUS_FATAL.finditer(text)]
    if not blocks and not errors:
        raise ParseError(f"{IBSTATUS}: no \"Infiniband device '<name>' port <n> status:\" block in {text.strip()[:200]!r}")
    ports = [_port(IBSTATUS, block["device"], block["port"], block["fields"], _IBSTATUS_REQUIRED) for block in blocks]
    return {"ports": ports, "errors": errors}


_HCA = re.compile(r"^hca_id:[ \t]*(?P<name>\S+)[ \t]*$")
_DEVINFO_FIELD = re.compile(r"^[ \t]+(?P<key>[a-z_]+):[ \t]*(?P<value>.*?)[ \t]*$")
_DEVINFO_REQUIRED = (("state", "state"), ("link_layer", "link_layer"))


def parse_ibv_devinfo(text):
    """``ibv_devinfo`` -> ``{"ports": [...], "errors": []}``; each port also has the HCA's ``firmware`` and ``board_id``.

    ibv_devinfo prints no rate and (without -v) no physical state: both None. ParseError for the
    shell's "command not found", and for an HCA that shows fewer port blocks than its ``phys_port_cnt``.
    """
    _refuse_missing_command(text or "", IBV_DEVINFO)
    text = _readable(text or "")
    hcas = []
    hca = port = None
    for line in text.splitlines():
        head = _HCA.match(line)
        if head:
            hca = {"name": head.group("name"), "fields": {}, "ports": []}
            hcas.append(hca)
            port = None
            continue
        if hca is None:
            continue
        pair = _DEVINFO_FIELD.match(line)
        if not pair:
            if line.strip():
                hca = port = None
            continue
        key, value = pair.group("key"), pair.group("value")
        if key == "port":
            if not value.isdigit():
                raise ParseError(f"{IBV_DEVINFO}: {hca['name']}: port {value!r} is not a port number")
            port = {"number": int(value), "fields": {}}
            hca["ports"].append(port)
        elif port is not None:
            if key == "phys_state":
                key = "physical_state"
            port["fields"][key] = value
        else:
            hca["fields"][key] = value
    if not hcas:
        raise ParseError(f"{IBV_DEVINFO}: no 'hca_id: <name>' block in {text.strip()[:200]!r}")
    ports = []
    for hca in hcas:
        declared = hca["fields"].get("phys_port_cnt")
        if declared is None or not declared.isdigit():
            raise ParseError(f"{IBV_DEVINFO}: {hca['name']} has no whole 'phys_port_cnt' line (got {declared!r}): the output was cut short")
        if len(hca["ports"]) != int(declared):
            raise ParseError(f"{IBV_DEVINFO}: {hca['name']} declares {declared} port(s) but shows {len(hca['ports'])}: the output was cut short")
        extra = {"firmware": hca["fields"].get("fw_ver"), "board_id": hca["fields"].get("board_id")}
        for item in hca["ports"]:
            fields = {key: value for key, value in item["fields"].items() if key in ("state", "physical_state", "link_layer")}
            ports.append(_port(IBV_DEVINFO, hca["name"], item["number"], fields, _DEVINFO_REQUIRED, extra))
    return {"ports": ports, "errors": []}
