"""The rehearsal's copy of GB200 NVL72 trays keeps their NVLink domains (plugins/module_utils/_rehearsal/convert.py, the
audit report's hardware from _report/fleet.py): named by the inventory's nvlink_domain (else after the ClusterUUID), with
the CliqueId, an IMEX version off the driver's and CDMM; gpusim's own parser then puts each tray with its domain's trays."""

from __future__ import annotations

import copy
import json
import pathlib
import sys

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rehearsal.convert import RehearsalError, audit_to_spec
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.fleet import _hardware

TESTS = pathlib.Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from gpusim import spec  # noqa: E402

REPORT = json.loads((TESTS / "fixtures" / "rehearsal" / "demo-16-report.json").read_text())
UUID_A, UUID_B = "8B3A1F2C-0001-4000-8000-00000000000A", "8b3a1f2c-0001-4000-8000-00000000000b"


def tray_facts(uuid, imex="580.95.05", cdmm="driver"):
    """What gpu_facts (as the audit keeps it) reads on a GB200 tray."""
    return {"kernel": "6.8.0-1015-nvidia-64k", "driver": {"installed": True, "loaded": True, "version": "580.95.05", "flavor": "open"},
            "nvidia_smi": "ok", "gpu_count": 4, "pci_gpu_count": 4,
            "gpus": [{"index": i, "name": "NVIDIA GB200", "vbios_version": "97.00.82.00.0F"} for i in range(4)],
            "nvswitch": {"present": False, "count": 0}, "fabricmanager": {"installed": False, "version": None, "running": False},
            "nics": [], "nvlink": {"cluster_uuid": uuid, "clique_id": 1, "multi_node": True, "fabric_ok": True},
            "imex": {"installed": True, "version": imex}, "cdmm": {"mode": cdmm, "enabled": cdmm == "driver"}}


def tray_report(domains, imex=None):
    """A fleet report of GB200 trays: ``domains`` {tray: (ClusterUUID, inventory nvlink_domain or None)}."""
    data = copy.deepcopy(REPORT)
    data["boms"] = {"gb200_nvl72": {"driver": {"version": "580.95.05", "install": "runfile", "kernel_module": "open"},
                                    "gpu": {"model": "NVIDIA GB200", "count": 4}}}
    data["nodes"] = []
    for name, (uuid, domain) in domains.items():
        record = {"name": name, "sku": "gb200_nvl72", "status": "ok", "hardware": _hardware(tray_facts(uuid, (imex or {}).get(name, "580.95.05")), None)}
        if domain is not None:
            record["nvlink_domain"] = domain
        data["nodes"].append(record)
    return data


def domains_of(made):
    """Each tray of the copy: (its NVLink domain, CliqueId, IMEX version, CDMM), after gpusim's own parser; the copy's inventory
    names the same domain (host variable nvlink_domain) unless the operator's variable was copied as it is."""
    parsed = spec.parse(made, source="copy")
    for plan in parsed.nodes:
        assert plan.host_vars.get("nvlink_domain") in (plan.spec["nvlink"]["domain"], "Rack A"), (plan.name, plan.host_vars)
    return {plan.name: (plan.spec["nvlink"]["domain"], plan.spec["nvlink"]["clique_id"], plan.spec["imex"], plan.spec["cdmm"]) for plan in parsed.nodes}


def test_the_audits_hardware_keeps_a_trays_domain_and_nothing_more_elsewhere():
    assert _hardware(tray_facts(UUID_A), None)["nvlink"] == {"cluster_uuid": UUID_A, "clique_id": 1}
    assert (_hardware(tray_facts(UUID_A), None)["imex"], _hardware(tray_facts(UUID_A), None)["cdmm"]) == ("580.95.05", "driver")
    zero = "00000000-0000-0000-0000-000000000000"
    hgx = dict(tray_facts(zero), nvlink={"cluster_uuid": zero, "clique_id": 0, "multi_node": False})
    assert not {"nvlink", "imex", "cdmm"} & set(_hardware(hgx, None))


def test_the_copy_keeps_each_trays_nvlink_domain_from_the_inventory():
    made, _notes = audit_to_spec(tray_report({"nvl-a01": (UUID_A, "rack-a"), "nvl-a02": (UUID_A, "rack-a"),
                                              "nvl-b01": (UUID_B, "rack-b"), "nvl-b02": (UUID_B, "rack-b")}))
    assert domains_of(made) == {"nvl-a01": ("rack-a", 1, "580.95.05", "driver"), "nvl-a02": ("rack-a", 1, "580.95.05", "driver"),
                                "nvl-b01": ("rack-b", 1, "580.95.05", "driver"), "nvl-b02": ("rack-b", 1, "580.95.05", "driver")}


def test_the_copy_names_a_domain_after_its_cluster_uuid_without_a_usable_inventory_name():
    made, notes = audit_to_spec(tray_report({"nvl-a01": (UUID_A, None), "nvl-a02": (UUID_A, "Rack A")}),
                                host_vars={"nvl-a02": {"nvlink_domain": "Rack A"}})
    assert {d[0] for d in domains_of(made).values()} == {"nvl-" + UUID_A.lower()}
    assert any("nvl-a02: nvlink_domain 'Rack A' is not a name the simulator takes" in note for note in notes), notes


def test_the_operators_host_vars_name_the_domain_and_an_imex_off_the_driver_stays_off():
    made, _notes = audit_to_spec(tray_report({"nvl-a01": (UUID_A, None), "nvl-a02": (UUID_A, None)}, imex={"nvl-a02": "580.82.07"}),
                                 host_vars={"nvl-a01": {"nvlink_domain": "rack-a"}, "nvl-a02": {"nvlink_domain": "rack-a"}})
    assert domains_of(made) == {"nvl-a01": ("rack-a", 1, "580.95.05", "driver"), "nvl-a02": ("rack-a", 1, "580.82.07", "driver")}


def test_a_garbled_cluster_uuid_is_refused_naming_the_tray_and_field():
    data = tray_report({"nvl-a01": (UUID_A, "rack-a")})
    data["nodes"][0]["hardware"]["nvlink"]["cluster_uuid"] = "not-a-uuid"
    with pytest.raises(RehearsalError, match=r"nvl-a01.*hardware\.nvlink\.cluster_uuid"):
        audit_to_spec(data)
