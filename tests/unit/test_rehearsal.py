"""The rehearsal converter: an audit's report (a real one, of demo-16) becomes a gpusim spec of the same fleet; refusals name the node and field.

tests/fixtures/rehearsal/demo-16-report.json is what playbooks/audit.yml wrote over tests/gpusim/specs/demo-16.yml
(brought up on another loopback); the spec made from it must expand, in gpusim's own parser, to the nodes demo-16.yml
declares, in everything an audit can see.
"""

from __future__ import annotations

import copy
import json
import pathlib
import sys

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rehearsal import simulator
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rehearsal.convert import RehearsalError, audit_to_spec

TESTS = pathlib.Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from gpusim import catalog, firmware, spec  # noqa: E402

REPORT = json.loads((TESTS / "fixtures" / "rehearsal" / "demo-16-report.json").read_text())
DEMO = TESTS / "gpusim" / "specs" / "demo-16.yml"


def report():
    return copy.deepcopy(REPORT)


def node(data, name):
    return next(n for n in data["nodes"] if n["name"] == name)


def seen_by_an_audit(plan):
    """What of a node's plan an audit can read: everything but jobs, faults, timing, perf and addresses."""
    s = plan.spec
    model = catalog.gpu_model(s["gpu_model"])
    return {
        "sku": s["sku"], "gpu_model": s["gpu_model"], "gpu_count": s["gpu_count"], "nvswitch": s["nvswitch"],
        "driver": s["driver"], "kernel_module": s["kernel_module"] if s["driver"] else None, "fabricmanager": s["fabricmanager"],
        "vbios": s["vbios"] or model.vbios, "gpu_firmware": s["gpu_firmware"] or "HGX-22.10-1", "kernel": s["kernel"],
        "nics": [{k: nic[k] for k in ("type", "psid", "part_number", "fw")} for nic in s["nics"]],
        "bmc_firmware": s.get("bmc_firmware") or "24.01.1", "bios": s.get("bios") or "2.1.0",
    }


def test_the_copy_of_demo_16_expands_in_gpusim_to_the_nodes_demo_16_declares():
    made, notes = audit_to_spec(report(), name="demo-16-copy", loopback=41, slurm_port=16200)
    copy_fleet = spec.parse(made, source="copy")
    original = spec.load(DEMO)
    assert [p.name for p in copy_fleet.nodes] == sorted(p.name for p in original.nodes)
    for plan in original.nodes:
        assert seen_by_an_audit(copy_fleet.node(plan.name)) == seen_by_an_audit(plan), plan.name
    assert copy_fleet.nodes[0].address == "127.0.41.1" and copy_fleet.slurm_port == 16200 and copy_fleet.partition == "gpu"
    assert {name: sku["bom"] for name, sku in made["skus"].items()} == REPORT["boms"]
    assert made["skus"]["hgx_h100"] == dict(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8, nvswitch=True, bom=REPORT["boms"]["hgx_h100"])
    assert any("no Slurm jobs" in n for n in notes)


def test_the_drift_the_audit_saw_is_on_the_copys_nodes():
    made, _notes = audit_to_spec(report())
    by_name = {name: dict(group, names=None) for group in made["nodes"] for name in group["names"]}
    assert by_name["h100-05"]["driver"] == "535.161.08"
    assert by_name["h100-06"]["fabricmanager"] == "565.57.01" and by_name["h100-06"]["driver"] == "570.124.06"
    assert by_name["l40s-05"]["kernel_module"] == "proprietary" and by_name["l40s-05"]["fabricmanager"] is None
    assert [n["fw"] for n in by_name["l40s-06"]["nics"]] == ["22.43.1014", "22.39.1002"]
    assert by_name["b200-03"]["gpu_firmware"] == "HGX-B200-24.08-2" and by_name["b200-03"]["vbios"] == "97.00.7D.00.0A"


def test_identical_neighbours_share_one_node_group():
    made, _notes = audit_to_spec(report())
    assert made["nodes"][0]["names"] == ["b200-01", "b200-02"]
    assert ["h100-01", "h100-02", "h100-03", "h100-04"] in [g["names"] for g in made["nodes"]]
    assert sum(len(g["names"]) for g in made["nodes"]) == 16


def test_host_vars_land_on_the_node_and_a_node_of_its_own_bom_keeps_it():
    data = report()
    node(data, "h100-02")["bom"] = dict(data["boms"]["hgx_h100"], driver={"version": "580.95.05"})
    made, _notes = audit_to_spec(data, host_vars={"h100-01": {"rack": "r1", "nvlink_domain": "nvl-a"}})
    parsed = spec.parse(made)
    assert parsed.node("h100-01").host_vars == {"rack": "r1", "nvlink_domain": "nvl-a"}
    assert parsed.node("h100-02").host_vars == {"gpufleet_bom": {**data["boms"]["hgx_h100"], "driver": {"version": "580.95.05"}}}
    assert parsed.node("h100-03").host_vars == {}


