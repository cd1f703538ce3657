"""gpufleet.lifecycle.rollout_state on a real state file (tmp_path) with a fake clock.

Invariant 11: a rollout holds a lock; a second rollout over the same nodes refuses to start.
"""

from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils import basic
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _state
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import clock as _clock
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import lock as _lock
from ansible_collections.gpufleet.lifecycle.plugins.modules import rollout_state

T0 = 1_764_590_000.0


class FakeClock:
    def __init__(self):
        self.now_s = T0

    def now(self):
        return self.now_s

    def sleep(self, seconds):
        self.now_s += seconds


@pytest.fixture
def node(tmp_path, monkeypatch, run_module):
    """Runs the module against tmp_path/facts.d/gpufleet.fact; ``node.clock`` is the fake clock, ``node.warnings`` the warnings."""

    class Node:
        def __init__(self):
            self.path = tmp_path / "facts.d" / "gpufleet.fact"
            self.clock = FakeClock()
            self.warnings = []

        def __call__(self, check_mode=False, diff=True, **args):
            args.setdefault("rollout_id", "r-1")
            args["state_file"] = str(self.path)
            if diff:
                args["_ansible_diff"] = True
            return run_module(rollout_state.main, args, check_mode=check_mode)

        def doc(self):
            return json.loads(self.path.read_text())

    fake = Node()
    monkeypatch.setattr(_clock, "SYSTEM", fake.clock)
    monkeypatch.setattr(_lock, "node_name", lambda: "gpu-07")
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, text: fake.warnings.append(text))
    return fake


def acquire(node, **extra):
    args = {"action": "acquire", "owner": "alice@ctl-01 job 42"}
    args.update(extra)
    return node(**args)


# --- acquire ---------------------------------------------------------------------------------------------------


def test_acquire_a_free_node_writes_the_lock(node):
    result = acquire(node, wave=1)
    assert not result.get("failed"), result
    assert result["changed"] is True
    rollout = node.doc()["rollout"]
    assert rollout == result["rollout"]
    assert {k: rollout[k] for k in ("id", "owner", "acquired_at", "heartbeat_at", "wave", "phase", "status", "result", "phases")} == {
        "id": "r-1", "owner": "alice@ctl-01 job 42", "acquired_at": T0, "heartbeat_at": T0, "wave": 1, "phase": None, "status": "running",
        "result": None, "phases": [],
    }
    assert result["lock"] == {"held_by": "r-1", "owner": "alice@ctl-01 job 42", "age_s": 0.0, "stale": False, "phase": None}
    assert result["diff"]["before"]["id"] is None and result["diff"]["after"]["status"] == "running"
    # the file is a whole state document that _state reads back
    assert _state.load(str(node.path))["rollout"]["id"] == "r-1"


def test_check_mode_acquire_reports_and_writes_nothing(node):
    result = acquire(node, check_mode=True)
    assert result["changed"] is True and result["rollout"]["status"] == "running"
    assert not node.path.exists() and not node.path.parent.exists()


def test_a_second_rollout_is_refused_with_holder_owner_age_and_phase(node):
    acquire(node)
    node(action="phase", phase="drain", status="started")
    before = node.path.read_bytes()
    node.clock.now_s += 60
    for check_mode in (False, True):
        refused = acquire(node, rollout_id="r-2", owner="bob@ctl-02", check_mode=check_mode)
        assert refused["failed"] is True and refused["changed"] is False
        assert refused["msg"].startswith("node gpu-07 is held by rollout r-1 (alice@ctl-01 job 42, age 60 s, phase drain); wait for it")
        assert refused["lock"]["held_by"] == "r-1" and refused["lock"]["stale"] is False
    assert node.path.read_bytes() == before


