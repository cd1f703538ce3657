"""A node's record, built whole from its state file section and this run's facts (issue 22: a resumed run keeps everything).

Each case is a table row: the state file's rollout section, this run's facts, the earlier evidence; then the record's
fields that matter, or the contradiction refused (naming the node and what to do).
"""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.rollout_records import validate_record
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import record as _record

RID = "r-0123456789"
T = 1_764_590_000.0
OLD = {"driver": "570.124.06", "fabricmanager": "570.124.06", "gpu_firmware": None, "nic_firmware": {}}
NEW = {"driver": "580.95.05", "fabricmanager": "580.95.05", "gpu_firmware": None, "nic_firmware": {}}
PLAN = {"canary": ["gpu-01"], "waves": [["gpu-02", "gpu-03"], ["gpu-04"]], "order": ["gpu-01", "gpu-02", "gpu-03", "gpu-04"],
        "domains": {"gpu-03": {"rack": "r2"}}}
ROLLBACK = {"decided_by": "validate", "reason": "xid: Xid 79 on GPU 1", "result": "validated"}


def phase(name, start, end, status="ok", detail=None):
    return {"name": name, "start": T + start, "end": None if end is None else T + end, "status": status, "detail": detail}


UPGRADE_PHASES = [phase("preflight", 0, 0), phase("drain", 10, 20), phase("driver", 20, 60), phase("activate", 60, 90),
                  phase("validate", 90, 100), phase("resume", 100, 101)]
# As a state file written before rollout_state kept the rollback: the failed phase, then the rollback phase.
ROLLED_BACK_PHASES = [phase("preflight", 0, 0), phase("drain", 10, 20), phase("driver", 20, 60), phase("activate", 60, 90),
                      phase("validate", 90, 100, "failed", "xid: Xid 79 on GPU 1"), phase("rollback", 100, 180, "ok", "restored nvidia_driver")]


def section(result=None, status="done", phases=None, wave=1, **extra):
    out = {"id": RID, "status": status, "result": result, "wave": wave, "phases": UPGRADE_PHASES if phases is None else phases}
    out.update(extra)
    return out


def settled(result, **extra):
    """This run's facts of a node an earlier run of the rollout finished: it read the node (NEW now) and did nothing."""
    out = {"result": result, "settled": True, "versions_at_start": NEW, "rollback": None, "checks": [], "skip_reason": None}
    out.update(extra)
    return out


