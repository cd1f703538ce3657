# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Capacity admission read from Slurm: the logic behind the slurm_capacity module (private).

Invariant 1 of the design: never more nodes unavailable than ``max_unavailable``, counting the ones
that are out for other reasons. The scheduler is the truth, not the playbook's memory: every poll
reads all nodes with one ``scontrol show node -o`` (parsed by ``_parsers/slurm.parse_show_nodes``).
A pool node is unavailable when Slurm shows it DOWN, with DRAIN (draining or drained), FAIL,
NOT_RESPONDING, REBOOT_REQUESTED / REBOOT_ISSUED, MAINTENANCE, POWERED_DOWN (or powering up or down,
or asked to power down), in the FUTURE, UNKNOWN or ERROR base state, or not at all (unknown to Slurm).
A wave is admitted when ``|unavailable | admit| <= budget``; otherwise it waits (polling, bounded by
``wait_timeout``) and then refuses, listing the unavailable nodes, their state and reason, and whose
they are.

Reading and draining are two steps, so two callers at once (two slices of one AWX job, two controllers)
could both read the same free capacity and both drain: more out than the budget. With ``drain_admitted``
the admission closes that gap in the scheduler itself: under a Slurm reservation used as a mutex (its
name is unique in slurmctld, so creating it is an atomic test-and-set; it expires by itself after
``MUTEX_MINUTES`` if its holder dies), it reads, judges and drains the admitted nodes with this rollout's
marker before it lets the next caller read. The next reader sees them drained.

The sliding window (``window.admission``) admits the ``admit`` nodes one by one onto the nodes out now: each must
fit the budget and, with ``spread_by``, at most ``max_per_domain`` nodes of its domain value out at once (the
``domains`` of the nodes given). ``read_jobs`` also reads each pool node's running jobs' latest end time
(``squeue``), which orders the rollout (idle nodes and nodes whose jobs end first go first).
"""

from __future__ import annotations

import os
import pwd
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.slurm import parse_show_nodes
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import clock as _clock
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import ids as _ids
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.budget import BudgetError, max_unavailable_count, whole_count
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.window import admission
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import Scontrol, Tool, ToolError

CALL_TIMEOUT = 60  # one scontrol call answers within MessageTimeout (10 s by default); allow for a slow controller
MAX_WAIT = 86400
MAX_POLL = 3600
MAX_POOL = 100_000
LISTED = 25  # nodes named in a refusal; the rest are counted
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
ROLLOUT_ID = _ids.ROLLOUT_ID  # one rule for every module that takes a rollout id
OWNER_TAG = re.compile(r"[A-Za-z0-9._-]{1,64}")
UNAVAILABLE_BASES = frozenset(("DOWN", "FUTURE", "UNKNOWN", "ERROR"))
UNAVAILABLE_FLAGS = frozenset(
    ("DRAIN", "FAIL", "REBOOT_REQUESTED", "REBOOT_ISSUED", "MAINTENANCE", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN", "POWERING_UP")
)
NOT_IN_SLURM = "not known to Slurm"
# The admission mutex: a reservation on one pool node, alive for at most this long if its holder dies.
MUTEX_MINUTES = 2
MUTEX_RETRY = 1  # seconds between two tries while another admission holds the mutex
DRAIN_REASON = re.compile(r"[^\n\r]{1,200}")
# What scontrol says when the reservation's name is taken (slurmctld ESLURM_RESERVATION_NAME_DUP, and older wordings).
MUTEX_TAKEN = re.compile(r"(?i)duplicate reservation name|reservation name .*(exists|in use)|name is (already )?in use")


class CapacityArgumentError(GpufleetError):
    """An option of slurm_capacity that cannot be used (found before any command runs)."""


class CapacityError(ToolError):
    """Slurm's answer cannot be read, or the wave is not admitted."""


class CapacityScontrol(Scontrol):
    # The reason's [user@time] is read in ISO 8601 whatever SLURM_TIME_FORMAT the user's shell sets.
    env = (("SLURM_TIME_FORMAT", "standard"),)


class CapacitySqueue(Tool):
    # Job end times in ISO 8601 (they order the rollout), whatever SLURM_TIME_FORMAT the user's shell sets.
    binary = "squeue"
    label = "squeue"
    env = (("SLURM_TIME_FORMAT", "standard"),)


