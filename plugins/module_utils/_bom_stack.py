# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ``stack`` section of a SKU's BOM, and a node's drift from it (private, pure).

::

    stack:
      ofed: {flavor: doca-ofed, version: 24.10-1.1.4.0.200}     # doca-ofed | mlnx-ofed | inbox (no version)
      rdma_ports:                                               # one entry per group of ports
        - {count: 8, link_layer: InfiniBand, rate: 400, ca_type: MT4129}   # ca_type / devices narrow the group
      peermem: true                                             # nvidia_peermem loaded, at the driver's version
      dcgm: 4.7.0                                               # or {version: 4.7.0}
      secure_boot: {mode: enforced, key_sha1: "76:a0:...:e0"}   # enforced | off | any; or the bare mode
      module_parameters: {nvidia: {NVreg_EnableGpuFirmware: "1"}, mlx5_core: {prof_sel: "2"}}

The node's side is gpu_facts' ``stack`` subset (_facts/stack.py). Every comparison gives items of the
BOM's shape (``{component, installed, wanted, status, detail?}``); a section the BOM names but the facts
do not hold (the stack subset was not gathered, a tool is not installed) is ``unknown`` with the reason,
never ``ok``. A port that is not Active never counts as running at its rate.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.ofed import VERSION_PATTERN as OFED_VERSION_PATTERN
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.secureboot import fingerprint_matches

OFED_FLAVORS = ("doca-ofed", "mlnx-ofed", "inbox")
LINK_LAYERS = ("InfiniBand", "Ethernet")
SECURE_BOOT_MODES = ("enforced", "off", "any")
SECTIONS = ("ofed", "rdma_ports", "peermem", "dcgm", "secure_boot", "module_parameters")
PORT_KEYS = ("count", "link_layer", "rate", "ca_type", "devices")
NOT_GATHERED = "gpu_facts did not gather the stack: add 'stack' to its gather_subset (playbooks/audit.yml does where the BOM names a stack)"
# The NVIDIA modules that Secure Boot's enforcement refuses when unsigned (the ones the stack facts read).
SIGNED_MODULES = ("nvidia", "nvidia_peermem")

_OFED_VERSION = re.compile(OFED_VERSION_PATTERN)
_DCGM_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(?:\.[0-9]+)?")
_SHA1 = re.compile(r"(?:[0-9a-fA-F]{2}:?){19}[0-9a-fA-F]{2}")
_MODULE = re.compile(r"[a-z0-9_]{1,64}")
_PARAMETER = re.compile(r"[A-Za-z0-9_]{1,64}")


class StackBomError(GpufleetError, ValueError):
    """A ``stack`` section that cannot be used; the message names the key."""


def _mapping(value, key):
    if not isinstance(value, dict):
        raise StackBomError(f"BOM {key} must be a mapping, got {type(value).__name__}")
    return value


def _unknown_keys(section, allowed, key):
    extra = sorted(str(name) for name in section if name not in allowed)
    if extra:
        raise StackBomError(f"BOM {key} has unknown key(s) {', '.join(extra)}: the keys are {', '.join(allowed)}")


