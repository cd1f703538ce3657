# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The bill of materials (BOM) of a hardware SKU, and a node's drift from it (private).

A BOM says what a node of one SKU must run::

    driver: {version: 550.90.07, kernel_module: open, method: runfile, ...}
    fabricmanager: {version: 550.90.07}      # or omitted: follows the driver on NVSwitch systems
    gpu: {model: NVIDIA H100 80GB HBM3, count: 8, vbios: 96.00.74.00.0D,
          gsp_firmware: 550.90.07, inforom: G520.0200.00.05}   # in band: nvidia-smi -q -x
    gpu_firmware: {version: HGX-22.10-1, package: ..., sha256: ...}  # the HGX bundle (out of band: the BMC)
    nvswitch_firmware: 96.10.6D.00.01        # out of band
    bmc_firmware: {version: 24.09-1, inventory_id: HostBMC_0}  # out of band
    bios: {version: 1.3.2}                   # out of band
    nic_firmware: {MT_0000000838: 28.43.1014}  # PSID -> firmware version
    cuda: ["12.4"]                           # what the workloads need (checked by the compatibility filters)

Drift is exact equality, as NVIDIA's own fleet tools count it: a newer version
than the BOM is drift too. A component the BOM names but nothing could read
(no BMC credentials, a BMC that did not answer, nvidia-smi without a driver)
is ``unknown`` with the reason, never ``ok``.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _bom_stack
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

STATUS_OK = "ok"
STATUS_DRIFT = "drift"
STATUS_MISSING = "missing"
STATUS_UNKNOWN = "unknown"


# Sections that may be given as a bare version string.
_VERSION_SHORTHAND = ("driver", "fabricmanager", "gpu_firmware", "nvswitch_firmware", "bmc_firmware", "bios")

# Out of band: BOM section -> the Redfish FirmwareInventory member ids that hold its version (<n>: a number), unless the
# section names its own (``inventory_id``). HGX_FW_BMC_0 is NVIDIA's HMC, whose version is the HGX bundle's name;
# HostBMC_0 / HostBIOS_0 are DGX's names for the host BMC and BIOS, the others common vendors' ones.
OOB_COMPONENTS = {
    "gpu_firmware": ("HGX_FW_BMC_0",),
    "nvswitch_firmware": ("HGX_FW_NVSwitch_<n>",),
    "bmc_firmware": ("HostBMC_<n>", "BMC_Firmware", "BMC", "bmc_active", "FW_BMC_0"),
    "bios": ("HostBIOS_<n>", "BIOS_Firmware", "BIOS", "bios_active", "FW_BIOS_0"),
}
_OOB_PATTERNS = {name: re.compile("|".join(re.escape(i).replace("<n>", r"\d+") for i in ids)) for name, ids in OOB_COMPONENTS.items()}
NO_BMC_CREDENTIALS = "no BMC credentials for this host (bmc_address, bmc_user, bmc_password): its firmware inventory was not read"
# In band, per GPU: BOM gpu key -> (component, gpu_facts key, what it is).
INBAND_GPU_FIRMWARE = (
    ("vbios", "gpu_vbios", "vbios_version", "VBIOS"),
    ("gsp_firmware", "gpu_gsp_firmware", "gsp_firmware_version", "GSP firmware"),
    ("inforom", "gpu_inforom", "inforom_version", "InfoROM image"),
)
# nvidia-smi states in which it printed the GPUs (anything else: it did not answer, the GPU firmware is unread).
_SMI_ANSWERED = (None, "ok", "gpu_lost", "version_mismatch")


class BomError(GpufleetError, ValueError):
    """A BOM that cannot be used (wrong type, missing version)."""


def _section(bom, name):
    value = bom.get(name)
    if value is None:
        return {}
    if isinstance(value, str) and name in _VERSION_SHORTHAND:
        return {"version": value}  # "fabricmanager: 550.90.07" is short for {version: 550.90.07}
    if not isinstance(value, dict):
        raise BomError(f"BOM section '{name}' must be a mapping, got {type(value).__name__}")
    return value