# --- options ---------------------------------------------------------------------------------------------


def _names(value, option, allow_empty):
    if value is None:
        value = []
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise CapacityArgumentError(f"{option} must be a list of Slurm node names, not {value!r}", option=option)
    if not value and not allow_empty:
        raise CapacityArgumentError(f"{option} is empty: name the Slurm nodes whose capacity the budget protects (gpufleet_capacity_pool)",
                                    option=option)
    if len(value) > MAX_POOL:
        raise CapacityArgumentError(f"{option} holds {len(value)} nodes, more than {MAX_POOL}", option=option)
    seen = set()
    for name in value:
        if not isinstance(name, str) or not NODE_NAME.fullmatch(name):
            raise CapacityArgumentError(
                f"{option} holds {name!r}, which is not one Slurm NodeName (letters, digits, '.', '_' and '-'; no hostlist such as gpu[01-04])",
                option=option,
            )
        if name in seen:
            raise CapacityArgumentError(f"{option} names {name} twice: two inventory hosts map to one Slurm node (gpufleet_slurm_node_name)",
                                        option=option)
        seen.add(name)
    return list(value)


def _seconds(params, name, low, high):
    value = params.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise CapacityArgumentError(f"{name} must be a whole number of seconds from {low} to {high}, got {value!r}", option=name)
    return value


def check_params(params):
    """The options, checked and normalised (``pool``, ``admit``, ``budget``...); CapacityArgumentError names the option."""
    pool = _names(params.get("pool"), "pool", allow_empty=False)
    admit = _names(params.get("admit"), "admit", allow_empty=True)
    members = set(pool)  # once: a set per admitted node made the check O(admitted x pool)
    outside = [name for name in admit if name not in members]
    if outside:
        raise CapacityArgumentError(
            f"admit names nodes that are not in the pool: {', '.join(outside[:LISTED])}. The budget protects the pool only: add them to "
            "pool (gpufleet_capacity_pool) or leave them out of this wave",
            option="admit",
        )
    try:
        budget = max_unavailable_count(params.get("max_unavailable"), len(pool))
    except BudgetError as exc:
        raise CapacityArgumentError(str(exc), option="max_unavailable") from None
    rollout_id = params.get("rollout_id")
    problem = _ids.rollout_id_problem(rollout_id, required=False)
    if problem:
        raise CapacityArgumentError(problem, option="rollout_id")
    owner_tag = params.get("owner_tag")
    if not isinstance(owner_tag, str) or not OWNER_TAG.fullmatch(owner_tag):
        raise CapacityArgumentError(f"owner_tag {owner_tag!r} may hold only letters, digits, '.', '_' and '-' (1 to 64)", option="owner_tag")
    drain_admitted = params.get("drain_admitted", False)
    if not isinstance(drain_admitted, bool):
        raise CapacityArgumentError(f"drain_admitted must be true or false, got {drain_admitted!r}", option="drain_admitted")
    drain_reason = params.get("drain_reason") or "admitted by slurm_capacity"
    if not isinstance(drain_reason, str) or not DRAIN_REASON.fullmatch(drain_reason):
        raise CapacityArgumentError(f"drain_reason {drain_reason!r} must be one line of 1 to 200 characters", option="drain_reason")
    spread_by, domains, max_per_domain = _spread(params, pool)
    if drain_admitted and rollout_id is None:
        raise CapacityArgumentError("drain_admitted needs rollout_id: the drain carries the rollout's marker (OWNER_TAG:ROLLOUT_ID: TEXT), so "
                                    "that the rollout's own drain takes it over and only this rollout resumes it", option="rollout_id")
    return {
        "pool": pool,
        "admit": admit,
        "budget": budget,
        "max_unavailable": params.get("max_unavailable"),
        "wait_timeout": _seconds(params, "wait_timeout", 0, MAX_WAIT),
        "poll_interval": _seconds(params, "poll_interval", 1, MAX_POLL),
        "rollout_id": rollout_id,
        "owner_tag": owner_tag,
        "drain_admitted": drain_admitted,
        "drain_reason": f"{owner_tag}:{rollout_id}: {drain_reason}" if drain_admitted else None,
        "spread_by": spread_by,
        "domains": domains,
        "max_per_domain": max_per_domain,
        "read_jobs": bool(params.get("read_jobs", False)),
    }


