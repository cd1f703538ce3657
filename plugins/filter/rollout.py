# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rollout's filters: gpufleet.lifecycle.wave_plan and gpufleet.lifecycle.max_unavailable_count.

Documentation in the adjacent wave_plan.yml and max_unavailable_count.yml; the logic is in
plugins/module_utils/_rollout/plan.py and budget.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.budget import BudgetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.budget import max_unavailable_count as _max_unavailable_count
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.plan import plan_waves


def wave_plan(hosts, hostvars=None, waves=None, canary=None, canary_count=1, spread_by=None, max_per_domain=None,
              max_unavailable=None, pool_size=None, unavailable=0):
    """The rollout's canary and waves: bounded by the budget, at most max_per_domain hosts of one domain per wave."""
    try:
        return plan_waves(hosts, hostvars, waves=waves, canary=canary, canary_count=canary_count, spread_by=spread_by,
                          max_per_domain=max_per_domain, max_unavailable=max_unavailable, pool_size=pool_size, unavailable=unavailable)
    except BudgetError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.wave_plan: {exc}") from exc


def max_unavailable_count(spec, pool_size):
    """How many nodes of a pool may be unavailable at once: 4 -> 4, "10%" of 37 -> 3 (floor, at least 1)."""
    try:
        return _max_unavailable_count(spec, pool_size)
    except BudgetError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.max_unavailable_count: {exc}") from exc


class FilterModule:
    """gpufleet.lifecycle rollout filters."""

    def filters(self):
        return {"wave_plan": wave_plan, "max_unavailable_count": max_unavailable_count}