def validate_bom(bom):
    """Raise BomError when the BOM's shape is wrong; return it otherwise."""
    if not isinstance(bom, dict):
        raise BomError(f"the BOM must be a mapping (gpufleet_bom in group_vars), got {type(bom).__name__}")
    driver = _section(bom, "driver")
    if driver and not driver.get("version"):
        raise BomError("BOM section 'driver' has no 'version'")
    if driver.get("kernel_module") not in (None, "open", "proprietary"):
        raise BomError(f"BOM driver.kernel_module must be 'open' or 'proprietary', got {driver.get('kernel_module')!r}")
    nic = _section(bom, "nic_firmware")
    for psid, version in nic.items():
        if not isinstance(version, str) or not version:
            raise BomError(f"BOM nic_firmware[{psid}] must be a firmware version string, got {version!r}")
    gpu = _section(bom, "gpu")
    for key, _component, _fact, _what in INBAND_GPU_FIRMWARE:
        if key in gpu and (not isinstance(gpu[key], str) or not gpu[key]):
            raise BomError(f"BOM gpu.{key} must be a version string, got {gpu[key]!r}")
    _section(bom, "fabricmanager")
    for name in OOB_COMPONENTS:
        section = _section(bom, name)
        if section and (not isinstance(section.get("version"), str) or not section["version"]):
            raise BomError(f"BOM section '{name}' has no 'version' (a version string), got {section.get('version')!r}")
        ids = section.get("inventory_id")
        if ids is not None and not _inventory_ids(ids):
            raise BomError(f"BOM {name}.inventory_id must be a Redfish FirmwareInventory member id or a list of them, got {ids!r}")
    try:
        _bom_stack.normalize(bom.get("stack"))  # the node's software stack: _bom_stack.py
    except _bom_stack.StackBomError as exc:
        raise BomError(str(exc)) from exc
    return bom


def _inventory_ids(value):
    """The list of ids of an ``inventory_id`` value, or None when it is not a string or a list of strings."""
    ids = [value] if isinstance(value, str) else value
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
        return None
    return ids


def _item(component, installed, wanted, status=None, detail=None, **extra):
    if status is None:
        if wanted is None:
            status = STATUS_OK
        elif installed is None:
            status = STATUS_MISSING
        else:
            status = STATUS_OK if str(installed) == str(wanted) else STATUS_DRIFT
    item = {"component": component, "installed": installed, "wanted": wanted, "status": status}
    if detail:
        item["detail"] = detail
    item.update(extra)
    return item


def _distinct(values):
    return sorted({v for v in values if v is not None})