def test_an_inactive_fabric_manager_stays_inactive_on_the_copy():
    data = report()
    node(data, "h100-01")["hardware"]["fabricmanager"]["running"] = False
    made, _notes = audit_to_spec(data)
    assert spec.parse(made).node("h100-01").spec["faults"] == [{"kind": "fm_inactive"}]


def test_a_node_without_a_driver_keeps_its_vbios_from_the_bmc_and_the_model_from_the_bom():
    data = report()
    hardware = node(data, "l40s-01")["hardware"]
    hardware.update(driver={"installed": False, "loaded": False, "version": None, "flavor": None}, gpus=[], gpu_count=0, nvidia_smi="no_driver")
    made, _notes = audit_to_spec(data)
    plan = spec.parse(made).node("l40s-01")
    assert plan.spec["driver"] is None and plan.spec["vbios"] == "95.02.66.00.02" and plan.spec["gpu_model"] == "NVIDIA L40S"


def test_a_node_whose_bmc_was_not_read_gets_the_defaults_and_a_note():
    data = report()
    node(data, "b200-03")["hardware"]["firmware_inventory"] = None
    made, notes = audit_to_spec(data)
    group = next(g for g in made["nodes"] if "b200-03" in g["names"])
    assert "gpu_firmware" not in group and "bmc_firmware" not in group
    assert any(n.startswith("b200-03: the audit did not read its BMC") for n in notes)


def test_a_bom_member_the_simulator_names_otherwise_is_renamed_with_a_note():
    data = report()
    data["boms"]["hgx_h100"]["bmc_firmware"] = {"version": "24.01.1", "inventory_id": "BMC_Firmware"}
    made, notes = audit_to_spec(data)
    assert made["skus"]["hgx_h100"]["bom"]["bmc_firmware"] == {"version": "24.01.1", "inventory_id": "HostBMC_0"}
    assert any("BMC_Firmware" in n and "HostBMC_0" in n for n in notes)
    assert data["boms"]["hgx_h100"]["bmc_firmware"]["inventory_id"] == "BMC_Firmware"  # the input is not changed


def test_unreadable_nodes_are_refused_unless_skipped_or_excluded():
    data = report()
    data["unreachable"] = ["h100-09"]
    node(data, "l40s-02").update(status="error", error="nvidia-smi timed out", hardware=None)
    with pytest.raises(RehearsalError, match=r"could not read h100-09, l40s-02"):
        audit_to_spec(data)
    made, notes = audit_to_spec(data, skip_unreadable=True)
    names = [n for g in made["nodes"] for n in g["names"]]
    assert "l40s-02" not in names and len(names) == 15
    assert any("h100-09, l40s-02" in n for n in notes)
    made, _notes = audit_to_spec(data, exclude=["h100-09", "l40s-02", "b200-01"])
    assert "b200-01" not in [n for g in made["nodes"] for n in g["names"]]


