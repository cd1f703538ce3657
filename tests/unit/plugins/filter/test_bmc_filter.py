"""bmc_endpoints: the hosts' BMCs as bmc_inventory takes them, only where all three credentials are set."""

# ruff: noqa: S106 - the passwords here are test values

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter.bmc import bmc_endpoints


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
        ([host("gpu-01", bmc_address="a", bmc_user="u", bmc_password="p", bmc_port="https")], "gpu-01: bmc_port is 'https', not a port number"),
    ],
)
def test_bad_input_is_refused_with_the_item(hosts, message):
    with pytest.raises(AnsibleFilterError, match=None) as caught:
        bmc_endpoints(hosts)
    assert message in str(caught.value)
