# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Where a rollout is, for the people who watch it: counts, failures against the budget, why nodes wait, time left (private).

Pure: the ``gpufleet.lifecycle.rollout_progress`` filter gathers each node's state from the play and calls ``progress``.

- A node is **done** once the rollout decided about it (upgraded, unchanged, rolled_back, failed_drained, skipped),
  **deferred** when the rollout left it for a later run, **waiting** while it asks for a slot, **in flight** while it
  is out of service for the rollout (its drain, its own work, a rollback), **queued** otherwise.
- **Time left** list-schedules the nodes still to go (waiting first, then queued, in plan order) on the slots of the
  budget that are free of other holders (other people's drains, lost nodes, nodes this rollout left drained), each
  taking the mean of the service times measured so far (a node's own work: firmware, driver, activation, validation,
  resume, rollback; record.phase_times' ``work_s``), after the nodes in flight finish theirs. With nothing measured yet
  the time left is unknown: no number is made up. Waits for jobs and the gates' pauses are not in it (it says so).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.rollout import duration_text  # the report's own words for a duration
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.rollout_records import PHASES
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.budget import BudgetError, whole_count
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.record import phase_times

DONE = ("upgraded", "unchanged", "rolled_back", "failed_drained", "skipped")
FAILED = ("rolled_back", "failed_drained")
RESULTS = ("not_started", *DONE, "deferred")
# Phases as rollout_state records them (PHASES: the names the report accepts); any after the admission is out of service.
WAITING_PHASES = ("admission",)
IN_FLIGHT_PHASES = tuple(p for p in PHASES if p not in ("preflight", *WAITING_PHASES))
# Results whose node did its own work (its service time is a measure of what the next nodes will take).
WORKED = ("upgraded", "rolled_back", "failed_drained")
RESULT_WORDS = {"upgraded": "upgraded", "unchanged": "unchanged", "rolled_back": "rolled back", "failed_drained": "left drained",
                "skipped": "skipped"}
WHY_MAX = 200  # characters of one node's reason to wait in the line
SHOWN_WAITERS = 2


class ProgressError(ValueError):
    """Input the progress cannot use; the message names the node and the field, and what to pass instead."""


def _seconds(value, field):
    """A time or duration as a finite number of at least 0, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProgressError(f"{field} must be a number of seconds or null, not {type(value).__name__}")
    if value < 0:
        raise ProgressError(f"{field} is {value}: a time cannot be negative (pass what rollout_state recorded, unchanged)")
    return float(value)


def _count(value, field, low):
    if value == "0":  # whole_count reads digits from 1 on; a budget of 0 failures is a count too
        value = 0
    try:
        return whole_count(value, field, low=low)
    except BudgetError as exc:
        raise ProgressError(exc.msg) from None


def _names(value, field):
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise ProgressError(f"{field} must be a list of inventory host names, not {type(value).__name__}")
    bad = [n for n in value if not isinstance(n, str) or not n]
    if bad:
        raise ProgressError(f"{field} must hold inventory host names (strings), not {type(bad[0]).__name__}")
    return list(value)


def _node(node, state):
    """``(result, phase, started, service_s)`` of one node's state, checked."""
    field = f"nodes.{node}"
    if not isinstance(state, Mapping):
        raise ProgressError(f"{field} must be a mapping {{result, phase, started, service_s}}, not {type(state).__name__}")
    result = state.get("result") or "not_started"
    if result not in RESULTS:
        shown = result if isinstance(result, str) and len(result) <= 40 else type(result).__name__
        raise ProgressError(f"{field}.result is {shown!r}: one of {', '.join(RESULTS)} expected")
    phase = state.get("phase")
    if phase is not None and phase not in PHASES:
        shown = phase if isinstance(phase, str) and len(phase) <= 40 else type(phase).__name__
        raise ProgressError(f"{field}.phase is {shown!r}: one of {', '.join(PHASES)} (or null) expected")
    return result, phase, _seconds(state.get("started"), f"{field}.started"), _seconds(state.get("service_s"), f"{field}.service_s")


def _waiting(waiting, order):
    """``{node: why}`` of the nodes that ask for a slot now (a list: no reason known)."""
    if waiting is None:
        return {}
    if isinstance(waiting, (list, tuple)):
        waiting = dict.fromkeys(_names(waiting, "waiting"), "")
    if not isinstance(waiting, Mapping):
        raise ProgressError(f"waiting must be a mapping of node: why it waits, or a list of nodes, not {type(waiting).__name__}")
    planned = set(order)
    out = {}
    for node, why in waiting.items():
        if node not in planned:
            raise ProgressError(f"waiting names {str(node)[:64]!r}, which is not in the plan's order: pass the rollout's own nodes")
        if why is not None and not isinstance(why, str):
            raise ProgressError(f"waiting.{node} must be the reason it waits (a string), not {type(why).__name__}")
        out[node] = (why or "").strip()
    return out


def time_left(in_flight_left, remaining, mean, slots):
    """Seconds until the last node is done: the nodes in flight end after ``in_flight_left`` seconds each; the ``remaining``
    nodes take ``mean`` seconds each on the first of ``slots`` slots to come free (list scheduling). None: no slot at all."""
    ends = sorted(in_flight_left)
    if remaining and slots < 1:
        return None
    # Nodes in flight beyond the slots (a drain that came after they went out) free no slot when they end: the last ones do.
    free = ends[-slots:] if len(ends) >= slots else [0.0] * (slots - len(ends)) + ends
    heapq.heapify(free)
    last = max(ends, default=0.0)
    for _node in range(remaining):
        start = heapq.heappop(free)
        heapq.heappush(free, start + mean)
        last = max(last, start + mean)
    return last


def progress(order, nodes, slots, failure_budget, failed=(), waiting=None, others_out=None, now=None, rollout_id="", unavailable=None, names=None):
    """Where the rollout is: a dict of counts, failures, reasons and the time left, with ``line``, one sentence for people.

    ``order``: the plan's order (every node of the rollout once). ``nodes``: ``{node: {result, phase, started, service_s}}``
    for each of them: its result (``not_started`` until decided), its current phase as rollout_state records it (null:
    none yet), when it went out (epoch seconds, null: not yet) and its measured service time (seconds of its own work,
    null: not measured). ``slots``: how many nodes may be out at once (the budget). ``failure_budget``: failures allowed.
    ``failed``: more nodes that count as failures (lost from the run). ``waiting``: ``{node: why}`` of the nodes asking for
    a slot now. ``others_out``: slots held by nodes out of service that are not this rollout's in flight nor left drained
    by it (a person's drain, a lost node); None: not known (Slurm not read), the time left then assumes none.
    ``now``: epoch seconds, to count the time the nodes in flight spent already.
    ``unavailable``: instead of ``others_out``, the nodes Slurm shows out of service (names, or slurm_capacity's
    ``unavailable`` entries ``{node, ...}``); ``names``: ``{node: Slurm node name}`` where they differ from the inventory's.
    ProgressError names the node and field of bad input.
    """
    order = _names(order, "order")
    seen = set()
    for node in order:
        if node in seen:
            raise ProgressError(f"order names {node} twice: pass the plan's order (rollout_plan.order) unchanged")
        seen.add(node)
    if not isinstance(nodes, Mapping):
        raise ProgressError(f"nodes must be a mapping of node: its state, not {type(nodes).__name__}")
    slots = _count(slots, "slots (gpufleet_max_unavailable as a count)", 1)
    failure_budget = _count(failure_budget, "failure_budget (gpufleet_failure_budget)", 0)
    others_out = None if others_out is None else _count(others_out, "others_out", 0)
    now = _seconds(now, "now")
    waiting = _waiting(waiting, order)

    state, groups, results, measured = {}, {k: [] for k in ("done", "in_flight", "waiting", "queued", "deferred")}, {}, []
    for node in order:
        if node not in nodes:
            raise ProgressError(f"nodes has no state for {node}, which is in the plan's order: pass every planned node's state "
                                "(not_started for one the rollout has not reached)")
        result, phase, started, service = _node(node, nodes[node])
        state[node] = (result, started)
        if result in DONE:
            group = "done"
            results[result] = results.get(result, 0) + 1
        elif result == "deferred":
            group = "deferred"
        elif node in waiting or phase in WAITING_PHASES:
            group = "waiting"
        elif phase in IN_FLIGHT_PHASES:
            group = "in_flight"
        else:
            group = "queued"
        groups[group].append(node)
        if service is not None and result in WORKED:
            measured.append(service)

    failures = sorted({n for n in order if state[n][0] in FAILED} | set(_names(failed, "failed")))
    left_drained = [n for n in order if state[n][0] == "failed_drained"]
    if unavailable is not None:
        others_out = held_by_others(unavailable, [*groups["in_flight"], *left_drained], names)
    free_slots = slots - (others_out or 0) - len(left_drained)
    mean = sum(measured) / len(measured) if measured else None
    to_go = len(groups["waiting"]) + len(groups["queued"])

    why_left = ""
    if not to_go and not groups["in_flight"]:
        left = 0.0
    elif mean is None:
        left, why_left = None, "no node's service time is measured yet"
    else:
        # A node's clock ahead of the controller's would give a negative time spent: counted as none.
        elapsed = [max(0.0, now - state[n][1]) if now is not None and state[n][1] is not None else 0.0 for n in groups["in_flight"]]
        left = time_left([max(0.0, mean - e) for e in elapsed], to_go, mean, free_slots)
        if left is None:
            why_left = f"no slot of the budget of {slots} is free for the {to_go} nodes still to go"
    waiting_why = {n: (waiting.get(n) or "asks for a slot")[:WHY_MAX] for n in groups["waiting"]}

    out = {
        "rollout_id": rollout_id or "",
        "total": len(order),
        **{k: len(v) for k, v in groups.items()},
        "nodes": groups,
        "results": results,
        "out_of_service": len(groups["in_flight"]) + len(left_drained),
        "in_service": len(order) - len(groups["in_flight"]) - len(left_drained),
        "failures": len(failures),
        "failed": failures,
        "failure_budget": failure_budget,
        "budget_spent": len(failures) > failure_budget,
        "slots": slots,
        "others_out": others_out,
        "free_slots": max(0, free_slots - len(groups["in_flight"])),
        "waiting_why": waiting_why,
        "measured": len(measured),
        "mean_service_s": None if mean is None else round(mean, 3),
        "time_left_s": None if left is None else round(left, 3),
        "time_left": "unknown" if left is None else duration_text(left),
        "time_left_why": why_left,
    }
    out["line"] = progress_line(out)
    return out


def held_by_others(unavailable, ours, names=None):
    """How many of the ``unavailable`` nodes (Slurm names, or ``{node, ...}`` entries) are not among ``ours`` (inventory names)."""
    if isinstance(unavailable, (str, bytes)) or not isinstance(unavailable, (list, tuple)):
        raise ProgressError(f"unavailable must be a list of the nodes Slurm shows out of service, not {type(unavailable).__name__}")
    if names is not None and not isinstance(names, Mapping):
        raise ProgressError(f"names must be a mapping of inventory host: Slurm node name, not {type(names).__name__}")
    names = names or {}
    held = {names.get(node) or node for node in ours}
    out = set()
    for index, entry in enumerate(unavailable):
        name = entry.get("node") if isinstance(entry, Mapping) else entry
        if not isinstance(name, str) or not name:
            raise ProgressError(f"unavailable[{index}] must be a Slurm node name or a mapping with its node, not {type(entry).__name__}")
        if name not in held:
            out.add(name)
    return len(out)


def progress_line(p):
    """One sentence of ``progress``'s dict for the play's output."""
    done = f"{p['done']}/{p['total']} done"
    if p["results"]:
        done += " (" + ", ".join(f"{p['results'][r]} {RESULT_WORDS[r]}" for r in DONE if p["results"].get(r)) + ")"
    parts = [done, f"{p['in_flight']} out for the rollout", f"{p['waiting']} waiting for a slot", f"{p['queued']} queued"]
    if p["deferred"]:
        parts.append(f"{p['deferred']} deferred")
    head = ("rollout " + p["rollout_id"] + ": " if p["rollout_id"] else "") + ", ".join(parts)
    held = "" if p["others_out"] is None else f", {p['others_out']} held by others"
    slots = f"out of service {p['out_of_service']} of the rollout's nodes{held}; budget {p['slots']}"
    failures = f"failures {p['failures']} of budget {p['failure_budget']}" + (" (SPENT)" if p["budget_spent"] else "")
    sentence = [head, slots, failures]
    waiters = list(p["waiting_why"].items())
    if waiters:
        shown = "; ".join(f"{n} waits: {why}" for n, why in waiters[:SHOWN_WAITERS])
        more = len(waiters) - SHOWN_WAITERS
        sentence.append(shown + (f" (and {more} more)" if more > 0 else ""))
    if p["time_left_s"] is None:
        sentence.append(f"time left unknown ({p['time_left_why']})")
    elif p["time_left_s"] == 0:
        sentence.append("nothing left to do")
    else:
        sentence.append(f"time left about {p['time_left']} (the mean service time of {p['measured']} measured node(s), "
                        f"{duration_text(p['mean_service_s'])}, on the free slots; waits for jobs and pauses not counted)")
    return "; ".join(sentence)


def node_state(result=None, phases=None):
    """A node's ``{result, phase, started, service_s}`` from its result and the phases its state file records.

    ``phase``: the open phase, else the last one recorded. ``started``: its first step after the preflight.
    ``service_s``: its own work (record.phase_times' ``work_s``) once its result says it did that work.
    """
    phases = [p for p in phases or [] if isinstance(p, Mapping) and isinstance(p.get("name"), str)]
    open_phases = [p for p in phases if p.get("end") is None]
    current = (open_phases or phases or [None])[-1]
    times = phase_times(phases)
    result = result or "not_started"
    return {
        "result": result,
        "phase": current["name"] if current else None,
        "started": times["start"],
        "service_s": times["work_s"] if result in WORKED else None,
    }
