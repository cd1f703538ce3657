# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rollout's per-node records: rollout_record, rollout_records and rollout_lost_states (gpufleet.lifecycle).

Documentation in the adjacent rollout_record.yml, rollout_records.yml and rollout_lost_states.yml; the logic is in
plugins/module_utils/_rollout/record.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_record = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.record")

# The rollout role's facts of a target that its record is built from when the target gave no answer in the last play.
_LOST_FACTS = ("rollout_result", "__rollout_settled", "__rollout_before", "__rollout_rollback", "__rollout_drain", "__rollout_skip_reason",
               "__rollout_phase_result", "__rollout_read", "__rollout_slurm_name")


def rollout_record(run, node=None, rollout=None, section=None, plan=None, prior=None):
    """The node's whole record, from its state file's rollout section and this run's facts (docs: rollout_record.yml)."""
    if not isinstance(node, str) or not node:
        raise AnsibleFilterError("gpufleet.lifecycle.rollout_record: node must be the inventory host name (node=inventory_hostname)")
    if not isinstance(rollout, str) or not rollout:
        raise AnsibleFilterError(f"gpufleet.lifecycle.rollout_record: rollout must be the rollout's id (node {node})")
    if run is not None and not isinstance(run, Mapping):
        raise AnsibleFilterError(f"gpufleet.lifecycle.rollout_record: the input must be a mapping of this run's facts of node {node}, "
                                 f"not {type(run).__name__}")
    try:
        return _record.node_record(node, rollout, run, section=section, plan=plan, prior=prior)
    except _record.RecordConflict as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.rollout_record: {exc.msg}") from exc


def _facts(hostvars, host):
    """The role's facts of ``host`` that a lost target's record needs (a missing or unreadable one is absent)."""
    try:
        variables = hostvars[host]
    except KeyError:
        raise AnsibleFilterError(f"gpufleet.lifecycle.rollout_records: host {host} is not in hostvars") from None
    out = {}
    for name in (*_LOST_FACTS, "rollout_record"):
        try:
            out[name] = variables[name] if name in variables else None
        except Exception:  # a fact whose template fails says nothing of the node: left out, the record says what is known
            out[name] = None
    return out


def _section(facts):
    for name in ("__rollout_phase_result", "__rollout_read"):
        registered = facts.get(name)
        if isinstance(registered, Mapping) and isinstance(registered.get("rollout"), Mapping):
            return registered["rollout"]
    return None


def rollout_lost_states(hosts, hostvars=None, slurm=None):
    """``{host: {node, state, reason, ours}}``: what Slurm shows of each lost target out of service (docs: rollout_lost_states.yml)."""
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("gpufleet.lifecycle.rollout_lost_states: the input must be a list of inventory host names")
    entries = _mapping(slurm).get("unavailable") or []
    by_name = {entry.get("node"): dict(entry) for entry in entries if isinstance(entry, Mapping)}
    out = {}
    for host in hosts:
        name = _facts(hostvars, host).get("__rollout_slurm_name") or host if hostvars is not None else host
        if name in by_name:
            out[host] = by_name[name]
    return out


def _mapping(value):
    return value if isinstance(value, Mapping) else {}


def rollout_records(hosts, hostvars=None, rollout=None, plan=None, slurm=None):
    """Every target's record: its own (rollout_record), or one built for a target lost from the run (docs: rollout_records.yml)."""
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("gpufleet.lifecycle.rollout_records: the input must be a list of inventory host names (the targets)")
    if hostvars is None:
        raise AnsibleFilterError("gpufleet.lifecycle.rollout_records: hostvars is required (hosts | rollout_records(hostvars, ...))")
    slurm = _mapping(slurm)
    slurm_read = "unavailable" in slurm
    states = rollout_lost_states(hosts, hostvars, slurm) if slurm_read else {}
    records = []
    for host in hosts:
        facts = _facts(hostvars, host)
        if isinstance(facts.get("rollout_record"), Mapping):
            records.append(dict(facts["rollout_record"]))
            continue
        run = {
            "result": facts.get("rollout_result") or "not_started",
            "settled": facts.get("__rollout_settled"),
            "versions_at_start": facts.get("__rollout_before"),
            "rollback": facts.get("__rollout_rollback"),
            "drain": facts.get("__rollout_drain"),
            "skip_reason": facts.get("__rollout_skip_reason"),
            "lost": _record.lost_reason(slurm_read, states.get(host)),
        }
        records.append(rollout_record(run, node=host, rollout=rollout, section=_section(facts), plan=plan))
    return records


class FilterModule:
    """gpufleet.lifecycle rollout record filters."""

    def filters(self):
        return {"rollout_record": rollout_record, "rollout_records": rollout_records, "rollout_lost_states": rollout_lost_states}
