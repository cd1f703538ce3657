# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Units of change (``gpufleet_unit_by``): a domain whose nodes go out, change and come back together (private).

On GB200/GB300 NVL72 a driver cannot be mixed within an NVLink domain, so its trays are one unit. Pure functions, no
Ansible; ``plan.plan_waves`` calls the planning ones, the ``gpufleet.lifecycle.rollout_units`` filters the verdict.

- ``group_units``: the units in the order of their first node (the admission order given), each with its nodes in
  that order; a node without a usable value of the variable is refused, naming it.
- ``refuse_unfit``: a unit larger than the nodes the budget lets out at once, or holding more nodes of one
  ``spread_by`` value than ``max_per_domain``, could never be admitted: refused at plan time, naming the unit, its
  size and the limit.
- ``unit_gates``: whole units into gates sized as ``serial`` does (a gate takes units until it holds its size).
- ``unit_verdict``: once every member ran its flow, what each member does now: all resumed together, or (a member
  failed, was lost, or was skipped while another changed) every changed member rolled back and the restored ones
  resumed together, so that no unit is ever in service with mixed driver versions (invariant 12).
- ``trays_without_units``: a rollout over GB200/GB300 NVL72 compute trays (a non-zero ClusterUUID in their facts) whose
  units do not hold each NVLink domain whole is refused before any node is touched, saying why and what to set.
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict

_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_MISSING = object()

# What a member does after its unit's verdict.
RESUME = "resume"  # validated (upgraded, or restored by a rollback): back in service with the whole unit
ROLLBACK = "rollback"  # upgraded and validated, but its unit failed: restored to last-known-good with it
LEAVE = "leave"  # left drained by its own failed rollback (its reason names the rollout and the failed check)
NOTHING = "nothing"  # not drained by this unit (at the BOM already, skipped, lost, or finished by an earlier run)

_CHANGED = ("upgraded",)
_FAILED = ("rolled_back", "failed_drained")
_FINE = ("upgraded", "unchanged")


class UnitError(ValueError):
    """A unit rule the plan cannot keep; the message names the unit or host and what to do."""

    def __init__(self, message, argument="unit_by", host=None, variable=None):
        super().__init__(message)
        self.argument = argument
        self.host = host
        self.variable = variable


def unit_variable(unit_by):
    """The host variable ``unit_by`` names ('' for none); UnitError when it is not a variable name."""
    if unit_by is None or unit_by == "":
        return ""
    if not isinstance(unit_by, str) or not _VARIABLE.fullmatch(unit_by):
        raise UnitError(f"unit_by must be one host variable name (for example nvlink_domain or rack), not {unit_by!r}")
    return unit_by


def unit_name(unit_by, value):
    """How a unit is named in messages and in the plan: ``rack r1``."""
    return f"{unit_by} {value}"


def _value(hostvars, host, unit_by):
    try:
        if host not in hostvars or unit_by not in hostvars[host]:
            return _MISSING
        return hostvars[host][unit_by]
    except (KeyError, TypeError):
        return _MISSING
    except Exception as exc:  # a host variable whose template fails (an undefined variable inside it)
        raise UnitError(f"host {host}: the unit_by variable {unit_by} cannot be read: {exc}", host=host, variable=unit_by) from exc


def group_units(hosts, hostvars, unit_by):
    """``OrderedDict{name: [hosts]}``: the units in the order of their first host in ``hosts``, members in that order."""
    unit_by = unit_variable(unit_by)
    if not unit_by:
        raise UnitError("group_units needs unit_by")
    if hostvars is None or not hasattr(hostvars, "__getitem__") or not hasattr(hostvars, "__contains__"):
        raise UnitError(f"unit_by needs hostvars (hosts | wave_plan(hostvars, ...)), got {type(hostvars).__name__}", argument="hostvars")
    units = OrderedDict()
    for host in hosts:
        value = _value(hostvars, host, unit_by)
        if value is _MISSING or value is None or value == "":
            raise UnitError(
                f"host {host} has no value for the unit_by variable {unit_by}: set {unit_by} for every target host (inventory or "
                "group_vars), or unset gpufleet_unit_by",
                host=host, variable=unit_by,
            )
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise UnitError(f"host {host}: the unit_by variable {unit_by} is {type(value).__name__} {value!r}: a unit is one string or number",
                            host=host, variable=unit_by)
        units.setdefault(unit_name(unit_by, value), []).append(host)
    return units