def test_a_stale_lock_is_reported_and_broken_only_on_request(node):
    acquire(node)
    node(action="phase", phase="driver", status="started")
    node.clock.now_s += 3601
    refused = acquire(node, rollout_id="r-2", owner="bob@ctl-02", stale_after=3600)
    assert refused["failed"] is True
    assert "held by rollout r-1 (alice@ctl-01 job 42, age 3601 s, phase driver), and that lock is stale" in refused["msg"]
    assert "break_stale=true" in refused["msg"]
    assert node.doc()["rollout"]["id"] == "r-1"
    # not stale under the default (a day): refused as held
    assert "wait for it" in acquire(node, rollout_id="r-2", owner="bob@ctl-02")["msg"]
    taken = acquire(node, rollout_id="r-2", owner="bob@ctl-02", stale_after=3600, break_stale=True)
    assert taken["changed"] is True, taken
    assert taken["rollout"]["id"] == "r-2" and taken["rollout"]["phases"] == [] and taken["rollout"]["acquired_at"] == node.clock.now_s
    assert any("broke the stale lock of rollout r-1 (alice@ctl-01 job 42, age 3601 s, phase driver)" in w for w in node.warnings)
    history = node.doc()["history"][-1]
    assert (history["component"], history["action"], history["before"], history["after"]) == ("rollout", "break_stale_lock", "r-1", "r-2")


def test_break_stale_never_breaks_a_live_lock(node):
    acquire(node)
    node.clock.now_s += 10
    refused = acquire(node, rollout_id="r-2", owner="bob", break_stale=True)
    assert refused["failed"] is True and "wait for it" in refused["msg"]


def test_the_same_rollout_resumes_and_keeps_its_phases(node):
    acquire(node, wave=2)
    node(action="phase", phase="drain", status="started")
    node.clock.now_s += 30
    resumed = acquire(node, owner="alice@ctl-03 job 43")
    assert resumed["changed"] is True
    rollout = resumed["rollout"]
    assert rollout["acquired_at"] == T0 and rollout["heartbeat_at"] == T0 + 30
    assert rollout["owner"] == "alice@ctl-03 job 43" and rollout["wave"] == 2
    assert [p["name"] for p in rollout["phases"]] == ["drain"]


# --- two runs of one rollout id (the run nonce) ------------------------------------------------------------------------

RUN_A, RUN_B = "a1b2c3d4e5f60718", "0f1e2d3c4b5a6978"


def test_a_twin_run_of_the_same_rollout_is_refused_while_the_holder_lives(node):
    acquire(node, run_nonce=RUN_A)
    node(action="phase", phase="drain", status="started", run_nonce=RUN_A)
    before = node.path.read_bytes()
    node.clock.now_s += 60
    for check_mode in (False, True):
        twin = acquire(node, owner="bob@ctl-02 awx 7", run_nonce=RUN_B, check_mode=check_mode)
        assert twin["failed"] is True and twin["changed"] is False
        assert twin["msg"].startswith("node gpu-07 is held by another run of the same rollout r-1 (alice@ctl-01 job 42, age 60 s, phase drain)")
        assert "gpufleet_lock_stale_seconds" in twin["msg"]
        assert twin["lock"]["held_by"] == "r-1" and twin["lock"]["stale"] is False
    assert node.path.read_bytes() == before
    # the holder goes on: its own nonce still holds the node
    assert acquire(node, run_nonce=RUN_A)["rollout"]["run"] == RUN_A
    assert node(action="phase", phase="drain", status="ok", run_nonce=RUN_A)["changed"] is True


