# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rollout's filters: wave_plan, max_unavailable_count, unknown_variables and stop_file_problem (gpufleet.lifecycle).

Documentation in the adjacent wave_plan.yml, max_unavailable_count.yml, unknown_variables.yml and stop_file_problem.yml;
the logic is in plugins/module_utils/_rollout/plan.py, budget.py, variables.py and stopfile.py.
"""

from __future__ import annotations

import functools

import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_stopfile = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.stopfile")
_variables = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.variables")
_budget = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.budget")
_plan = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.plan")


def wave_plan(hosts, hostvars=None, waves=None, canary=None, canary_count=1, spread_by=None, max_per_domain=None,
              max_unavailable=None, pool_size=None, unavailable=0, gates=False, unit_by=None, unit_skipped=None):
    """The rollout's canary and waves: bounded by the budget, at most max_per_domain hosts of one domain per wave (or gates)."""
    try:
        return _plan.plan_waves(hosts, hostvars, waves=waves, canary=canary, canary_count=canary_count, spread_by=spread_by,
                                max_per_domain=max_per_domain, max_unavailable=max_unavailable, pool_size=pool_size,
                                unavailable=unavailable, gates=gates, unit_by=unit_by, unit_skipped=unit_skipped)
    except _budget.BudgetError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.wave_plan: {exc}") from exc


def max_unavailable_count(spec, pool_size):
    """How many nodes of a pool may be unavailable at once: 4 -> 4, "10%" of 37 -> 3 (floor, at least 1)."""
    try:
        return _budget.max_unavailable_count(spec, pool_size)
    except _budget.BudgetError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.max_unavailable_count: {exc}") from exc


def _load_yaml(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except (OSError, yaml.YAMLError, RecursionError, UnicodeError) as exc:
        raise _variables.UnknownVariablesError(f"cannot read {path} to know this collection's variables: {exc}") from exc


@functools.lru_cache(maxsize=1)
def _known():
    return _variables.known_variables(_variables.collection_root(), _load_yaml)


def unknown_variables(hostvars, hosts):
    """One line per host variable with the collection's prefixes that the collection does not know, naming the closest."""
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("gpufleet.lifecycle.unknown_variables: hosts must be a list of inventory host names (ansible_play_hosts_all)")
    try:
        known = _known()
        names = {host: list(hostvars[host]) for host in hosts}
    except _variables.UnknownVariablesError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.unknown_variables: {exc}") from exc
    except KeyError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.unknown_variables: host {exc} is not in hostvars") from exc
    return [_variables.describe(entry) for entry in _variables.unknown_variables(names, known)]


def stop_file_problem(path):
    """'' when the stop file's folder is private to the controller user (or root); else what is wrong and what to do."""
    return _stopfile.problem(path) or ""


class FilterModule:
    """gpufleet.lifecycle rollout filters."""

    def filters(self):
        return {"wave_plan": wave_plan, "max_unavailable_count": max_unavailable_count, "unknown_variables": unknown_variables,
                "stop_file_problem": stop_file_problem}