def node_drift(facts, bom, bmc=None):
    """Compare one node's gpu_facts (and its BMC's firmware inventory) with its BOM: a list of items, one per component.

    ``bmc`` is None (or empty) when no BMC credentials were given, ``{"entries": [...]}`` (what
    community.general.redfish_info GetFirmwareInventory returns) or ``{"error": "why"}``.
    Each item is ``{component, installed, wanted, status, detail?, source?, inventory_ids?}`` with status
    ok / drift / missing / unknown.
    """
    validate_bom(bom)
    facts = facts or {}
    items = []
    driver = facts.get("driver") or {}
    bom_driver = _section(bom, "driver")
    if bom_driver:
        if driver.get("installed") is False and driver.get("version") is None:
            items.append(_item("driver", None, bom_driver.get("version"), STATUS_MISSING, "no NVIDIA driver is installed"))
        else:
            items.append(_item("driver", driver.get("version"), bom_driver.get("version")))
        if bom_driver.get("kernel_module"):
            items.append(_item("driver_kernel_module", driver.get("flavor"), bom_driver["kernel_module"]))
        if driver.get("installed") and not driver.get("loaded"):
            items.append(_item("driver_loaded", False, True, STATUS_DRIFT, "the driver is installed but not loaded"))

    nvswitch = (facts.get("nvswitch") or {}).get("present")
    fm = facts.get("fabricmanager") or {}
    wanted_fm = _section(bom, "fabricmanager").get("version")
    if wanted_fm is None and nvswitch and bom_driver:
        wanted_fm = bom_driver.get("version")  # NVSwitch systems: the fabric manager equals the driver
    if wanted_fm is not None:
        items.append(_item("fabricmanager", fm.get("version"), wanted_fm))
        if nvswitch and fm.get("running") is False:
            items.append(_item("fabricmanager_running", False, True, STATUS_DRIFT, "nvidia-fabricmanager is not running on an NVSwitch system"))

    gpus = facts.get("gpus") or []
    bom_gpu = _section(bom, "gpu")
    if "count" in bom_gpu:
        items.append(_item("gpu_count", facts.get("gpu_count", len(gpus)), bom_gpu["count"]))
    if bom_gpu.get("model"):
        models = _distinct(g.get("name") for g in gpus)
        installed = models[0] if len(models) == 1 else (", ".join(models) or None)
        items.append(_item("gpu_model", installed, bom_gpu["model"]))
    items += _inband_gpu_firmware(facts, gpus, bom_gpu)
    items += _oob_firmware(bom, bmc)

    nic_bom = _section(bom, "nic_firmware")
    for nic in facts.get("nics") or []:
        psid = nic.get("psid")
        component = "nic_firmware[{}]".format(nic.get("pci") or psid)
        if nic.get("query_failed"):
            status = nic.get("status") or "no status"
            items.append(_item(component, None, None, STATUS_UNKNOWN, f"the Mellanox tool could not read this device ({status}): its firmware is unknown"))
        elif psid in nic_bom:
            items.append(_item(component, nic.get("fw_current"), nic_bom[psid]))
        elif nic_bom:
            items.append(_item(component, nic.get("fw_current"), None, STATUS_UNKNOWN, f"PSID {psid} is not in the BOM"))
    items += _bom_stack.stack_drift(facts, bom.get("stack"), driver_version=driver.get("version"))
    return items


def _inband_gpu_firmware(facts, gpus, bom_gpu):
    """VBIOS, GSP firmware and InfoROM of the GPUs, as nvidia-smi -q -x shows them."""
    items = []
    smi = facts.get("nvidia_smi")
    for key, component, fact, what in INBAND_GPU_FIRMWARE:
        wanted = bom_gpu.get(key)
        versions = _distinct(g.get(fact) for g in gpus)
        if len(versions) > 1:
            items.append(_item(component, ", ".join(versions), wanted, STATUS_DRIFT, f"mixed {what} versions within the node", source="nvidia-smi"))
        elif wanted is None:
            continue
        elif versions:
            items.append(_item(component, versions[0], wanted, source="nvidia-smi"))
        elif smi not in _SMI_ANSWERED or not gpus:
            reason = facts.get("nvidia_smi_message") or f"nvidia-smi state {smi or 'not gathered'}"
            detail = f"nvidia-smi listed no GPU, the {what} was not read ({smi}: {reason})"[:300]
            items.append(_item(component, None, wanted, STATUS_UNKNOWN, detail, source="nvidia-smi"))
        elif any(fact not in g for g in gpus):
            detail = f"gpu_facts does not read the {what} version from nvidia-smi -q -x"
            items.append(_item(component, None, wanted, STATUS_UNKNOWN, detail, source="nvidia-smi"))
        else:
            detail = f"nvidia-smi -q -x shows no {what} version (N/A)"
            items.append(_item(component, None, wanted, STATUS_UNKNOWN, detail, source="nvidia-smi"))
    return items