def _spread(params, pool):
    """``(spread_by, domains, max_per_domain)`` checked: variable names, ``{pool node: {variable: value}}``, a count."""
    spread_by = params.get("spread_by") or []
    if isinstance(spread_by, str) or not isinstance(spread_by, (list, tuple)) or not all(isinstance(n, str) and n for n in spread_by):
        raise CapacityArgumentError(f"spread_by must be a list of domain variable names (for example [rack]), not {spread_by!r}", option="spread_by")
    domains = params.get("domains") or {}
    if not isinstance(domains, dict):
        raise CapacityArgumentError(f"domains must be a dict of Slurm node name: {{variable: value}}, not {type(domains).__name__}", option="domains")
    members = set(pool)
    domains = {node: values for node, values in domains.items() if node in members}  # others' domains cannot be out of the pool
    for node, values in domains.items():
        if not isinstance(values, dict) or not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in values.values()):
            raise CapacityArgumentError(f"domains of {node} must be a dict of variable: value (a string or number each)", option="domains")
    try:
        max_per_domain = whole_count(params.get("max_per_domain", 1), "max_per_domain")
    except BudgetError as exc:
        raise CapacityArgumentError(str(exc), option="max_per_domain") from None
    return list(spread_by), {node: dict(values) for node, values in domains.items()}, max_per_domain


# --- reading and judging ------------------------------------------------------------------------------------


def unavailable_why(node):
    """What makes a node (as parse_show_node returns it) unavailable: a list of Slurm's words, empty when it is available."""
    why = []
    if node["base_state"] in UNAVAILABLE_BASES:
        why.append(node["base_state"])
    why.extend(flag for flag in node["flags"] if flag in UNAVAILABLE_FLAGS)
    if node["not_responding"]:
        why.append("NOT_RESPONDING")
    return why


def is_ours(reason, owner_tag, rollout_id):
    """True when the reason is this rollout's marker ``OWNER_TAG:ROLLOUT_ID: TEXT`` (one line); informative only, it counts either way."""
    if not reason or rollout_id is None:
        return False
    return re.fullmatch(re.escape(f"{owner_tag}:{rollout_id}: ") + r"[^\n]+", reason) is not None


def read_nodes(scontrol, names=None):
    """``{name: node}`` of every node Slurm knows (or of ``names`` only), from one ``scontrol show node -o [NAMES]``."""
    argv = ["show", "node", "-o"] + ([",".join(names)] if names else [])
    rc, out, err = scontrol.run(argv, ok_rcs=None, timeout=CALL_TIMEOUT)
    cmd = [scontrol.path, *argv]
    if rc != 0:
        raise CapacityError(f"scontrol show node -o failed with exit status {rc}: {(err or out).strip()[:500]}. Is slurmctld reachable from this "
                            "host (gpufleet_slurm_client, gpufleet_slurm_environment)?", cmd=cmd, rc=rc, stdout=out, stderr=err)
    if out.strip() == "No nodes in the system":
        return {}
    try:
        records = parse_show_nodes(out)
    except ParseError as exc:
        raise CapacityError(f"{exc}. Admission cannot count what it cannot read", cmd=cmd, rc=rc, stdout=out[-4000:], stderr=err) from exc
    nodes = {}
    for record in records:
        if record["name"] in nodes:
            raise CapacityError(f"scontrol show node -o printed node {record['name']} twice", cmd=cmd, rc=rc, stdout=out[-4000:], stderr=err)
        nodes[record["name"]] = record
    return nodes


def assess(nodes, options):
    """``{"unavailable": [{node, state, reason, ours}], "counted", "admitted"}`` of one reading against the budget."""
    unavailable = []
    for name in options["pool"]:
        node = nodes.get(name)
        if node is None:
            unavailable.append({"node": name, "state": NOT_IN_SLURM, "reason": None, "ours": False})
            continue
        if unavailable_why(node):
            unavailable.append({"node": name, "state": node["state"], "reason": node["reason"],
                                "ours": is_ours(node["reason"], options["owner_tag"], options["rollout_id"])})
    out = {entry["node"] for entry in unavailable}
    counted = len(out | set(options["admit"]))
    # One by one onto the nodes out now: each must fit the budget and its domains (all of admit, or none).
    taken, why = set(out), ""
    for name in options["admit"]:
        verdict = admission(name, taken, options["budget"], options.get("domains"), options.get("spread_by"), options.get("max_per_domain", 1))
        if not verdict["admit"]:
            why = f"{name}: {verdict['why']}"
            break
        taken.add(name)
    admitted = not why and counted <= options["budget"]  # the nodes out alone may exceed it: then nothing fits
    return {"unavailable": unavailable, "counted": counted, "admitted": admitted, "why": why,
            "held_by_others": held_by_others(options["admit"], unavailable)}


