# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The wave plan of a rollout: canary, then waves bounded by the budget and spread over domains (private).

Pure and deterministic (same input, same plan). ``plan_waves`` is what the
``gpufleet.lifecycle.wave_plan`` filter returns:

- the canary: the ``canary`` hosts as given, or the first ``canary_count`` hosts (in the order given)
  that the spread rule lets share one wave;
- waves sized with Ansible ``serial`` semantics from ``waves`` (a count, or ``"N%"`` of the hosts left
  after the canary, floor, at least 1; the last size repeats until every host is placed);
- every wave (the canary too) holds at most the budget (``max_unavailable`` resolved against
  ``pool_size``, minus ``unavailable`` already out) and at most ``max_per_domain`` hosts of one value of
  each ``spread_by`` host variable; a host that does not fit goes to a later wave, in its turn.

Cost: hosts are grouped by their tuple of domain values, and a wave visits the groups (not the hosts)
in the order their first host was given, bucketed by the variable with the fewest values (a bucket
whose value is used up is skipped whole), stopping once the wave is full or once every value of one
variable is used up; so a plan costs far less than waves x hosts.
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict, deque

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import units as _units
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.budget import BudgetError, max_unavailable_count, percent, whole_count
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.window import merge_gates

DEFAULT_WAVES = ("10%", "25%", "100%")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_MISSING = object()


class PlanError(BudgetError):
    """The arguments cannot make a plan; the message names the argument and what to do."""


def _host_list(hosts):
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, (list, tuple)):
        raise PlanError(f"the input must be a list of inventory host names (for example ansible_play_hosts), not {type(hosts).__name__}",
                        argument="hosts")
    seen = set()
    for host in hosts:
        if not isinstance(host, str) or not host:
            raise PlanError(f"every host must be a non-empty inventory host name, got {host!r}", argument="hosts")
        if host in seen:
            raise PlanError(f"host {host} is listed twice: give each host once", argument="hosts")
        seen.add(host)
    if not hosts:
        raise PlanError("no hosts to plan: the host pattern (gpufleet_targets) matched none", argument="hosts")
    return list(hosts)


def _wave_specs(waves):
    """The ``serial`` list as given: each entry an int or ``"N%"`` (checked), a single value being a list of one."""
    if waves is None:
        waves = list(DEFAULT_WAVES)
    if isinstance(waves, (int, str)) and not isinstance(waves, bool):
        waves = [waves]
    if not isinstance(waves, (list, tuple)) or not waves:
        raise PlanError(f"waves must be a non-empty list of sizes as for serial (for example [\"10%\", \"25%\", \"100%\"] or [2, 10]), got {waves!r}",
                        argument="waves")
    checked = []
    for index, spec in enumerate(waves):
        pct = percent(spec)
        if pct is not None:
            if pct > 100:
                raise PlanError(f"waves[{index}] {spec!r} is more than 100%: a wave size is 1% to 100% of the hosts after the canary, or a count",
                                argument="waves")
            checked.append(("pct", pct))
            continue
        try:
            checked.append(("count", whole_count(spec, f"waves[{index}]")))
        except BudgetError:
            raise PlanError(
                f"waves[{index}] {spec!r} is not a wave size: write a count of at least 1 (5) or a percentage from 1% to 100% (\"20%\"), "
                "with nothing around it (no space, sign, decimal point or newline)",
                argument="waves",
            ) from None
    return checked


