"""Table tests of the BOM's stack section (issue 24): validation naming the key, and each comparison with a node's stack facts."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._bom import BomError, drift_summary, node_drift, validate_bom
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._bom_stack import StackBomError, normalize, stack_drift

KEY = "76:a0:92:06:58:00:bf:37:69:01:c3:72:cd:55:a9:0e:1f:de:d2:e0"
BOM = {
    "ofed": {"flavor": "doca-ofed", "version": "24.10-1.1.4.0.200"},
    "rdma_ports": [{"count": 2, "link_layer": "InfiniBand", "rate": 400, "ca_type": "MT4129"}],
    "peermem": True,
    "dcgm": "4.7.0",
    "secure_boot": {"mode": "enforced", "key_sha1": KEY},
    "module_parameters": {"nvidia": {"NVreg_EnableGpuFirmware": 1}},
}


def port(device, state="Active", physical="LinkUp", rate=400, link_layer="InfiniBand", ca_type="MT4129"):
    active = state == "Active"
    return {
        "device": device,
        "port": 1,
        "state": state,
        "physical_state": physical,
        "rate_gbps": rate if active else None,
        "link_layer": link_layer,
        "active": active and physical == "LinkUp",
        "ca_type": ca_type,
    }


def module(loaded=True, installed=True, version="580.95.05", signed=True):
    return {"loaded": loaded, "installed": installed, "version": version, "signer": "DKMS module signing key" if signed else None, "signed": signed}


def good_stack():
    return {
        "kernel": "6.8.0-90-generic",
        "ofed": {"installed": True, "flavor": "doca-ofed", "version": "24.10-1.1.4.0.200", "release": "OFED-internal-24.10-1.1.4.0.200"},
        "rdma": {
            "source": "ibstat",
            "ports": [port("mlx5_0"), port("mlx5_1"), port("mlx5_bond_0", rate=200, link_layer="Ethernet", ca_type="MT41692")],
            "errors": [],
        },
        "modules": {"nvidia": module(), "nvidia_peermem": module(), "mlx5_core": module(version="24.10-1.1.4")},
        "secure_boot": {
            "state": "enabled",
            "enforcing": True,
            "setup_mode": False,
            "enrolled_keys": [{"sha1": "76a0920658", "cn": "DKMS"}],
            "enrolled_error": None,
        },
        "dkms": {"installed": True, "entries": [], "errors": [], "nvidia": None},
        "dcgm": {"installed": True, "version": "4.7.0", "hostengine_version": "4.7.0"},
        "module_parameters": {"nvidia": {"NVreg_EnableGpuFirmware": "1"}},
        "problems": [],
    }


def drift(stack, bom=None, driver="580.95.05"):
    items = stack_drift({"stack": stack} if stack is not None else {}, BOM if bom is None else bom, driver_version=driver)
    return {item["component"]: item for item in items}


def test_a_node_that_matches_is_ok():
    items = drift(good_stack())
    assert {name: item["status"] for name, item in items.items()} == {
        "ofed": "ok",
        "rdma_ports[InfiniBand/MT4129/400G]": "ok",
        "nvidia_peermem": "ok",
        "dcgm": "ok",
        "secure_boot": "ok",
        "module_signing_key": "ok",
        "module_parameter[nvidia.NVreg_EnableGpuFirmware]": "ok",
    }


def _set(stack, path, value):
    node = stack
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return stack


PLANTED = [
    # (what is planted, the component that must name it, its status, a part of its detail)
    (("ofed", "version"), "23.10-1.1.9.0", "ofed", "drift", "runs OFED-internal"),
    (("ofed",), {"installed": False, "flavor": "inbox", "version": None, "release": None}, "ofed", "missing", "inbox RDMA stack"),
    (("rdma", "ports", 1), port("mlx5_1", state="Down", physical="Polling"), "rdma_port[mlx5_1/1]", "drift", "not Active: its rate is unknown"),
    (("rdma", "ports", 1), port("mlx5_1", rate=200), "rdma_port[mlx5_1/1]", "drift", "runs at 200 Gb/s, not 400"),
    (("rdma", "ports", 1), port("mlx5_1", state="Active", physical="LinkUp", rate=None), "rdma_port[mlx5_1/1]", "unknown", "prints no rate"),
    (("rdma", "ports"), [port("mlx5_0")], "rdma_ports[InfiniBand/MT4129/400G]", "drift", "lists 1 InfiniBand port"),
    (("rdma", "ports"), None, "rdma_ports[InfiniBand/MT4129/400G]", "unknown", "neither ibstat nor ibv_devinfo"),
    (("modules", "nvidia_peermem", "loaded"), False, "nvidia_peermem", "drift", "Unknown symbol ib_register_peer_memory_client"),
    (("modules", "nvidia_peermem"), module(loaded=False, installed=False), "nvidia_peermem", "missing", "not installed for the running kernel"),
    (("modules", "nvidia_peermem", "version"), "570.124.06", "nvidia_peermem_version", "drift", "not the loaded driver's"),
    (("dcgm", "version"), "3.3.9", "dcgm", "drift", "install datacenter-gpu-manager 4.7.0"),
    (("dcgm", "hostengine_version"), "4.6.0", "dcgm_hostengine", "drift", "nv-hostengine"),
    (("secure_boot", "enforcing"), False, "secure_boot", "drift", "not enforced"),
    (("secure_boot", "enrolled_keys"), [{"sha1": "2bb010e24d", "cn": "fedoraca"}], "module_signing_key", "drift", "mokutil --import"),
    (("secure_boot", "enrolled_keys"), None, "module_signing_key", "unknown", "not read"),
    (("secure_boot", "state"), None, "secure_boot", "unknown", "mokutil is not installed"),
    (("modules", "nvidia", "signed"), False, "module_signature[nvidia]", "drift", "Key was rejected by service"),
    (("module_parameters", "nvidia", "NVreg_EnableGpuFirmware"), "0", "module_parameter[nvidia.NVreg_EnableGpuFirmware]", "drift", "options nvidia"),
    (("module_parameters",), {}, "module_parameter[nvidia.NVreg_EnableGpuFirmware]", "missing", "not loaded"),
    (("problems",), ["dkms status reports an error: x"], "stack_problem", "drift", "dkms status reports an error"),
]


@pytest.mark.parametrize(("path", "value", "component", "status", "detail"), PLANTED, ids=[f"{p[2]}-{p[3]}-{i}" for i, p in enumerate(PLANTED)])
def test_planted_drift_is_named(path, value, component, status, detail):
    items = drift(_set(good_stack(), path, copy.deepcopy(value)))
    assert items[component]["status"] == status, items[component]
    assert detail in items[component].get("detail", ""), items[component]


def test_a_port_that_is_not_active_never_counts_as_at_rate():
    """Even where a tool prints Rate: 400 on a Down port, the Down port is drift, never ok."""
    stack = good_stack()
    stack["rdma"]["ports"][1] = dict(port("mlx5_1", state="Down", physical="Disabled"), rate_gbps=400)
    assert drift(stack)["rdma_port[mlx5_1/1]"]["status"] == "drift"


def test_without_the_stack_subset_every_section_is_unknown_never_ok():
    items = drift(None)
    assert {item["status"] for item in items.values()} == {"unknown"}
    assert all("gather_subset" in item["detail"] for item in items.values())


@pytest.mark.parametrize(
    ("mode", "state", "enforcing", "expected"),
    [
        ("off", "enabled", True, "drift"),
        ("off", "disabled", False, "ok"),
        ("off", "not_supported", False, "ok"),
        ("any", "enabled", True, "ok"),
        ("enforced", "disabled", False, "drift"),
        ("enforced", "unknown", False, "unknown"),
    ],
)
def test_secure_boot_modes(mode, state, enforcing, expected):
    stack = good_stack()
    stack["secure_boot"].update(state=state, enforcing=enforcing)
    assert drift(stack, {"secure_boot": mode})["secure_boot"]["status"] == expected


def test_inbox_bom_on_an_inbox_node_is_ok():
    stack = _set(good_stack(), ("ofed",), {"installed": False, "flavor": "inbox", "version": None, "release": None})
    assert drift(stack, {"ofed": {"flavor": "inbox"}})["ofed"]["status"] == "ok"


@pytest.mark.parametrize(
    ("stack", "message"),
    [
        ([], "BOM stack must be a mapping"),
        ({"ofed": {"flavor": "mofed", "version": "24.10-1.1.4.0"}}, "stack.ofed.flavor must be one of doca-ofed, mlnx-ofed, inbox"),
        ({"ofed": {"flavor": "mlnx-ofed", "version": "24.10"}}, "stack.ofed.version must be the exact release"),
        ({"ofed": {"flavor": "inbox", "version": "24.10-1.1.4.0"}}, "must not be set for the inbox stack"),
        ({"rdma_ports": {"count": 8}}, "stack.rdma_ports must be a list"),
        ({"rdma_ports": [{"count": 8, "link_layer": "IB", "rate": 400}]}, r"stack.rdma_ports\[0\].link_layer must be InfiniBand or Ethernet"),
        ({"rdma_ports": [{"count": 8, "link_layer": "InfiniBand", "rate": "NDR"}]}, r"stack.rdma_ports\[0\].rate must be the port rate in Gb/s"),
        ({"rdma_ports": [{"count": "8", "link_layer": "InfiniBand", "rate": 400}]}, r"stack.rdma_ports\[0\].count must be a whole number"),
        ({"rdma_ports": [{"count": 8, "link_layer": "InfiniBand", "rate": 400, "speed": 1}]}, r"stack.rdma_ports\[0\] has unknown key\(s\) speed"),
        ({"peermem": "yes"}, "stack.peermem must be true"),
        ({"dcgm": "4.7"}, "stack.dcgm.version must be a DCGM version"),
        ({"secure_boot": "on"}, "stack.secure_boot.mode must be one of enforced, off, any"),
        ({"secure_boot": {"mode": "enforced", "key_sha1": "-----BEGIN PRIVATE KEY-----abc"}}, "key_sha1 must be the SHA1 fingerprint .*got 30$"),
        ({"secure_boot": {"mode": "off", "key_sha1": KEY}}, "key_sha1 is set but mode is off"),
        ({"module_parameters": {"nvidia": {"NVreg_X": True}}}, "stack.module_parameters.nvidia.NVreg_X must be a string or a whole number"),
        ({"module_parameters": {"Bad-Name": {"x": 1}}}, "is not a kernel module name"),
        ({"kernel": "6.8"}, "BOM stack has unknown key"),
    ],
)
def test_bad_bom_values_name_the_key(stack, message):
    with pytest.raises(StackBomError, match=message):
        normalize(stack)
    # validate_bom (and so node_drift and the audit report) refuses it as a BomError with the same words.
    with pytest.raises(BomError, match=message):
        validate_bom({"stack": stack})


def test_the_private_key_never_reaches_the_message():
    secret = "-----BEGIN PRIVATE KEY-----MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"  # noqa: S105 - a fake key, the input under test
    with pytest.raises(StackBomError) as caught:
        normalize({"secure_boot": {"mode": "enforced", "key_sha1": secret}})
    assert "PRIVATE" not in str(caught.value) and "MIIE" not in str(caught.value)


def test_node_drift_carries_the_stack_items_and_the_driver_version():
    stack = _set(good_stack(), ("modules", "nvidia_peermem", "version"), "570.124.06")
    facts = {"driver": {"installed": True, "loaded": True, "version": "580.95.05"}, "stack": stack}
    items = node_drift(facts, {"driver": "580.95.05", "stack": BOM})
    by_name = {item["component"]: item for item in items}
    assert by_name["nvidia_peermem_version"]["wanted"] == "580.95.05"
    assert drift_summary(items)["status"] == "drift"
    # A BOM without a stack section compares no stack: the report of an older BOM is unchanged.
    assert [item["component"] for item in node_drift(facts, {"driver": "580.95.05"})] == ["driver"]


@pytest.mark.parametrize("stack", ["x", ["a"], {"ofed": "x", "rdma": {"ports": ["x", None]}, "secure_boot": [], "problems": "x"}])
def test_malformed_stack_facts_are_unknown_not_a_crash(stack):
    items = stack_drift({"stack": stack}, BOM, driver_version="580.95.05")
    assert {item["status"] for item in items} <= {"unknown", "drift", "missing"}
    assert any(item["component"] == "ofed" and item["status"] == "unknown" for item in items)
