# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Drain, resume and reboot one Slurm node: the logic behind the slurm_node module (private).

Reads the node with ``scontrol show node -o`` and ``squeue -h -o %i,%u,%j`` (parsed in
``_parsers/slurm.py``); plans what to change
from the node's state flags and drain reason; never touches a drain whose reason does
not carry our marker (``<owner_tag>:<rollout_id>: <reason>``) unless forced.
"""

from __future__ import annotations

import re
import time

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.slurm import parse_show_node, parse_squeue
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import MAX_TIMEOUT, Scontrol, Tool, ToolError

# One Slurm call should answer within MessageTimeout (10 s by default); allow for a slow controller.
CALL_TIMEOUT = 60
_NOT_FOUND = re.compile(r"Node \S+ not found")
# Options are checked with fullmatch: "$" would let a trailing newline through ("r1\n").
ROLLOUT_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
OWNER_TAG = re.compile(r"[A-Za-z0-9._-]{1,64}")
# One Slurm NodeName: no hostlist expression (gpu[01-04]), no list (a,b), no space.
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
# Printable text; no newline (Slurm prints each reason line apart), no tab or other control character.
REASON_TEXT = re.compile(r"[^\x00-\x1f\x7f]{1,1024}")
POLL_INTERVAL_MAX = 3600


class SlurmArgumentError(GpufleetError):
    """An option of slurm_node that cannot be used (found before any command runs)."""


class SlurmError(ToolError):
    """Slurm answered, but not with what the plan needs (unknown node, drain that does not finish)."""


class Squeue(Tool):
    binary = "squeue"
    label = "squeue"


class NodeScontrol(Scontrol):
    # The reason's [user@time] is found by its time format: ISO 8601, whatever SLURM_TIME_FORMAT the user's shell sets.
    env = (("SLURM_TIME_FORMAT", "standard"),)


# --- options -----------------------------------------------------------------------------------------


def _whole_number(params, name, low, high):
    value = params.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SlurmArgumentError(f"{name} must be a whole number of seconds from {low} to {high}, got {value!r}", option=name)


def check_params(params):
    """Refuse unusable options before the first command; return nothing (SlurmArgumentError names the option)."""
    node = params.get("node")
    if node is not None and not NODE_NAME.fullmatch(node):
        raise SlurmArgumentError(
            f"node {node!r} is not one Slurm NodeName: letters, digits, '.', '_' and '-', no hostlist (gpu[01-04]), list or space",
            option="node",
        )
    rollout_id = params.get("rollout_id")
    if rollout_id is not None and not ROLLOUT_ID.fullmatch(rollout_id):
        raise SlurmArgumentError(
            f"rollout_id {rollout_id!r} may hold only letters, digits, '.', '_' and '-' (1 to 64, no space or newline)", option="rollout_id",
        )
    owner_tag = params.get("owner_tag")
    if not isinstance(owner_tag, str) or not OWNER_TAG.fullmatch(owner_tag):
        raise SlurmArgumentError(
            f"owner_tag {owner_tag!r} may hold only letters, digits, '.', '_' and '-' (1 to 64, no ':', space or newline)", option="owner_tag",
        )
    reason = params.get("reason")
    if reason is not None and (not REASON_TEXT.fullmatch(reason) or not reason.strip()):
        raise SlurmArgumentError(
            f"reason {reason!r} must be 1 to 1024 printable characters on one line (no newline, tab or other control character)",
            option="reason",
        )
    _whole_number(params, "timeout", 1, MAX_TIMEOUT)
    _whole_number(params, "poll_interval", 1, POLL_INTERVAL_MAX)


# --- our reason ------------------------------------------------------------------------------------


def make_reason(owner_tag, rollout_id, reason):
    """``gpufleet:<rollout_id>: <reason>``, or ``gpufleet: <reason>`` without a rollout id."""
    marker = f"{owner_tag}:{rollout_id}:" if rollout_id else f"{owner_tag}:"
    return f"{marker} {reason}".rstrip()


def reason_owner(reason, owner_tag):
    """``(ours, rollout_id)``: whether the reason carries our marker, and the rollout it names."""
    if not reason or not reason.startswith(owner_tag + ":"):
        return False, None
    rest = reason[len(owner_tag) + 1 :]
    head, sep, _tail = rest.partition(":")
    if sep and head and ROLLOUT_ID.fullmatch(head):
        return True, head
    return True, None


# --- the node and the plan -------------------------------------------------------------------------


class SlurmNode:
    """Reads and changes one node through scontrol (and squeue for its jobs)."""

    def __init__(self, module, name, owner_tag="gpufleet", rollout_id=None, scontrol_path=None, squeue_path=None):
        self.module = module
        self.name = name
        self.owner_tag = owner_tag
        self.rollout_id = rollout_id
        self.scontrol = NodeScontrol(module, path=scontrol_path, required=True)
        self.squeue = Squeue(module, path=squeue_path)

    # reading

    def show(self):
        """The node as parse_show_node returns it, plus ``ours`` and ``rollout_id`` of its reason (no jobs)."""
        rc, out, err = self.scontrol.run(["show", "node", "-o", self.name], ok_rcs=None, timeout=CALL_TIMEOUT)
        if rc != 0:
            if _NOT_FOUND.search(out + err):
                raise SlurmError(
                    f"Slurm does not know node {self.name}: check NodeName in slurm.conf / the node option",
                    cmd=[self.scontrol.path, "show", "node", "-o", self.name], rc=rc, stdout=out, stderr=err,
                )
            raise SlurmError(
                f"scontrol show node {self.name} failed with exit status {rc}: {(err or out).strip()[:500]}",
                cmd=[self.scontrol.path, "show", "node", "-o", self.name], rc=rc, stdout=out, stderr=err,
            )
        try:
            node = parse_show_node(out)
        except ParseError as exc:
            raise SlurmError(str(exc), cmd=[self.scontrol.path, "show", "node", "-o", self.name], rc=rc, stdout=out, stderr=err) from exc
        if node["name"] != self.name:
            raise SlurmError(f"scontrol show node {self.name} answered for node {node['name']}", rc=rc, stdout=out, stderr=err)
        ours, rollout = reason_owner(node["reason"], self.owner_tag)
        node["ours"] = ours
        node["rollout_id"] = rollout
        return node

    def jobs(self):
        """Jobs on the node (``[{"id", "user", "name"}]``), or None when squeue is not installed."""
        if not self.squeue.available:
            return None
        out = self.squeue.run(["-w", self.name, "-h", "-o", "%i,%u,%j"], timeout=CALL_TIMEOUT)[1]
        try:
            return parse_squeue(out)
        except ParseError as exc:
            raise SlurmError(str(exc), cmd=[self.squeue.path, "-w", self.name], stdout=out) from exc

    def read(self):
        node = self.show()
        node.pop("fields")
        node["jobs"] = self.jobs()
        return node

    def owned(self, node):
        """The node's reason is ours and, when we have a rollout id, names our rollout."""
        if not node["ours"]:
            return False
        return self.rollout_id is None or node["rollout_id"] == self.rollout_id

    # acting

    def update(self, *args):
        self.scontrol.run(["update", f"NodeName={self.name}", *args], timeout=CALL_TIMEOUT)

    def wait_drained(self, timeout, interval):
        """Poll until DRAINED (DRAIN flag and no jobs); return the seconds waited; SlurmError on timeout."""
        start = time.monotonic()
        while True:
            node = self.show()
            if not node["drain"]:
                raise SlurmError(f"node {self.name} lost its drain while we waited (state {node['state']}, reason {node['reason']!r})")
            if node["drain_state"] == "drained":
                return round(time.monotonic() - start, 1)
            waited = time.monotonic() - start
            if waited >= timeout:
                jobs = self.jobs()
                listed = ", ".join(f"{j['id']} ({j['user']}, {j['name']})" for j in jobs or []) or "unknown (squeue not installed)"
                error = SlurmError(
                    f"node {self.name} is still draining after {int(timeout)} s ({node['state']}); jobs still running: {listed}. "
                    "The drain stays in place: wait longer (timeout), or cancel the jobs.",
                )
                error.jobs = jobs
                raise error
            time.sleep(min(interval, max(timeout - waited, 0.1)))