CASES = {
    # The failure: a node rolled back by an earlier run; the resumed run has no fact of it but its state file.
    "settled rolled_back, rollback kept by the state file": dict(
        node="gpu-03", run=settled("rolled_back", versions_at_start=OLD),
        section=section("rolled_back", phases=ROLLED_BACK_PHASES, rollback=ROLLBACK, before=OLD),
        want={"result": "rolled_back", "rollback": ROLLBACK, "before": OLD, "after": OLD, "wave": 1, "domain": {"rack": "r2"}}),
    "settled rolled_back, an older state file: the rollback from its phases": dict(
        node="gpu-03", run=settled("rolled_back", versions_at_start=OLD), section=section("rolled_back", phases=ROLLED_BACK_PHASES),
        want={"result": "rolled_back", "rollback": ROLLBACK, "before": {}, "after": OLD}),
    "settled failed_drained after a failed rollback, from its phases": dict(
        node="gpu-02", run=settled("failed_drained", versions_at_start=OLD),
        section=section("failed_drained", phases=[*ROLLED_BACK_PHASES[:-1], phase("rollback", 100, 180, "failed", "reboot timed out")]),
        want={"result": "failed_drained", "rollback": {"decided_by": "validate", "reason": "xid: Xid 79 on GPU 1", "result": "failed"},
              "after": {}}),
    # A node an earlier (killed) run upgraded: its before from the state file, not this run's read (which is the after).
    "settled upgraded, no earlier evidence": dict(
        node="gpu-01", run=settled("upgraded"), section=section("upgraded", wave=0, before=OLD),
        want={"result": "upgraded", "before": OLD, "after": NEW, "wave": 0, "rollback": None, "checks": [], "phases": UPGRADE_PHASES}),
    "settled upgraded, the earlier evidence adds its checks": dict(
        node="gpu-01", run=settled("upgraded"), section=section("upgraded", wave=0, before=OLD),
        prior={"node": "gpu-01", "rollout_id": RID, "result": "upgraded", "before": OLD, "after": NEW, "drain": {"ours": True, "reason": "r"},
               "checks": [{"name": "xid", "status": "pass", "message": "", "observed": 0}]},
        want={"checks": [{"name": "xid", "status": "pass", "message": ""}], "drain": {"ours": True, "reason": "r"}}),
    "settled upgraded, earlier evidence of another result is stale and ignored": dict(
        node="gpu-01", run=settled("upgraded"), section=section("upgraded", before=OLD),
        prior={"node": "gpu-01", "rollout_id": RID, "result": "not_started", "checks": [{"name": "x", "status": "fail"}]},
        want={"checks": [], "result": "upgraded"}),
    "settled upgraded, earlier evidence as damaged JSON text is ignored": dict(
        node="gpu-01", run=settled("upgraded"), section=section("upgraded", before=OLD), prior='{"node": "gpu-01", ',
        want={"checks": [], "before": OLD}),
    "settled upgraded, earlier evidence as JSON text": dict(
        node="gpu-01", run=settled("upgraded"), section=section("upgraded", before=OLD),
        prior=json.dumps({"node": "gpu-01", "rollout_id": RID, "result": "upgraded", "checks": [{"name": "ecc", "status": "pass"}]}),
        want={"checks": [{"name": "ecc", "status": "pass"}]}),
    "settled skipped: the reason the state file kept": dict(
        node="gpu-04", run=settled("skipped"), section=section("skipped", detail="drain failed: jobs outlived the timeout"),
        want={"skip_reason": "drain failed: jobs outlived the timeout", "after": NEW}),
    "settled skipped, an older state file: the skipped phase's detail": dict(
        node="gpu-04", run=settled("skipped"), section=section("skipped", phases=[phase("drain", 1, 2, "skipped", "held by alice")]),
        want={"skip_reason": "held by alice"}),
    # Nodes this run worked on.
    "upgraded by this run": dict(
        node="gpu-02", run={"result": "upgraded", "versions_at_start": OLD, "versions_after": NEW,
                            "checks": [{"name": "xid", "status": "pass", "message": "none", "observed": [1]}], "drain": {"ours": True}},
        section=section("upgraded", before=OLD),
        want={"before": OLD, "after": NEW, "checks": [{"name": "xid", "status": "pass", "message": "none"}], "drain": {"ours": True},
              "rollback": None, "skip_reason": None}),
    "resumed by this run: the state file's before wins over this run's read of a half-changed node": dict(
        node="gpu-02", run={"result": "upgraded", "versions_at_start": {**OLD, "driver": "580.95.05"}, "versions_after": NEW},
        section=section("upgraded", before=OLD), want={"before": OLD}),
    "rolled back by this run: its own verdict": dict(
        node="gpu-03", run={"result": "rolled_back", "versions_at_start": OLD, "versions_after": OLD, "rollback": ROLLBACK},
        section=section("rolled_back", phases=ROLLED_BACK_PHASES, rollback=ROLLBACK), want={"rollback": ROLLBACK, "after": OLD}),
    "unchanged by this run: after is what it ran": dict(
        node="gpu-04", run={"result": "unchanged", "versions_at_start": NEW}, section=section("unchanged", wave=2),
        want={"before": NEW, "after": NEW, "wave": 2}),
    "not started (a stopped run): the plan's wave, no phases of another rollout": dict(
        node="gpu-04", run={"result": "not_started", "versions_at_start": OLD},
        section={"id": "r-other", "status": "done", "result": "upgraded", "phases": UPGRADE_PHASES, "wave": 0},
        want={"result": "not_started", "wave": 2, "phases": [], "before": OLD, "after": {}, "domain": {}}),
    "not in the plan (skipped before the plan)": dict(
        node="gpu-09", run={"result": "skipped", "versions_at_start": OLD, "skip_reason": "unhealthy before the change: xid"},
        section=None, want={"wave": None, "skip_reason": "unhealthy before the change: xid", "after": OLD}),
    "a run that lost track of a node its state file finished: the file is the truth": dict(
        node="gpu-02", run={"result": "not_started"}, section=section("upgraded", before=OLD), want={"result": "upgraded", "before": OLD}),
    "lost from the run": dict(
        node="gpu-04", run={"result": "not_started", "versions_at_start": OLD, "skip_reason": "", "lost": "lost from the run (unreachable)"},
        section=section(None, status="running", phases=[phase("drain", 1, None, "started")]),
        want={"skip_reason": "lost from the run (unreachable)", "phases": [phase("drain", 1, None, "started")]}),
    "a yes/no fact as text (older templating)": dict(
        node="gpu-01", run=settled("upgraded", settled="True"), section=section("upgraded", before=OLD), want={"after": NEW}),
    "settled False as text is not settled": dict(
        node="gpu-02", run={"result": "upgraded", "settled": "False", "versions_at_start": OLD, "versions_after": NEW},
        section=section("upgraded"), want={"before": OLD, "after": NEW}),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_record_is_built_whole(case):
    got = _record.node_record(case["node"], RID, case["run"], section=case.get("section"), plan=PLAN, prior=case.get("prior"))
    assert list(got) == list(_record.RECORD_KEYS)
    assert {key: got[key] for key in case["want"]} == case["want"], got
    # What rollout_report accepts: the record passes its strict check as it is.
    validate_record(got, 0, RID)


REFUSED = {
    "rolled_back with no rollback anywhere (the issue's error, now only when the state file truly has none)": dict(
        node="hgx-03", run=settled("rolled_back"), section=section("rolled_back"),
        words=["node hgx-03", "rolled_back", "no rollback entry", "gpufleet.lifecycle.node_state", "new gpufleet_rollout_id"]),
    "rolled_back but the rollback failed": dict(
        node="gpu-03", run=settled("rolled_back"), section=section("rolled_back", rollback={**ROLLBACK, "result": "failed"}),
        words=["node gpu-03", "rollback failed", "failed_drained"]),
    "failed_drained but the rollback validated": dict(
        node="gpu-03", run=settled("failed_drained"), section=section("failed_drained", rollback=ROLLBACK),
        words=["node gpu-03", "failed_drained", "validated"]),
    "upgraded with a rollback recorded": dict(
        node="gpu-02", run=settled("upgraded"), section=section("upgraded", rollback=ROLLBACK), words=["node gpu-02", "upgraded", "rollback"]),
    "this run finished it otherwise than its state file": dict(
        node="gpu-02", run={"result": "upgraded"}, section=section("rolled_back", rollback=ROLLBACK),
        words=["node gpu-02", "finished it upgraded", "records rolled_back", "another run"]),
    "settled, but the state file no longer says finished": dict(
        node="gpu-02", run=settled("upgraded"), section=section(None, status="running"), words=["node gpu-02", "no longer records"]),
    "settled, but the state file now says another result": dict(
        node="gpu-02", run=settled("upgraded"), section=section("skipped"), words=["node gpu-02", "now says skipped"]),
    "a result that is none": dict(node="gpu-02", run={"result": "done"}, section=None, words=["node gpu-02", "'done'"]),
    "a state file result that is none": dict(
        node="gpu-02", run=settled("upgraded"), section=section("finished"), words=["node gpu-02", "'finished'"]),
    "rollback details that are not strings": dict(
        node="gpu-03", run={"result": "rolled_back", "rollback": {"decided_by": "validate", "reason": None, "result": "validated"}},
        section=None, words=["node gpu-03", "decided_by, reason, result"]),
}


@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
def test_a_contradiction_is_refused_naming_the_node_and_what_to_do(case):
    with pytest.raises(_record.RecordConflict) as caught:
        _record.node_record(case["node"], RID, case["run"], section=case["section"], plan=PLAN)
    for word in case["words"]:
        assert word in caught.value.msg, caught.value.msg


LOST = {
    "Slurm not read": (False, None, "lost from the run (unreachable)"),
    "in service": (True, None, "lost from the run (unreachable); in service in Slurm"),
    "someone else's drain": (True, {"state": "DRAIN", "reason": "bad fan", "ours": False},
                             "lost from the run (unreachable); Slurm shows it DRAIN: bad fan"),
    "down, no reason": (True, {"state": "DOWN", "reason": "", "ours": False}, "lost from the run (unreachable); Slurm shows it DOWN"),
    "our drain": (True, {"state": "DRAIN", "reason": "gpufleet: r-1", "ours": True},
                  "lost from the run (unreachable); Slurm shows it DRAIN, drained by this rollout (gpufleet: r-1): it stays out of "
                  "service until it answers and the rollout is run again, which resumes it, or a person resumes it"),
}


@pytest.mark.parametrize("case", LOST.values(), ids=LOST.keys())
def test_why_a_target_gave_no_record(case):
    read, slurm, want = case
    assert _record.lost_reason(read, slurm) == want


PHASES = {
    "no rollback phase": ([phase("validate", 1, 2, "failed", "x")], None),
    "a rollback still open": ([phase("validate", 1, 2, "failed", "x"), phase("rollback", 2, None, "started")], None),
    "no failed phase before it (on demand)": ([phase("rollback", 1, 2, "ok", "restored")], None),
    "the last rollback counts": ([phase("soak", 1, 2, "failed", "ecc"), phase("rollback", 2, 3, "ok"), phase("validate", 4, 5, "failed", "xid"),
                                 phase("rollback", 5, 6, "failed", "timeout")], {"decided_by": "validate", "reason": "xid", "result": "failed"}),
    "a failed phase without detail": ([phase("driver", 1, 2, "failed"), phase("rollback", 2, 3, "ok")],
                                      {"decided_by": "driver", "reason": "driver failed", "result": "validated"}),
}


@pytest.mark.parametrize("case", PHASES.values(), ids=PHASES.keys())
def test_the_rollback_as_an_older_state_file_records_it(case):
    phases, want = case
    assert _record.rollback_from_phases(phases) == want


TIMES = {
    "a node upgraded after waiting its turn": (
        [phase("preflight", 0, 5), phase("admission", 60, 90), phase("drain", 90, 400), phase("driver", 400, 460), phase("activate", 460, 520),
         phase("validate", 520, 540), phase("resume", 540, 541)],
        {"start": T + 60, "queued_s": 55.0, "capacity_s": 30.0, "jobs_s": 310.0, "work_s": 141.0, "observation_s": None}),
    "no admission recorded: capacity unknown, the wait before the drain is queued": (
        [phase("preflight", 0, 5), phase("drain", 100, 130), phase("driver", 130, 160), phase("soak", 170, 470)],
        {"start": T + 100, "queued_s": 95.0, "capacity_s": None, "jobs_s": 30.0, "work_s": 30.0, "observation_s": 300.0}),
    "never admitted (a stopped run)": ([phase("preflight", 0, 5)],
                                       {"start": None, "queued_s": None, "capacity_s": None, "jobs_s": None, "work_s": None, "observation_s": None}),
    "a resumed node: its last preflight before its first step, an open phase unknown": (
        [phase("preflight", 0, 5), phase("drain", 50, 60), phase("driver", 60, None, "started"), phase("preflight", 900, 905)],
        {"start": T + 50, "queued_s": 45.0, "capacity_s": None, "jobs_s": 10.0, "work_s": None, "observation_s": None}),
    "a rollback is its own work": (
        [phase("drain", 0, 10), phase("validate", 10, 20, "failed", "xid"), phase("rollback", 20, 200)],
        {"start": T, "queued_s": None, "capacity_s": None, "jobs_s": 10.0, "work_s": 190.0, "observation_s": None}),
}


@pytest.mark.parametrize("case", TIMES.values(), ids=TIMES.keys())
def test_where_a_nodes_time_went_from_its_recorded_phases_only(case):
    phases, want = case
    assert _record.phase_times(phases) == want
