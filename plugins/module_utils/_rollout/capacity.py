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
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.slurm import parse_show_nodes
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import clock as _clock
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.budget import BudgetError, max_unavailable_count
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import Scontrol, ToolError

CALL_TIMEOUT = 60  # one scontrol call answers within MessageTimeout (10 s by default); allow for a slow controller
MAX_WAIT = 86400
MAX_POLL = 3600
MAX_POOL = 100_000
LISTED = 25  # nodes named in a refusal; the rest are counted
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
ROLLOUT_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
OWNER_TAG = re.compile(r"[A-Za-z0-9._-]{1,64}")
UNAVAILABLE_BASES = frozenset(("DOWN", "FUTURE", "UNKNOWN", "ERROR"))
UNAVAILABLE_FLAGS = frozenset(
    ("DRAIN", "FAIL", "REBOOT_REQUESTED", "REBOOT_ISSUED", "MAINTENANCE", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN", "POWERING_UP")
)
NOT_IN_SLURM = "not known to Slurm"


class CapacityArgumentError(GpufleetError):
    """An option of slurm_capacity that cannot be used (found before any command runs)."""


class CapacityError(ToolError):
    """Slurm's answer cannot be read, or the wave is not admitted."""


class CapacityScontrol(Scontrol):
    # The reason's [user@time] is read in ISO 8601 whatever SLURM_TIME_FORMAT the user's shell sets.
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
    outside = [name for name in admit if name not in set(pool)]
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
    if rollout_id is not None and not ROLLOUT_ID.fullmatch(rollout_id):
        raise CapacityArgumentError(f"rollout_id {rollout_id!r} may hold only letters, digits, '.', '_' and '-' (1 to 64)", option="rollout_id")
    owner_tag = params.get("owner_tag")
    if not isinstance(owner_tag, str) or not OWNER_TAG.fullmatch(owner_tag):
        raise CapacityArgumentError(f"owner_tag {owner_tag!r} may hold only letters, digits, '.', '_' and '-' (1 to 64)", option="owner_tag")
    return {
        "pool": pool,
        "admit": admit,
        "budget": budget,
        "max_unavailable": params.get("max_unavailable"),
        "wait_timeout": _seconds(params, "wait_timeout", 0, MAX_WAIT),
        "poll_interval": _seconds(params, "poll_interval", 1, MAX_POLL),
        "rollout_id": rollout_id,
        "owner_tag": owner_tag,
    }


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


def read_nodes(scontrol):
    """``{name: node}`` of every node Slurm knows, from one ``scontrol show node -o``."""
    argv = ["show", "node", "-o"]
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
    return {"unavailable": unavailable, "counted": counted, "admitted": counted <= options["budget"]}


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
    waited_text = f"after waiting {waited:.0f} s ({samples} reads of Slurm)" if options["wait_timeout"] else "(wait_timeout 0: no wait)"
    return (
        f"capacity admission refused {waited_text}: {len(unavailable)} of the {len(options['pool'])} pool nodes are unavailable{wave}, "
        f"{found['counted']} in all, over the budget of {options['budget']} (max_unavailable {options['max_unavailable']!r}). "
        f"Unavailable: {listed or 'none'}. Nothing was changed. To go on: bring nodes back into service once they are healthy, or wait and "
        "rerun (the rollout resumes where it stopped), or make the waves smaller (gpufleet_waves), or raise gpufleet_max_unavailable "
        "(or gpufleet_capacity_wait_seconds)"
    )


def run(module, params, clock=None):
    """Read Slurm until the wave fits the budget or ``wait_timeout`` passes; the module's result, or CapacityError (with ``result``)."""
    options = check_params(params)
    clock = _clock.get(clock)
    scontrol = CapacityScontrol(module, path=params.get("scontrol_path"), required=True)
    started = clock.now()
    samples = 0
    while True:
        found = assess(read_nodes(scontrol), options)
        samples += 1
        waited = max(0.0, clock.now() - started)
        if found["admitted"] or module.check_mode or waited >= options["wait_timeout"]:
            break
        clock.sleep(min(options["poll_interval"], options["wait_timeout"] - waited))
    result = {
        "changed": False,
        "admitted": found["admitted"],
        "budget": options["budget"],
        "pool_size": len(options["pool"]),
        "unavailable": found["unavailable"],
        "counted": found["counted"],
        "admit": options["admit"],
        "waited_s": round(waited, 3),
        "samples": samples,
    }
    if not found["admitted"]:
        message = refusal(options, found, waited, samples)
        if module.check_mode:
            result["warnings_text"] = [f"check mode: {message}"]
            return result
        error = CapacityError(message)
        error.result = result
        raise error
    return result
