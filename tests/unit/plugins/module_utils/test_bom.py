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


# -- firmware: in band (nvidia-smi) and out of band (the BMC's Redfish FirmwareInventory) -----------------

HGX_BOM = dict(
    BOM,
    gpu_firmware={"version": "HGX-B200-24.12-1"},
    nvswitch_firmware="96.10.6D.00.01",
    bmc_firmware="24.09-1",
    bios={"version": "1.3.2", "inventory_id": "Host_BIOS"},
)


def inventory(bundle="HGX-B200-24.12-1", nvswitch=("96.10.6D.00.01",) * 4, extra=()):
    """What community.general.redfish_info GetFirmwareInventory returns as redfish_facts.firmware.entries."""
    entries = [{"Id": "HGX_FW_BMC_0", "Name": "HGX_FW_BMC_0 firmware", "Version": bundle, "Updateable": True}]
    entries += [{"Id": f"HGX_FW_NVSwitch_{i}", "Version": v} for i, v in enumerate(nvswitch)]
    entries += [{"Id": f"HGX_FW_GPU_SXM_{i + 1}", "Version": "97.00.7D.00.0B"} for i in range(2)]
    entries += list(extra)
    return {"entries": entries}


def test_old_gpu_firmware_bundle_from_the_bmc_is_drift_with_both_versions():
    items = by_component(node_drift(facts(), HGX_BOM, bmc=inventory(bundle="HGX-B200-24.08-2")))
    item = items["gpu_firmware"]
    assert (item["installed"], item["wanted"], item["status"]) == ("HGX-B200-24.08-2", "HGX-B200-24.12-1", "drift")
    assert item["source"] == "bmc" and "HGX_FW_BMC_0" in item["inventory_ids"]
    assert items["nvswitch_firmware"]["status"] == "ok"


def test_bmc_and_bios_versions_are_compared_with_their_bom_keys():
    extra = [{"Id": "HostBMC_0", "Version": "24.09-1"}, {"Id": "Host_BIOS", "Version": "1.2.9"}]
    items = by_component(node_drift(facts(), HGX_BOM, bmc=inventory(extra=extra)))
    assert items["bmc_firmware"]["status"] == "ok" and items["bmc_firmware"]["installed"] == "24.09-1"
    # the BOM names the inventory member of a vendor whose BIOS is not one of the usual ids
    assert (items["bios"]["installed"], items["bios"]["wanted"], items["bios"]["status"]) == ("1.2.9", "1.3.2", "drift")


def test_without_bmc_credentials_firmware_is_unknown_with_the_reason_never_ok():
    items = by_component(node_drift(facts(), HGX_BOM))
    for component in ("gpu_firmware", "nvswitch_firmware", "bmc_firmware", "bios"):
        assert items[component]["status"] == "unknown", component
        assert items[component]["installed"] is None
        assert "no BMC credentials" in items[component]["detail"]
    assert drift_summary(items.values())["status"] == "unknown"


def test_unreadable_bmc_inventory_is_unknown_with_the_bmc_error():
    items = by_component(node_drift(facts(), HGX_BOM, bmc={"error": "HTTP Error 401 on GET request"}))
    assert items["gpu_firmware"]["status"] == "unknown"
    assert "HTTP Error 401" in items["gpu_firmware"]["detail"]


def test_a_component_the_inventory_does_not_list_is_unknown_naming_what_was_looked_for():
    items = by_component(node_drift(facts(), HGX_BOM, bmc=inventory()))
    assert items["bmc_firmware"]["status"] == "unknown"
    assert "HostBMC_<n>" in items["bmc_firmware"]["detail"] and "inventory_id" in items["bmc_firmware"]["detail"]
    assert items["bios"]["status"] == "unknown" and "Host_BIOS" in items["bios"]["detail"]


def test_mixed_nvswitch_firmware_within_a_node_is_drift_naming_the_member():
    items = by_component(node_drift(facts(), HGX_BOM, bmc=inventory(nvswitch=("96.10.6D.00.01", "96.10.55.00.01"))))
    item = items["nvswitch_firmware"]
    assert item["status"] == "drift" and item["installed"] == "96.10.55.00.01, 96.10.6D.00.01"
    assert "HGX_FW_NVSwitch_1" in item["detail"]


