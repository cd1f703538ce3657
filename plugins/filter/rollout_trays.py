# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""GB200/GB300 NVL72 compute trays in a rollout: the nvl72_units_problem and nvl72_unit_by filters (gpufleet.lifecycle).

Documentation in the adjacent nvl72_units_problem.yml and nvl72_unit_by.yml; the decisions are units.trays_without_units and
units.default_unit_by
(plugins/module_utils/_rollout/units.py).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_units = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.units")


def _get(mapping, key):
    try:
        return mapping[key] if key in mapping else None
    except (KeyError, TypeError):
        return None


def _nvlink(registered):
    """The ``nvlink`` facts of a registered gpu_facts result ({} when the read was skipped or failed)."""
    facts = _get(_get(registered or {}, "ansible_facts") or {}, "gpufleet") or {}
    return _get(facts, "nvlink") or {}


def _nodes(hosts, hostvars, unit_by, facts):
    nodes = {}
    for host in hosts or []:
        variables = _get(hostvars, host) or {}
        nvlink = _nvlink(_get(variables, facts))
        nodes[host] = {"multi_node": nvlink.get("multi_node"), "cluster_uuid": nvlink.get("cluster_uuid"),
                       "nvlink_domain": _get(variables, "nvlink_domain"), "unit": _get(variables, unit_by) if unit_by else None}
    return nodes


def nvl72_units_problem(hosts, hostvars, unit_by=None, facts="__rollout_facts_before"):
    """Why the units of change do not hold each NVLink domain whole ('' when they do, or no target is a tray)."""
    try:
        unit_by = _units.unit_variable(unit_by)
        return _units.trays_without_units(_nodes(hosts, hostvars, unit_by, facts), unit_by)
    except (_units.UnitError, TypeError, ValueError, AttributeError) as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.nvl72_units_problem: {exc}") from exc


def nvl72_unit_by(hosts, hostvars, unit_by=None, facts="__rollout_facts_before"):
    """The rollout's unit_by: the one given, else nvlink_domain on NVL72 trays whose inventory names each domain ({unit_by, note})."""
    try:
        return _units.default_unit_by(_nodes(hosts, hostvars, "", facts), unit_by)
    except (_units.UnitError, TypeError, ValueError, AttributeError) as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.nvl72_unit_by: {exc}") from exc


class FilterModule:
    """gpufleet.lifecycle NVL72 tray filters."""

    def filters(self):
        return {"nvl72_units_problem": nvl72_units_problem, "nvl72_unit_by": nvl72_unit_by}
