# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A node's record in the rollout's evidence, built whole from its state file and this run's facts (private).

The node state file is the truth of what a rollout did on a node: its ``rollout`` section (rollout_state) holds the
result, the wave, the phases and the rollback's details (``rollback``), the versions before the change
(``before``) and the finish detail (``detail``). A run that resumes a rollout (after a killed run, a stop, or a
run that rolled nodes back) has no facts of its own for the nodes an earlier run finished: their record comes from the
state file, and from the earlier run's evidence file (``prior``) only where it agrees with the state file (its
validation checks, its drain). A record that would contradict itself (a rolled_back node with no rollback anywhere,
a rollback on an upgraded node, this run's result against the state file's) is refused, naming the node and what to do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

FINISHED = ("upgraded", "unchanged", "rolled_back", "failed_drained", "skipped")
RESULTS = (*FINISHED, "not_started")
ROLLBACK_KEYS = ("decided_by", "reason", "result")
ROLLBACK_RESULTS = ("validated", "failed")
CHECK_KEYS = ("name", "status", "message")
RECORD_KEYS = ("node", "rollout_id", "wave", "domain", "result", "before", "after", "phases", "checks", "rollback", "drain", "skip_reason")
LOST = "lost from the run (unreachable)"


class RecordConflict(GpufleetError):
    """The facts of a node contradict each other: no record is written that could mislead."""

    def __init__(self, msg, node=None, field=None):
        super().__init__(msg, node=node, field=field)


def _mapping(value):
    return value if isinstance(value, Mapping) else {}


def _flag(value):
    """A yes/no fact as Ansible may hand it over (a bool, or its text from an older templating)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


def plan_wave(node, plan):
    """The node's wave in ``plan`` (the wave_plan result): 0 for a canary, 1, 2... for a wave, None when not planned."""
    plan = _mapping(plan)
    if node in (plan.get("canary") or []):
        return 0
    for index, wave in enumerate(plan.get("waves") or [], start=1):
        if node in (wave or []):
            return index
    return None


def rollback_from_phases(phases):
    """The rollback as a state file without ``rollback`` records it: the last closed rollback phase and the failed phase before it.

    ``{"decided_by": <the failed phase>, "reason": <its detail>, "result": validated|failed}``, or None when the phases
    hold no closed rollback with a failed phase before it (nothing to say who decided it).
    """
    phases = [p for p in phases or [] if isinstance(p, Mapping)]
    closed = [i for i, p in enumerate(phases) if p.get("name") == "rollback" and p.get("status") in ("ok", "failed")]
    if not closed:
        return None
    last = closed[-1]
    failed = next((p for p in reversed(phases[:last]) if p.get("status") == "failed" and p.get("name") != "rollback"), None)
    if failed is None:
        return None
    return {
        "decided_by": str(failed.get("name")),
        "reason": str(failed.get("detail") or f"{failed.get('name')} failed"),
        "result": "validated" if phases[last].get("status") == "ok" else "failed",
    }


def _rollback(value, node, source):
    if value is None:
        return None
    if not isinstance(value, Mapping) or any(not isinstance(value.get(key), str) or not value.get(key) for key in ROLLBACK_KEYS):
        raise RecordConflict(
            f"node {node}: the rollback details of {source} are not {{decided_by, reason, result}} strings: "
            "run the rollout with this collection's roles (they record them), or look at the node's history (gpufleet.lifecycle.node_state)",
            node=node, field="rollback",
        )
    if value["result"] not in ROLLBACK_RESULTS:
        raise RecordConflict(f"node {node}: the rollback result of {source} is {value['result'][:40]!r}, not validated or failed",
                             node=node, field="rollback.result")
    return {key: value[key] for key in ROLLBACK_KEYS}


def _prior(prior, node, rollout_id, result):
    """The earlier evidence of the node when it is this rollout's record of the same result; else {} (stale or damaged)."""
    if isinstance(prior, str):
        try:
            prior = json.loads(prior) if prior.strip() else None
        except ValueError:
            return {}  # a damaged copy of older evidence: the state file is the truth
    prior = _mapping(prior)
    if prior.get("node") != node or prior.get("rollout_id") != rollout_id or prior.get("result") != result:
        return {}
    return prior


def _checks(checks):
    return [{key: check.get(key) for key in CHECK_KEYS if key in check} for check in checks or [] if isinstance(check, Mapping)]


def _conflict(node, what, todo, field):
    return RecordConflict(f"node {node}: {what}: {todo}", node=node, field=field)