def normalize(stack):
    """The BOM's ``stack`` with every shorthand spelled out; StackBomError naming the key for a bad value. None: {}."""
    if stack is None:
        return {}
    stack = _mapping(stack, "stack")
    _unknown_keys(stack, SECTIONS, "stack")
    result = {}
    if stack.get("ofed") is not None:
        result["ofed"] = _ofed(stack["ofed"])
    if stack.get("rdma_ports") is not None:
        ports = stack["rdma_ports"]
        if not isinstance(ports, list) or not ports:
            raise StackBomError(f"BOM stack.rdma_ports must be a list of port groups ({{count, link_layer, rate}}), got {ports!r}"[:300])
        result["rdma_ports"] = [_port_group(group, f"stack.rdma_ports[{index}]") for index, group in enumerate(ports)]
    if stack.get("peermem") is not None:
        if not isinstance(stack["peermem"], bool):
            raise StackBomError(f"BOM stack.peermem must be true (nvidia_peermem loaded) or false (not checked), got {stack['peermem']!r}")
        result["peermem"] = stack["peermem"]
    if stack.get("dcgm") is not None:
        dcgm = {"version": stack["dcgm"]} if isinstance(stack["dcgm"], str) else _mapping(stack["dcgm"], "stack.dcgm")
        _unknown_keys(dcgm, ("version",), "stack.dcgm")
        if not isinstance(dcgm.get("version"), str) or not _DCGM_VERSION.fullmatch(dcgm["version"]):
            raise StackBomError(f"BOM stack.dcgm.version must be a DCGM version such as 4.7.0, got {dcgm.get('version')!r}")
        result["dcgm"] = dict(dcgm)
    if stack.get("secure_boot") is not None:
        result["secure_boot"] = _secure_boot(stack["secure_boot"])
    if stack.get("module_parameters") is not None:
        result["module_parameters"] = _module_parameters(stack["module_parameters"])
    return result


def _ofed(value):
    ofed = _mapping(value, "stack.ofed")
    _unknown_keys(ofed, ("flavor", "version"), "stack.ofed")
    flavor, version = ofed.get("flavor"), ofed.get("version")
    if flavor not in OFED_FLAVORS:
        raise StackBomError(f"BOM stack.ofed.flavor must be one of {', '.join(OFED_FLAVORS)}, got {flavor!r}")
    if flavor == "inbox":
        if version is not None:
            raise StackBomError("BOM stack.ofed.version must not be set for the inbox stack (its version is the kernel's)")
        return {"flavor": flavor, "version": None}
    if not isinstance(version, str) or not _OFED_VERSION.fullmatch(version):
        raise StackBomError(
            f"BOM stack.ofed.version must be the exact release as ofed_info -s prints it after the name (for example 24.10-1.1.4.0), got {version!r}"
        )
    return {"flavor": flavor, "version": version}


def _count(value, key):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StackBomError(f"BOM {key} must be a whole number of ports (0 or more), got {value!r}")
    return value


def _port_group(value, key):
    group = _mapping(value, key)
    _unknown_keys(group, PORT_KEYS, key)
    if group.get("link_layer") not in LINK_LAYERS:
        raise StackBomError(f"BOM {key}.link_layer must be InfiniBand or Ethernet (RoCE), got {group.get('link_layer')!r}")
    rate = group.get("rate")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate <= 0:
        raise StackBomError(f"BOM {key}.rate must be the port rate in Gb/s as ibstat prints it (for example 400 for NDR), got {rate!r}")
    ca_type = group.get("ca_type")
    if ca_type is not None and (not isinstance(ca_type, str) or not re.fullmatch(r"MT[0-9]{4,6}", ca_type)):
        raise StackBomError(f"BOM {key}.ca_type must be an ibstat CA type such as MT4129, got {ca_type!r}")
    devices = group.get("devices")
    if devices is not None and (not isinstance(devices, list) or not devices or not all(isinstance(d, str) and d for d in devices)):
        raise StackBomError(f"BOM {key}.devices must be a list of RDMA device names such as mlx5_0, got {devices!r}"[:300])
    return {"count": _count(group.get("count"), f"{key}.count"), "link_layer": group["link_layer"], "rate": rate, "ca_type": ca_type, "devices": devices}


def _secure_boot(value):
    secure_boot = {"mode": value} if isinstance(value, str) else _mapping(value, "stack.secure_boot")
    _unknown_keys(secure_boot, ("mode", "key_sha1"), "stack.secure_boot")
    if secure_boot.get("mode") not in SECURE_BOOT_MODES:
        raise StackBomError(f"BOM stack.secure_boot.mode must be one of {', '.join(SECURE_BOOT_MODES)}, got {secure_boot.get('mode')!r}")
    key = secure_boot.get("key_sha1")
    if key is not None and (not isinstance(key, str) or not _SHA1.fullmatch(key)):
        # The value is a public fingerprint, but print only its length: a private key pasted here by mistake must not reach a log.
        length = len(key) if isinstance(key, str) else type(key).__name__
        raise StackBomError(f"BOM stack.secure_boot.key_sha1 must be the SHA1 fingerprint of the public module-signing key (40 hex digits), got {length}")
    if key is not None and secure_boot["mode"] == "off":
        raise StackBomError("BOM stack.secure_boot.key_sha1 is set but mode is off: set mode enforced (or any), or remove the key")
    return {"mode": secure_boot["mode"], "key_sha1": key.replace(":", "").lower() if key else None}


