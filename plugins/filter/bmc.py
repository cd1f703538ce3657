# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The gpufleet.lifecycle.bmc_endpoints filter: the BMCs of some hosts, as gpufleet.lifecycle.bmc_inventory takes them.

Documentation in the adjacent bmc_endpoints.yml.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def _text(value):
    return "" if value is None else str(value)


def bmc_endpoints(hosts):
    """``[{name, address, port, user, password}]`` for each host whose bmc_address, bmc_user and bmc_password are all set."""
    if isinstance(hosts, (str, bytes)) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError(f"gpufleet.lifecycle.bmc_endpoints: the input is a {type(hosts).__name__}: give a list of hostvars (map('extract', hostvars))")
    endpoints = []
    for index, host in enumerate(hosts):
        if not isinstance(host, Mapping):
            raise AnsibleFilterError(f"gpufleet.lifecycle.bmc_endpoints: item {index} is a {type(host).__name__}, not a host's variables")
        name = _text(host.get("inventory_hostname"))
        if not name:
            raise AnsibleFilterError(f"gpufleet.lifecycle.bmc_endpoints: item {index} has no inventory_hostname: give hostvars entries")
        address, user, password = (_text(host.get(key)) for key in ("bmc_address", "bmc_user", "bmc_password"))
        if not (address and user and password):
            continue  # no BMC credentials: the audit reports its out-of-band firmware unknown, for that reason
        port = host.get("bmc_port", 443)
        try:
            port = int(_text(port).strip() or 443)
        except ValueError:
            raise AnsibleFilterError(f"gpufleet.lifecycle.bmc_endpoints: {name}: bmc_port is {port!r}, not a port number") from None
        endpoints.append({"name": name, "address": address, "port": port, "user": user, "password": password})
    return endpoints


class FilterModule:
    """gpufleet.lifecycle BMC filters."""

    def filters(self):
        return {"bmc_endpoints": bmc_endpoints}
