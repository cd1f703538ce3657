# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Units of change (gpufleet_unit_by): the unit_verdict filter (gpufleet.lifecycle).

Documentation in the adjacent unit_verdict.yml; the logic is in plugins/module_utils/_rollout/units.py (the plan's units
come from gpufleet.lifecycle.wave_plan with unit_by).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_units = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.units")


def unit_verdict(results, unit="the unit", settled=None, domain=None):
    """What each member of a unit does once all ran their flow: resume together, or roll every changed member back."""
    try:
        return _units.unit_verdict(dict(results or {}), str(unit), settled or (), dict(domain or {}))
    except (_units.UnitError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.unit_verdict: {exc}") from exc


class FilterModule:
    """gpufleet.lifecycle units of change filters."""

    def filters(self):
        return {"unit_verdict": unit_verdict}
