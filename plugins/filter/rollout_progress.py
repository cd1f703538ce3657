# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Where a rollout is, for the people who watch it: rollout_progress (gpufleet.lifecycle).

Documentation in the adjacent rollout_progress.yml; the logic is in plugins/module_utils/_rollout/progress.py. The
filter reads each planned node's state from the rollout role's facts (its result and the phases its state file
records, as the last rollout_state task returned them) and calls progress().
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_clock = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.clock")
_progress = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.progress")

# The rollout role's registered rollout_state results that hold the node's section, latest first when equally recent.
_SECTIONS = ("__rollout_finish", "__rollout_phase_result", "__rollout_read")
_NAME = "gpufleet.lifecycle.rollout_progress"


def _fact(variables, name):
    try:
        return variables[name] if name in variables else None
    except Exception:  # a fact whose template fails says nothing of the node's progress: as if absent
        return None


def _section(variables, rollout):
    """The node's latest rollout section (the most recent heartbeat) of this rollout among the registered results."""
    best = None
    for name in _SECTIONS:
        registered = _fact(variables, name)
        section = registered.get("rollout") if isinstance(registered, Mapping) else None
        if not isinstance(section, Mapping) or (rollout and section.get("id") != rollout):
            continue
        beat = section.get("heartbeat_at")
        beat = beat if isinstance(beat, (int, float)) and not isinstance(beat, bool) else 0
        if best is None or beat > best[0]:
            best = (beat, section)
    return best[1] if best else {}


def _set_facts(hostvars):
    """The facts the play set on each host (set_fact and register: VariableManager's non-persistent facts), or None.

    ``hostvars[host]`` builds every variable of the host (VariableManager.get_vars) to answer for five facts: one line
    over N nodes costs N of those, and every node of a rollout shows a line (bench/bench_progress.py: 0.28 s a line at
    1,000 nodes). The rollout's facts that the line reads are all set by the play, so they are read where the play keeps
    them. None where hostvars is not Ansible's (the unit tests' dicts) or keeps them elsewhere: then hostvars is read."""
    cache = getattr(getattr(hostvars, "_variable_manager", None), "_nonpersistent_fact_cache", None)
    return cache if isinstance(cache, Mapping) else None


def _variables(hostvars, facts, host):
    if facts is not None:
        mine = facts.get(host)  # .get: the cache is a defaultdict, a lookup must not add the host
        if isinstance(mine, Mapping) and "rollout_result" in mine:
            return mine
    try:
        return hostvars[host]
    except KeyError:
        raise AnsibleFilterError(f"{_NAME}: host {host} of the plan's order is not in hostvars: pass the plan's order and hostvars") from None


def _node(hostvars, host, rollout, facts=None):
    variables = _variables(hostvars, facts, host)
    result = _fact(variables, "rollout_result") or "not_started"
    return _progress.node_state(result, _section(variables, rollout).get("phases")), _fact(variables, "__rollout_slurm_name")


def rollout_progress(order, hostvars=None, slots=None, failure_budget=0, failed=None, waiting=None, unavailable=None, rollout="", now=None):
    """Where the rollout is: counts, failures against the budget, why nodes wait, time left, and ``line`` (docs: rollout_progress.yml)."""
    if hostvars is None or slots is None:
        raise AnsibleFilterError(f"{_NAME}: hostvars and slots are required (order | {_NAME}(hostvars, slots=budget, ...))")
    if isinstance(order, (str, bytes)) or not isinstance(order, (list, tuple)):
        raise AnsibleFilterError(f"{_NAME}: the input must be the plan's order (a list of inventory host names), not {type(order).__name__}")
    nodes, names, facts = {}, {}, _set_facts(hostvars)
    for host in order:
        nodes[host], slurm_name = _node(hostvars, host, rollout, facts)
        if isinstance(slurm_name, str) and slurm_name:
            names[host] = slurm_name
    try:
        return _progress.progress(order, nodes, slots, failure_budget, failed=failed or [], waiting=waiting,
                                  now=_clock.get().now() if now is None else now, rollout_id=rollout or "",
                                  unavailable=unavailable, names=names)
    except _progress.ProgressError as exc:
        raise AnsibleFilterError(f"{_NAME}: {exc}") from exc


def rollout_facts(hosts, hostvars=None, name=None):
    """Each host's fact ``name`` as the play set it (None where it has none): ``hosts | map('extract', hostvars, name)``
    without building every variable of every host (docs: rollout_facts.yml)."""
    where = "gpufleet.lifecycle.rollout_facts"
    if hostvars is None or not isinstance(name, str) or not name:
        raise AnsibleFilterError(f"{where}: give hostvars and the fact's name (hosts | {where}(hostvars, 'rollout_result'))")
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError(f"{where}: the input must be a list of inventory host names, not {type(hosts).__name__}")
    facts = _set_facts(hostvars)
    out = []
    for host in hosts:
        if not isinstance(host, str):
            raise AnsibleFilterError(f"{where}: the input must hold inventory host names (strings), not {type(host).__name__}")
        mine = facts.get(host) if facts is not None else None
        if isinstance(mine, Mapping) and name in mine:
            out.append(mine[name])
            continue
        try:
            variables = hostvars[host]
        except KeyError:
            raise AnsibleFilterError(f"{where}: host {host} is not in hostvars") from None
        out.append(_fact(variables, name))
    return out


class FilterModule:
    """gpufleet.lifecycle rollout progress filters."""

    def filters(self):
        return {"rollout_progress": rollout_progress, "rollout_facts": rollout_facts}