def test_a_run_resumed_after_a_crash_takes_over_a_stale_lock_of_its_own_rollout(node):
    acquire(node, run_nonce=RUN_A, wave=2)
    node(action="phase", phase="driver", status="started", run_nonce=RUN_A)
    node.clock.now_s += 3601
    resumed = acquire(node, owner="alice@ctl-01 job 43", run_nonce=RUN_B, stale_after=3600)
    assert resumed["changed"] is True and not resumed.get("failed"), resumed
    rollout = resumed["rollout"]
    assert rollout["run"] == RUN_B and rollout["status"] == "running" and [p["name"] for p in rollout["phases"]] == ["driver"]
    assert rollout["acquired_at"] == T0 and rollout["wave"] == 2
    assert any("took over node gpu-07 from an earlier run of the same rollout r-1" in w for w in node.warnings)
    history = node.doc()["history"][-1]
    assert (history["action"], history["before"], history["after"]) == ("take_over_stale_run", RUN_A, RUN_B)
    # the old run, if it was only slow, has lost the node: its records are refused, its release leaves the lock
    late = node(action="phase", phase="driver", status="ok", run_nonce=RUN_A)
    assert late["failed"] is True and "held by another run of the same rollout r-1" in late["msg"]
    assert "which took it over from this run" in late["msg"] and "stop this run" in late["msg"]
    late_finish = node(action="finish", result="upgraded", run_nonce=RUN_A)
    assert late_finish["failed"] is True and "which took it over from this run" in late_finish["msg"]
    assert node(action="release", run_nonce=RUN_A)["changed"] is False
    assert node.doc()["rollout"]["run"] == RUN_B and node.doc()["rollout"]["status"] == "running"
    assert node(action="finish", result="upgraded", run_nonce=RUN_B)["rollout"]["status"] == "done"


@pytest.mark.parametrize(("held", "asked"), [(None, RUN_B), (RUN_A, None), (RUN_A, RUN_A)])
def test_without_two_different_nonces_the_same_rollout_resumes(node, held, asked):
    acquire(node, **({"run_nonce": held} if held else {}))
    node.clock.now_s += 30
    resumed = acquire(node, **({"run_nonce": asked} if asked else {}))
    assert resumed["changed"] is True and not resumed.get("failed"), resumed
    assert resumed["rollout"]["run"] == (asked or held)


def test_a_released_lock_of_the_same_rollout_is_taken_by_any_run(node):
    acquire(node, run_nonce=RUN_A)
    node(action="release", run_nonce=RUN_A)
    assert acquire(node, run_nonce=RUN_B)["rollout"]["run"] == RUN_B


def test_a_file_of_before_the_lock_is_a_free_node(node):
    node.path.parent.mkdir(parents=True)
    doc = _state.empty()
    _state.set_phase(doc, "old-rollout", "driver", now="2026-01-01T00:00:00+00:00")
    _state.save(str(node.path), doc)
    assert acquire(node)["rollout"]["id"] == "r-1"


# --- phases ----------------------------------------------------------------------------------------------------------


def test_phases_record_start_end_status_and_detail(node):
    acquire(node)
    node.clock.now_s += 5
    started = node(action="phase", phase="drain", status="started", wave=1)
    assert started["changed"] is True and started["rollout"]["phase"] == "drain"
    node.clock.now_s += 40
    closed = node(action="phase", phase="drain", status="ok", detail="waited for 1 job")
    assert closed["rollout"]["phases"] == [{"name": "drain", "start": T0 + 5, "end": T0 + 45, "status": "ok", "detail": "waited for 1 job"}]
    assert closed["rollout"]["heartbeat_at"] == T0 + 45 and closed["rollout"]["wave"] == 1
    assert closed["diff"]["before"]["phases"][0]["end"] is None
    # closing it again as it is changes nothing (a re-run)
    node.clock.now_s += 5
    again = node(action="phase", phase="drain", status="ok")
    assert again["changed"] is False
    assert node.doc()["rollout"]["heartbeat_at"] == T0 + 45


def test_a_phase_closed_without_a_start_is_recorded_at_once(node):
    acquire(node)
    result = node(action="phase", phase="nic_firmware", status="skipped", detail="already at the BOM")
    assert result["rollout"]["phases"] == [{"name": "nic_firmware", "start": T0, "end": T0, "status": "skipped", "detail": "already at the BOM"}]