def refuse_unfit(units, cap, budget=None, domains=None, spread_by=(), max_per_domain=1):
    """UnitError for the first unit that could never be admitted whole: more nodes than ``cap`` (the nodes the budget lets
    out at once, the ones already out deducted; None: no budget), or more of one ``spread_by`` value than ``max_per_domain``."""
    for name, members in units.items():
        if cap is not None and len(members) > cap:
            held = f"the budget of {budget} less the nodes already out leaves {cap}" if budget is not None and budget != cap else f"the budget is {cap}"
            raise UnitError(
                f"unit {name} holds {len(members)} nodes ({', '.join(members)}) but at most {cap} may be out of service at once "
                f"({held}, gpufleet_max_unavailable): a unit goes out whole. Raise gpufleet_max_unavailable to at least {len(members)}, "
                "bring the nodes already out back into service, or choose a smaller gpufleet_unit_by",
                argument="max_unavailable",
            )
        for variable in spread_by or ():
            counts = Counter(str((domains or {}).get(host, {}).get(variable)) for host in members)
            value, count = counts.most_common(1)[0]
            if count > max_per_domain:
                raise UnitError(
                    f"unit {name} holds {count} nodes of {variable} {value} but gpufleet_wave_max_per_domain is {max_per_domain}: a unit goes "
                    f"out whole, so it could never be admitted. Raise gpufleet_wave_max_per_domain to at least {count}, or remove "
                    f"{variable} from gpufleet_wave_spread_by",
                    argument="spread_by",
                )


def hold_back(units, skipped_units):
    """``(kept, held_back)``: the units without a member in ``skipped_units`` (members not planned, skipped at preflight), and
    ``{name: why}`` for those held back whole (changing the rest would leave the unit with mixed driver versions)."""
    kept, held_back = OrderedDict(), OrderedDict()
    for name, members in units.items():
        absent = skipped_units.get(name) if skipped_units else None
        if absent:
            held_back[name] = (f"unit {name} is held back whole: {', '.join(absent)} skipped at preflight, so {', '.join(members)} "
                               "are not changed either (a unit changes whole or not at all)")
        else:
            kept[name] = members
    return kept, held_back


def members_named(name, hosts, hostvars, unit_by):
    """The ``hosts`` in unit ``name``."""
    return [host for host in hosts if unit_name(unit_by, _value(hostvars, host, unit_by)) == name]


def unit_gates(units, sizes):
    """Whole units into gates: ``sizes(gate_index)`` nodes each (a gate takes units until it holds that many, at least one)."""
    gates = []
    queue = list(units)
    while queue:
        want = sizes(len(gates))
        gate, held = [], 0
        while queue and (not gate or held < want):
            name = queue.pop(0)
            gate.append(name)
            held += len(units[name])
        gates.append(gate)
    return gates


def unit_verdict(results, unit="the unit", settled=(), domain=None):
    """What each member does now that every member ran its flow.

    ``results``: ``{member: result}`` (upgraded, unchanged, rolled_back, failed_drained, skipped, deferred, or
    not_started for a member lost from the run). ``settled``: members an earlier run finished (left as they are).
    ``domain``: ``{member: why}`` for members whose unit-wide check (the IMEX domain, judged once every member changed)
    failed: they are culprits too, and every changed member, them included, is rolled back.
    Returns ``{"failed": bool, "culprits": [...], "why": str, "actions": {member: action}}``.
    """
    if not isinstance(results, dict) or not results:
        raise UnitError(f"unit_verdict needs the unit's members and their results, got {results!r}", argument="results")
    if domain is None:
        domain = {}
    if not isinstance(domain, dict):
        raise UnitError(f"unit_verdict's domain must be {{member: why}}, got {type(domain).__name__}", argument="domain")
    strangers = sorted(str(host) for host in domain if host not in results)
    if strangers:
        raise UnitError(f"unit_verdict's domain names {', '.join(strangers)}, not members of {unit}", argument="domain")
    settled = set(settled or ())
    live = {host: result for host, result in results.items() if host not in settled}
    changed = [host for host, result in live.items() if result in _CHANGED]
    culprits = [host for host, result in live.items() if result in _FAILED]
    if changed:  # a member left on the old driver (skipped, lost) beside changed ones would mix the unit
        culprits += [host for host, result in live.items() if result not in _FINE and result not in _FAILED]
    culprits += [host for host in live if host in domain and host not in culprits]
    actions = {}
    for host, result in results.items():
        if host in settled:
            actions[host] = NOTHING
        elif result == "failed_drained":
            actions[host] = LEAVE
        elif result == "rolled_back":
            actions[host] = RESUME
        elif result in _CHANGED:
            actions[host] = ROLLBACK if culprits else RESUME
        else:
            actions[host] = NOTHING
    if not culprits:
        return {"failed": False, "culprits": [], "why": "", "actions": actions}
    told = ", ".join(f"{host} {results[host]}" if host not in domain
                     else f"{host} {results[host]} but its IMEX domain check failed ({str(domain[host]).strip()[:240]})" for host in culprits)
    others = list(changed)
    why = (f"unit {unit} failed: {told}; "
           + (f"its other changed members are rolled back with it ({', '.join(others)})" if others else "no other member was changed"))
    return {"failed": True, "culprits": culprits, "why": why, "actions": actions}


def _domain_name(cluster_uuid, trays, unit_values):
    named = sorted({str(v) for v in unit_values.values() if v not in (None, "")})
    return f"NVLink domain {cluster_uuid}" + (f" (nvlink_domain {', '.join(named)})" if named else "") + f": {', '.join(trays)}"


