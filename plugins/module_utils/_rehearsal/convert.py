# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""An audit's fleet report (report_version 1) turned into a gpusim fleet spec: a simulated copy of the fleet (private).

``audit_to_spec(report, ...)`` returns ``(spec, notes)``: the spec (tests/gpusim/README.md, "Spec format") reproduces
every node's SKU (GPU model and count, NVSwitch, ConnectX ports with type, PSID, part number and firmware), its
versions (driver and kernel module flavour, fabric manager, kernel, VBIOS, and what the BMC showed: HGX bundle, host
BMC and BIOS; on a GB200 NVL72 tray its NVLink domain, CliqueId, IMEX version and CDMM), the SKUs' BOMs and the
operator's host variables; ``notes`` say what the copy does not reproduce.
What the simulator cannot play is refused with the node and the field, never approximated silently.
"""

from __future__ import annotations

import copy
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._bom import OOB_COMPONENTS
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rehearsal import simulator

REPORT_VERSION = 1

# Always fullmatch.
_HOSTNAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DRIVER_VERSION = re.compile(r"\d+\.\d+(\.\d+)?")
_CLUSTER_UUID = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
_FIRMWARE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_KERNEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]{0,127}")
_PSID = re.compile(r"[A-Za-z0-9_]{1,32}")
_PART_NUMBER = re.compile(r"[A-Za-z0-9_.-]{0,64}")
_PARTITION = re.compile(r"[A-Za-z0-9_-]{1,64}")
_VAR_NAME = re.compile(r"[a-z_][a-z0-9_]*")
# Host variables the simulator writes itself or Ansible reserves (gpusim.spec._RESERVED_VARS).
_RESERVED_VARS = {"bmc_address", "inventory_hostname", "inventory_hostname_short", "hostvars", "groups", "group_names",
                  "omit", "play_hosts", "environment", "vars", "gpusim_fleet", "gpusim_workdir"}
_KERNEL_MODULES = ("open", "proprietary")
MAX_NICS_PER_ENTRY = 16


class RehearsalError(GpufleetError, ValueError):
    """The report cannot be turned into a simulated copy; the message names the node and the field."""


def _node_error(name, field, message):
    return RehearsalError(f"node {name!r}, {field}: {message}", node=name, field=field)


def _check_args(name, loopback, slurm_port, partition, bmc_loopback):
    if not isinstance(name, str) or not _HOSTNAME.fullmatch(name):
        raise RehearsalError(f"name must be a fleet name of lower-case letters, digits and -, got {name!r}")
    for option, value, low, high in (("loopback", loopback, 1, 254), ("slurm_port", slurm_port, 1024, 60000)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise RehearsalError(f"{option} must be an integer between {low} and {high}, got {value!r}")
    if bmc_loopback is not None and (isinstance(bmc_loopback, bool) or not isinstance(bmc_loopback, int)
                                     or not 1 <= bmc_loopback <= 254 or bmc_loopback == loopback):
        raise RehearsalError(f"bmc_loopback must be an integer between 1 and 254 other than loopback ({loopback}), got {bmc_loopback!r}")
    if not isinstance(partition, str) or not _PARTITION.fullmatch(partition):
        raise RehearsalError(f"partition must be a Slurm partition name (letters, digits, _ -), got {partition!r}")


def _check_report(report):
    if not isinstance(report, dict):
        raise RehearsalError(f"the audit report must be a mapping (the JSON fleet_report writes), got {type(report).__name__}")
    version = report.get("report_version")
    if version != REPORT_VERSION:
        raise RehearsalError(
            f"report_version {version!r}: this converter reads fleet reports of version {REPORT_VERSION} "
            "(playbooks/audit.yml of this collection); audit the fleet again with it"
        )
    for key, kind in (("nodes", list), ("unreachable", list), ("boms", dict)):
        if not isinstance(report.get(key), kind):
            hint = " (reports written before 0.2.0 have none: audit the fleet again)" if key == "boms" else ""
            raise RehearsalError(f"the report's {key!r} must be a {kind.__name__}, got {type(report.get(key)).__name__}{hint}")
    seen = set()
    for i, record in enumerate(report["nodes"]):
        if not isinstance(record, dict):
            raise RehearsalError(f"the report's nodes[{i}] must be a mapping, got {type(record).__name__}")
        if not isinstance(record.get("name"), str):
            raise RehearsalError(f"the report's nodes[{i}].name must be a node name (a string), got {type(record.get('name')).__name__}")
        if record.get("name") in seen:
            raise _node_error(record.get("name"), "name", "is in the report twice; a report holds each node once")
        seen.add(record.get("name"))


def _host_vars(name, values):
    result = {}
    if not isinstance(values, dict):
        raise _node_error(name, "host_vars", f"must be a mapping of variable name to value, got {type(values).__name__}")
    for key, value in values.items():
        if not isinstance(key, str) or not _VAR_NAME.fullmatch(key) or key.startswith("ansible_") or key in _RESERVED_VARS:
            raise _node_error(name, f"host_vars.{key}", "not a variable the copy's inventory may set (lower-case letters, digits, _; "
                                                        "not ansible_*, bmc_address or a name Ansible reserves)")
        if value is None or not isinstance(value, (str, int, float, bool, list, dict)):
            raise _node_error(name, f"host_vars.{key}", f"must be a string, number, boolean, list or mapping, got {value!r}")
        result[key] = copy.deepcopy(value)
    return result


def _gpus(name, hardware, bom):
    """(model, count, vbios) of one node; vbios None where nothing showed it."""
    gpus = hardware.get("gpus")
    if not isinstance(gpus, list):
        raise _node_error(name, "hardware.gpus", f"must be a list, got {type(gpus).__name__}")
    models = sorted({g.get("name") for g in gpus if isinstance(g, dict) and g.get("name")})
    bom_gpu = bom.get("gpu") if isinstance(bom.get("gpu"), dict) else {}
    if len(models) > 1:
        raise _node_error(name, "hardware.gpus", f"mixes GPU models ({', '.join(models)}): a simulated node has one model")
    if models:
        model, count = models[0], hardware.get("gpu_count")
    elif bom_gpu.get("model") and bom_gpu.get("count"):
        model, count = bom_gpu["model"], bom_gpu["count"]  # nvidia-smi listed no GPU (no driver): the BOM's SKU
    else:
        raise _node_error(name, "hardware.gpus", "nvidia-smi listed no GPU and the BOM names no gpu.model and gpu.count: the GPU model is unknown")
    if model not in simulator.GPU_MODELS:
        raise _node_error(name, "hardware.gpus.name", f"GPU model {model!r} is not one the simulator plays; it plays: {', '.join(simulator.GPU_MODELS)}")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 16:
        raise _node_error(name, "hardware.gpu_count", f"must be between 1 and 16, got {count!r}")
    pci = hardware.get("pci_gpu_count")
    if models and isinstance(pci, int) and not isinstance(pci, bool) and pci > count:
        raise _node_error(name, "hardware.gpu_count", f"nvidia-smi saw {count} of the {pci} GPUs on the PCI bus (a GPU is lost): "
                                                      "repair the node or leave it out (exclude)")
    inventory = hardware.get("firmware_inventory") or {}
    vbioses = sorted({g.get("vbios_version") for g in gpus if isinstance(g, dict) and g.get("vbios_version")})
    if not vbioses:  # no driver: the BMC lists the GPUs' firmware (their VBIOS) too
        vbioses = sorted({v for k, v in inventory.items() if k.startswith(simulator.GPU_ID_PREFIXES) and isinstance(v, str) and v})
    if len(vbioses) > 1:
        raise _node_error(name, "hardware.gpus.vbios_version", f"mixes VBIOS versions ({', '.join(vbioses)}): a simulated node "
                                                               "has one VBIOS for all its GPUs; flash the odd GPUs or leave the node out (exclude)")
    vbios = vbioses[0] if vbioses else None
    if vbios is not None and not _FIRMWARE.fullmatch(vbios):
        raise _node_error(name, "hardware.gpus.vbios_version", f"{vbios!r} is not a version the simulator can print")
    return model, count, vbios


def _driver(name, hardware):
    """(driver version or None, kernel module flavour or None)."""
    driver = hardware.get("driver")
    if not isinstance(driver, dict):
        raise _node_error(name, "hardware.driver", f"must be a mapping, got {type(driver).__name__}")
    if not driver.get("installed"):
        return None, None
    if not driver.get("loaded"):
        raise _node_error(name, "hardware.driver.loaded", "the driver is installed but not loaded: the simulator boots every node with "
                                                          "its driver loaded; load it (or leave the node out: exclude)")
    version, flavor = driver.get("version"), driver.get("flavor")
    if not isinstance(version, str) or not _DRIVER_VERSION.fullmatch(version):
        raise _node_error(name, "hardware.driver.version", f"must be a driver version like 570.124.06, got {version!r}")
    if flavor not in _KERNEL_MODULES:
        raise _node_error(name, "hardware.driver.flavor", f"must be one of {', '.join(_KERNEL_MODULES)}, got {flavor!r}")
    return version, flavor


def _fabricmanager(name, hardware):
    """(version or None, running: True / False / None)."""
    fm = hardware.get("fabricmanager")
    if not fm or not fm.get("installed") or fm.get("version") is None:
        return None, None
    version = fm["version"]
    if not isinstance(version, str) or not _DRIVER_VERSION.fullmatch(version):
        raise _node_error(name, "hardware.fabricmanager.version", f"must be a version like 570.124.06, got {version!r}")
    return version, fm.get("running")


def _nics(name, hardware):
    nics = hardware.get("nics")
    if not isinstance(nics, list):
        raise _node_error(name, "hardware.nics", f"must be a list, got {type(nics).__name__}")
    result = []
    for i, nic in enumerate(nics):
        where = f"hardware.nics[{i}]"
        if not isinstance(nic, dict):
            raise _node_error(name, where, f"must be a mapping, got {type(nic).__name__}")
        if nic.get("query_failed"):
            raise _node_error(name, where, f"the Mellanox tool could not open port {nic.get('pci')} (its PSID and firmware are unknown): "
                                           "repair it or leave the node out (exclude)")
        raw_type = nic.get("type")
        nic_type = simulator.NIC_TYPES.get(str(raw_type).replace("-", "").replace(" ", "").lower()) if raw_type else None
        if nic_type is None:
            raise _node_error(name, f"{where}.type", f"{raw_type!r} is not a NIC the simulator plays; it plays: "
                                                     f"{', '.join(sorted(simulator.NIC_TYPES.values()))}")
        psid, part, fw = nic.get("psid"), nic.get("part_number") or "", nic.get("fw_current")
        if not isinstance(psid, str) or not _PSID.fullmatch(psid):
            raise _node_error(name, f"{where}.psid", f"must be a PSID like MT_0000000834, got {psid!r}")
        if not isinstance(part, str) or not _PART_NUMBER.fullmatch(part):
            raise _node_error(name, f"{where}.part_number", f"must be a part number like MCX755106AS-HEA_Ax, got {part!r}")
        if not isinstance(fw, str) or not _DRIVER_VERSION.fullmatch(fw):
            raise _node_error(name, f"{where}.fw_current", f"must be a firmware version like 28.43.1014, got {fw!r}")
        entry = {"type": nic_type, "psid": psid, "part_number": part, "fw": fw}
        if result and result[-1]["count"] < MAX_NICS_PER_ENTRY and {k: v for k, v in result[-1].items() if k != "count"} == entry:
            result[-1]["count"] += 1
        else:
            result.append(dict(entry, count=1))
    return result


def _out_of_band(name, hardware, nvswitch, notes):
    """What the BMC showed: {gpu_firmware, bmc_firmware, bios} (absent: the simulator's default)."""
    inventory = hardware.get("firmware_inventory")
    if inventory is None:
        notes.append(f"{name}: the audit did not read its BMC; the copy's HGX bundle, BMC and BIOS firmware are the simulator's defaults")
        return {}
    if not isinstance(inventory, dict):
        raise _node_error(name, "hardware.firmware_inventory", f"must be a mapping of member id to version, got {type(inventory).__name__}")
    result = {}
    bundle = inventory.get(simulator.HGX_BUNDLE_ID)
    if bundle is not None:
        if not nvswitch:
            raise _node_error(name, f"hardware.firmware_inventory.{simulator.HGX_BUNDLE_ID}",
                              "an HGX bundle on a node without NVSwitch: the simulator has HGX firmware only on NVSwitch baseboards")
        result["gpu_firmware"] = bundle
    for member, version in sorted(inventory.items()):
        if member.startswith(simulator.NVSWITCH_ID_PREFIX) and version != simulator.NVSWITCH_FIRMWARE:
            raise _node_error(name, f"hardware.firmware_inventory.{member}",
                              f"NVSwitch firmware {version!r}: every simulated NVSwitch runs {simulator.NVSWITCH_FIRMWARE} and a spec cannot change it")
    for key in ("bmc_firmware", "bios"):
        patterns = [re.compile(re.escape(i).replace("<n>", r"\d+")) for i in OOB_COMPONENTS[key]]
        versions = sorted({v for member, v in inventory.items() if any(p.fullmatch(member) for p in patterns) and v})
        if len(versions) > 1:
            raise _node_error(name, f"hardware.firmware_inventory ({key})", f"several versions ({', '.join(versions)}): the simulator has one")
        if versions:
            result[key] = versions[0]
    for key, value in result.items():
        if not isinstance(value, str) or not _FIRMWARE.fullmatch(value):
            raise _node_error(name, f"hardware.firmware_inventory ({key})",
                              f"{value!r} is not a version the simulator can serve (letters, digits, . _ -; at most 63)")
    return result


def _copy_bom(sku, bom, notes):
    """The BOM for the copy: the audited one, with the out-of-band members the simulator names."""
    bom = copy.deepcopy(bom)
    for key, member in (("bmc_firmware", simulator.HOST_BMC_ID), ("bios", simulator.HOST_BIOS_ID), ("gpu_firmware", simulator.HGX_BUNDLE_ID)):
        section = bom.get(key)
        if isinstance(section, dict) and section.get("inventory_id") not in (None, member, [member]):
            notes.append(f"SKU {sku}: BOM {key}.inventory_id {section['inventory_id']!r} is {member} on the copy (the simulator's member)")
            section["inventory_id"] = member
    return bom


def _nvlink_domain(name, record, hardware, driver, host_vars, notes):
    """A GB200/GB300 NVL72 tray's NVLink domain on the copy: named by the inventory's nvlink_domain (else after its ClusterUUID),
    with its CliqueId, IMEX version and CDMM mode; {} for a node the audit saw no multi-node NVLink on."""
    nvlink = hardware.get("nvlink")
    if not isinstance(nvlink, dict):
        return {}
    uuid = nvlink.get("cluster_uuid")
    if not isinstance(uuid, str) or not _CLUSTER_UUID.fullmatch(uuid):
        raise _node_error(name, "hardware.nvlink.cluster_uuid", f"must be the tray's ClusterUUID (8-4-4-4-12 hex digits), got {uuid!r}")
    domain = host_vars.get("nvlink_domain", record.get("nvlink_domain"))
    if not isinstance(domain, str) or not _HOSTNAME.fullmatch(domain):
        if domain is not None:
            notes.append(f"{name}: nvlink_domain {domain!r} is not a name the simulator takes (lower-case letters, digits, -): the copy "
                         "names its NVLink domain after its ClusterUUID")
        domain = "nvl-" + uuid.lower()
    entry = {"nvlink_domain": domain}
    clique = nvlink.get("clique_id")
    if isinstance(clique, int) and not isinstance(clique, bool) and 1 <= clique <= 32767:
        entry["clique_id"] = clique
    imex = hardware.get("imex")
    if isinstance(imex, str) and _DRIVER_VERSION.fullmatch(imex) and imex != driver:
        entry["imex"] = imex
    if hardware.get("cdmm") in ("driver", "default"):
        entry["cdmm"] = hardware["cdmm"]
    return entry


def _node(record, bom, host_vars, notes):
    """One node's group entry (without names) and its SKU shape."""
    name = record.get("name")
    if not isinstance(name, str) or not _HOSTNAME.fullmatch(name):
        raise _node_error(name, "name", "gpusim node names are lower-case host names (letters, digits, -, at most 63): "
                                        "rename it in the report or leave it out (exclude)")
    sku = record.get("sku")
    if not isinstance(sku, str) or sku == "unknown" or not _GROUP_NAME.fullmatch(sku):
        raise _node_error(name, "sku", f"has no SKU ({sku!r}): set gpufleet_sku (an Ansible group name) in the inventory and audit again")
    hardware = record.get("hardware")
    if not isinstance(hardware, dict):
        raise _node_error(name, "hardware", "missing: the report was written before the audit kept what it read of each node; audit again")
    model, count, vbios = _gpus(name, hardware, bom)
    driver, flavor = _driver(name, hardware)
    switches = hardware.get("nvswitch") or {}
    if not isinstance(switches, dict):
        raise _node_error(name, "hardware.nvswitch", f"must be a mapping (with 'present'), got {type(switches).__name__}")
    nvswitch = bool(switches.get("present"))
    fm_version, fm_running = _fabricmanager(name, hardware)
    kernel = hardware.get("kernel")
    if not isinstance(kernel, str) or not _KERNEL.fullmatch(kernel):
        raise _node_error(name, "hardware.kernel", f"must be a kernel release like 6.1.0-18-amd64, got {kernel!r}")
    entry = {"sku": sku, "driver": driver}
    if flavor:
        entry["kernel_module"] = flavor
    entry["fabricmanager"] = fm_version
    if vbios:
        entry["vbios"] = vbios
    entry.update(_out_of_band(name, hardware, nvswitch, notes))
    entry["kernel"] = kernel
    entry["nics"] = _nics(name, hardware)
    faults = []
    if fm_version and fm_running is False:
        faults.append({"kind": "fm_inactive"})
    if faults:
        entry["faults"] = faults
    entry.update(_nvlink_domain(name, record, hardware, driver, host_vars or {}, notes))
    own_vars = _host_vars(name, host_vars or {})
    if "nvlink_domain" in entry:  # the copy's inventory names the tray's domain (gpufleet_unit_by, IMEX's nodes_config.cfg)
        own_vars.setdefault("nvlink_domain", entry["nvlink_domain"])
    if "bom" in record:  # this node's BOM differs from its SKU's: a host variable overrides the group's
        own_vars["gpufleet_bom"] = copy.deepcopy(record["bom"])
    if own_vars:
        entry["vars"] = own_vars
    if record.get("critical_xids"):
        notes.append(f"{name}: the audit saw critical Xids {record['critical_xids']}; the copy starts without them")
    shape = {"gpu_model": model, "gpu_count": count, "nvswitch": nvswitch}
    return entry, shape


def audit_to_spec(report, name="rehearsal", loopback=40, slurm_port=16817, partition="gpu", bmc_loopback=None,
                  host_vars=None, exclude=None, skip_unreadable=False, timing=None):
    """``(spec, notes)`` for a fleet report; see the module docstring. ``host_vars``: ``{node: {variable: value}}``."""
    _check_args(name, loopback, slurm_port, partition, bmc_loopback)
    _check_report(report)
    exclude = set(exclude or [])
    if host_vars is not None and not isinstance(host_vars, dict):
        raise RehearsalError(f"host_vars must be a mapping of node name to its variables, got {type(host_vars).__name__}")
    host_vars = host_vars or {}
    notes = []
    unreadable = sorted(set(report["unreachable"]) - exclude)
    unreadable += sorted(str(n.get("name")) for n in report["nodes"] if n.get("status") == "error" and n.get("name") not in exclude)
    if unreadable and not skip_unreadable:
        raise RehearsalError(f"the audit could not read {', '.join(map(str, unreadable))} (unreachable or error): a copy needs what "
                             "a node runs; audit them again, or leave them out (exclude, or skip_unreadable)", nodes=unreadable)
    if unreadable:
        notes.append(f"left out, the audit could not read them: {', '.join(map(str, unreadable))}")
    if exclude:
        notes.append(f"left out by request: {', '.join(sorted(exclude))}")
    unknown = sorted(set(host_vars) - {n.get("name") for n in report["nodes"]})
    if unknown:
        raise RehearsalError(f"host_vars names nodes the report does not hold: {', '.join(map(str, unknown))}")

    skus, shapes, groups = {}, {}, []
    for record in sorted(report["nodes"], key=lambda n: str(n.get("name"))):
        if record.get("name") in exclude or record.get("status") == "error":
            continue
        sku = record.get("sku")
        bom = report["boms"].get(sku, {}) if isinstance(sku, str) else {}
        if not isinstance(bom, dict):
            raise RehearsalError(f"the report's boms[{sku!r}] must be a mapping, got {type(bom).__name__}")
        entry, shape = _node(record, record.get("bom") if isinstance(record.get("bom"), dict) else bom, host_vars.get(record["name"]), notes)
        known = shapes.setdefault(sku, (shape, record["name"]))
        if known[0] != shape:
            field = next(k for k in shape if shape[k] != known[0][k])
            raise _node_error(record["name"], f"SKU {sku}: {field}", f"{shape[field]!r}, but {known[1]} of the same SKU has {known[0][field]!r}: "
                                                                     "a SKU is one hardware shape; give the odd nodes their own gpufleet_sku")
        if sku not in skus:
            skus[sku] = dict(shape, bom=_copy_bom(sku, bom, notes))
        if groups and {k: v for k, v in groups[-1].items() if k != "names"} == entry:
            groups[-1]["names"].append(record["name"])
        else:
            groups.append(dict(names=[record["name"]], **entry))
    if not groups:
        raise RehearsalError("no node is left to copy: the report holds none, or every one is excluded or unreadable")
    fleet = {"name": name, "loopback": loopback, "slurm_port": slurm_port, "partition": partition}
    if bmc_loopback is not None:
        fleet["bmc_loopback"] = bmc_loopback
    notes.append("the copy starts with no Slurm jobs, 8 CPUs a node and one partition; NIC ports get the simulator's PCI addresses, in order")
    spec = {"fleet": fleet, "timing": copy.deepcopy(timing if timing is not None else simulator.TIMING), "skus": skus, "nodes": groups}
    return spec, notes
