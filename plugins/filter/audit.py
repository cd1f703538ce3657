# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The audit's filters: gpufleet.lifecycle.bmc_endpoints (the BMCs of some hosts, as gpufleet.lifecycle.bmc_inventory takes
them) and gpufleet.lifecycle.audit_records (each host's audit record, as gpufleet.lifecycle.fleet_report takes it).

Documentation in the adjacent bmc_endpoints.yml and audit_records.yml.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_fleet = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.fleet")


def _text(value):
    return "" if value is None else str(value)


def _credential_defaults(defaults, name):
    """``{bmc_user, bmc_password, bmc_port}`` from ``defaults`` (``{user, password, port}``; empty values count as unset)."""
    if defaults is None:
        return {}
    if not isinstance(defaults, Mapping):
        raise AnsibleFilterError(f"gpufleet.lifecycle.{name}: defaults is a {type(defaults).__name__}: give a mapping of user, password, port")
    unknown = sorted(set(map(str, defaults)) - {"user", "password", "port"})
    if unknown:
        raise AnsibleFilterError(f"gpufleet.lifecycle.{name}: defaults has unknown key(s) {', '.join(unknown)}: give user, password and port")
    return {f"bmc_{key}": value for key, value in defaults.items() if value is not None and _text(value) != ""}


def bmc_endpoints(hosts, defaults=None):
    """``[{name, address, port, user, password}]`` for each host whose bmc_address, bmc_user and bmc_password are all set.

    ``defaults`` (``{user, password, port}``, the controller's GPUFLEET_BMC_* environment under AWX) stand in for the
    bmc_user, bmc_password and bmc_port a host does not define; a host's own value always wins.
    """
    fallback = _credential_defaults(defaults, "bmc_endpoints")
    endpoints = []
    for name, given in _hosts(hosts, "bmc_endpoints"):
        # Only these keys are read (a hostvars mapping templates each value it is asked for).
        host = {key: given.get(key) if given.get(key) is not None else fallback.get(key)
                for key in ("bmc_address", "bmc_user", "bmc_password", "bmc_port")}
        address, user, password = (_text(host.get(key)) for key in ("bmc_address", "bmc_user", "bmc_password"))
        if not (address and user and password):
            continue  # no BMC credentials: the audit reports its out-of-band firmware unknown, for that reason
        port = 443 if host["bmc_port"] is None else host["bmc_port"]
        try:
            port = int(_text(port).strip() or 443)
            if isinstance(host["bmc_port"], bool) or not 1 <= port <= 65535:
                raise ValueError(port)
        except ValueError:
            # The value is never shown: two swapped variables put the BMC password there.
            raise AnsibleFilterError(
                f"gpufleet.lifecycle.bmc_endpoints: {name}: bmc_port is not a port number (1 to 65535); its value is not shown, "
                "in case it is a secret: check the host's bmc_port") from None
        endpoints.append({"name": name, "address": address, "port": port, "user": user, "password": password})
    return endpoints


def _hosts(hosts, name):
    if isinstance(hosts, (str, bytes)) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError(f"gpufleet.lifecycle.{name}: the input is a {type(hosts).__name__}: give a list of hostvars (map('extract', hostvars))")
    for index, host in enumerate(hosts):
        if not isinstance(host, Mapping):
            raise AnsibleFilterError(f"gpufleet.lifecycle.{name}: item {index} is a {type(host).__name__}, not a host's variables")
        host_name = _text(host.get("inventory_hostname"))
        if not host_name:
            raise AnsibleFilterError(f"gpufleet.lifecycle.{name}: item {index} has no inventory_hostname: give hostvars entries")
        yield host_name, host


def audit_records(hosts, registered="gpufleet_audit_gathered"):
    """``[{name, sku, bom, facts} or {name, sku, error}]`` for each host whose gpu_facts result is registered as ``registered``."""
    records = []
    for name, host in _hosts(hosts, "audit_records"):
        result = host.get(registered)
        if not isinstance(result, Mapping):
            continue  # gpu_facts never ran there (unreachable, or not targeted): the report names it unreachable
        sku = _text(host.get("gpufleet_sku")) or "unknown"
        facts = (result.get("ansible_facts") or {}).get("gpufleet") if isinstance(result.get("ansible_facts"), Mapping) else None
        if result.get("unreachable"):
            continue
        if isinstance(facts, Mapping) and not result.get("failed_when_result") and not result.get("failed"):
            # The facts the report reads: the task that writes it carries every node's record (a tenth of its facts).
            record = {"name": name, "sku": sku, "bom": host.get("gpufleet_bom") or {}, "facts": _fleet.report_facts(facts)}
            if host.get("nvlink_domain") is not None:  # the inventory's NVLink domain, cross-checked with the ClusterUUID
                record["nvlink_domain"] = _text(host.get("nvlink_domain"))
            records.append(record)
        else:
            records.append({"name": name, "sku": sku, "error": _text(result.get("msg")) or "gpu_facts failed"})
    return records


class FilterModule:
    """gpufleet.lifecycle audit filters."""

    def filters(self):
        return {"bmc_endpoints": bmc_endpoints, "audit_records": audit_records}