def _set(path, value):
    """A mutation of the report: set the key path (node name first) to value."""
    def mutate(data):
        target = node(data, path[0])
        for key in path[1:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


def _top(key, value):
    def mutate(data):
        if value is None:
            del data[key]
        else:
            data[key] = value
    return mutate


def _gpu(node_name, index, **values):
    def mutate(data):
        node(data, node_name)["hardware"]["gpus"][index].update(values)
    return mutate


def _nic(node_name, index, **values):
    def mutate(data):
        node(data, node_name)["hardware"]["nics"][index].update(values)
    return mutate


REFUSALS = {
    "another report version": (_top("report_version", 2), r"report_version 2: this converter reads fleet reports of version 1"),
    "a report without boms": (_top("boms", None), r"'boms' must be a dict.*audit the fleet again"),
    "a node without a SKU": (_set(("h100-01", "sku"), "unknown"), r"node 'h100-01', sku: has no SKU \('unknown'\): set gpufleet_sku"),
    "a SKU that is no group name": (_set(("h100-01", "sku"), "hgx-h100"), r"node 'h100-01', sku: has no SKU \('hgx-h100'\)"),
    "a node without hardware": (_set(("h100-01", "hardware"), None), r"node 'h100-01', hardware: missing"),
    "a node name gpusim cannot use": (_set(("h100-01", "name"), "GPU01.example.com"), r"node 'GPU01.example.com', name: gpusim node names"),
    "two GPU models in one node": (_gpu("h100-02", 0, name="NVIDIA GB200"), r"node 'h100-02', hardware.gpus: mixes GPU models"),
    "an unknown GPU model": (lambda d: [g.update(name="NVIDIA GH200 480GB") for g in node(d, "h100-02")["hardware"]["gpus"]],
                             r"node 'h100-02', hardware.gpus.name: GPU model 'NVIDIA GH200 480GB' is not one the simulator plays"),
    "mixed VBIOS in one node": (_gpu("b200-01", 3, vbios_version="97.00.7D.00.01"), r"node 'b200-01', hardware.gpus.vbios_version: mixes VBIOS"),
    "a lost GPU": (_set(("h100-03", "hardware", "pci_gpu_count"), 9), r"node 'h100-03', hardware.gpu_count: nvidia-smi saw 8 of the 9 GPUs"),
    "a GPU count out of range": (_set(("h100-03", "hardware", "gpu_count"), 0), r"node 'h100-03', hardware.gpu_count: must be between 1 and 16"),
    "a driver installed, not loaded": (_set(("h100-04", "hardware", "driver", "loaded"), False), r"node 'h100-04', hardware.driver.loaded: .*not loaded"),
    "a driver version with a newline": (_set(("h100-04", "hardware", "driver", "version"), "570.124.06\n"),
                                        r"node 'h100-04', hardware.driver.version: must be a driver version"),
    "an unknown kernel module flavour": (_set(("h100-04", "hardware", "driver", "flavor"), "nouveau"), r"node 'h100-04', hardware.driver.flavor"),
    "a bad fabric manager version": (_set(("h100-04", "hardware", "fabricmanager", "version"), "565"), r"node 'h100-04', hardware.fabricmanager.version"),
    "a bad kernel": (_set(("h100-04", "hardware", "kernel"), "6.1.0 amd64"), r"node 'h100-04', hardware.kernel"),
    "a NIC the simulator lacks": (_nic("l40s-01", 1, type="ConnectX8"), r"node 'l40s-01', hardware.nics\[1\].type: 'ConnectX8' is not a NIC"),
    "a NIC that could not be read": (_nic("l40s-01", 0, query_failed=True, psid=None), r"node 'l40s-01', hardware.nics\[0\]: the Mellanox tool could not open"),
    "a bad PSID": (_nic("l40s-01", 0, psid="MT 359"), r"node 'l40s-01', hardware.nics\[0\].psid"),
    "a bad part number": (_nic("l40s-01", 0, part_number="MCX6 23"), r"node 'l40s-01', hardware.nics\[0\].part_number"),
    "a bad NIC firmware": (_nic("l40s-01", 0, fw_current="22.43.1014-rc"), r"node 'l40s-01', hardware.nics\[0\].fw_current"),
    "NVSwitch firmware the simulator cannot set": (_set(("b200-02", "hardware", "firmware_inventory", "HGX_FW_NVSwitch_2"), "96.10.55.00.01"),
                                                   r"node 'b200-02', hardware.firmware_inventory.HGX_FW_NVSwitch_2: NVSwitch firmware '96.10.55.00.01'"),
    "an HGX bundle without NVSwitch": (_set(("l40s-03", "hardware", "firmware_inventory", "HGX_FW_BMC_0"), "HGX-22.10-1"),
                                       r"node 'l40s-03', hardware.firmware_inventory.HGX_FW_BMC_0: an HGX bundle on a node without NVSwitch"),
    "a bundle name the BMC cannot serve": (_set(("b200-02", "hardware", "firmware_inventory", "HGX_FW_BMC_0"), "HGX B200 24.12"),
                                           r"node 'b200-02', hardware.firmware_inventory \(gpu_firmware\): 'HGX B200 24.12'"),
    "two host BMC versions": (_set(("b200-02", "hardware", "firmware_inventory", "HostBMC_1"), "24.09-1"),
                              r"node 'b200-02', hardware.firmware_inventory \(bmc_firmware\): several versions"),
    "GPUs that are no list": (_set(("h100-01", "hardware", "gpus"), "8x H100"), r"node 'h100-01', hardware.gpus: must be a list, got str"),
    "no GPU listed and no BOM model": (lambda d: (node(d, "l40s-04")["hardware"].update(gpus=[]), d["boms"]["l40s_pcie"].pop("gpu")),
                                       r"node 'l40s-04', hardware.gpus: nvidia-smi listed no GPU and the BOM names no gpu.model"),
    "a VBIOS the simulator cannot print": (lambda d: [g.update(vbios_version="96.00 A5") for g in node(d, "h100-01")["hardware"]["gpus"]],
                                           r"node 'h100-01', hardware.gpus.vbios_version: '96.00 A5' is not a version"),
    "a driver that is no mapping": (_set(("h100-01", "hardware", "driver"), "570.124.06"), r"node 'h100-01', hardware.driver: must be a mapping"),
    "NICs that are no list": (_set(("h100-01", "hardware", "nics"), {}), r"node 'h100-01', hardware.nics: must be a list, got dict"),
    "a NIC that is no mapping": (_set(("h100-01", "hardware", "nics"), ["MT_0000000834"]), r"node 'h100-01', hardware.nics\[0\]: must be a mapping"),
    "a firmware inventory that is no mapping": (_set(("h100-01", "hardware", "firmware_inventory"), []),
                                                r"node 'h100-01', hardware.firmware_inventory: must be a mapping of member id to version"),
    "a SKU's BOM that is no mapping": (lambda d: d["boms"].update(hgx_b200="570.133.20"), r"the report's boms\['hgx_b200'\] must be a mapping"),
    "a node entry that is no mapping": (lambda d: d["nodes"].append("h100-99"), r"the report's nodes\[16\] must be a mapping, got str"),
    "a node twice": (lambda d: d["nodes"].append(copy.deepcopy(node(d, "l40s-01"))), r"node 'l40s-01', name: is in the report twice"),
    "a node name that is a list": (lambda d: node(d, "l40s-01").update(name=["l40s-01"]),
                                   r"the report's nodes\[\d+\]\.name must be a node name \(a string\), got list"),
    "NVSwitches that are no mapping": (_set(("b200-02", "hardware", "nvswitch"), 5),
                                       r"node 'b200-02', hardware.nvswitch: must be a mapping \(with 'present'\), got int"),
    "a SKU of two shapes": (lambda d: node(d, "h100-02")["hardware"].update(gpu_count=4, gpus=node(d, "h100-02")["hardware"]["gpus"][:4]),
                            r"node 'h100-02', SKU hgx_h100: gpu_count: 4, but h100-01 of the same SKU has 8"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_what_the_simulator_cannot_play_is_refused_naming_the_node_and_field(case):
    mutate, message = REFUSALS[case]
    data = report()
    mutate(data)
    with pytest.raises(RehearsalError, match=message):
        audit_to_spec(data)


@pytest.mark.parametrize("kwargs, message", [
    ({"host_vars": {"h100-01": {"ansible_host": "10.0.0.1"}}}, r"node 'h100-01', host_vars.ansible_host: not a variable the copy's inventory may set"),
    ({"host_vars": {"h100-01": {"bmc_address": "10.0.0.1"}}}, r"node 'h100-01', host_vars.bmc_address"),
    ({"host_vars": {"h100-01": {"rack": None}}}, r"node 'h100-01', host_vars.rack: must be a string"),
    ({"host_vars": {"gpu-99": {"rack": "r1"}}}, r"host_vars names nodes the report does not hold: gpu-99"),
    ({"host_vars": ["rack"]}, r"host_vars must be a mapping"),
    ({"host_vars": {"h100-01": ["rack"]}}, r"node 'h100-01', host_vars: must be a mapping of variable name to value"),
    ({"name": "Demo_16"}, r"name must be a fleet name"),
    ({"loopback": 255}, r"loopback must be an integer between 1 and 254, got 255"),
    ({"loopback": True}, r"loopback must be an integer"),
    ({"slurm_port": 80}, r"slurm_port must be an integer between 1024 and 60000"),
    ({"bmc_loopback": 40}, r"bmc_loopback must be .* other than loopback \(40\)"),
    ({"partition": "gpu batch"}, r"partition must be a Slurm partition name"),
    ({"exclude": sorted(n["name"] for n in REPORT["nodes"])}, r"no node is left to copy"),
])
def test_bad_options_are_refused_naming_the_option(kwargs, message):
    with pytest.raises(RehearsalError, match=message):
        audit_to_spec(report(), **kwargs)


def test_the_report_itself_must_be_a_mapping():
    with pytest.raises(RehearsalError, match=r"the audit report must be a mapping"):
        audit_to_spec([REPORT])


def test_the_simulators_names_are_gpusims_own():
    assert set(simulator.GPU_MODELS) == set(catalog.GPU_MODELS)
    assert sorted(simulator.NIC_TYPES.values()) == sorted(catalog.NIC_TYPES)
    assert simulator.NVSWITCH_FIRMWARE == firmware.NVSWITCH[2]
    assert simulator.HOST_BMC_ID == firmware.HOST_BMC_ID and simulator.HOST_BIOS_ID in firmware.HOST_COMPONENTS
    assert simulator.HGX_BUNDLE_ID in firmware.HGX_COMPONENTS
    assert spec.parse({"fleet": {"name": "t"}, "timing": simulator.TIMING, "skus": {"s": {"gpu_model": "NVIDIA L40S", "gpu_count": 1}},
                       "nodes": [{"names": ["n"], "sku": "s"}]}).nodes[0].spec["timing"]["reboot"] == 3