def _diff_view(node):
    return {"state": node["state"], "reason": node["reason"]}


def plan(node, desired, want_reason, owned, force=False):
    """What to do: ``{"action": "drain"|"resume"|"reboot"|None, "drained_by_others": bool, "note": str|None}``."""
    held = node["drain"] or node["down"] or bool({"REBOOT_REQUESTED", "REBOOT_ISSUED"} & set(node["flags"]))
    others = held and not owned
    if desired == "drained":
        if others:
            note = (
                f"node {node['name']} is already out of service for someone else ({node['state']}, reason {node['reason']!r} "
                f"set by {node['reason_user']}): left as it is, counted as unavailable"
            )
            return {"action": None, "drained_by_others": True, "note": note}
        if node["drain"] and node["reason"] == want_reason:
            return {"action": None, "drained_by_others": False, "note": None}
        return {"action": "drain", "drained_by_others": False, "note": None}
    if desired == "resumed":
        if not held:
            return {"action": None, "drained_by_others": False, "note": None}
        if others and not force:
            note = (
                f"node {node['name']} was taken out of service by someone else ({node['state']}, reason {node['reason']!r} "
                f"set by {node['reason_user']} at {node['reason_time']}): not resumed. Resume it by hand once its owner agrees."
            )
            return {"action": None, "drained_by_others": True, "note": note}
        if others:
            note = f"force: resuming node {node['name']} although someone else drained it (reason {node['reason']!r}, by {node['reason_user']})"
            return {"action": "resume", "drained_by_others": True, "note": note}
        return {"action": "resume", "drained_by_others": False, "note": None}
    if desired == "rebooted":
        if others:
            return {"action": None, "drained_by_others": True, "note": None}
        reason = node["reason"] or ""
        if reason.startswith(want_reason) and (
            {"REBOOT_REQUESTED", "REBOOT_ISSUED"} & set(node["flags"]) or "reboot complete" in reason
        ):
            return {"action": None, "drained_by_others": False, "note": None}
        return {"action": "reboot", "drained_by_others": False, "note": None}
    raise ValueError(f"unknown state {desired!r}")