def held_by_others(admit, unavailable):
    """The nodes of ``admit`` out of service for someone else (a person's drain, DOWN), in ``admit``'s order.

    The window counts such a node as out already and drains nothing, so its slot is not the rollout's: if it came back
    into service before the node's own drain step, that drain would take it out with no admission (invariant 1). The
    caller skips these nodes instead (their drain and reason are kept; a later run takes them)."""
    others = {entry["node"] for entry in unavailable if not entry["ours"]}
    return [name for name in admit if name in others]


_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
_BRACKET = re.compile(r"^(?P<head>[^\[\]]*)\[(?P<ranges>[^\[\]]+)\](?P<tail>.*)$")


def expand_hostlist(text):
    """A Slurm hostlist (``gpu-[01-03,07],cpu1``) as node names; CapacityError when it cannot be read."""
    items, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    names = []
    for item in items:
        names.extend(_expand_item(item.strip()))
    return [name for name in names if name]


def _expand_item(item):
    match = _BRACKET.match(item)
    if not match:
        if "[" in item or "]" in item:
            raise CapacityError(f"squeue printed the node list {item!r}, which is not a hostlist")
        return [item]
    heads = []
    for part in match.group("ranges").split(","):
        low, _dash, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()) or (high and int(high) < int(low)) or (high and int(high) - int(low) > MAX_POOL):
            raise CapacityError(f"squeue printed the node list {item!r}, whose range {part!r} cannot be read")
        for number in range(int(low), int(high or low) + 1):
            heads.append(f"{match.group('head')}{number:0{len(low)}d}")
    return [head + rest for head in heads for rest in _expand_item(match.group("tail"))]


def parse_job_ends(text, pool):
    """``{node: end}`` of ``squeue -h -o '%e|%N'``: each pool node's latest job end (ISO 8601), or "Unknown" when a job has none."""
    ends = {}
    members = set(pool)
    for line in text.splitlines():
        if not line.strip():
            continue
        end, sep, nodes = line.partition("|")
        if not sep:
            raise CapacityError(f"squeue printed {line[:200]!r}, not END|NODELIST")
        end = end.strip() if _ISO.fullmatch(end.strip()) else "Unknown"
        for node in expand_hostlist(nodes.strip()):
            if node not in members:
                continue
            known = ends.get(node)
            if known == "Unknown" or (known is not None and end != "Unknown" and known >= end):
                continue
            ends[node] = end
    return ends


def read_job_ends(squeue, pool):
    """Each pool node's latest running job's end from one ``squeue`` call; idle nodes are left out."""
    argv = ["-h", "-t", "RUNNING,COMPLETING,CONFIGURING", "-o", "%e|%N"]
    rc, out, err = squeue.run(argv, ok_rcs=None, timeout=CALL_TIMEOUT)
    if rc != 0:
        raise CapacityError(f"squeue failed with exit status {rc}: {(err or out).strip()[:500]}", cmd=[squeue.path, *argv], rc=rc, stdout=out,
                            stderr=err)
    return parse_job_ends(out, pool)


def describe(entry):
    reason = f" {entry['reason']!r}" if entry["reason"] else ""
    return f"{entry['node']} {entry['state']}{reason} ({'ours' if entry['ours'] else 'others'})"


