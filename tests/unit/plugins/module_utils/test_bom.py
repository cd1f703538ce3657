"""BOM validation and drift: exact equality, fabric manager following the driver, mixed versions."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._bom import (
    BomError,
    drift_summary,
    node_drift,
    sku_mixed_versions,
    validate_bom,
)

BOM = {
    "driver": {"version": "550.90.07", "kernel_module": "open"},
    "gpu": {"model": "NVIDIA H100 80GB HBM3", "count": 2, "vbios": "96.00.74.00.0D"},
    "nic_firmware": {"MT_0000000838": "28.43.1014"},
}


def facts(driver="550.90.07", flavor="open", fm="550.90.07", nvswitch=True, vbios=("96.00.74.00.0D", "96.00.74.00.0D"), nic_fw="28.43.1014", fm_running=True):
    return {
        "driver": {"installed": True, "loaded": True, "version": driver, "flavor": flavor},
        "fabricmanager": {"version": fm, "running": fm_running},
        "nvswitch": {"present": nvswitch},
        "gpu_count": len(vbios),
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "vbios_version": v} for v in vbios],
        "nics": [{"pci": "0000:1a:00.0", "psid": "MT_0000000838", "fw_current": nic_fw}],
    }


def by_component(items):
    return {item["component"]: item for item in items}


def test_matching_node_has_no_drift():
    items = node_drift(facts(), BOM)
    assert {i["status"] for i in items} == {"ok"}
    assert set(by_component(items)) == {
        "driver", "driver_kernel_module", "fabricmanager", "gpu_count", "gpu_model", "gpu_vbios", "nic_firmware[0000:1a:00.0]",
    }
    assert drift_summary(items)["status"] == "ok"


def test_newer_driver_is_drift_too():
    items = by_component(node_drift(facts(driver="570.172.08", fm="570.172.08"), BOM))
    assert items["driver"] == {"component": "driver", "installed": "570.172.08", "wanted": "550.90.07", "status": "drift"}
    # On NVSwitch systems the fabric manager must equal the BOM's driver.
    assert items["fabricmanager"]["wanted"] == "550.90.07" and items["fabricmanager"]["status"] == "drift"


def test_pcie_node_has_no_fabric_manager_requirement():
    items = by_component(node_drift(facts(nvswitch=False, fm=None), BOM))
    assert "fabricmanager" not in items


def test_stopped_fabric_manager_on_nvswitch_node_is_drift():
    items = by_component(node_drift(facts(fm_running=False), BOM))
    assert items["fabricmanager_running"]["status"] == "drift"


def test_mixed_vbios_within_a_node_is_called_out():
    items = by_component(node_drift(facts(vbios=("96.00.74.00.0D", "96.00.89.00.01")), BOM))
    assert items["gpu_vbios"]["status"] == "drift"
    assert items["gpu_vbios"]["installed"] == "96.00.74.00.0D, 96.00.89.00.01"
    assert "mixed" in items["gpu_vbios"]["detail"]


def test_missing_driver_and_unknown_psid():
    node = facts(driver=None)
    node["nics"][0]["psid"] = "MT_0000000999"
    items = by_component(node_drift(node, BOM))
    assert items["driver"]["status"] == "missing"
    assert items["nic_firmware[0000:1a:00.0]"]["status"] == "unknown"
    summary = drift_summary(items.values())
    assert summary["status"] == "drift" and summary["counts"]["missing"] == 1 and summary["counts"]["unknown"] == 1


def test_only_unknown_items_make_an_unknown_node():
    node = facts()
    node["nics"][0]["psid"] = "MT_0000000999"
    assert drift_summary(node_drift(node, BOM))["status"] == "unknown"


@pytest.mark.parametrize(
    ("bom", "message"),
    [
        ([], "must be a mapping"),
        ({"driver": ["550.90.07"]}, "section 'driver' must be a mapping"),
        ({"driver": {"kernel_module": "open"}}, "has no 'version'"),
        ({"driver": {"version": "550.90.07", "kernel_module": "closed"}}, "'open' or 'proprietary'"),
        ({"nic_firmware": {"MT_0000000838": 28}}, "nic_firmware\\[MT_0000000838\\]"),
    ],
)
def test_bad_bom_is_refused_with_the_reason(bom, message):
    with pytest.raises(BomError, match=message):
        validate_bom(bom)


def test_mixed_versions_within_sku():
    nodes = [
        {"name": "a1", "sku": "hgx", "facts": facts()},
        {"name": "a2", "sku": "hgx", "facts": facts(nic_fw="28.39.1002")},
        {"name": "b1", "sku": "l40s", "facts": facts(driver="535.161.08")},
    ]
    mixed = sku_mixed_versions(nodes)
    assert mixed == {"hgx": {"nic_firmware[MT_0000000838]": {"28.39.1002": ["a2"], "28.43.1014": ["a1"]}}}


def test_bare_version_strings_are_short_for_version_mappings():
    bom = dict(BOM, driver="550.90.07", fabricmanager="550.90.07")
    items = by_component(node_drift(facts(fm="535.161.08"), bom))
    assert items["driver"]["status"] == "ok"
    assert items["fabricmanager"] == {"component": "fabricmanager", "installed": "535.161.08", "wanted": "550.90.07", "status": "drift"}
