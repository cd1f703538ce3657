# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""How a node starts a rollout run (the preflight's verdict on it), from what the preflight read.

From the node's rollout section (``rollout_state`` action read), the pool nodes Slurm shows out of service and the
read-only health check: whether this rollout finished the node (settled: not touched again by the same rollout id),
was interrupted on it (resuming), is held by a live run (busy: nothing may load its GPUs), is out of service for
someone else (held) or unhealthy, and so skipped - and the node's result so far. One function, so that the preflight
sets the node's facts in one task (roles/rollout/tasks/preflight.yml).
"""

from __future__ import annotations


class NodeStartError(ValueError):
    """A read that is not a rollout_state read, or an out-of-service list that is not a list of {node, ours, ...}."""


def _mapping(value, what):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise NodeStartError(f"{what} must be a mapping, not {type(value).__name__}")
    return value


def held_by_others(unavailable, slurm_name):
    """The entry of ``unavailable`` (slurm_capacity's) for ``slurm_name`` when someone else holds it out of service, else {}."""
    if unavailable is None:
        return {}
    if not isinstance(unavailable, (list, tuple)):
        raise NodeStartError(f"unavailable must be a list of {{node, state, reason, ours}}, not {type(unavailable).__name__}")
    for item in unavailable:
        entry = _mapping(item, "each entry of unavailable")
        if entry.get("node") == slurm_name and not entry.get("ours"):
            return entry
    return {}


def unhealthy(baseline):
    """The failed checks of the read-only health check, as 'name: message' ([] when it did not run or was skipped).

    A health check without checks (the module failed) is one failed check named gpu_validate with its message.
    """
    baseline = _mapping(baseline, "baseline")
    if not baseline or baseline.get("skipped"):
        return []
    checks = baseline.get("checks")
    if checks is None:
        checks = [{"name": "gpu_validate", "status": "fail", "message": baseline.get("msg", "no result")}]
    return [f"{c.get('name')}: {c.get('message')}" for c in checks if _mapping(c, "each check").get("status") == "fail"]


def node_start(read, rollout_id, run_nonce, slurm_name, unavailable=None, baseline=None):
    """The preflight's verdict on one node: a dict of done, resuming, prior_result, busy, held, skip_reason, skipped and result.

    ``read`` is rollout_state's read result ({rollout, lock}); ``unavailable`` slurm_capacity's list of nodes out of
    service; ``baseline`` the health check's result (None or skipped when it did not run). ``result`` is the node's
    result so far: the prior result of a node this rollout finished, ``skipped`` for a skipped one, else ``not_started``.
    """
    read = _mapping(read, "read")
    rollout = _mapping(read.get("rollout"), "read.rollout")
    lock = _mapping(read.get("lock"), "read.lock")
    mine = rollout.get("id", "") == rollout_id
    status = rollout.get("status", "")
    done = mine and status == "done"
    resuming = mine and status == "running" and any(
        _mapping(p, "each phase").get("name") != "preflight" for p in rollout.get("phases") or [])
    prior = rollout.get("result", "") if mine else ""
    # Held by a live run (another rollout, or another run of this one): its lock refuses this run, and meanwhile that run
    # may be installing a driver there, so nothing may load the node's GPUs.
    busy = lock.get("held_by") is not None and not lock.get("stale", False) and rollout.get("run", "") != run_nonce
    held = held_by_others(unavailable, slurm_name)
    if held:
        skip_reason = f"out of service for someone else: {held.get('state', '')} {held.get('reason', '')}"
    else:
        failed = unhealthy(baseline)
        skip_reason = f"unhealthy before the change: {'; '.join(failed)}" if failed else ""
    return {
        "done": done, "resuming": resuming, "prior_result": prior, "busy": busy, "held": held,
        "skip_reason": skip_reason, "skipped": bool(skip_reason),
        "result": prior if done else ("skipped" if skip_reason else "not_started"),
    }