def refusal(options, found, waited, samples):
    unavailable = found["unavailable"]
    out = {entry["node"] for entry in unavailable}
    adding = [name for name in options["admit"] if name not in out]
    listed = "; ".join(describe(entry) for entry in unavailable[:LISTED])
    if len(unavailable) > LISTED:
        listed += f"; and {len(unavailable) - LISTED} more"
    wave = f" and this wave would take out {len(adding)} more ({', '.join(adding[:LISTED])})" if adding else ""
    if found.get("why") and found["counted"] <= options["budget"]:  # within the budget: a domain rule holds it
        when = f"after waiting {waited:.0f} s" if options["wait_timeout"] else "(wait_timeout 0: no wait)"
        return (f"capacity admission refused {when}: "
                f"{found['why']}. Nothing was changed. To go on: wait for a node of that domain to come back, or raise "
                "gpufleet_wave_max_per_domain")
    waited_text = f"after waiting {waited:.0f} s ({samples} reads of Slurm)" if options["wait_timeout"] else "(wait_timeout 0: no wait)"
    return (
        f"capacity admission refused {waited_text}: {len(unavailable)} of the {len(options['pool'])} pool nodes are unavailable{wave}, "
        f"{found['counted']} in all, over the budget of {options['budget']} (max_unavailable {options['max_unavailable']!r}). "
        f"Unavailable: {listed or 'none'}. Nothing was changed. To go on: bring nodes back into service once they are healthy, or wait and "
        "rerun (the rollout resumes where it stopped), or make the waves smaller (gpufleet_waves), or raise gpufleet_max_unavailable "
        "(or gpufleet_capacity_wait_seconds)"
    )


class AdmissionMutex:
    """A Slurm reservation named ``<owner_tag>-admission`` on one pool node: whoever creates it holds the mutex.

    slurmctld refuses a second reservation of the same name, so the creation is an atomic test-and-set in the
    scheduler, shared by every controller and every slice whatever host runs scontrol. It lasts MUTEX_MINUTES at
    most (a holder that dies frees it by expiry), IGNORE_JOBS and OVERLAP let it sit on a busy or already reserved
    node, and it takes nothing out of service (no MAINT flag: the node stays available; for the instant it exists,
    only the reservation's user may start new jobs on that one node).
    """

    def __init__(self, scontrol, owner_tag, node):
        self.scontrol, self.node = scontrol, node
        self.name = f"{owner_tag}-admission"
        self.held = False
        self.notes = []  # a release that failed: the drain is done, the mutex expires by itself (a warning, not a failure)

    def _user(self):
        try:
            return pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            return str(os.geteuid())

    def acquire(self):
        """True when this call now holds the mutex, False when another admission holds it; CapacityError otherwise."""
        argv = ["create", "reservation", f"ReservationName={self.name}", "StartTime=now", f"Duration={MUTEX_MINUTES}",
                f"Nodes={self.node}", f"Users={self._user()}", "Flags=IGNORE_JOBS,OVERLAP"]
        rc, out, err = self.scontrol.run(argv, ok_rcs=None, timeout=CALL_TIMEOUT)
        if rc == 0:
            self.held = True
            return True
        if MUTEX_TAKEN.search(f"{out}\n{err}"):
            return False
        raise CapacityError(
            f"scontrol create reservation {self.name} (the admission mutex) failed with exit status {rc}: {(err or out).strip()[:500]}. "
            "drain_admitted needs a Slurm administrator or operator (the user that drains nodes) on this host",
            cmd=[self.scontrol.path, *argv], rc=rc, stdout=out, stderr=err,
        )

    def release(self):
        if not self.held:
            return
        self.held = False
        argv = ["delete", f"ReservationName={self.name}"]
        rc, out, err = self.scontrol.run(argv, ok_rcs=None, timeout=CALL_TIMEOUT)
        if rc != 0:
            self.notes.append(f"scontrol delete reservation {self.name} (the admission mutex) failed with exit status {rc}: "
                              f"{(err or out).strip()[:300]}. It expires by itself within {MUTEX_MINUTES} minutes; until then other "
                              "admissions wait")


def drain(scontrol, nodes, reason):
    """Drain ``nodes`` (one ``scontrol update``) with the rollout's marker; CapacityError when Slurm refuses."""
    argv = ["update", f"NodeName={','.join(nodes)}", "State=DRAIN", f"Reason={reason}"]
    rc, out, err = scontrol.run(argv, ok_rcs=None, timeout=CALL_TIMEOUT)
    if rc != 0:
        raise CapacityError(f"scontrol update State=DRAIN of {', '.join(nodes)} failed with exit status {rc}: {(err or out).strip()[:500]}",
                            cmd=[scontrol.path, *argv], rc=rc, stdout=out, stderr=err)


