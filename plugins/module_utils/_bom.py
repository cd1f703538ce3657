# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The bill of materials (BOM) of a hardware SKU, and a node's drift from it (private).

A BOM says what a node of one SKU must run::

    driver: {version: 550.90.07, kernel_module: open, method: runfile, ...}
    fabricmanager: {version: 550.90.07}      # or omitted: follows the driver on NVSwitch systems
    gpu: {model: NVIDIA H100 80GB HBM3, count: 8, vbios: 96.00.74.00.0D}
    nic_firmware: {MT_0000000838: 28.43.1014}  # PSID -> firmware version
    cuda: ["12.4"]                           # what the workloads need (checked by the compatibility filters)

Drift is exact equality, as NVIDIA's own fleet tools count it: a newer version
than the BOM is drift too.
"""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

STATUS_OK = "ok"
STATUS_DRIFT = "drift"
STATUS_MISSING = "missing"
STATUS_UNKNOWN = "unknown"


# Sections that may be given as a bare version string.
_VERSION_SHORTHAND = ("driver", "fabricmanager", "gpu_firmware")


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
    _section(bom, "gpu")
    _section(bom, "fabricmanager")
    return bom


def _item(component, installed, wanted, status=None, detail=None):
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
    return item


def _distinct(values):
    return sorted({v for v in values if v is not None})


def node_drift(facts, bom):
    """Compare one node's gpu_facts with its BOM: a list of items, one per component.

    Each item is ``{component, installed, wanted, status, detail?}`` with status
    ok / drift / missing / unknown.
    """
    validate_bom(bom)
    facts = facts or {}
    items = []
    driver = facts.get("driver") or {}
    bom_driver = _section(bom, "driver")
    if bom_driver:
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
    vbios = _distinct(g.get("vbios_version") for g in gpus)
    if len(vbios) > 1:
        items.append(_item("gpu_vbios", ", ".join(vbios), bom_gpu.get("vbios"), STATUS_DRIFT, "mixed VBIOS versions within the node"))
    elif bom_gpu.get("vbios"):
        items.append(_item("gpu_vbios", vbios[0] if vbios else None, bom_gpu["vbios"]))

    nic_bom = _section(bom, "nic_firmware")
    for nic in facts.get("nics") or []:
        psid = nic.get("psid")
        component = "nic_firmware[{}]".format(nic.get("pci") or psid)
        if psid in nic_bom:
            items.append(_item(component, nic.get("fw_current"), nic_bom[psid]))
        elif nic_bom:
            items.append(_item(component, nic.get("fw_current"), None, STATUS_UNKNOWN, f"PSID {psid} is not in the BOM"))
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