def test_no_firmware_items_when_the_bom_asks_for_none():
    items = by_component(node_drift(facts(), BOM, bmc=inventory()))
    assert not {"gpu_firmware", "nvswitch_firmware", "bmc_firmware", "bios"} & set(items)


def test_gsp_firmware_is_compared_in_band_and_unread_when_nvidia_smi_does_not_answer():
    bom = dict(BOM, gpu=dict(BOM["gpu"], gsp_firmware="550.90.07"))
    node = facts()
    for gpu in node["gpus"]:
        gpu["gsp_firmware_version"] = "550.54.15"
    item = by_component(node_drift(node, bom))["gpu_gsp_firmware"]
    assert (item["installed"], item["wanted"], item["status"], item["source"]) == ("550.54.15", "550.90.07", "drift", "nvidia-smi")
    silent = dict(facts(vbios=()), nvidia_smi="no_driver")
    item = by_component(node_drift(silent, bom))["gpu_gsp_firmware"]
    assert item["status"] == "unknown" and "no_driver" in item["detail"]
    assert by_component(node_drift(silent, bom))["gpu_vbios"]["status"] == "unknown"


def test_inforom_that_gpu_facts_does_not_read_is_unknown_not_ok():
    bom = dict(BOM, gpu=dict(BOM["gpu"], inforom="G520.0200.00.05"))
    item = by_component(node_drift(facts(), bom))["gpu_inforom"]
    assert item["status"] == "unknown" and "InfoROM" in item["detail"]
    node = facts()
    for gpu in node["gpus"]:
        gpu["inforom_version"] = "G520.0200.00.05"
    assert by_component(node_drift(node, bom))["gpu_inforom"]["status"] == "ok"


def test_no_driver_installed_is_reported_as_such_not_as_not_loaded():
    node = facts(driver=None, vbios=())
    node["driver"].update(installed=False, loaded=False, flavor=None)
    items = by_component(node_drift(node, BOM))
    assert "driver_loaded" not in items
    assert items["driver"]["status"] == "missing" and items["driver"]["detail"] == "no NVIDIA driver is installed"


def test_installed_but_not_loaded_still_says_so():
    node = facts()
    node["driver"]["loaded"] = False
    assert by_component(node_drift(node, BOM))["driver_loaded"]["detail"] == "the driver is installed but not loaded"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"gpu_firmware": {"package": "x.fwpkg"}}, "gpu_firmware.*version"),
        ({"bios": 12}, "'bios' must be a mapping"),
        ({"bmc_firmware": {"version": "1", "inventory_id": ["a", 3]}}, "bmc_firmware.inventory_id"),
        ({"gpu": {"gsp_firmware": 550}}, "gpu.gsp_firmware"),
    ],
)
def test_bad_firmware_sections_are_refused(section, message):
    with pytest.raises(BomError, match=message):
        validate_bom(dict(BOM, **section))


def test_nic_the_tool_could_not_open_is_unknown_with_its_status_not_a_missing_psid():
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils._bom import node_drift

    facts = {
        "driver": {"version": "550.90.07", "installed": True, "loaded": True},
        "gpus": [],
        "nics": [
            {"pci": "0000:1a:00.0", "psid": "MT_0000000838", "fw_current": "28.43.1014", "query_failed": False},
            {"pci": "0000:3b:00.0", "psid": None, "fw_current": None, "query_failed": True, "status": "Failed to open device"},
        ],
    }
    items = {i["component"]: i for i in node_drift(facts, {"nic_firmware": {"MT_0000000838": "28.43.1014"}})}
    assert items["nic_firmware[0000:1a:00.0]"]["status"] == "ok"
    failed = items["nic_firmware[0000:3b:00.0]"]
    assert failed["status"] == "unknown"
    assert failed["detail"] == "the Mellanox tool could not read this device (Failed to open device): its firmware is unknown"