def _admit_once(scontrol, options, mutex, check_mode):
    """One try: ``(found, drained)``; found is None when another admission holds the mutex (nothing was read)."""
    if mutex is None or check_mode:
        return assess(read_nodes(scontrol), options), []
    if not mutex.acquire():
        return None, []
    try:
        found = assess(read_nodes(scontrol), options)
        drained = []
        if found["admitted"]:
            out = {entry["node"] for entry in found["unavailable"]}
            drained = [name for name in options["admit"] if name not in out]
            taken = _taken_since(scontrol, drained)
            if taken:
                # Slurm has no compare-and-set: a drain set since our read is someone else's, and ours would overwrite
                # its reason. Back off; the next reading counts the node as held by others.
                found = dict(found, admitted=False, why=f"{', '.join(taken)} went out of service for someone else while this admission "
                                                        "prepared its drain (their drain and reason are kept)")
                return found, []
            if drained:
                drain(scontrol, drained, options["drain_reason"])
        return found, drained
    finally:
        mutex.release()


def _taken_since(scontrol, names):
    """Of ``names`` (read in service a moment ago), those Slurm now shows out of service: one more read, of them only,
    right before the drain (the window left is one scontrol round trip, as slurm_node's)."""
    if not names:
        return []
    fresh = read_nodes(scontrol, names)
    return [name for name in names if name not in fresh or unavailable_why(fresh[name])]


def _why_not(options, found):
    """Why the admit nodes do not fit this reading ('' when they do): the domain rule, or the budget's count."""
    if found["admitted"]:
        return ""
    if found.get("why"):
        return found["why"]
    return f"{found['counted']} nodes would be out, over the budget of {options['budget']}"


def run(module, params, clock=None):
    """Read Slurm until the wave fits the budget or ``wait_timeout`` passes; the module's result, or CapacityError (with ``result``)."""
    options = check_params(params)
    clock = _clock.get(clock)
    scontrol = CapacityScontrol(module, path=params.get("scontrol_path"), required=True)
    mutex = AdmissionMutex(scontrol, options["owner_tag"], sorted(options["pool"])[0]) if options["drain_admitted"] and options["admit"] else None
    started = clock.now()
    samples = 0
    found, drained, contended, waited_why = None, [], 0, ""
    while True:
        try_found, drained = _admit_once(scontrol, options, mutex, module.check_mode)
        if try_found is None:
            contended += 1
        else:
            found = try_found
            samples += 1
            waited_why = waited_why or _why_not(options, found)
        waited = max(0.0, clock.now() - started)
        if (found is not None and (found["admitted"] or module.check_mode)) or waited >= options["wait_timeout"]:
            break
        pause = MUTEX_RETRY if try_found is None else options["poll_interval"]
        clock.sleep(min(pause, max(options["wait_timeout"] - waited, 0)))
    if found is None:  # the mutex stayed taken for the whole wait: read once, without it, to say what Slurm shows
        found = assess(read_nodes(scontrol), options)
        found["admitted"] = False
        samples += 1
    result = {
        "changed": bool(drained),
        "admitted": found["admitted"],
        "budget": options["budget"],
        "pool_size": len(options["pool"]),
        "unavailable": found["unavailable"],
        "counted": found["counted"],
        "admit": options["admit"],
        "drained": drained,
        "held_by_others": found.get("held_by_others", []),
        "waited_s": round(waited, 3),
        "samples": samples,
        "waited_why": waited_why if waited_why and (samples > 1 or not found["admitted"]) else "",
    }
    if options["read_jobs"]:
        result["job_ends"] = read_job_ends(CapacitySqueue(module, path=params.get("squeue_path"), required=True), options["pool"])
    if mutex is not None and mutex.notes:
        result["warnings_text"] = list(mutex.notes)
    if module.check_mode and options["drain_admitted"] and found["admitted"]:
        out = {entry["node"] for entry in found["unavailable"]}
        result["drained"] = [name for name in options["admit"] if name not in out]
        result["changed"] = bool(result["drained"])
    if not found["admitted"]:
        message = refusal(options, found, waited, samples)
        if contended:
            message += (f" Another admission held the Slurm reservation {options['owner_tag']}-admission (the admission mutex) at "
                        f"{contended} of the tries; it expires by itself within {MUTEX_MINUTES} minutes if its holder died")
        if module.check_mode:
            result["warnings_text"] = [*result.get("warnings_text", []), f"check mode: {message}"]
            return result
        error = CapacityError(message)
        error.result = result
        raise error
    return result
