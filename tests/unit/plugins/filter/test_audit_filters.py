"""The audit filters: bmc_endpoints (the hosts' BMCs as bmc_inventory takes them, only where all three credentials are set)
and audit_records (the report records from this run's registered gpu_facts results)."""

# ruff: noqa: S106 - the passwords here are test values

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter.audit import audit_records, bmc_endpoints


def host(name, **kw):
    return dict({"inventory_hostname": name}, **kw)


def test_hosts_with_all_three_credentials_are_kept_in_order():
    hosts = [
        host("gpu-02", bmc_address="10.0.0.2", bmc_user="admin", bmc_password="pw2", bmc_port="8443"),
        host("gpu-01", bmc_address="10.0.0.1", bmc_user="admin", bmc_password="pw1"),
        host("gpu-03", bmc_address="10.0.0.3", bmc_user="admin", bmc_password=""),
        host("gpu-04", bmc_address="10.0.0.4", bmc_password="pw4"),
        host("gpu-05"),
    ]
    assert bmc_endpoints(hosts) == [
        {"name": "gpu-02", "address": "10.0.0.2", "port": 8443, "user": "admin", "password": "pw2"},
        {"name": "gpu-01", "address": "10.0.0.1", "port": 443, "user": "admin", "password": "pw1"},
    ]


@pytest.mark.parametrize(
    "hosts, message",
    [
        ("gpu-01", "the input is a str"),
        (["gpu-01"], "item 0 is a str, not a host's variables"),
        ([{"bmc_address": "10.0.0.1"}], "item 0 has no inventory_hostname"),
        ([host("gpu-01", bmc_address="a", bmc_user="u", bmc_password="p", bmc_port="https")], "gpu-01: bmc_port is not a port number"),
        ([host("gpu-01", bmc_address="a", bmc_user="u", bmc_password="p", bmc_port=70000)], "gpu-01: bmc_port is not a port number"),
    ],
)
def test_bad_input_is_refused_with_the_item(hosts, message):
    with pytest.raises(AnsibleFilterError, match=None) as caught:
        bmc_endpoints(hosts)
    assert message in str(caught.value)


FACTS = {"driver": {"version": "570.124.06"}, "gpu_count": 8}


def test_audit_records_come_from_this_runs_registered_result_only():
    hosts = [
        host("gpu-01", gpufleet_sku="hgx", gpufleet_bom={"driver": {"version": "570.124.06"}},
             gpufleet_audit_gathered={"changed": False, "ansible_facts": {"gpufleet": FACTS}, "failed_when_result": False}),
        host("gpu-02", gpufleet_audit_gathered={"changed": False, "failed_when_result": False,
                                                "msg": "nvidia-smi -q -x printed XML that ends early: line 3"}),
        # a fact cache still holds gpu-03's facts, but nothing of this run was registered: it is not reported as read
        host("gpu-03", gpufleet_sku="hgx", ansible_facts={"gpufleet": FACTS}),
        host("gpu-04", gpufleet_sku="hgx", gpufleet_audit_gathered={"unreachable": True, "msg": "ssh: connect timed out"}),
    ]
    assert audit_records(hosts) == [
        {"name": "gpu-01", "sku": "hgx", "bom": {"driver": {"version": "570.124.06"}}, "facts": FACTS},
        {"name": "gpu-02", "sku": "unknown", "error": "nvidia-smi -q -x printed XML that ends early: line 3"},
    ]


def test_a_result_without_facts_or_message_is_an_error_not_a_read_node():
    hosts = [host("gpu-01", gpufleet_audit_gathered={"failed": True}), host("gpu-02", mine={"ansible_facts": {"gpufleet": FACTS}})]
    assert audit_records(hosts) == [{"name": "gpu-01", "sku": "unknown", "error": "gpu_facts failed"}]
    assert audit_records(hosts, registered="mine") == [{"name": "gpu-02", "sku": "unknown", "bom": {}, "facts": FACTS}]


def test_audit_records_refuse_what_is_not_hostvars():
    with pytest.raises(AnsibleFilterError) as caught:
        audit_records([{"gpufleet_audit_gathered": {}}])
    assert "item 0 has no inventory_hostname" in str(caught.value)


def test_a_bad_bmc_port_never_shows_its_value():
    """bmc_port and bmc_password swapped: the error names the host and the variable, never the value (a secret)."""
    secret = "S3cr3t-pa55!"  # noqa: S105 - a test value, checked to appear nowhere
    with pytest.raises(AnsibleFilterError) as refused:
        bmc_endpoints([host("gpu-01", bmc_address="a", bmc_user="u", bmc_password="443", bmc_port=secret)])
    assert "gpu-01: bmc_port" in str(refused.value) and secret not in str(refused.value)


ENV = {"user": "awx-bmc", "password": "from-env", "port": "8443"}  # the GPUFLEET_BMC_* environment an AWX credential injects


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, {"port": 8443, "user": "awx-bmc", "password": "from-env"}),  # nothing per host: the environment's
        ({"bmc_user": "own", "bmc_password": "own-pw", "bmc_port": 443}, {"port": 443, "user": "own", "password": "own-pw"}),  # host wins
        ({"bmc_password": "own-pw"}, {"port": 8443, "user": "awx-bmc", "password": "own-pw"}),  # key by key
        ({"bmc_password": ""}, None),  # a host that sets an empty password has none: the environment does not fill it
    ],
)
def test_defaults_stand_in_for_what_a_host_does_not_define(given, expected):
    found = bmc_endpoints([host("gpu-01", bmc_address="10.0.0.1", **given)], defaults=ENV)
    assert found == ([] if expected is None else [dict({"name": "gpu-01", "address": "10.0.0.1"}, **expected)])


def test_empty_defaults_are_no_credentials_and_bad_defaults_are_refused():
    assert bmc_endpoints([host("gpu-01", bmc_address="10.0.0.1")], defaults={"user": "", "password": "", "port": ""}) == []
    with pytest.raises(AnsibleFilterError, match="defaults has unknown key"):
        bmc_endpoints([host("gpu-01")], defaults={"username": "x"})
    with pytest.raises(AnsibleFilterError, match="defaults is a str"):
        bmc_endpoints([host("gpu-01")], defaults="x")
