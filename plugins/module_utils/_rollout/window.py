# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The sliding window of a rollout: which node goes first, whether one more may go out now, when to stop (private).

Pure functions, no Ansible: the slurm_capacity module calls ``admission`` under its Slurm-side mutex, the
``gpufleet.lifecycle.rollout_window`` filters expose the rest to the playbook.

- ``admission_order``: the nodes this rollout already holds or finished first (a resumed run picks up where it
  stopped), then idle nodes, then nodes by the end time Slurm gives their last running job (the first to end
  first), then nodes whose end Slurm does not know; ties keep the order given (the inventory's).
- ``admission``: one node may go out when the pool nodes Slurm shows out of service (ours and others'), with it,
  stay within the budget and, for each ``spread_by`` variable, at most ``max_per_domain`` nodes of its value are
  out with it. A node already out (our drain of an interrupted run) is counted once.
- ``stop_before_admission``: the stop file, then the failure budget; checked before each new node (the nodes in
  flight finish).
- ``gate_verdict``: after a gate (a wave of ``gpufleet_waves``), whether its failures stop the rollout.
- ``merge_gates``: at most ``MAX_GATES`` gates; the rest join the last one.
- ``waiters_allowed``: how many nodes may wait for capacity at once, so that waiting nodes never hold every fork
  the nodes in flight need.
"""

from __future__ import annotations

import re

MAX_GATES = 8
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


class WindowError(ValueError):
    """Arguments a window decision cannot use; the message names the argument."""


def _end_key(end):
    """(rank, time) of one node: 1 idle, 2 a job with a known end (ISO 8601, as SLURM_TIME_FORMAT=standard prints), 3 unknown."""
    if end is None or end == "":
        return (1, "")
    if isinstance(end, str) and _ISO.fullmatch(end):
        return (2, end)
    return (3, "")


def admission_order(hosts, job_ends=None, held=None, names=None):
    """``hosts`` in the order the window admits them (see the module's docstring); a new list, stable.

    ``job_ends``: ``{host: end}`` where end is the latest end time of the host's running jobs (ISO 8601 string), or
    None / missing for an idle host, or any other string ("Unknown", "NONE") for a job Slurm gives no end. ``held``:
    hosts this rollout holds or finished already (they keep the head of the line, so a resumed run's plan starts
    with them). ``names``: ``{host: Slurm node name}`` when ``job_ends`` is keyed by Slurm's names.
    """
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, (list, tuple)):
        raise WindowError(f"hosts must be a list of inventory host names, not {type(hosts).__name__}")
    job_ends = job_ends or {}
    if not isinstance(job_ends, dict):
        raise WindowError(f"job_ends must be a dict of host: end time, not {type(job_ends).__name__}")
    held = set(held or ())
    names = names or {}
    position = {host: index for index, host in enumerate(hosts)}
    return sorted(hosts, key=lambda host: ((0, "") if host in held else _end_key(job_ends.get(names.get(host, host))), position[host]))


def admission(candidate, out, budget, domains=None, spread_by=(), max_per_domain=1):
    """``{"admit": bool, "why": str}``: may ``candidate`` go out of service now?

    ``out``: the pool nodes Slurm shows out of service now (ours and others'). ``budget``: how many may be out
    at once. ``domains``: ``{node: {variable: value}}`` for the nodes whose domains are known (the rollout's
    targets); ``spread_by``: the variables whose values bound the nodes out at once to ``max_per_domain``.
    ``why`` says what blocks the node (empty when admitted).
    """
    out = set(out)
    if candidate in out:
        return {"admit": True, "why": ""}  # already out (our drain of an interrupted run): counted already
    if budget is not None and len(out) + 1 > budget:
        return {"admit": False,
                "why": f"{len(out)} of the budget of {budget} nodes are out of service ({', '.join(sorted(out))}): no slot is free"}
    domains = domains or {}
    mine = domains.get(candidate) or {}
    for name in spread_by or ():
        if name not in mine:
            continue
        same = sorted(node for node in out if (domains.get(node) or {}).get(name) == mine[name])
        if len(same) + 1 > max_per_domain:
            return {"admit": False,
                    "why": f"{name} {mine[name]} has {len(same)} node(s) out already ({', '.join(same)}), at most {max_per_domain} at once "
                           "(gpufleet_wave_max_per_domain)"}
    return {"admit": True, "why": ""}


def stop_before_admission(stop_file_present, failed, failure_budget, stop_file="the stop file", earlier=""):
    """Why no new node may be admitted ('' when one may): an earlier stop, the stop file, or a spent failure budget."""
    if earlier:
        return earlier
    if stop_file_present:
        return (f"the stop file {stop_file} is present: no new node was started (the nodes in flight finished). To resume, delete "
                f"{stop_file} and run the same command again")
    failed = sorted(set(failed or ()))
    if len(failed) > int(failure_budget):
        return (f"the failure budget is spent: {len(failed)} nodes failed ({', '.join(failed)}), more than gpufleet_failure_budget "
                f"{failure_budget}. Look at them, then run again (with a larger budget if that is right)")
    return ""


def gate_verdict(gate, size, failed, max_fail_percentage):
    """Why the rollout stops after gate ``gate`` ('' when it goes on): its failed nodes above the percentage of its size.

    Gate 0 is the canary: any failure stops the rollout. The reason's head only: the caller adds which nodes and why.
    """
    failed = list(failed or ())
    if not failed:
        return ""
    if int(gate) == 0:
        return "the canary failed"
    if len(failed) * 100 > int(max_fail_percentage) * int(size):
        return (f"wave {gate} failed on {len(failed)} of {size} nodes, more than gpufleet_wave_max_fail_percentage "
                f"{max_fail_percentage}%")
    return ""


def merge_gates(gates, max_gates=MAX_GATES):
    """``(gates, note)``: at most ``max_gates`` gates, the ones beyond joining the last (note '' when none did)."""
    gates = [list(gate) for gate in gates]
    if len(gates) <= max_gates:
        return gates, ""
    kept = gates[:max_gates - 1]
    rest = [host for gate in gates[max_gates - 1:] for host in gate]
    note = (f"{len(gates)} waves planned, more than the {max_gates} gates a rollout pauses at: waves {max_gates} to {len(gates)} are "
            f"one gate of {len(rest)} nodes (give fewer, larger gpufleet_waves to choose where it pauses)")
    return [*kept, rest], note


def waiters_allowed(forks, budget):
    """How many nodes may wait for capacity at once: the forks left when every slot of the budget runs a node (at least 1)."""
    return max(1, int(forks) - int(budget or 0))