def _module_parameters(value):
    modules = _mapping(value, "stack.module_parameters")
    result = {}
    for module, given in modules.items():
        key = f"stack.module_parameters.{module}"
        if not isinstance(module, str) or not _MODULE.fullmatch(module):
            raise StackBomError(f"BOM stack.module_parameters: {str(module)[:80]!r} is not a kernel module name (as lsmod prints it: mlx5_core)")
        params = _mapping(given, key)
        for name, wanted in params.items():
            if not isinstance(name, str) or not _PARAMETER.fullmatch(name):
                raise StackBomError(f"BOM {key}: {str(name)[:80]!r} is not a module parameter name")
            if isinstance(wanted, bool) or not isinstance(wanted, (str, int)):
                raise StackBomError(f"BOM {key}.{name} must be a string or a whole number as /sys/module shows it, got {type(wanted).__name__}")
        result[module] = {name: str(wanted) for name, wanted in params.items()}
    return result


def _item(component, installed, wanted, status, detail=None):
    item = {"component": component, "installed": installed, "wanted": wanted, "status": status, "source": "stack"}
    if detail:
        item["detail"] = detail[:400]
    return item


def _compare(component, installed, wanted, detail=None):
    if installed is None:
        return _item(component, None, wanted, "missing", detail)
    return _item(component, installed, wanted, "ok" if installed == wanted else "drift", None if installed == wanted else detail)


def ofed_drift(facts, wanted):
    """The OFED flavour and exact version."""
    ofed = facts.get("ofed") or {}
    want = wanted["flavor"] if wanted["flavor"] == "inbox" else f"{wanted['flavor']} {wanted['version']}"
    if not ofed:
        return [_item("ofed", None, want, "unknown", NOT_GATHERED)]
    have = ofed.get("flavor") if ofed.get("flavor") == "inbox" else f"{ofed.get('flavor')} {ofed.get('version')}"
    if have == want:
        return [_item("ofed", have, want, "ok")]
    if ofed.get("flavor") == "inbox":
        return [_item("ofed", have, want, "missing", "ofed_info is not installed: the node runs the distribution's inbox RDMA stack")]
    return [_item("ofed", have, want, "drift", f"the node runs {ofed.get('release')}: install the BOM's release without its firmware updater")]


def _selected(ports, group):
    chosen = [port for port in ports if isinstance(port, dict) and port.get("link_layer") == group["link_layer"]]
    if group["ca_type"]:
        chosen = [port for port in chosen if port.get("ca_type") == group["ca_type"]]
    if group["devices"]:
        chosen = [port for port in chosen if port.get("device") in group["devices"]]
    return chosen


def ports_of_group(ports, group):
    """The ports (gpu_facts' rdma ports) that a normalised ``rdma_ports`` group selects: its link layer, CA type and devices."""
    return _selected(ports, group)


def _group_name(group):
    parts = [group["link_layer"], *([group["ca_type"]] if group["ca_type"] else []), f"{group['rate']}G"]
    return "/".join(parts)


