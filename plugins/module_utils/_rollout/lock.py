# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rollout lock and phase record on a node: the logic behind the rollout_state module (private).

Invariant 11 of the design: a rollout holds a lock; a second rollout over the same nodes refuses to
start. The lock is the ``rollout`` section of the node state file (``_state``), changed in one
load-change-save under the state file's flock (``_state.update``), so two controllers acquiring one
node at once cannot both win. The section::

    {"id", "run", "owner", "acquired_at", "heartbeat_at", "wave", "phase", "status", "result", "updated_at",
     "phases": [{"name", "start", "end", "status", "detail"}], "detail", "before", "rollback": {"decided_by", "reason", "result"}}

``status`` ``running`` holds the node; ``done`` (finished, with ``result``) and ``released`` free it.
Times are epoch seconds from the injectable clock (``_rollout.clock``); the heartbeat is refreshed by
every change, and a lock whose heartbeat is older than ``stale_after`` is stale: reported with its
owner and age, taken over only with ``break_stale``.

``run`` is the run nonce: one random value per playbook run, made on the controller. Two runs of one rollout id (the
default id is the BOM's hash: two operators, a CLI run and an AWX job) are twins: an acquire whose nonce differs from
the holder's is refused while the holder's heartbeat is fresh, and takes the node over (with a warning) once it is stale
(a run resumed after a crash). Phases, finish and release of a run whose node was taken over are refused or ignored.

The node keeps its own evidence, so that a later run (a resumed one, another controller, an AWX job with a fresh
project folder) rebuilds its record whole: ``finish`` records its ``detail`` and, for a rolled_back or failed_drained
result, the ``rollback`` (who decided it, why, and whether the restored node validated); ``before`` (the versions before
the rollout changed the node) is kept from the first write of the rollout that gives it.
"""

from __future__ import annotations

import copy
import datetime
import json
import re
import socket

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _state
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import clock as _clock
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.ids import rollout_id_problem

ROLLOUT_ACTIONS = ("acquire", "phase", "finish", "release", "read")
PHASE_STATUSES = _state.PHASE_STATUSES
RESULTS = _state.ROLLOUT_RESULTS
RUN_NONCE = re.compile(r"[A-Za-z0-9]{8,64}")
PHASE_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
OWNER = re.compile(r"[^\x00-\x1f\x7f]{1,256}")
MAX_DETAIL = 4000
MAX_DECIDED_BY = 200
MAX_BEFORE = 16384  # characters of JSON: a few versions and one per NIC PSID
ROLLBACK_KEYS = ("decided_by", "reason", "result")
ROLLBACK_RESULTS = _state.ROLLBACK_RESULTS
# The rollback a finish result carries: rolled_back after a validated rollback, failed_drained after a failed one (or none).
ROLLBACK_OF_RESULT = {"rolled_back": "validated", "failed_drained": "failed"}
MAX_PHASES = 200
MAX_STALE = 366 * 86400
DEFAULT_STALE = 86400


class RolloutStateArgumentError(GpufleetError):
    """An option of rollout_state that cannot be used (found before the state file is read)."""


class LockRefused(GpufleetError):
    """The node is held by another rollout (or its lock is stale), or this rollout does not hold it."""


def check_params(params):
    """The options, checked; RolloutStateArgumentError names the option and what to give."""
    options = dict(params)
    problem = rollout_id_problem(params.get("rollout_id"))
    if problem:
        raise RolloutStateArgumentError(problem, option="rollout_id")
    run_nonce = params.get("run_nonce")
    if run_nonce is not None and (not isinstance(run_nonce, str) or not RUN_NONCE.fullmatch(run_nonce)):
        raise RolloutStateArgumentError("run_nonce must be 8 to 64 letters and digits, one random value per playbook run (the rollout role "
                                        "makes it on the controller)", option="run_nonce")
    action = params.get("action")
    if action not in ROLLOUT_ACTIONS:
        raise RolloutStateArgumentError(f"action must be one of {', '.join(ROLLOUT_ACTIONS)}, got {action!r}", option="action")
    owner = params.get("owner")
    if owner is not None and (not OWNER.fullmatch(owner) or not owner.strip()):
        raise RolloutStateArgumentError(f"owner {owner!r} must be 1 to 256 printable characters on one line (for example alice@ctl-01 job 42)",
                                        option="owner")
    if action == "acquire" and owner is None:
        raise RolloutStateArgumentError("action=acquire needs owner: who runs this rollout (user@controller, a CI job), shown to anyone it blocks",
                                        option="owner")
    phase = params.get("phase")
    if phase is not None and not PHASE_NAME.fullmatch(phase):
        raise RolloutStateArgumentError(f"phase {phase!r} must be a phase name (lower-case letters, digits and _, for example drain)", option="phase")
    status = params.get("status")
    if status is not None and status not in PHASE_STATUSES:
        raise RolloutStateArgumentError(f"status must be one of {', '.join(PHASE_STATUSES)}, got {status!r}", option="status")
    if action == "phase" and (phase is None or status is None):
        raise RolloutStateArgumentError("action=phase needs phase (its name) and status (started, ok, failed or skipped)", option="phase")
    next_phase = params.get("next_phase")
    if next_phase is not None:
        if not isinstance(next_phase, str) or not PHASE_NAME.fullmatch(next_phase):
            raise RolloutStateArgumentError(f"next_phase {next_phase!r} must be a phase name (lower-case letters, digits and _, for example "
                                            "driver)", option="next_phase")
        if action != "phase" or status == "started" or next_phase == phase:
            raise RolloutStateArgumentError("next_phase opens the phase that follows the one this call closes: it needs action=phase, a closing "
                                            "status (ok, failed or skipped) and another phase's name", option="next_phase")
    result = params.get("result")
    if result is not None and result not in RESULTS:
        raise RolloutStateArgumentError(f"result must be one of {', '.join(RESULTS)}, got {result!r}", option="result")
    if action == "finish" and result is None:
        raise RolloutStateArgumentError(f"action=finish needs result ({', '.join(RESULTS)})", option="result")
    detail = params.get("detail")
    if detail is not None and (len(detail) > MAX_DETAIL or "\x00" in detail):
        raise RolloutStateArgumentError(f"detail must be at most {MAX_DETAIL} characters without NUL", option="detail")
    options["rollback"] = _check_rollback(params.get("rollback"), action, result)
    options["before"] = _check_before(params.get("before"), action)
    wave = params.get("wave")
    if wave is not None and (isinstance(wave, bool) or not isinstance(wave, int) or wave < 0):
        raise RolloutStateArgumentError(f"wave must be a whole number of at least 0 (0 is the canary), got {wave!r}", option="wave")
    stale_after = params.get("stale_after", DEFAULT_STALE)
    if isinstance(stale_after, bool) or not isinstance(stale_after, int) or not 1 <= stale_after <= MAX_STALE:
        raise RolloutStateArgumentError(f"stale_after must be a whole number of seconds from 1 to {MAX_STALE}, got {stale_after!r}",
                                        option="stale_after")
    options["stale_after"] = stale_after
    options["break_stale"] = bool(params.get("break_stale"))
    options["state_file"] = params.get("state_file") or _state.DEFAULT_PATH
    return options


def _check_rollback(rollback, action, result):
    """The rollback details of a finish, checked against its result; RolloutStateArgumentError names what to give."""
    if rollback is None:
        if action == "finish" and result == "rolled_back":
            raise RolloutStateArgumentError(
                "result=rolled_back needs rollback: {decided_by, reason, result: validated} (which phase or who decided the rollback, "
                "why, and that the restored node validated), so that any later run can rebuild the node's record", option="rollback")
        return None
    if action != "finish":
        raise RolloutStateArgumentError("rollback is recorded with action=finish (the node's rolled_back or failed_drained result)",
                                        option="rollback")
    if not isinstance(rollback, dict) or sorted(rollback) != sorted(ROLLBACK_KEYS):
        keys = ", ".join(sorted(str(k) for k in rollback)) if isinstance(rollback, dict) else type(rollback).__name__
        raise RolloutStateArgumentError(f"rollback must be a mapping of exactly decided_by, reason and result, got {keys}", option="rollback")
    decided_by, reason, outcome = rollback["decided_by"], rollback["reason"], rollback["result"]
    if not isinstance(decided_by, str) or not decided_by.strip() or len(decided_by) > MAX_DECIDED_BY or "\x00" in decided_by:
        raise RolloutStateArgumentError(f"rollback.decided_by must be 1 to {MAX_DECIDED_BY} characters (the failed phase, or who asked)",
                                        option="rollback")
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_DETAIL or "\x00" in reason:
        raise RolloutStateArgumentError(f"rollback.reason must be 1 to {MAX_DETAIL} characters without NUL (the failed check and why)",
                                        option="rollback")
    if outcome not in ROLLBACK_RESULTS:
        raise RolloutStateArgumentError(f"rollback.result must be one of {', '.join(ROLLBACK_RESULTS)}, got {str(outcome)[:40]!r}",
                                        option="rollback")
    if ROLLBACK_OF_RESULT.get(result) != outcome:
        expected = ", ".join(f"{r} after a {o} rollback" for r, o in ROLLBACK_OF_RESULT.items())
        raise RolloutStateArgumentError(f"rollback.result {outcome} does not fit result={result}: a rollback is recorded only as {expected}",
                                        option="rollback")
    return {"decided_by": decided_by, "reason": reason, "result": outcome}


def _check_before(before, action):
    """The versions before the change (component: version, nic_firmware: {psid: version}), checked."""
    if before is None:
        return None
    if action not in ("acquire", "phase", "finish"):
        raise RolloutStateArgumentError("before is recorded with action acquire, phase or finish", option="before")
    if not isinstance(before, dict):
        raise RolloutStateArgumentError(f"before must be a mapping of component to version, not {type(before).__name__}", option="before")
    before = dict(before)
    for component, version in list(before.items()):
        if not isinstance(component, str) or not PHASE_NAME.fullmatch(component):
            raise RolloutStateArgumentError(f"before holds {str(component)[:40]!r}, which is not a component name (for example driver)",
                                            option="before")
        if isinstance(version, dict):
            if not all(isinstance(k, str) and (v is None or isinstance(v, (str, int, float))) for k, v in version.items()):
                raise RolloutStateArgumentError(f"before.{component} must map PSID strings to versions", option="before")
            before[component] = {k: None if v is None else str(v) for k, v in version.items()}
        elif version is None or isinstance(version, (str, int, float)):
            before[component] = None if version is None else str(version)
        else:
            raise RolloutStateArgumentError(f"before.{component} must be a version, null, or a mapping of PSID to version, not "
                                            f"{type(version).__name__}", option="before")
    if len(json.dumps(before)) > MAX_BEFORE:
        raise RolloutStateArgumentError(f"before must be at most {MAX_BEFORE} characters as JSON (the versions, not a whole fact set)",
                                        option="before")
    return before


# --- the section ---------------------------------------------------------------------------------------------


def _iso(now):
    return datetime.datetime.fromtimestamp(now, datetime.timezone.utc).replace(microsecond=0).isoformat()


def section(doc):
    """The ``rollout`` section with every key present (a file written before the lock existed has only id and phase)."""
    rollout = copy.deepcopy(doc.get("rollout") or {})  # a copy to the phases: a diff's before must not change with after
    for key in ("id", "run", "owner", "acquired_at", "heartbeat_at", "wave", "phase", "status", "result", "updated_at", "detail", "before",
                "rollback"):
        rollout.setdefault(key, None)
    rollout["phases"] = list(rollout.get("phases") or [])
    return rollout


def lock_info(rollout, now, stale_after):
    """``{"held_by", "owner", "age_s", "stale", "phase"}``: who holds the node now (``held_by`` None when free)."""
    held = rollout.get("status") == "running" and rollout.get("id")
    since = rollout.get("heartbeat_at") or rollout.get("acquired_at")
    age = None if since is None else round(max(0.0, now - since), 3)
    return {
        "held_by": rollout["id"] if held else None,
        "owner": rollout.get("owner") if held else None,
        "age_s": age if held else None,
        "stale": bool(held and (age is None or age > stale_after)),
        "phase": rollout.get("phase") if held else None,
    }


def _holder(rollout, info):
    age = "age unknown" if info["age_s"] is None else f"age {info['age_s']:.0f} s"
    return f"rollout {rollout['id']} ({rollout.get('owner') or 'owner not recorded'}, {age}, phase {rollout.get('phase') or 'none'})"


def _other_run(rollout, options):
    """True when the node is held by another run (another nonce) of this same rollout id: a twin, or the run that took over from us."""
    nonce = options.get("run_nonce")
    return (rollout["id"] == options["rollout_id"] and rollout["status"] == "running" and bool(nonce) and bool(rollout.get("run"))
            and rollout["run"] != nonce)


def _twin_refused(rollout, info, node, options):
    return LockRefused(
        f"node {node} is held by another run of the same {_holder(rollout, info)}: two runs of one rollout would work the same nodes at "
        "once. Wait for that run to finish, or stop it first. If it is no longer running (killed, crashed), this run takes the node over "
        f"once its heartbeat is older than {options['stale_after']} s (gpufleet_lock_stale_seconds; a lower value takes it over sooner)",
        node=node, lock=info,
    )


def _taken_over(rollout, info, node):
    return LockRefused(
        f"node {node} is held by another run of the same {_holder(rollout, info)}, which took it over from this run (this run's heartbeat "
        "was stale): this run no longer holds the node and records nothing on it; stop this run and let the other one finish",
        node=node, lock=info,
    )


def _not_held(rollout, rollout_id, node):
    if rollout["id"] == rollout_id and rollout["status"] == "done":
        return LockRefused(f"rollout {rollout_id} has finished on node {node} (result {rollout['result']}): nothing more to record; "
                           "a re-run skips this node", node=node)
    if rollout["status"] == "running":
        return LockRefused(f"node {node} is held by rollout {rollout['id']}, not {rollout_id}: acquire it first (action=acquire)", node=node)
    return LockRefused(f"node {node} is not held by rollout {rollout_id} (it is free): acquire it first (action=acquire)", node=node)


def _find(phases, name, open_only):
    for phase in reversed(phases):
        if phase["name"] == name and (not open_only or (phase["status"] == "started" and phase.get("end") is None)):
            return phase
    return None


def _acquire(doc, rollout, options, now, node, warnings):
    rollout_id = options["rollout_id"]
    if rollout["id"] == rollout_id:
        if rollout["status"] == "done":
            return False  # a finished rollout run again changes nothing
        if _other_run(rollout, options):
            info = lock_info(rollout, now, options["stale_after"])
            if not info["stale"]:
                raise _twin_refused(rollout, info, node, options)
            warnings.append(f"took over node {node} from an earlier run of the same {_holder(rollout, info)}: its heartbeat is stale")
            _state.append_history(doc, "rollout", "take_over_stale_run", before=rollout["run"], after=options["run_nonce"], result="ok",
                                  rollout_id=rollout_id, now=_iso(now),
                                  details={"owner": rollout.get("owner"), "age_s": info["age_s"], "phase": rollout.get("phase")})
        rollout.update(owner=options["owner"], status="running", heartbeat_at=now, acquired_at=rollout["acquired_at"] or now,
                       run=options.get("run_nonce") or rollout.get("run"))
    else:
        info = lock_info(rollout, now, options["stale_after"])
        if info["held_by"]:
            if not info["stale"]:
                raise LockRefused(
                    f"node {node} is held by {_holder(rollout, info)}; wait for it to finish, or stop it first. A second rollout over the "
                    "same nodes refuses to start (gpufleet_lock_stale_seconds makes an abandoned lock stale)",
                    node=node, lock=info,
                )
            if not options["break_stale"]:
                raise LockRefused(
                    f"node {node} is held by {_holder(rollout, info)}, and that lock is stale (no heartbeat for more than "
                    f"{options['stale_after']} s): make sure that rollout is no longer running, then rerun with break_stale=true "
                    "(gpufleet_lock_break_stale) to take the node over",
                    node=node, lock=info,
                )
            warnings.append(f"broke the stale lock of {_holder(rollout, info)} on node {node} (break_stale=true)")
            _state.append_history(doc, "rollout", "break_stale_lock", before=rollout["id"], after=rollout_id, result="ok", rollout_id=rollout_id,
                                  details={"owner": rollout.get("owner"), "age_s": info["age_s"], "phase": rollout.get("phase")},
                                  now=_iso(now))
        # A finished or released rollout's section is kept whole under "superseded" (one level): a run that is refused
        # before it does anything (its preflight found another target held) gives it back on release.
        superseded = {k: v for k, v in rollout.items() if k != "superseded"} if rollout["id"] and rollout["status"] in ("done", "released") else None
        rollout.clear()
        rollout.update(id=rollout_id, run=options.get("run_nonce"), owner=options["owner"], acquired_at=now, heartbeat_at=now, wave=None,
                       phase=None, status="running", result=None, phases=[], updated_at=None, detail=None, before=None, rollback=None)
        if superseded is not None:
            rollout["superseded"] = copy.deepcopy(superseded)
    if options.get("wave") is not None:
        rollout["wave"] = options["wave"]
    _keep_before(rollout, options)
    return True


def _keep_before(rollout, options):
    """Record the versions before the change once per rollout: a resumed run reads a node it may have changed already."""
    if options.get("before") and not rollout.get("before"):
        rollout["before"] = copy.deepcopy(options["before"])


def _phase(rollout, options, now):
    name, status, detail = options["phase"], options["status"], options.get("detail")
    phases = rollout["phases"]
    open_phase = _find(phases, name, open_only=True)
    if status == "started":
        if open_phase is None:
            phases.append({"name": name, "start": now, "end": None, "status": "started", "detail": detail})
        elif detail is not None:
            open_phase["detail"] = detail
    elif open_phase is not None:
        open_phase.update(end=now, status=status, detail=detail if detail is not None else open_phase.get("detail"))
    else:
        last = _find(phases, name, open_only=False)
        if last is not None and last["status"] == status and (detail is None or last.get("detail") == detail) and rollout["phase"] == name:
            return False  # closed already, as asked: a re-run records nothing twice
        phases.append({"name": name, "start": now, "end": now, "status": status, "detail": detail})
    del phases[: max(0, len(phases) - MAX_PHASES)]
    rollout["phase"] = name
    rollout["heartbeat_at"] = now
    if options.get("wave") is not None:
        rollout["wave"] = options["wave"]
    return True


def _phase_then_next(rollout, options, now):
    """Close ``phase`` and, with ``next_phase``, open the next one in the same write (one task on the node, not two)."""
    following = options.get("next_phase")
    if not following:
        return _phase(rollout, options, now)
    opening = {"phase": following, "status": "started", "detail": None, "wave": options.get("wave")}
    last = _find(rollout["phases"], options["phase"], open_only=False)
    detail = options.get("detail")
    if (rollout["phase"] == following and last is not None and last.get("end") is not None and last["status"] == options["status"]
            and (detail is None or last.get("detail") == detail)):
        return _phase(rollout, opening, now)  # a re-run: closed as asked, and the next one is open already
    closed = _phase(rollout, options, now)
    return _phase(rollout, opening, now) or closed


def apply(doc, options, now, node, warnings):
    """Change ``doc`` for the action (``_state.update``'s change function); True when it changed. LockRefused when refused."""
    rollout = section(doc)
    before = section(doc)
    action, rollout_id = options["action"], options["rollout_id"]
    changed = False
    if action == "acquire":
        changed = _acquire(doc, rollout, options, now, node, warnings)
    elif action == "phase":
        if rollout["id"] != rollout_id or rollout["status"] != "running":
            raise _not_held(rollout, rollout_id, node)
        if _other_run(rollout, options):
            raise _taken_over(rollout, lock_info(rollout, now, options["stale_after"]), node)
        changed = _phase_then_next(rollout, options, now)
        if changed:
            _keep_before(rollout, options)
            rollout.pop("superseded", None)  # this run has begun its work on the node: nothing is given back any more
    elif action == "finish":
        if rollout["id"] != rollout_id:
            raise _not_held(rollout, rollout_id, node)
        if _other_run(rollout, options):
            raise _taken_over(rollout, lock_info(rollout, now, options["stale_after"]), node)
        if rollout["status"] != "done" or rollout["result"] != options["result"]:
            rollout.update(status="done", result=options["result"], heartbeat_at=now, detail=options.get("detail"),
                           rollback=copy.deepcopy(options.get("rollback")))
            _keep_before(rollout, options)
            _state.append_history(doc, "rollout", "finish", after=options["result"], result="ok", rollout_id=rollout_id, now=_iso(now),
                                  details={"phases": len(rollout["phases"]), "wave": rollout["wave"]})
            changed = True
    elif action == "release":
        if _other_run(rollout, options):
            warnings.append(f"node {node} is held by another run of rollout {rollout_id}: its lock is left as it is")
        elif rollout["id"] == rollout_id and rollout["status"] == "running":
            if rollout.get("superseded") and not rollout["phases"]:
                # This run did nothing on the node (refused at its preflight): the rollout it took the node from gets its
                # finished section back as it was, so that its record and its next run find it.
                _state.append_history(doc, "rollout", "give_back", before=rollout_id, after=rollout["superseded"].get("id"), result="ok",
                                      rollout_id=rollout_id, now=_iso(now))
                doc["rollout"] = copy.deepcopy(rollout["superseded"])
                return True
            rollout.update(status="released", heartbeat_at=now)
            changed = True
        elif rollout["status"] == "running":
            warnings.append(f"node {node} is held by rollout {rollout['id']}, not {rollout_id}: its lock is left as it is")
    if changed and rollout != before:
        rollout["updated_at"] = _iso(now)
        doc["rollout"] = rollout
        return True
    return False


def node_name():
    return socket.gethostname().split(".")[0]


def run(params, check_mode=False, clock=None, node=None):
    """Do the action on the state file: the module's result (``changed``, ``rollout``, ``lock``, ``diff``, ``warnings_text``)."""
    options = check_params(params)
    now = _clock.get(clock).now()
    node = node or node_name()
    path = options["state_file"]
    warnings = []
    seen = {}

    def change(doc):
        seen["before"] = section(doc)
        changed = apply(doc, options, now, node, warnings)
        seen["after"] = section(doc)
        return changed

    if check_mode or options["action"] == "read":
        doc = _state.load(path)
        changed = change(copy.deepcopy(doc))
    else:
        changed, _doc = _state.update(path, change, purpose=f"rollout_state {options['action']} for rollout {options['rollout_id']}")
    after = seen["after"]
    return {
        "changed": changed,
        "rollout": after,
        "lock": lock_info(after, now, options["stale_after"]),
        "diff": {"before": seen["before"], "after": after},
        "warnings_text": warnings,
        "state_file": path,
    }