def _result(node, rollout_id, run, section):
    """The node's result: the state file's for a node an earlier run finished; this run's otherwise (the state file agreeing)."""
    ran = run.get("result") or "not_started"
    if ran not in RESULTS:
        raise _conflict(node, f"this run's result is {str(ran)[:40]!r}", "expected one of " + ", ".join(RESULTS), "result")
    recorded = section.get("result") if section.get("status") == "done" else None
    if recorded is not None and recorded not in FINISHED:
        raise _conflict(node, f"its state file records the result {str(recorded)[:40]!r} for rollout {rollout_id}",
                        "expected one of " + ", ".join(FINISHED) + "; look at the file with gpufleet.lifecycle.node_state", "result")
    if _flag(run.get("settled")):
        if recorded is None:
            raise _conflict(node, f"this run found it finished by rollout {rollout_id} ({ran}) but its state file no longer records that",
                            "another run or a person changed the file during this run; run the same command again once nothing else runs", "result")
        if recorded != ran:
            raise _conflict(node, f"this run found it {ran} by rollout {rollout_id} but its state file now says {recorded}",
                            "another run changed the file during this run; run the same command again once nothing else runs", "result")
        return recorded
    if ran == "not_started":
        return recorded or ran  # the run lost track of a node its state file says is finished: the file is the truth
    if recorded is not None and recorded != ran:
        raise _conflict(node, f"this run finished it {ran} but its state file records {recorded} for rollout {rollout_id}",
                        "another run of the rollout wrote the file at the same time; stop it, then run the same command again", "result")
    return ran


def _check_rollback(node, rollout_id, result, rollback):
    if result == "rolled_back":
        if rollback is None:
            raise _conflict(
                node, f"its result is rolled_back (rollout {rollout_id}) but neither this run nor its state file records the rollback's "
                "details (no rollback entry, no rollback phase after a failed phase)",
                "the evidence cannot say who decided the rollback and why. Read what the node's history says "
                "(gpufleet.lifecycle.node_state), keep that with the report, and roll the node out again under a new gpufleet_rollout_id",
                "rollback")
        if rollback["result"] != "validated":
            raise _conflict(node, "its result is rolled_back but its rollback failed (a failed rollback leaves the node failed_drained)",
                            "look at the node's state file (gpufleet.lifecycle.node_state) and at the node itself before trusting it", "rollback.result")
    elif result == "failed_drained":
        if rollback is not None and rollback["result"] != "failed":
            raise _conflict(node, "its result is failed_drained but its rollback was validated (a validated rollback resumes the node, "
                            "rolled_back)", "look at the node's state file (gpufleet.lifecycle.node_state) and at Slurm's view of the node",
                            "rollback.result")
    elif rollback is not None:
        raise _conflict(node, f"its result is {result} but a rollback is recorded for it in rollout {rollout_id}",
                        "a rolled-back node stays rolled back for its rollout; look at the node's state file (gpufleet.lifecycle.node_state)",
                        "rollback")


def _skip_reason(run, section, prior, result, settled):
    if run.get("skip_reason"):
        return run["skip_reason"]
    if settled and result == "skipped":
        skipped = [p for p in section.get("phases") or [] if isinstance(p, Mapping) and p.get("status") == "skipped" and p.get("detail")]
        recorded = section.get("detail") or (skipped[-1]["detail"] if skipped else None)
        if recorded:
            return recorded
    return prior.get("skip_reason") or run.get("lost") or None