def rdma_drift(facts, groups):
    """Each port group: the number of ports, and every port Active / LinkUp at its rate (the rate of a port that is not Active is unknown)."""
    rdma = facts.get("rdma")
    items = []
    if not rdma or not isinstance(rdma.get("ports"), list):
        reason = NOT_GATHERED if not rdma else "neither ibstat nor ibv_devinfo is installed: install infiniband-diags"
        return [_item(f"rdma_ports[{_group_name(group)}]", None, group["count"], "unknown", reason) for group in groups]
    errors = "; ".join(rdma.get("errors") or [])
    for group in groups:
        name = _group_name(group)
        chosen = _selected(rdma["ports"], group)
        detail = f"{rdma.get('source')} lists {len(chosen)} {group['link_layer']} port(s)" + (f"; it also said: {errors}" if errors else "")
        items.append(_compare(f"rdma_ports[{name}]", len(chosen), group["count"], detail))
        want = f"Active/LinkUp {group['rate']} Gb/s"
        for port in chosen:
            component = f"rdma_port[{port.get('device')}/{port.get('port')}]"
            if not port.get("active"):
                have = f"{port.get('state')}/{port.get('physical_state') or '?'}"
                items.append(
                    _item(
                        component,
                        have,
                        want,
                        "drift",
                        f"the port is {have}, not Active: its rate is unknown; check the cable, the switch and the subnet manager",
                    )
                )
            elif port.get("rate_gbps") is None:
                items.append(_item(component, "Active", want, "unknown", f"{rdma.get('source')} prints no rate: install infiniband-diags (ibstat)"))
            elif port.get("rate_gbps") != group["rate"]:
                have = f"Active {port.get('rate_gbps')} Gb/s"
                items.append(
                    _item(
                        component,
                        have,
                        want,
                        "drift",
                        f"the port runs at {port.get('rate_gbps')} Gb/s, not {group['rate']}: a degraded link (cable, transceiver, switch port)",
                    )
                )
    return items


def peermem_drift(facts, driver_version):
    """nvidia_peermem loaded, and built from the loaded driver (it ships with the driver since R470)."""
    module = (facts.get("modules") or {}).get("nvidia_peermem")
    if not module:
        return [_item("nvidia_peermem", None, "loaded", "unknown", NOT_GATHERED)]
    if module.get("loaded") is None:
        return [_item("nvidia_peermem", None, "loaded", "unknown", "lsmod is not installed: whether nvidia_peermem is loaded is unknown")]
    if not module.get("loaded"):
        why = (
            "nvidia_peermem is not loaded: modprobe nvidia-peermem (an 'Unknown symbol ib_register_peer_memory_client' in dmesg means the "
            "driver was built before OFED: rebuild it against OFED)"
            if module.get("installed")
            else "nvidia_peermem is not installed for the running kernel: reinstall the driver after OFED (the driver's build finds OFED's symbols)"
        )
        return [_item("nvidia_peermem", "not loaded", "loaded", "drift" if module.get("installed") else "missing", why)]
    items = [_item("nvidia_peermem", "loaded", "loaded", "ok")]
    if driver_version and module.get("version") and module["version"] != driver_version:
        items.append(
            _item("nvidia_peermem_version", module["version"], driver_version, "drift", "nvidia_peermem is not the loaded driver's: reinstall the driver")
        )
    return items


def dcgm_drift(facts, wanted):
    """The DCGM version (dcgmi) and the host engine's."""
    dcgm = facts.get("dcgm")
    version = wanted["version"]
    if not dcgm:
        return [_item("dcgm", None, version, "unknown", NOT_GATHERED)]
    if not dcgm.get("installed"):
        return [_item("dcgm", None, version, "missing", "neither dcgmi nor nv-hostengine is installed")]
    items = [_compare("dcgm", dcgm.get("version"), version, f"dcgmi is {dcgm.get('version')}: install datacenter-gpu-manager {version}")]
    host = dcgm.get("hostengine_version")
    if host is not None and host != version:
        items.append(_item("dcgm_hostengine", host, version, "drift", "nv-hostengine is another version than the BOM's: restart or reinstall it"))
    return items