def _tray_domains(nodes):
    """``OrderedDict{cluster_uuid: [trays]}``: the NVL72 compute trays of ``nodes`` (a non-zero ClusterUUID), by NVLink domain."""
    domains = OrderedDict()
    for host, node in nodes.items():
        if node.get("multi_node") is True and node.get("cluster_uuid"):
            domains.setdefault(node["cluster_uuid"], []).append(host)
    return domains


def trays_without_units(nodes, unit_by):
    """Why this rollout cannot change these NVL72 compute trays as planned ('' when it can).

    ``nodes``: ``{host: {"multi_node": bool|None, "cluster_uuid": str|None, "nvlink_domain": value|None, "unit": value|None}}``
    (the tray's facts ``nvlink``, the inventory's ``nvlink_domain`` and the host's ``unit_by`` value). A tray is a node whose
    GPUs report a non-zero ClusterUUID (``multi_node``). Each NVLink domain's trays must be in one unit of change:
    without ``unit_by`` they would be changed one by one, and a domain split between units would be in service with mixed
    driver versions, which IMEX refuses (invariant 12).
    """
    if not isinstance(nodes, dict):
        raise UnitError(f"trays_without_units needs {{host: facts}}, got {type(nodes).__name__}", argument="nodes")
    unit_by = unit_variable(unit_by)
    nodes = {host: node or {} for host, node in nodes.items()}
    domains = _tray_domains(nodes)
    if not domains:
        return ""
    why = ("a driver cannot be mixed within an NVLink domain (each tray's nvidia-imex refuses to talk to trays on another "
           "driver), so the driver's verify would wait for an IMEX domain that cannot come UP while the domain's other trays run "
           "the old driver")
    if not unit_by:
        listed = "; ".join(_domain_name(uuid, trays, {t: nodes[t].get("nvlink_domain") for t in trays}) for uuid, trays in domains.items())
        return (f"{sum(len(t) for t in domains.values())} targets are GB200/GB300 NVL72 compute trays ({listed}) but gpufleet_unit_by is not "
                f"set, so they would be changed one by one: {why}. Set gpufleet_unit_by: nvlink_domain, with nvlink_domain in the inventory "
                "naming each tray's NVLink domain (the same value for every tray of one rack)")
    split = []
    for uuid, trays in domains.items():
        values = OrderedDict((tray, nodes[tray].get("unit")) for tray in trays)
        if any(v is None or v == "" for v in values.values()) or len({str(v) for v in values.values()}) > 1:
            by_value = ", ".join(f"{tray} {unit_by} {value if value not in (None, '') else '(unset)'}" for tray, value in values.items())
            split.append(f"NVLink domain {uuid} ({by_value})")
    if not split:
        return ""
    return (f"gpufleet_unit_by {unit_by} splits the trays of an NVLink domain between units of change: {'; '.join(split)}: {why}. "
            f"Set {unit_by} to the same value for every tray of one NVLink domain (its ClusterUUID), or set gpufleet_unit_by: "
            "nvlink_domain with nvlink_domain naming each tray's domain")


def default_unit_by(nodes, unit_by):
    """The unit_by a rollout uses: ``unit_by`` when set; else ``nvlink_domain`` when targets are NVL72 compute trays and the
    inventory's ``nvlink_domain`` names every target's domain the way the trays' ClusterUUIDs group them; else ''.

    ``nodes`` as for trays_without_units. Returns ``{"unit_by": str, "note": str}`` (the note says why a default was
    taken). Without a usable ``nvlink_domain`` (a target without one, or a ClusterUUID whose trays carry two values) the
    default is '' and trays_without_units refuses, naming what to set: a guess would risk a domain in service with mixed
    drivers.
    """
    if not isinstance(nodes, dict):
        raise UnitError(f"default_unit_by needs {{host: facts}}, got {type(nodes).__name__}", argument="nodes")
    unit_by = unit_variable(unit_by)
    if unit_by:
        return {"unit_by": unit_by, "note": ""}
    nodes = {host: node or {} for host, node in nodes.items()}
    domains = _tray_domains(nodes)
    if not domains:
        return {"unit_by": "", "note": ""}
    values = {host: node.get("nvlink_domain") for host, node in nodes.items()}
    if any(v is None or v == "" or isinstance(v, bool) or not isinstance(v, (str, int)) for v in values.values()):
        return {"unit_by": "", "note": ""}
    if any(len({str(values[tray]) for tray in trays}) > 1 for trays in domains.values()):
        return {"unit_by": "", "note": ""}
    trays = sum(len(t) for t in domains.values())
    return {"unit_by": "nvlink_domain",
            "note": (f"gpufleet_unit_by unset: {trays} targets are NVL72 compute trays in {len(domains)} NVLink domain(s), so each "
                     "nvlink_domain is one unit of change (the inventory's nvlink_domain groups them as their ClusterUUIDs do)")}