def _resolve(spec, base):
    kind, value = spec
    if kind == "count":
        return value
    return max(1, base * value // 100)


def _spread_vars(spread_by):
    if spread_by is None:
        return []
    if isinstance(spread_by, str) or not isinstance(spread_by, (list, tuple)):
        raise PlanError(f"spread_by must be a list of host variable names (for example [rack, nvlink_domain]), not {spread_by!r}: "
                        "write [rack] for one", argument="spread_by")
    names = []
    for name in spread_by:
        if not isinstance(name, str) or not _VARIABLE.fullmatch(name):
            raise PlanError(f"spread_by holds {name!r}, which is not a host variable name (letters, digits and _)", argument="spread_by")
        if name in names:
            raise PlanError(f"spread_by names {name} twice", argument="spread_by")
        names.append(name)
    return names


def _lookup(hostvars, host, name):
    """The value of host variable ``name`` of ``host`` in ``hostvars`` (a dict or Ansible's HostVars), or _MISSING."""
    try:
        if host not in hostvars:
            return _MISSING
        variables = hostvars[host]
        if name not in variables:
            return _MISSING
        return variables[name]
    except (KeyError, TypeError):
        return _MISSING
    except Exception as exc:  # a host variable whose template fails (an undefined variable inside it)
        raise PlanError(f"host {host}: the spread_by variable {name} cannot be read: {exc}", argument="spread_by", host=host, variable=name) from exc


def _domains(hosts, hostvars, names):
    """``{host: {name: value}}`` for every host; PlanError naming the host and the variable that lacks a usable value."""
    domains = {}
    if not names:
        return {host: {} for host in hosts}
    if hostvars is None or not hasattr(hostvars, "__getitem__") or not hasattr(hostvars, "__contains__"):
        raise PlanError(f"spread_by needs hostvars as the first argument (hosts | wave_plan(hostvars, ...)), got {type(hostvars).__name__}",
                        argument="hostvars")
    for host in hosts:
        values = {}
        for name in names:
            value = _lookup(hostvars, host, name)
            if value is _MISSING or value is None:
                raise PlanError(
                    f"host {host} has no value for the spread_by variable {name}: set {name} for every target host "
                    "(inventory or group_vars), or remove it from gpufleet_wave_spread_by",
                    argument="spread_by", host=host, variable=name,
                )
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise PlanError(
                    f"host {host}: the spread_by variable {name} is {type(value).__name__} {value!r}: a domain is one string or number",
                    argument="spread_by", host=host, variable=name,
                )
            values[name] = value
        domains[host] = values
    return domains


def _cap(max_unavailable, pool_size, unavailable, host_count, notes, gates=False):
    """``(budget, cap)``: the budget resolved against the pool, and how many hosts one wave may hold (None: no budget)."""
    if isinstance(unavailable, (list, tuple)):
        # A node named twice is one node out of service, not two (a list merged from two sources).
        names = [str(name) for name in unavailable]
        unavailable = len(set(names))
        if unavailable != len(names):
            twice = sorted({name for name in names if names.count(name) > 1})
            notes.append(f"unavailable names {', '.join(twice)} more than once: counted once")
    out = whole_count(unavailable, "unavailable", low=0)
    if max_unavailable is None:
        if out:
            notes.append(f"{out} nodes are already unavailable; no max_unavailable was given, so waves are not bounded by a budget")
        return None, None
    if pool_size is None:
        pool_size = host_count
        notes.append(f"pool_size not given: the budget is resolved against the {host_count} hosts planned")
    budget = max_unavailable_count(max_unavailable, pool_size)
    cap = budget - out
    if cap < 1:
        raise PlanError(
            f"the budget of {budget} unavailable nodes (max_unavailable {max_unavailable!r} of a pool of {pool_size}) is used up by "
            f"{out} nodes already unavailable: no wave can take a node out. Bring those nodes back into service, or raise "
            "max_unavailable (gpufleet_max_unavailable)",
            argument="unavailable",
        )
    if out:
        held = f"at most {cap} of ours go out at once while they stay out" if gates else f"a wave holds at most {cap} nodes"
        notes.append(f"{out} of the budget of {budget} are already unavailable: {held}")
    return budget, cap


class _Pool:
    """The hosts not yet placed, grouped by their tuple of domain values (order of first appearance kept).

    Groups sit in buckets by their value of the variable with the fewest values (the one that fills a wave
    first): once a wave holds ``max_per_domain`` hosts of a bucket's value, the whole bucket is skipped.
    """

    def __init__(self, hosts, domains, names, index):
        self.names = names
        self.index = index
        self.left = {name: Counter() for name in names}
        keys = {}
        for host in hosts:
            key = tuple(str(domains[host][name]) for name in names)
            keys[host] = key
            for name, value in zip(names, key):
                self.left[name][value] += 1
        # the bucketing variable: fewest values (ties: the first named), by its position in the key
        self.first = min(range(len(names)), key=lambda i: (len(self.left[names[i]]), i)) if names else None
        self.buckets = OrderedDict()
        for host in hosts:
            key = keys[host]
            bucket = self.buckets.setdefault(key[self.first] if names else None, OrderedDict())
            bucket.setdefault(key, deque()).append(host)
        self.size = len(hosts)

    def take(self, size, max_per_domain):
        """Up to ``size`` hosts, at most ``max_per_domain`` of one value of each variable; removed from the pool, in input order."""
        used = {name: Counter() for name in self.names}
        # Values of each variable a host of this wave may still have: once one variable has none, no host fits any more.
        open_values = {name: len(self.left[name]) for name in self.names}
        closed = set()
        picked = []
        spent = []  # buckets emptied by this wave, removed after the walk (the walk stops at the first wave-full point:
        # copying every bucket for every wave made waves of 1 over small domains quadratic)
        for bucket_value, groups in self.buckets.items():
            if len(picked) >= size or any(count == 0 for count in open_values.values()):
                break
            emptied = []
            for key, group in groups.items():
                if len(picked) >= size or (self.names and used[self.names[self.first]][bucket_value] >= max_per_domain):
                    break
                room = size - len(picked)
                for name, value in zip(self.names, key):
                    room = min(room, max_per_domain - used[name][value])
                if room <= 0:
                    continue
                count = min(room, len(group))
                picked.extend(group.popleft() for _taken in range(count))
                if not group:
                    emptied.append(key)
                for name, value in zip(self.names, key):
                    used[name][value] += count
                    self.left[name][value] -= count
                    if self.left[name][value] == 0:
                        del self.left[name][value]
                    if (used[name][value] >= max_per_domain or value not in self.left[name]) and (name, value) not in closed:
                        closed.add((name, value))
                        open_values[name] -= 1
            for key in emptied:
                del groups[key]
            if not groups:
                spent.append(bucket_value)
        for bucket_value in spent:
            del self.buckets[bucket_value]
        self.size -= len(picked)
        picked.sort(key=self.index.__getitem__)
        return picked


def _explicit_canary(canary, hosts, domains, names, per, cap):
    if isinstance(canary, str) or not isinstance(canary, (list, tuple)):
        raise PlanError(f"canary must be a list of inventory host names (the gpufleet_canary group), not {canary!r}", argument="canary")
    known = set(hosts)
    unknown = [host for host in canary if not isinstance(host, str) or host not in known]
    if unknown:
        raise PlanError(
            f"canary hosts {', '.join(map(str, unknown))} are not among the hosts planned: the gpufleet_canary group must hold target "
            "hosts only (check gpufleet_targets and the group)",
            argument="canary",
        )
    if len(set(canary)) != len(canary):
        raise PlanError("canary lists a host twice", argument="canary")
    if cap is not None and len(canary) > cap:
        raise PlanError(f"the canary holds {len(canary)} hosts but the budget lets only {cap} be out at once: make the gpufleet_canary group "
                        "smaller or raise max_unavailable", argument="canary")
    if names:
        for name in names:
            counts = Counter(str(domains[host][name]) for host in canary)
            value, count = counts.most_common(1)[0]
            if count > per:
                raise PlanError(
                    f"the canary holds {count} hosts of {name} {value} but max_per_domain is {per}: pick canaries of different {name} "
                    "values, or raise max_per_domain (gpufleet_wave_max_per_domain)",
                    argument="canary",
                )
    return list(canary)


def _unit_plan(hosts, hostvars, unit_by, canary, canary_count, specs, domains, names, per, budget, cap, notes, skipped):
    """``(units, canary units, gates of units)`` of a plan with ``unit_by``: whole units only, never split across gates."""
    try:
        units = _units.group_units(hosts, hostvars, unit_by)
        _units.refuse_unfit(units, cap, budget, domains, names, per)
        kept, held_back = _units.hold_back(units, _units.group_units(list(skipped or ()), hostvars, unit_by) if skipped else {})
    except _units.UnitError as exc:
        raise PlanError(str(exc), argument=exc.argument, host=exc.host, variable=exc.variable) from None
    notes.extend(held_back.values())
    units = kept
    if not units:
        return units, [], [], held_back
    unit_of = {host: name for name, members in units.items() for host in members}
    if canary:
        unknown = [host for host in canary if host not in unit_of]
        if unknown:
            raise PlanError(f"canary hosts {', '.join(map(str, unknown))} are not among the hosts planned: the gpufleet_canary group must hold "
                            "target hosts only", argument="canary")
        first = list(OrderedDict.fromkeys(unit_of[host] for host in canary))
        notes.append(f"unit_by {unit_by}: the canary is the unit(s) of the gpufleet_canary hosts, whole: {', '.join(first)}")
    else:
        count = whole_count(canary_count, "canary_count")
        first, held = [], 0
        for name in units:
            if held >= count:
                break
            first.append(name)
            held += len(units[name])
    if cap is not None and sum(len(units[name]) for name in first) > cap:
        raise PlanError(f"the canary units {', '.join(first)} hold {sum(len(units[name]) for name in first)} nodes, more than the {cap} the budget "
                        "lets be out at once: name fewer canaries (gpufleet_canary) or lower gpufleet_canary_count", argument="canary")
    rest = OrderedDict((name, members) for name, members in units.items() if name not in first)
    base = sum(len(members) for members in rest.values())
    gates = _units.unit_gates(rest, lambda index: _resolve(specs[min(index, len(specs) - 1)], base))
    return units, first, gates, held_back


def plan_waves(hosts, hostvars=None, waves=None, canary=None, canary_count=1, spread_by=None, max_per_domain=None,
               max_unavailable=None, pool_size=None, unavailable=0, gates=False, unit_by=None, unit_skipped=None):
    """The plan: ``{"canary", "waves", "gate_of", "sizes", "order", "domains", "budget", "notes"}`` (PlanError on unusable arguments).

    ``gate_of``: each host's wave (0 for the canary).

    With ``gates`` the waves are the sliding window's gates (where the rollout pauses, not how many nodes go out at
    once): sized by ``waves`` alone, neither cut to the budget nor spread over domains (the admission of each node
    keeps both), at most ``window.MAX_GATES`` of them (the rest join the last, with a note).

    With ``unit_by`` (gates only) each value of that host variable is one unit of change: the canary is the first
    unit (the units of the ``canary`` hosts when given), gates hold whole units, and a unit the budget or the spread
    rule could never let out whole is refused. The plan adds ``units`` (``[{"name", "hosts"}]`` in order),
    ``unit_of`` (each host's unit) and ``unit_sizes`` (per gate, 0 the canary, its units' sizes: the unit play's serial).
    ``unit_skipped``: target hosts not planned (skipped at preflight); a unit holding one is held back whole (its planned
    hosts are left out, listed in ``held_back`` with the reason): changing the rest would mix the unit.
    """
    hosts = _host_list(hosts)
    specs = _wave_specs(waves)
    names = _spread_vars(spread_by)
    notes = []
    if max_per_domain is None:
        per = 1
    else:
        per = whole_count(max_per_domain, "max_per_domain")
        if not names and per != 1:  # 1 is the default the rollout always passes: a note on every plan was noise
            notes.append("max_per_domain has no effect without spread_by")
    budget, cap = _cap(max_unavailable, pool_size, unavailable, len(hosts), notes, gates)
    domains = _domains(hosts, hostvars, names)
    index = {host: position for position, host in enumerate(hosts)}
    try:
        unit_by = _units.unit_variable(unit_by)
    except _units.UnitError as exc:
        raise PlanError(str(exc), argument="unit_by") from None
    if unit_by:
        if not gates:
            raise PlanError("unit_by needs gates=true (the sliding window's plan)", argument="unit_by")
        return _plan_units(hosts, hostvars, unit_by, canary, canary_count, specs, domains, names, per, budget, cap, notes, unit_skipped)

    if canary:
        chosen = _explicit_canary(canary, hosts, domains, names, per, cap)
        taken = set(chosen)
        pool = _Pool([host for host in hosts if host not in taken], domains, names, index)
    else:
        count = whole_count(canary_count, "canary_count")
        if count > len(hosts):
            raise PlanError(f"canary_count {count} is larger than the {len(hosts)} hosts planned: lower gpufleet_canary_count", argument="canary_count")
        if cap is not None and count > cap:
            raise PlanError(f"canary_count {count} is larger than the {cap} nodes the budget lets be out at once: lower gpufleet_canary_count "
                            "or raise max_unavailable", argument="canary_count")
        pool = _Pool(hosts, domains, names, index)
        chosen = pool.take(count, per)
        if len(chosen) < count:
            raise PlanError(
                f"only {len(chosen)} canary hosts fit one wave with max_per_domain {per} over {', '.join(names)}: lower canary_count, raise "
                "max_per_domain, or name the canaries (the gpufleet_canary group)",
                argument="canary_count",
            )

    base = pool.size
    planned = []
    capped = spread_cut = 0
    if gates:
        taken = set(chosen)
        rest = [host for host in hosts if host not in taken]
        while rest:
            size = _resolve(specs[min(len(planned), len(specs) - 1)], base)
            planned.append(rest[:size])
            rest = rest[size:]
        planned, merged = merge_gates(planned)
        if merged:
            notes.append(merged)
    while pool.size and not gates:
        nominal = _resolve(specs[min(len(planned), len(specs) - 1)], base)
        size = nominal if cap is None else min(nominal, cap)
        capped += size < nominal
        wave = pool.take(size, per)
        spread_cut += len(wave) < size and pool.size > 0
        planned.append(wave)
    if capped:
        notes.append(f"{capped} wave(s) were cut to the budget: at most {cap} nodes out at once")
    if spread_cut:
        notes.append(f"{spread_cut} wave(s) hold fewer nodes than their size: at most {per} per value of {', '.join(names)} in one wave")
    return _gated(chosen, planned, domains, budget, notes)


def _gated(chosen, planned, domains, budget, notes):
    """The plan of a canary and its gates (nodes or units): each node's gate, the sizes, the admission order."""
    gate_of = {host: 0 for host in chosen}
    for number, wave in enumerate(planned, start=1):
        gate_of.update({host: number for host in wave})
    return {
        "gate_of": gate_of,
        "canary": chosen,
        "waves": planned,
        "sizes": [len(chosen)] + [len(wave) for wave in planned],
        "order": chosen + [host for wave in planned for host in wave],
        "domains": domains,
        "budget": budget,
        "notes": notes,
    }


def _plan_units(hosts, hostvars, unit_by, canary, canary_count, specs, domains, names, per, budget, cap, notes, skipped):
    units, first, gates, held_back = _unit_plan(hosts, hostvars, unit_by, canary, canary_count, specs, domains, names, per, budget, cap,
                                                notes, skipped)
    gates, merged = merge_gates(gates)
    if merged:
        notes.append(merged.replace("nodes", "units"))
    chosen = [host for name in first for host in units[name]]
    planned = [[host for name in gate for host in units[name]] for gate in gates]
    return {
        **_gated(chosen, planned, domains, budget, notes),
        "unit_by": unit_by,
        "units": [{"name": name, "hosts": members} for name, members in units.items()],
        "unit_of": {host: name for name, members in units.items() for host in members},
        "unit_sizes": [[len(units[name]) for name in first]] + [[len(units[name]) for name in gate] for gate in gates],
        "held_back": {host: why for name, why in held_back.items() for host in _units.members_named(name, hosts, hostvars, unit_by)},
    }