def _predict(node, action, want_reason):
    """The node's diff view after the action (for check mode)."""
    if action == "drain":
        flags = [f for f in node["flags"] if f != "DRAIN"]
        state = "+".join([node["base_state"], "DRAIN", *flags])
        return {"state": state, "reason": want_reason}
    if action == "resume":
        base = "IDLE" if node["down"] else node["base_state"]
        flags = [f for f in node["flags"] if f not in ("DRAIN", "REBOOT_REQUESTED", "REBOOT_ISSUED")]
        return {"state": "+".join([base, *flags]), "reason": None}
    if action == "reboot":
        flags = [f for f in node["flags"] if f not in ("DRAIN", "REBOOT_REQUESTED")]
        return {"state": "+".join([node["base_state"], "DRAIN", "REBOOT_REQUESTED", *flags]), "reason": want_reason}
    return _diff_view(node)


def _recheck(slurm, step, desired, want_reason, force, result):
    """Read the node again right before acting: a drain someone set since the first read wins over ours.

    Slurm has no compare-and-set for a node's state, so this narrows the window between our read and
    our update to one scontrol round trip (invariant: never overwrite someone else's drain reason).
    Returns the step to carry out (``action`` None when we back off) and updates ``result``.
    """
    node = slurm.show()
    fresh = plan(node, desired, want_reason, slurm.owned(node), force=force)
    if fresh["action"] is None:
        # Someone else's drain appeared (kept as it is), or the node already is as wanted: nothing to do.
        if fresh["drained_by_others"]:
            result["warnings_text"].append(
                f"node {slurm.name} was taken out of service by someone else while this task prepared its {step['action']} "
                f"({node['state']}, reason {node['reason']!r} set by {node['reason_user']} at {node['reason_time']}): "
                "their drain is kept, nothing was changed"
            )
        result.update(changed=False, action=None, drained_by_others=fresh["drained_by_others"])
        return fresh
    if fresh["drained_by_others"] and not step["drained_by_others"]:
        # force: the user asked to act on someone else's drain too; say so.
        result["drained_by_others"] = True
        if fresh["note"]:
            result["warnings_text"].append(fresh["note"])
    return step


def run(module, params):
    """Read, plan, act, re-read. Returns the module result (``warnings_text`` for module.warn)."""
    slurm = SlurmNode(
        module, params["node"], owner_tag=params["owner_tag"], rollout_id=params.get("rollout_id"),
        scontrol_path=params.get("scontrol_path"), squeue_path=params.get("squeue_path"),
    )
    desired = params["state"]
    want_reason = make_reason(params["owner_tag"], params.get("rollout_id"), params.get("reason") or "")
    before = slurm.read()
    step = plan(before, desired, want_reason, slurm.owned(before), force=params.get("force", False))
    result = {
        "changed": step["action"] is not None,
        "node": slurm.name,
        "action": step["action"],
        "drained_by_others": step["drained_by_others"],
        "reason": want_reason if desired != "resumed" else None,
        "before": before,
        "warnings_text": [step["note"]] if step["note"] else [],
        "waited_s": 0,
    }
    check = module.check_mode
    if step["action"] and not check:
        step = _recheck(slurm, step, desired, want_reason, params.get("force", False), result)
    if step["action"] and not check:
        if step["action"] == "drain":
            slurm.update("State=DRAIN", f"Reason={want_reason}")
        elif step["action"] == "resume":
            slurm.update("State=RESUME")
        elif step["action"] == "reboot":
            slurm.scontrol.run(
                ["reboot", "ASAP", f"nextstate={params['nextstate'].upper()}", f"reason={want_reason}", slurm.name], timeout=CALL_TIMEOUT
            )
    if desired == "drained" and params.get("wait") and not step["drained_by_others"] and not check:
        try:
            result["waited_s"] = slurm.wait_drained(params["timeout"], params["poll_interval"])
        except SlurmError as exc:
            exc.result = dict(result, after=slurm.read())
            raise
    after = before if check else slurm.read()
    result["after"] = after
    if desired == "drained" and result["drained_by_others"]:
        # Callers counting unavailable nodes see whether the other drain still waits for jobs, and which.
        result["drain_state"] = after["drain_state"]
        result["jobs"] = after["jobs"]
    result["diff"] = {"before": _diff_view(before), "after": _predict(before, step["action"], want_reason) if check else _diff_view(after)}
    return result