def _oob_firmware(bom, bmc):
    """The HGX bundle, NVSwitch, BMC and BIOS firmware from the BMC's Redfish FirmwareInventory (None: not read)."""
    items = []
    wanted_sections = {name: _section(bom, name) for name in OOB_COMPONENTS}
    wanted_sections = {name: section for name, section in wanted_sections.items() if section}
    if not wanted_sections:
        return items
    entries = (bmc or {}).get("entries")
    error = (bmc or {}).get("error")
    versions = {}  # member id -> version, one pass over the inventory
    for entry in entries or []:
        if isinstance(entry, dict) and isinstance(entry.get("Id"), str):
            versions[entry["Id"]] = entry.get("Version")
    for name, section in wanted_sections.items():
        wanted = section["version"]
        ids = _inventory_ids(section.get("inventory_id"))
        looked_for = ids or list(OOB_COMPONENTS[name])
        extra = {"source": "bmc", "inventory_ids": []}
        if not bmc:
            items.append(_item(name, None, wanted, STATUS_UNKNOWN, NO_BMC_CREDENTIALS, **extra))
            continue
        if error or entries is None:
            detail = f"the BMC's firmware inventory could not be read: {error or 'no entries returned'}"[:300]
            items.append(_item(name, None, wanted, STATUS_UNKNOWN, detail, **extra))
            continue
        if ids:
            found = {i: versions[i] for i in ids if i in versions}
        else:
            pattern = _OOB_PATTERNS[name]
            found = {i: v for i, v in versions.items() if pattern.fullmatch(i)}
        found = dict(sorted(found.items()))
        extra["inventory_ids"] = list(found)
        read = {i: v for i, v in found.items() if isinstance(v, str) and v}
        if not read:
            detail = (
                f"the BMC's firmware inventory lists no member with a version for {name} (looked for {', '.join(looked_for)}); "
                f"set {name}.inventory_id in the BOM to the member that holds it"
            )
            items.append(_item(name, None, wanted, STATUS_UNKNOWN, detail, **extra))
            continue
        distinct = _distinct(read.values())
        if len(distinct) > 1:
            odd = ", ".join(f"{i} runs {v}" for i, v in read.items() if v != wanted)
            items.append(_item(name, ", ".join(distinct), wanted, STATUS_DRIFT, f"mixed versions within the node: {odd}", **extra))
        else:
            items.append(_item(name, distinct[0], wanted, **extra))
    return items


def drift_summary(items):
    """Counts per status, and the overall status of a node (worst of its items)."""
    counts = {STATUS_OK: 0, STATUS_DRIFT: 0, STATUS_MISSING: 0, STATUS_UNKNOWN: 0}
    for item in items:
        counts[item["status"]] += 1
    if counts[STATUS_DRIFT] or counts[STATUS_MISSING]:
        overall = STATUS_DRIFT
    elif counts[STATUS_UNKNOWN]:
        overall = STATUS_UNKNOWN
    else:
        overall = STATUS_OK
    return {"status": overall, "counts": counts}


def sku_mixed_versions(nodes):
    """Within each SKU, components whose installed versions differ between nodes.

    ``nodes`` is a list of ``{"name", "sku", "facts"}``; returns
    ``{sku: {component: {version: [node, ...]}}}`` for components with more than one version.
    """
    by_sku = {}
    for node in nodes:
        facts = node.get("facts") or {}
        seen = by_sku.setdefault(node.get("sku") or "unknown", {})
        values = {
            "driver": (facts.get("driver") or {}).get("version"),
            "fabricmanager": (facts.get("fabricmanager") or {}).get("version"),
        }
        for gpu in facts.get("gpus") or []:
            values.setdefault("gpu_vbios", set()).add(gpu.get("vbios_version"))
        for nic in facts.get("nics") or []:
            values.setdefault("nic_firmware[{}]".format(nic.get("psid")), set()).add(nic.get("fw_current"))
        for component, value in values.items():
            for version in value if isinstance(value, set) else {value}:
                if version is not None:
                    seen.setdefault(component, {}).setdefault(version, []).append(node["name"])
    mixed = {}
    for sku, components in by_sku.items():
        for component, versions in components.items():
            if len(versions) > 1:
                mixed.setdefault(sku, {})[component] = {v: sorted(set(n)) for v, n in sorted(versions.items())}
    return mixed
