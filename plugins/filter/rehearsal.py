# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The gpufleet.lifecycle.audit_to_gpusim_spec and audit_to_gpusim_notes filters: a simulated copy of an audited fleet.

Documentation in the adjacent audit_to_gpusim_spec.yml and audit_to_gpusim_notes.yml; the logic is in
plugins/module_utils/_rehearsal/convert.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_convert_mod = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._rehearsal.convert")


def _plain(value):
    """A plain copy of an inventory value (Ansible's lazy and tagged types become dict, list, str...)."""
    if isinstance(value, Mapping):
        return {k if isinstance(k, int) and not isinstance(k, bool) else str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def _host_vars(report, hostvars, copy_vars, filter_name):
    """``{node: {var: value}}`` of the report's nodes that the inventory holds, for the variables named in copy_vars."""
    if hostvars is None:
        return None
    if isinstance(copy_vars, str) or not isinstance(copy_vars, (list, tuple)):
        raise AnsibleFilterError(f"gpufleet.lifecycle.{filter_name}: copy_vars must be a list of variable names, got {copy_vars!r}")
    nodes = report.get("nodes") if isinstance(report, Mapping) else None
    result = {}
    for node in nodes if isinstance(nodes, list) else []:
        name = node.get("name") if isinstance(node, Mapping) else None
        if not isinstance(name, str) or name not in hostvars:
            continue
        own = hostvars[name]
        values = {var: _plain(own[var]) for var in copy_vars if var in own}
        if values:
            result[name] = values
    return result


OPTIONS = ("name", "loopback", "slurm_port", "partition", "bmc_loopback", "exclude", "skip_unreadable", "timing")


def _convert(report, filter_name, hostvars=None, copy_vars=(), **kwargs):
    unknown = sorted(set(kwargs) - set(OPTIONS))
    if unknown:
        raise AnsibleFilterError(f"gpufleet.lifecycle.{filter_name}: unknown option(s) {', '.join(unknown)}; "
                                 f"options: hostvars, copy_vars, {', '.join(OPTIONS)}")
    try:
        host_vars = _host_vars(report, hostvars, list(copy_vars) if isinstance(copy_vars, (list, tuple)) else copy_vars, filter_name)
        return _convert_mod.audit_to_spec(_plain(report), host_vars=host_vars, **{k: _plain(v) for k, v in kwargs.items()})
    except _convert_mod.RehearsalError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.{filter_name}: {exc}") from exc


def audit_to_gpusim_spec(report, **kwargs):
    """The gpusim fleet spec that reproduces the audited fleet."""
    return _convert(report, "audit_to_gpusim_spec", **kwargs)[0]


def audit_to_gpusim_notes(report, **kwargs):
    """What the copy made by audit_to_gpusim_spec (same options) does not reproduce."""
    return _convert(report, "audit_to_gpusim_notes", **kwargs)[1]


class FilterModule:
    """gpufleet.lifecycle rehearsal filters."""

    def filters(self):
        return {"audit_to_gpusim_spec": audit_to_gpusim_spec, "audit_to_gpusim_notes": audit_to_gpusim_notes}
