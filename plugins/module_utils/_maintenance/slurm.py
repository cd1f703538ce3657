# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Drain, resume and reboot one Slurm node: the logic behind the slurm_node module (private).

Reads the node with ``scontrol show node -o`` and ``squeue -h -o %i,%u,%j`` (parsed in
``_parsers/slurm.py``), judges whose its state is (``judge``: ours only with exactly our marker
``<owner_tag>:<rollout_id>: <reason>``, set by us, in a state we cause), plans, acts, reads again.
A node that is not ours is never changed unless a resume is forced.
"""

from __future__ import annotations

import os
import pwd
import re
import time

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.slurm import REBOOT_FLAGS, parse_show_node, parse_slurm_user, parse_squeue
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import ids as _ids
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import MAX_TIMEOUT, Scontrol, Tool, ToolError

# One Slurm call should answer within MessageTimeout (10 s by default); allow for a slow controller.
CALL_TIMEOUT = 60
_NOT_FOUND = re.compile(r"Node \S+ not found")
# BootTime as scontrol prints it (SLURM_TIME_FORMAT=standard): when slurmd last registered a boot.
_BOOT_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
# Options are checked with fullmatch: "$" would let a trailing newline through ("r1\n").
ROLLOUT_ID = _ids.ROLLOUT_ID  # one rule for every module that takes a rollout id
OWNER_TAG = re.compile(r"[A-Za-z0-9._-]{1,64}")
# One Slurm NodeName: no hostlist expression (gpu[01-04]), no list (a,b), no space.
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
# Printable text; no newline (Slurm prints each reason line apart), no tab or other control character.
REASON_TEXT = re.compile(r"[^\x00-\x1f\x7f]{1,1024}")
# A job id scancel is given: a job (1234), an array task (1234_7) or a heterogeneous job component (1234+1), as squeue
# prints the jobs running on a node. Nothing that scancel could read as an option, a filter or a second argument.
SCANCEL_JOB_ID = re.compile(r"[0-9]{1,10}(?:_[0-9]{1,10}|\+[0-9]{1,10})?")
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
    if rollout_id is None and not (params.get("state") == "resumed" and params.get("force")):
        raise SlurmArgumentError(
            "rollout_id is required: the marker OWNER_TAG:ROLLOUT_ID: in the drain reason is how this module knows a drain is its own, "
            "and without it a resume could put back in service a node that another rollout drained. Pass the rollout's id "
            "(the same one the drain used); only state=resumed with force=true goes without it.",
            option="rollout_id",
        )
    problem = _ids.rollout_id_problem(rollout_id, required=False)
    if problem:
        raise SlurmArgumentError(problem, option="rollout_id")
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

# What slurmctld appends to a reason itself (set_node_reboot_reason, as SlurmUser) during `scontrol reboot`.
REBOOT_NOTES = ("reboot issued", "reboot complete", "reboot timed out")
# Base states that are no usable node: a node that never registered, or one Slurm has no name for.
_NOT_A_NODE_YET = frozenset(("FUTURE", "UNKNOWN", "ERROR"))


def make_reason(owner_tag, rollout_id, reason):
    """``<owner_tag>:<rollout_id>: <reason>`` (``gpufleet:2026-06-01-r1: driver upgrade``)."""
    return f"{owner_tag}:{rollout_id}: {reason}"


def split_reason(reason, owner_tag):
    """``{"rollout_id", "text", "notes"}`` of a reason that is exactly ``<owner_tag>:<rollout_id>: <text>``, else None.

    ``notes`` are Slurm's own `` : reboot issued`` / `` : reboot complete`` / `` : reboot timed out`` at the end.
    One line only: a reason with a second line was changed by someone (we never write a newline).
    """
    if not reason:
        return None
    match = re.fullmatch(re.escape(owner_tag) + r":(?P<rollout>[A-Za-z0-9._-]{1,64}): (?P<text>[^\n]+)", reason)
    if not match:
        return None
    text, notes = _strip_notes(match.group("text"))
    if not text:
        return None
    return {"rollout_id": match.group("rollout"), "text": text, "notes": notes}


def _strip_notes(reason):
    """``(reason without Slurm's trailing reboot notes, [notes])``; linear: one pointer walks back from the end."""
    end, notes = len(reason), []
    while True:
        for note in REBOOT_NOTES:
            if reason.endswith(" : " + note, 0, end) and end > len(note) + 3:
                end -= len(note) + 3
                notes.append(note)
                break
        else:
            return reason[:end], notes[::-1]


def reason_owner(reason, owner_tag):
    """``(marked, rollout_id)``: whether the reason is exactly in our marker's form, and the rollout it names."""
    parts = split_reason(reason, owner_tag)
    return (True, parts["rollout_id"]) if parts else (False, None)


def current_user():
    """``{"name", "uid"}`` of the user this module runs as: the user Slurm records as the setter of our reasons."""
    uid = os.geteuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:  # no passwd entry: Slurm prints the number too
        name = str(uid)
    return {"name": name, "uid": str(uid)}


def judge(node, owner_tag, rollout_id, users):
    """Whose the node's state is: ``{"hold": "in_service" | "ours" | "others", "why": str | None, "foreign_reason": bool}``.

    Ours means all of: the reason is exactly ``<owner_tag>:<rollout_id>: <text>`` with our rollout id,
    Slurm says it was set by one of ``users`` (when it says who), and the node is out of service only in
    ways we cause: the DRAIN flag, a reboot we asked for (REBOOT_REQUESTED / REBOOT_ISSUED), or DOWN after
    our reboot completed. FAIL, another DOWN, FUTURE / UNKNOWN and every reason of someone else are
    theirs. ``users(parts, user)`` returns the names and uids accepted as the setter of a reason of ours
    (SlurmUser too when Slurm appended a reboot note).
    """
    reason, state = node["reason"], node["state"]
    held = node["drain"] or node["down"] or bool(REBOOT_FLAGS & set(node["flags"]))
    if node["base_state"] in _NOT_A_NODE_YET:
        return _others(f"it is {node['base_state']} in Slurm (no registered, usable node): nothing this rollout set")
    if node["fail"]:
        return _others("it has the FAIL flag, set by an administrator or Slurm (a drain would replace it, a resume clear it)")
    marker = f"{owner_tag}:{rollout_id}:"
    parts = split_reason(reason, owner_tag)
    why = None
    if reason is None:
        why = f"it is {state} with no reason, which this rollout never leaves" if held else None
    elif rollout_id is None:  # force without rollout_id: no drain is known to be ours
        why = f"its reason {reason!r} cannot be ours: no rollout_id was given"
    elif parts is None:
        why = f"its reason {reason!r} does not start with our marker {marker} (one line, '{marker} TEXT')"
    elif parts["rollout_id"] != rollout_id:
        why = f"its reason {reason!r} names rollout {parts['rollout_id']}, not {rollout_id}"
    elif node["reason_user"] is not None and node["reason_user"] not in users(parts, node["reason_user"]):
        accepted = " or ".join(sorted(users(parts, node["reason_user"])))
        why = f"its reason {reason!r} carries our marker but was set by {node['reason_user']}, not by {accepted} (this task's user)"
    if why:
        if held or reason is not None:
            return {"hold": "others", "why": why, "foreign_reason": reason is not None}
        return {"hold": "in_service", "why": None, "foreign_reason": False}
    if not held:
        return {"hold": "in_service", "why": None, "foreign_reason": False}
    if node["drain"] or REBOOT_FLAGS & set(node["flags"]):
        return {"hold": "ours", "why": None, "foreign_reason": False}
    # DOWN without DRAIN: ours only right after our own reboot (scontrol reboot nextstate=DOWN) completed.
    if parts["notes"] and parts["notes"][-1] == "reboot complete":
        return {"hold": "ours", "why": None, "foreign_reason": False}
    if "reboot timed out" in parts["notes"]:
        return _others("our reboot timed out and Slurm set it DOWN: look at the node before resuming it")
    return _others(f"it is {state}, which this rollout did not set (only DRAIN, a reboot it asked for, or DOWN after that reboot)")


def _without_notes(reason):
    """The reason without the reboot notes Slurm appended (`` : reboot issued``...)."""
    return _strip_notes(reason)[0]


def _others(why):
    return {"hold": "others", "why": why, "foreign_reason": False}


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
        me = current_user()
        self.our_users = {me["name"], me["uid"]}
        self._slurm_user = None

    # reading

    def show(self):
        """The node as parse_show_node returns it, plus ``ours``, ``rollout_id``, ``hold`` and ``hold_why`` (no jobs)."""
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
            raise SlurmError(
                f"{exc}. Nothing was changed.", cmd=[self.scontrol.path, "show", "node", "-o", self.name], rc=rc, stdout=out, stderr=err,
            ) from exc
        if node["name"] != self.name:
            raise SlurmError(f"scontrol show node {self.name} answered for node {node['name']}", rc=rc, stdout=out, stderr=err)
        node["boot_time"] = _boot_time(node["fields"].get("BootTime"), self.name, out)
        node["rollout_id"] = reason_owner(node["reason"], self.owner_tag)[1]
        verdict = judge(node, self.owner_tag, self.rollout_id, self.accepted_users)
        node["ours"] = verdict["hold"] == "ours"
        node["hold"] = verdict["hold"]
        node["hold_why"] = verdict["why"]
        node["foreign_reason"] = verdict["foreign_reason"]
        return node

    def accepted_users(self, parts, user):
        """Who may have set a reason of ours: us, and SlurmUser when Slurm appended a reboot note (asked only then)."""
        if user in self.our_users or not parts["notes"]:
            return self.our_users
        return self.our_users | self.slurm_user()

    def slurm_user(self):
        """``{name, uid}`` of SlurmUser (``scontrol show config``), asked once."""
        if self._slurm_user is None:
            out = self.scontrol.run(["show", "config"], timeout=CALL_TIMEOUT)[1]
            try:
                user = parse_slurm_user(out)
            except ParseError as exc:
                raise SlurmError(f"{exc}. Nothing was changed.", cmd=[self.scontrol.path, "show", "config"], stdout=out) from exc
            self._slurm_user = {user["name"], user["uid"]}
        return self._slurm_user

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
            if node["hold"] != "ours":
                raise SlurmError(
                    f"node {self.name} was taken over by someone else while we waited ({node['state']}, reason {node['reason']!r} "
                    f"set by {node['reason_user']}): {node['hold_why']}. Their drain is kept; this node is not ours to upgrade now."
                )
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


def _boot_time(value, name, out):
    """Slurm's BootTime of the node (``2026-06-01T10:12:44``), None when Slurm prints none (``None``, ``Unknown``: a zero time,
    as scontrol prints it for a node that has not registered a boot, or no field)."""
    if value is None or value in ("None", "Unknown"):
        return None
    if not _BOOT_TIME.fullmatch(value):
        raise SlurmError(
            f"scontrol show node {name}: BootTime={value[:40]!r} is not a time like 2026-06-01T10:12:44 (SLURM_TIME_FORMAT must be "
            "unset or standard). Nothing was changed.", stdout=out,
        )
    return value


def _diff_view(node):
    return {"state": node["state"], "reason": node["reason"]}


def _someone(node):
    return f"({node['state']}, reason {node['reason']!r} set by {node['reason_user']} at {node['reason_time']})"


def plan(node, desired, want_reason, force=False):
    """What to do: ``{"action": "drain"|"resume"|"reboot"|None, "drained_by_others": bool, "note": str|None}``.

    ``node`` carries ``hold`` and ``hold_why`` (see judge).
    """
    hold, why = node["hold"], node["hold_why"]
    name = node["name"]
    if desired == "drained":
        if hold == "others":
            note = f"node {name} is out of service for someone else or holds their reason {_someone(node)}: {why}. Left as it is, counted as unavailable"
            return {"action": None, "drained_by_others": True, "note": note}
        reason = node["reason"] or ""
        if node["drain"] and (reason == want_reason or (hold == "ours" and _without_notes(reason) == want_reason)):
            return {"action": None, "drained_by_others": False, "note": None}
        # DOWN after our own reboot (nextstate=DOWN): Slurm cleared the DRAIN flag, and with ReturnToService=2 it returns
        # the node to service at its next answer. The drain keeps Slurm's notes, so the reboot stays known as done.
        keep = hold == "ours" and _without_notes(reason) == want_reason and reason.endswith(" : reboot complete")
        return {"action": "drain", "drained_by_others": False, "note": None, "reason": reason if keep else want_reason}
    if desired == "resumed":
        if hold == "in_service":
            return {"action": None, "drained_by_others": False, "note": None}
        if hold == "others" and not force:
            note = f"node {name} {_someone(node)}: {why}. It is not resumed: resume it by hand once its owner agrees (or force: true)"
            return {"action": None, "drained_by_others": True, "note": note}
        if hold == "others":
            note = f"force: resuming node {name} although it is not ours {_someone(node)}: {why}"
            return {"action": "resume", "drained_by_others": True, "note": note}
        return {"action": "resume", "drained_by_others": False, "note": None}
    if desired == "rebooted":
        if hold == "others":
            note = f"node {name} {_someone(node)}: {why}. No reboot asked: left as it is, counted as unavailable"
            return {"action": None, "drained_by_others": True, "note": note}
        reason = node["reason"] or ""
        same = _without_notes(reason) == want_reason
        ours_done = same and (REBOOT_FLAGS & set(node["flags"]) or reason.endswith(" : reboot complete"))
        if hold == "ours" and ours_done:
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
    fresh = plan(node, desired, want_reason, force=force)
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
    want_reason = make_reason(params["owner_tag"], params["rollout_id"], params["reason"]) if desired != "resumed" else None
    before = slurm.read()
    step = plan(before, desired, want_reason, force=params.get("force", False))
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
            slurm.update("State=DRAIN", f"Reason={step.get('reason', want_reason)}")
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
    # A node that asked Slurm to reboot itself may go down before one more scontrol answers, and with it the
    # task's own connection: report what was asked instead of racing the reboot with a read.
    self_reboot = step["action"] == "reboot" and params.get("runs_on_node", False) and not check
    if self_reboot:
        result["warnings_text"].append(
            f"node {slurm.name} asked Slurm to reboot itself: the reboot may cut this task's connection before its result arrives. "
            "Run state=rebooted delegated to another Slurm client (a login or controller host) and wait for the node there"
        )
    after = before if check or self_reboot else slurm.read()
    result["after"] = after
    if desired == "drained" and result["drained_by_others"]:
        # Callers counting unavailable nodes see whether the other drain still waits for jobs, and which.
        result["drain_state"] = after["drain_state"]
        result["jobs"] = after["jobs"]
    predicted = check or self_reboot
    predicted_reason = step.get("reason", want_reason)
    result["diff"] = {"before": _diff_view(before), "after": _predict(before, step["action"], predicted_reason) if predicted else _diff_view(after)}
    return result


# --- a reboot Slurm was asked for that never starts ----------------------------------------------------
#
# slurmctld sends REQUEST_REBOOT_NODES once (agent.c: retry 0) and, when it cannot reach slurmd (busy, restarting),
# keeps the node REBOOT_ISSUED without pinging it until ResumeTimeout, then sets it DOWN "reboot timed out"
# (node_mgr.c check_reboot_nodes). Asking Slurm again changes nothing: `scontrol reboot` on a node already
# REBOOT_ISSUED is skipped and answers success, and `scontrol cancel_reboot` is refused ("Reboot already in progress")
# (Slurm 22.05, proc_req.c _slurm_rpc_reboot_nodes, node_mgr.c update_node). What Slurm still waits for is a boot:
# slurmd registering with a boot time after the request completes the reboot it asked for (nextstate and reason
# kept), however the node was rebooted. So the second request goes to the node itself (its own reboot command, what
# slurmd's RebootProgram would have run), and the third to its BMC (ComputerSystem.Reset), the path that works when
# the node's OS does not.

# Who can be asked to reboot the node, in the order they are asked.
REBOOT_PATHS = ("slurm", "node", "bmc")
_REBOOT_PATH_TEXT = {
    "slurm": "Slurm (scontrol reboot)",
    "node": "the node's own reboot command",
    "bmc": "its BMC (Redfish ComputerSystem.Reset ForceRestart)",
}


def scancel_ids(jobs):
    """The job ids of ``jobs`` (slurm_node's ``jobs``: ``[{"id", "user", "name"}]``) for ``scancel``, each once, in order.

    SlurmArgumentError naming the entry (``jobs[2].id``) for anything that is not a job id Slurm prints for a running
    job (digits, ``<job>_<task>`` of an array, ``<job>+<offset>`` of a heterogeneous job): such a value came from
    somewhere else than squeue, and nothing is cancelled.
    """
    if not isinstance(jobs, (list, tuple)):
        raise SlurmArgumentError(f"jobs must be a list of jobs ({{id, user, name}} as slurm_node returns them), got {type(jobs).__name__}")
    ids = []
    for index, job in enumerate(jobs):
        value = job.get("id") if isinstance(job, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not SCANCEL_JOB_ID.fullmatch(value):
            shown = repr(value)[:40] if isinstance(value, str) else type(value).__name__
            raise SlurmArgumentError(
                f"jobs[{index}].id {shown} is not a Slurm job id (digits, <job>_<task> of an array or <job>+<offset> of a "
                "heterogeneous job, as squeue prints them): nothing was cancelled"
            )
        if value not in ids:
            ids.append(value)
    return ids


def reboot_next(started, asked, node=None, bmc=False, waited=None):
    """What to do once a reboot asked of ``asked[-1]`` was given its time to start.

    ``started``: the node went down within that time (its boot id changed, or it stopped answering).
    ``asked``: the paths asked so far, in order (``["slurm"]``, then ``["slurm", "node"]``...).
    ``node``: Slurm's view of the node read after the wait (slurm_node's ``before``), or None.
    ``bmc``: whether the node's BMC can be asked (address and credentials set).
    ``waited``: the seconds each path was given, for the message.
    Returns ``{"action": "wait" | "node" | "bmc" | "fail", "path": str | None, "why": str}``: ``wait`` for the node to
    come back (``path`` is who rebooted it), ask ``node`` or ``bmc`` next, or ``fail`` with ``why``.
    """
    asked = list(asked or [])
    if not asked or any(p not in REBOOT_PATHS for p in asked) or len(set(asked)) != len(asked):
        raise SlurmArgumentError(f"asked must list each of {', '.join(REBOOT_PATHS)} at most once, in order; got {asked!r}")
    last = asked[-1]
    if started:
        return {"action": "wait", "path": last, "why": f"the node went down after {_REBOOT_PATH_TEXT[last]} was asked"}
    node = node if isinstance(node, dict) else {}
    flags = set(node.get("flags") or [])
    within = f" within {waited} s" if waited is not None else ""
    if node.get("hold") == "others":
        return {"action": "fail", "path": None,
                "why": f"the node did not go down{within} and Slurm shows it {node.get('state')}: {node.get('hold_why')}"}
    if last == "slurm" and "REBOOT_REQUESTED" in flags and "REBOOT_ISSUED" not in flags and not node.get("not_responding"):
        # Not lost: Slurm has not sent it yet (it reboots a node once idle; ASAP keeps new jobs off meanwhile). A node
        # whose slurmd does not respond is never sent it (controller.c _queue_reboot_msg): that one is asked below.
        jobs = node.get("jobs") or []
        return {"action": "wait", "path": "slurm",
                "why": f"Slurm holds the reboot until the node is idle ({len(jobs)} job(s) on it, state {node.get('state')})"}
    if "REBOOT_ISSUED" in flags:
        detail = " (Slurm shows the reboot issued: its request to slurmd was lost)"
    elif node.get("not_responding"):
        detail = " (its slurmd does not respond: Slurm cannot send it the reboot)"
    else:
        detail = ""
    lost = f"the node did not go down{within} after {_REBOOT_PATH_TEXT[last]} was asked{detail}"
    if "node" not in asked:
        return {"action": "node", "path": None, "why": f"{lost}; asking {_REBOOT_PATH_TEXT['node']}"}
    if "bmc" not in asked and bmc:
        return {"action": "bmc", "path": None, "why": f"{lost}; asking {_REBOOT_PATH_TEXT['bmc']}"}
    tried = ", ".join(_REBOOT_PATH_TEXT[p] for p in asked)
    hint = "" if bmc else " (no BMC is configured for it: set bmc_address, bmc_user and bmc_password to let the rollout reset it)"
    return {"action": "fail", "path": None,
            "why": f"{lost}; asked {tried} and it is still up on its old boot{hint}: look at the node (slurmd, its console)"}