def test_a_phase_start_on_an_open_phase_keeps_its_start(node):
    acquire(node)
    node(action="phase", phase="validate", status="started")
    node.clock.now_s += 9
    result = node(action="phase", phase="validate", status="started")
    assert [p["start"] for p in result["rollout"]["phases"]] == [T0]
    assert result["rollout"]["heartbeat_at"] == T0 + 9


@pytest.mark.parametrize("holder", [None, "r-2"])
def test_phases_need_the_lock(node, holder):
    if holder:
        acquire(node, rollout_id=holder)
    result = node(action="phase", phase="drain", status="started")
    assert result["failed"] is True
    assert "acquire it first" in result["msg"]


# --- finish, release, read ---------------------------------------------------------------------------------------------


def test_finish_records_the_result_frees_the_node_and_a_rerun_changes_nothing(node):
    acquire(node)
    node(action="phase", phase="driver", status="started")
    node(action="phase", phase="driver", status="ok")
    node.clock.now_s += 100
    done = node(action="finish", result="upgraded")
    assert done["changed"] is True
    assert (done["rollout"]["status"], done["rollout"]["result"]) == ("done", "upgraded")
    assert done["lock"]["held_by"] is None
    assert node.doc()["history"][-1]["action"] == "finish" and node.doc()["history"][-1]["after"] == "upgraded"
    before = node.path.read_bytes()
    for check_mode in (True, False):
        assert acquire(node, check_mode=check_mode)["changed"] is False
        assert node(action="finish", result="upgraded", check_mode=check_mode)["changed"] is False
    assert node.path.read_bytes() == before
    refused = node(action="phase", phase="driver", status="started")
    assert refused["failed"] is True and "has finished on node gpu-07 (result upgraded)" in refused["msg"]
    # another rollout takes the finished node at once, with no phases of the old one
    other = acquire(node, rollout_id="r-2")
    assert other["changed"] is True and other["rollout"]["phases"] == [] and other["rollout"]["result"] is None


ROLLBACK = {"decided_by": "validate", "reason": "xid: Xid 79 on GPU 1", "result": "validated"}
BEFORE = {"driver": "570.124.06", "fabricmanager": "570.124.06", "gpu_firmware": None, "nic_firmware": {"MT_0000000838": "28.40.1000"}}


def test_the_node_keeps_its_rollback_and_versions_so_that_a_later_run_rebuilds_its_record(node):
    """Issue 22: a node rolled back in one run keeps who decided the rollback and why, read back by any later run."""
    acquire(node)
    node(action="phase", phase="drain", status="started", before=BEFORE)
    # A resumed run reads a node it changed already: the first versions given stay.
    node(action="phase", phase="drain", status="ok", before=dict(BEFORE, driver="580.95.05"))
    done = node(action="finish", result="rolled_back", rollback=ROLLBACK, detail="xid: Xid 79 on GPU 1", before=dict(BEFORE, driver="580.95.05"))
    assert done["changed"] is True, done
    section = node.doc()["rollout"]
    expected = ("rolled_back", ROLLBACK, "xid: Xid 79 on GPU 1", BEFORE)
    assert (section["result"], section["rollback"], section["detail"], section["before"]) == expected
    assert node(action="read")["rollout"]["rollback"] == ROLLBACK
    assert _state.load(str(node.path))["rollout"]["rollback"] == ROLLBACK
    # Finished: the same finish again changes nothing, nor does another verdict.
    again = node(action="finish", result="rolled_back", rollback=dict(ROLLBACK, reason="other"))
    assert again["changed"] is False and node.doc()["rollout"]["rollback"] == ROLLBACK


def test_a_failed_rollback_is_kept_with_its_failed_drained_result(node):
    acquire(node)
    failed = dict(ROLLBACK, result="failed", reason="xid; the rollback failed too (reboot timed out)")
    assert node(action="finish", result="failed_drained", rollback=failed)["changed"] is True
    assert node.doc()["rollout"]["rollback"] == failed