def secure_boot_drift(facts, wanted):
    """Secure Boot's state against the BOM's mode; under enforcement, the key enrolled and the NVIDIA modules signed."""
    secure_boot = facts.get("secure_boot")
    mode = wanted["mode"]
    if not secure_boot:
        return [_item("secure_boot", None, mode, "unknown", NOT_GATHERED)]
    state = secure_boot.get("state")
    if state in (None, "unknown"):
        why = "mokutil is not installed" if state is None else "mokutil cannot determine the Secure Boot state"
        return [_item("secure_boot", state, mode, "unknown", why)]
    items = []
    enforcing = bool(secure_boot.get("enforcing"))
    if mode == "enforced":
        items.append(_item("secure_boot", state, mode, "ok" if enforcing else "drift", None if enforcing else "Secure Boot is not enforced on this node"))
    elif mode == "off":
        items.append(
            _item(
                "secure_boot",
                state,
                mode,
                "drift" if state == "enabled" else "ok",
                "Secure Boot is on: unsigned modules will not load" if state == "enabled" else None,
            )
        )
    else:
        items.append(_item("secure_boot", state, mode, "ok"))
    if not enforcing:
        return items
    key = wanted.get("key_sha1")
    if key:
        items.append(_key_enrolled(secure_boot, key))
    for name in SIGNED_MODULES:
        module = (facts.get("modules") or {}).get(name) or {}
        if module.get("installed") and module.get("signed") is False:
            items.append(
                _item(
                    f"module_signature[{name}]",
                    "unsigned",
                    "signed",
                    "drift",
                    f"{name}.ko is not signed and Secure Boot is enforced: the kernel refuses it at the next load ('Key was rejected by service')",
                )
            )
    return items


def _key_enrolled(secure_boot, key):
    keys = secure_boot.get("enrolled_keys")
    if keys is None:
        return _item("module_signing_key", None, key, "unknown", secure_boot.get("enrolled_error") or "the enrolled keys were not read")
    if any(fingerprint_matches(entry.get("sha1"), key) for entry in keys):
        return _item("module_signing_key", "enrolled", "enrolled", "ok")
    return _item(
        "module_signing_key",
        "not enrolled",
        "enrolled",
        "drift",
        "the BOM's module-signing key is not enrolled (MOK): 'mokutil --import <key.der>', then confirm it in the MOK manager at the next boot",
    )


def module_parameter_drift(facts, wanted):
    """Each parameter the BOM names against /sys/module/<module>/parameters/<name>."""
    present = facts.get("module_parameters")
    items = []
    for module, params in wanted.items():
        for name, value in params.items():
            component = f"module_parameter[{module}.{name}]"
            if present is None:
                items.append(_item(component, None, value, "unknown", NOT_GATHERED))
            elif module not in present:
                items.append(_item(component, None, value, "missing", f"the {module} module is not loaded (no /sys/module/{module}/parameters)"))
            else:
                items.append(
                    _compare(component, present[module].get(name), value, f"set options {module} {name}={value} in /etc/modprobe.d and reload the module")
                )
    return items


def stack_drift(facts, bom_stack, driver_version=None):
    """The items of a node's stack against its BOM's ``stack`` (normalised here); [] when the BOM names no stack."""
    wanted = normalize(bom_stack)
    if not wanted:
        return []
    stack = (facts or {}).get("stack")
    # Facts from elsewhere (a cached fact file, a hand-written record) may be malformed: a section that is no mapping is not read.
    stack = {name: value for name, value in stack.items() if isinstance(value, dict) or name in ("kernel", "problems")} if isinstance(stack, dict) else {}
    items = []
    if "ofed" in wanted:
        items += ofed_drift(stack, wanted["ofed"])
    if "rdma_ports" in wanted:
        items += rdma_drift(stack, wanted["rdma_ports"])
    if wanted.get("peermem"):
        items += peermem_drift(stack, driver_version)
    if "dcgm" in wanted:
        items += dcgm_drift(stack, wanted["dcgm"])
    if "secure_boot" in wanted:
        items += secure_boot_drift(stack, wanted["secure_boot"])
    if "module_parameters" in wanted:
        items += module_parameter_drift(stack, wanted["module_parameters"])
    problems = stack.get("problems")
    for problem in problems if isinstance(problems, list) else []:
        items.append(_item("stack_problem", None, None, "drift", str(problem)))
    return items