def node_record(node, rollout_id, run, section=None, plan=None, prior=None):
    """The node's record for rollout_report: every field, from the state file section and this run's facts.

    ``run``: this run's facts of the node, ``{"result", "settled", "versions_at_start", "versions_after", "checks",
    "rollback", "drain", "skip_reason", "lost"}`` (``settled``: an earlier run of this rollout finished it, this run did
    nothing to it; ``versions_at_start``: what the node ran when this run read it; ``versions_after``: read after this run
    changed it, or None; ``lost``: why the node gave no answer, when it did not). ``section``: the node's ``rollout``
    section (rollout_state read); another rollout's section says nothing of this one. ``prior``: the record the earlier
    run's evidence holds for the node (a mapping or its JSON text), used only for a settled node of the same result.
    RecordConflict names the node, the contradiction and what to do.
    """
    run = _mapping(run)
    section = _mapping(section)
    if section.get("id") != rollout_id:
        section = {}
    settled = _flag(run.get("settled"))
    result = _result(node, rollout_id, run, section)
    prior = _prior(prior, node, rollout_id, result) if settled else {}

    rollback = None if settled else _rollback(run.get("rollback"), node, "this run")
    if rollback is None:
        rollback = _rollback(section.get("rollback"), node, "its state file")
    if rollback is None and result in ("rolled_back", "failed_drained"):
        rollback = rollback_from_phases(section.get("phases")) or _rollback(prior.get("rollback"), node, "the earlier evidence")
    _check_rollback(node, rollout_id, result, rollback)

    at_start = dict(_mapping(run.get("versions_at_start")))
    before = dict(_mapping(section.get("before"))) or (at_start if not settled else dict(_mapping(prior.get("before"))))
    after = run.get("versions_after")
    if isinstance(after, Mapping):
        after = dict(after)
    elif settled and result != "failed_drained":
        # Finished by an earlier run and not touched since (another rollout would own the section): what it runs now. A
        # node left drained has no after, as in the run that left it (its versions were not read).
        after = dict(_mapping(prior.get("after"))) or at_start
    else:
        after = at_start if result in ("skipped", "unchanged") else {}

    wave = section.get("wave")
    if isinstance(wave, bool) or not isinstance(wave, int):
        wave = plan_wave(node, plan)
    drain = prior.get("drain") if settled else run.get("drain")
    return {
        "node": node,
        "rollout_id": rollout_id,
        "wave": wave,
        "domain": dict(_mapping(_mapping(_mapping(plan).get("domains")).get(node))),
        "result": result,
        "before": before,
        "after": after,
        "phases": [dict(p) for p in section.get("phases") or [] if isinstance(p, Mapping)],
        "checks": _checks(prior.get("checks") if settled else run.get("checks")),
        "rollback": rollback,
        "drain": dict(drain) if isinstance(drain, Mapping) else None,
        "skip_reason": _skip_reason(run, section, prior, result, settled),
    }


def lost_reason(slurm_read, slurm=None):
    """Why a target gave no record: lost from the run, and what Slurm shows of it (``slurm``: {state, reason, ours}, None: in service).

    ``slurm_read`` False: Slurm was not read (another backend, or the read failed), so nothing more is known.
    """
    if not slurm_read:
        return LOST
    if not isinstance(slurm, Mapping):
        return LOST + "; in service in Slurm"
    state, reason = slurm.get("state") or "out of service", slurm.get("reason") or ""
    if slurm.get("ours"):
        return (f"{LOST}; Slurm shows it {state}, drained by this rollout ({reason}): it stays out of service until it answers and "
                "the rollout is run again, which resumes it, or a person resumes it")
    return f"{LOST}; Slurm shows it {state}" + (f": {reason}" if reason else "")


# What a node's time went to, by the phases its state file records (names as rollout_state writes them).
WAITING_FOR_CAPACITY = ("admission",)
WAITING_FOR_JOBS = ("drain",)
OBSERVATION = ("soak",)
OWN_WORK = ("ofed", "nic_firmware", "gpu_firmware", "driver", "activate", "validate", "resume", "rollback")


def _closed_seconds(phases, names):
    spans = [p["end"] - p["start"] for p in phases if p["name"] in names and p.get("end") is not None]
    return round(sum(spans), 3) if spans else None


def phase_times(phases):
    """Where the node's time went, from its recorded phases only (a phase not recorded, or still open, counts as unknown: None).

    ``start``: its first step after the preflight (admitted: the admission or the drain), None when it had none.
    ``queued_s``: from the end of its last preflight before that to that step (its turn in the plan, capacity).
    ``capacity_s``: its admission phases (waiting for capacity in Slurm). ``jobs_s``: its drain (waiting for its own
    jobs to end). ``work_s``: its own steps (firmware, driver, activation, validation, resume, rollback).
    ``observation_s``: the soak (the wait the user asked for before it is judged again).
    """
    phases = [p for p in phases or [] if isinstance(p, Mapping) and isinstance(p.get("start"), (int, float))]
    steps = [p["start"] for p in phases if p.get("name") != "preflight"]
    start = min(steps) if steps else None
    preflights = [p["end"] for p in phases if p.get("name") == "preflight" and p.get("end") is not None and start is not None and p["end"] <= start]
    return {
        "start": start,
        "queued_s": round(start - max(preflights), 3) if preflights else None,
        "capacity_s": _closed_seconds(phases, WAITING_FOR_CAPACITY),
        "jobs_s": _closed_seconds(phases, WAITING_FOR_JOBS),
        "work_s": _closed_seconds(phases, OWN_WORK),
        "observation_s": _closed_seconds(phases, OBSERVATION),
    }