def test_a_new_rollout_starts_without_the_old_ones_rollback(node):
    acquire(node)
    node(action="finish", result="rolled_back", rollback=ROLLBACK, before=BEFORE)
    taken = acquire(node, rollout_id="r-2")
    assert (taken["rollout"]["rollback"], taken["rollout"]["before"], taken["rollout"]["detail"]) == (None, None, None)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"result": "rolled_back"}, "result=rolled_back needs rollback"),
        ({"result": "upgraded", "rollback": ROLLBACK}, "rollback.result validated does not fit result=upgraded"),
        ({"result": "rolled_back", "rollback": dict(ROLLBACK, result="failed")}, "does not fit result=rolled_back"),
        ({"result": "failed_drained", "rollback": ROLLBACK}, "does not fit result=failed_drained"),
        ({"result": "rolled_back", "rollback": {"decided_by": "validate", "result": "validated"}}, "exactly decided_by, reason and result"),
        ({"result": "rolled_back", "rollback": dict(ROLLBACK, why="x")}, "exactly decided_by, reason and result"),
        ({"result": "rolled_back", "rollback": dict(ROLLBACK, decided_by="")}, "rollback.decided_by must be 1 to 200"),
        ({"result": "rolled_back", "rollback": dict(ROLLBACK, reason="x" * 4001)}, "rollback.reason must be 1 to 4000"),
        ({"result": "rolled_back", "rollback": dict(ROLLBACK, result="ok")}, "rollback.result must be one of validated, failed"),
        ({"result": "upgraded", "before": {"Driver!": "1"}}, "not a component name"),
        ({"result": "upgraded", "before": {"driver": ["1"]}}, "before.driver must be a version"),
        ({"result": "upgraded", "before": {"nic_firmware": {"MT_1": ["x"]}}}, "before.nic_firmware must map PSID strings"),
        ({"result": "upgraded", "before": {"driver": "5" * 20000}}, "before must be at most"),
    ],
)
def test_bad_rollback_or_versions_are_refused_before_the_file_is_touched(node, args, words):
    acquire(node)
    before = node.path.read_bytes()
    result = node(action="finish", **args)
    assert result["failed"] is True and words in result["msg"], result
    assert node.path.read_bytes() == before


def test_rollback_belongs_to_a_finish(node):
    acquire(node)
    result = node(action="phase", phase="rollback", status="ok", rollback=ROLLBACK)
    assert result["failed"] is True and "rollback is recorded with action=finish" in result["msg"]


def test_release_drops_only_our_lock(node):
    acquire(node, rollout_id="r-2")
    not_ours = node(action="release")
    assert not_ours["changed"] is False and not_ours["lock"]["held_by"] == "r-2"
    assert any("held by rollout r-2, not r-1" in w for w in node.warnings)
    ours = node(action="release", rollout_id="r-2")
    assert ours["changed"] is True and ours["rollout"]["status"] == "released" and ours["lock"]["held_by"] is None
    assert acquire(node)["rollout"]["id"] == "r-1"


def test_read_reports_and_writes_nothing(node):
    missing = node(action="read")
    assert missing["changed"] is False and missing["lock"]["held_by"] is None
    assert not node.path.exists()
    acquire(node)
    node.clock.now_s += 12.5
    before = node.path.read_bytes()
    read = node(action="read")
    assert read["changed"] is False and read["lock"]["age_s"] == 12.5 and read["rollout"]["id"] == "r-1"
    assert node.path.read_bytes() == before


def test_no_diff_without_diff_mode(node):
    assert "diff" not in acquire(node, diff=False)


