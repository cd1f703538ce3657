"""Table tests of the multi-node NVLink / IMEX facts decisions (issue 23)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts.nvlink import imex_facts, imex_matches_driver, nvlink_domain

ZERO = "00000000-0000-0000-0000-000000000000"
DOMAIN_A = "6a1b2c3d-0000-4000-8000-00000000000a"
DOMAIN_B = "6a1b2c3d-0000-4000-8000-00000000000b"


def gpu(index, state="Completed", status="Success", clique=2, uuid=DOMAIN_A, health="Healthy"):
    fabric = {"state": state, "status": status, "clique_id": clique, "cluster_uuid": uuid, "health": health, "multi_node": uuid != ZERO}
    return {"index": index, "pci_bus_id": f"0000000{index}:01:00.0", "fabric": fabric}


@pytest.mark.parametrize(
    ("gpus", "expected", "problem"),
    [
        ([gpu(i) for i in range(4)], (DOMAIN_A, 2, True, True), None),
        ([gpu(i, uuid=ZERO, clique=0, health=None) for i in range(8)], (ZERO, 0, False, True), None),  # HGX H100
        ([gpu(0), gpu(1), gpu(2), gpu(3, uuid=DOMAIN_B)], (None, 2, None, False), "different ClusterUUIDs"),
        ([gpu(0), gpu(1, clique=3)], (DOMAIN_A, None, True, False), "different CliqueIds"),
        ([gpu(0, status="Insufficient Resources", clique=0, uuid=ZERO), gpu(1, status="Insufficient Resources", clique=0, uuid=ZERO)],
         (ZERO, 0, False, False), "status is 'Insufficient Resources'"),
        ([gpu(0), gpu(1, health="Unhealthy")], (DOMAIN_A, 2, True, False), "health is 'Unhealthy'"),
        ([gpu(0, state="In Progress", status=None)], (DOMAIN_A, 2, True, False), "state is 'In Progress'"),
        ([{"index": 0, "fabric": None}], (None, None, None, None), None),  # no Fabric block: PCIe, old driver
        ([], (None, None, None, None), None),
    ],
)
def test_nvlink_domain(gpus, expected, problem):
    result = nvlink_domain(gpus)
    assert (result["cluster_uuid"], result["clique_id"], result["multi_node"], result["fabric_ok"]) == expected
    if problem is None:
        assert result["problems"] == []
    else:
        assert any(problem in line for line in result["problems"]), result["problems"]


@pytest.mark.parametrize(
    ("imex", "driver", "expected"),
    [
        ("580.95.05", "580.95.05", True),
        ("570.172", "570.172.08", True),  # nvidia-imex-ctl -N prints two parts
        ("570.17", "570.172.08", False),
        ("580.82.07", "580.95.05", False),
        (None, "580.95.05", None),
        ("580.95.05", None, None),
    ],
)
def test_imex_matches_driver(imex, driver, expected):
    assert imex_matches_driver(imex, driver) is expected


def domain(state="UP", versions=("580.95",) * 2, marks=(), states=("READY",) * 2, addresses=("10.0.0.1", "10.0.0.2")):
    nodes = [{"id": i, "address": a, "state": s, "version": v} for i, (a, s, v) in enumerate(zip(addresses, states, versions))]
    return {
        "nodes": nodes,
        "connectivity": {},
        "domain_state": state,
        "domain_up": state == "UP",
        "version_mismatch": "version_mismatch" in marks,
        "node_map_mismatch": "node_map_mismatch" in marks,
        "versions": sorted(set(versions)),
    }


CONFIG = ["10.0.0.1", "10.0.0.2"]


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"version": "580.95.05", "service_state": "active", "nodes_config": CONFIG, "domain": domain()}, None),
        ({"version": "580.82.07", "service_state": "failed", "nodes_config": CONFIG, "domain": None, "domain_error": "exit status 1: x"},
         "not the loaded driver's version 580.95.05"),
        ({"version": "580.95.05", "service_state": "inactive", "nodes_config": CONFIG, "domain": None}, "service is 'inactive'"),
        ({"version": "580.95.05", "service_state": "active", "nodes_config": None, "domain": domain()}, "no /etc/nvidia-imex/nodes_config.cfg"),
        ({"version": "580.95.05", "service_state": "active", "nodes_config": CONFIG, "domain": domain(state="DOWN", marks=("version_mismatch",))},
         "domain state is 'DOWN'"),
        ({"version": "580.95.05", "service_state": "active", "nodes_config": CONFIG, "domain": domain(marks=("version_mismatch",))}, "(!V!)"),
        ({"version": "580.95.05", "service_state": "active", "nodes_config": CONFIG, "domain": domain(marks=("node_map_mismatch",))}, "(!M!)"),
        ({"version": "580.95.05", "service_state": "active", "nodes_config": CONFIG, "domain": domain(states=("READY", "UNAVAILABLE"))},
         "not READY: #1 10.0.0.2 UNAVAILABLE"),
        ({"version": "580.95.05", "service_state": "active", "nodes_config": ["10.0.0.1"], "domain": domain()}, "differs from /etc/nvidia-imex"),
        ({"version": "580.95.05", "service_state": "active", "nodes_config": CONFIG, "domain": None, "domain_error": "exit status 1: down"},
         "gave no domain state: exit status 1: down"),
    ],
)
def test_imex_facts_problems(kwargs, problem):
    result = imex_facts(driver_version="580.95.05", **kwargs)
    assert result["installed"] is True
    if problem is None:
        assert result["problems"] == [] and result["matches_driver"] is True and result["running"] is True
    else:
        assert any(problem in line for line in result["problems"]), result["problems"]


def test_node_without_imex_is_absent_not_an_error():
    result = imex_facts(version=None, service_state=None, nodes_config=None, domain=None, driver_version="550.90.07")
    assert result["installed"] is False and result["problems"] == [] and result["domain"] is None