# --- a damaged file, bad options ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"rollout": {"id": "r-9", "status": "held"}}'])
def test_a_damaged_state_file_is_refused_and_left_alone(node, content):
    node.path.parent.mkdir(parents=True)
    node.path.write_bytes(content)
    for check_mode in (False, True):
        result = acquire(node, check_mode=check_mode)
        assert result["failed"] is True
        assert str(node.path) in result["msg"] and "To repair" in result["msg"]
    assert node.path.read_bytes() == content
    assert sorted(os.listdir(node.path.parent)) in (["gpufleet.fact"], ["gpufleet.fact", "gpufleet.fact.lock"])


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"rollout_id": "r 1", "action": "read"}, "rollout_id 'r 1' may hold only"),
        ({"rollout_id": "r1\n", "action": "read"}, "rollout_id"),
        ({"action": "acquire", "owner": "alice\nbob"}, "owner"),
        ({"action": "phase", "phase": "Drain!", "status": "ok"}, "phase 'Drain!' must be a phase name"),
        ({"action": "phase", "phase": "drain", "status": "ok", "wave": -1}, "wave must be a whole number of at least 0"),
        ({"action": "acquire", "owner": "a", "stale_after": 0}, "stale_after must be a whole number of seconds from 1"),
        ({"action": "finish", "result": "upgraded", "detail": "x" * 4001}, "detail must be at most 4000"),
        ({"action": "acquire"}, "owner"),
        ({"action": "finish"}, "result"),
        ({"action": "acquire", "owner": "a", "run_nonce": "short"}, "run_nonce must be 8 to 64 letters and digits"),
        ({"action": "acquire", "owner": "a", "run_nonce": "a1b2c3d4 e5"}, "run_nonce must be 8 to 64 letters and digits"),
    ],
)
def test_bad_options_are_refused_before_the_file_is_touched(node, args, words):
    result = node(**args)
    assert result["failed"] is True and words in result["msg"], result["msg"]
    assert not node.path.parent.exists()


def test_next_phase_closes_one_phase_and_opens_the_next_in_one_write(node):
    acquire(node)
    node(action="phase", phase="drain", status="started", wave=2)
    node.clock.now_s += 30
    result = node(action="phase", phase="drain", status="ok", detail="waited for 1 job", next_phase="driver", wave=2)
    assert result["changed"] is True and result["rollout"]["phase"] == "driver"
    assert result["rollout"]["phases"] == [
        {"name": "drain", "start": T0, "end": T0 + 30, "status": "ok", "detail": "waited for 1 job"},
        {"name": "driver", "start": T0 + 30, "end": None, "status": "started", "detail": None},
    ]
    # The same call again (a re-run): the drain is closed and the driver open already; its start is kept.
    node.clock.now_s += 5
    again = node(action="phase", phase="drain", status="ok", detail="waited for 1 job", next_phase="driver", wave=2)
    assert [p["start"] for p in again["rollout"]["phases"]] == [T0, T0 + 30]
    # The next one closes the driver as usual.
    node.clock.now_s += 10
    closed = node(action="phase", phase="driver", status="ok", next_phase="activate")
    assert [(p["name"], p["status"]) for p in closed["rollout"]["phases"]] == [("drain", "ok"), ("driver", "ok"), ("activate", "started")]


def test_next_phase_in_check_mode_writes_nothing(node):
    acquire(node)
    node(action="phase", phase="drain", status="started")
    before = node.path.read_bytes()
    result = node(check_mode=True, action="phase", phase="drain", status="ok", next_phase="driver")
    assert result["changed"] is True and result["rollout"]["phase"] == "driver"
    assert node.path.read_bytes() == before


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"action": "phase", "phase": "drain", "status": "started", "next_phase": "driver"}, "a closing status"),
        ({"action": "phase", "phase": "drain", "status": "ok", "next_phase": "drain"}, "another phase's name"),
        ({"action": "phase", "phase": "drain", "status": "ok", "next_phase": "Driver\n"}, "next_phase 'Driver\\n' must be a phase name"),
        ({"action": "finish", "result": "upgraded", "next_phase": "driver"}, "needs action=phase"),
    ],
)
def test_a_wrong_next_phase_is_refused_and_nothing_written(node, args, words):
    acquire(node)
    before = node.path.read_bytes()
    result = node(**args)
    assert result["failed"] is True and words in result["msg"], result["msg"]
    assert node.path.read_bytes() == before
