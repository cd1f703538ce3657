"""The node state file: load/save round trip, atomic write, last known good, history, phase;
refusing damaged files, keeping the previous copy, and the lock around read-modify-write."""

from __future__ import annotations

import fcntl
import glob
import json
import multiprocessing
import os
import stat
import subprocess
import sys
import threading
import time

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _state

GOOD = {
    "schema": 1,
    "last_known_good": {"driver": {"version": "550.90.07", "kernel_module": "open", "method": "runfile", "recorded_at": "2024-06-11T09:00:00+00:00"}},
    "rollout": {"id": "r-1", "phase": "driver", "updated_at": "2024-06-11T09:00:00+00:00"},
    "history": [{"time": "t0", "component": "driver", "action": "upgrade", "before": "535.161.08", "after": "550.90.07", "result": "ok", "rollout_id": "r-1"}],
}


def test_missing_file_is_an_empty_document(tmp_path):
    doc = _state.load(str(tmp_path / "none.fact"))
    assert doc == {"schema": 1, "last_known_good": {}, "rollout": {"id": None, "phase": None, "updated_at": None}, "history": []}


def test_round_trip_and_mode(tmp_path):
    path = str(tmp_path / "facts.d" / "gpufleet.fact")
    doc = _state.load(path)
    assert _state.record_last_known_good(doc, "driver", "550.90.07", {"kernel_module": "open"}, now="2024-06-11T09:00:00+00:00")
    _state.save(path, doc)
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    again = _state.load(path)
    assert again["last_known_good"]["driver"] == {"version": "550.90.07", "kernel_module": "open", "recorded_at": "2024-06-11T09:00:00+00:00"}
    assert json.loads(open(path).read())["schema"] == 1
    assert [p for p in os.listdir(tmp_path / "facts.d") if p.endswith(".tmp")] == []


def test_record_same_version_is_no_change_and_keeps_time(tmp_path):
    doc = _state.empty()
    _state.record_last_known_good(doc, "driver", "550.90.07", now="t1")
    assert not _state.record_last_known_good(doc, "driver", "550.90.07", now="t2")
    assert doc["last_known_good"]["driver"]["recorded_at"] == "t1"
    assert _state.record_last_known_good(doc, "driver", "570.124.06", now="t3")
    assert _state.last_known_good(doc, "driver")["version"] == "570.124.06"
    assert _state.last_known_good(doc, "fabricmanager") is None


def test_history_is_bounded_and_takes_the_rollout_id():
    doc = _state.empty()
    _state.set_phase(doc, "r-42", "driver", now="t0")
    for n in range(5):
        _state.append_history(doc, "driver", "upgrade", before=str(n), after=str(n + 1), now=f"t{n}", limit=3)
    assert [e["before"] for e in doc["history"]] == ["2", "3", "4"]
    assert doc["history"][-1]["rollout_id"] == "r-42"
    assert doc["history"][-1]["result"] == "ok"


def test_set_phase_changes_only_on_new_values():
    doc = _state.empty()
    assert _state.set_phase(doc, "r-1", "drain", now="t0")
    assert not _state.set_phase(doc, "r-1", "drain", now="t1")
    assert doc["rollout"] == {"id": "r-1", "phase": "drain", "updated_at": "t0"}


def test_corrupt_file_names_the_fix(tmp_path):
    path = tmp_path / "gpufleet.fact"
    path.write_text("{not json")
    with pytest.raises(_state.StateFileError, match=r"not valid JSON.*move it aside"):
        _state.load(str(path))
    path.write_text("[1, 2]")
    with pytest.raises(_state.StateFileError, match="not an object"):
        _state.load(str(path))


def test_failed_write_keeps_the_old_document(tmp_path, monkeypatch):
    path = str(tmp_path / "gpufleet.fact")
    _state.save(path, {"schema": 1, "history": [], "last_known_good": {"driver": {"version": "535.161.08"}}})

    def broken(*_args, **_kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(_state.os, "replace", broken)
    with pytest.raises(_state.StateFileError, match="disk full"):
        _state.save(path, _state.empty())
    monkeypatch.undo()
    assert _state.load(path)["last_known_good"]["driver"]["version"] == "535.161.08"
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


def test_update_saves_only_when_changed(tmp_path):
    path = str(tmp_path / "gpufleet.fact")
    changed, _doc = _state.update(path, lambda doc: False)
    assert not changed and not os.path.exists(path)
    changed, _doc = _state.update(path, lambda doc: _state.set_phase(doc, "r-1", "validate"))
    assert changed and _state.load(path)["rollout"]["phase"] == "validate"


def test_unknown_keys_are_kept(tmp_path):
    """Other components (firmware, the rollout) may add keys: a load and save keeps them."""
    path = tmp_path / "gpufleet.fact"
    path.write_text(json.dumps(dict(GOOD, firmware_plan={"psid": "MT_0000000838"})))
    _state.update(str(path), lambda doc: _state.set_phase(doc, "r-2", "drain"))
    assert json.loads(path.read_text())["firmware_plan"] == {"psid": "MT_0000000838"}


# -- damaged files: refused with a message that says how to repair, never reset, never a traceback ----

DEEP = "[" * 100_000 + "]" * 100_000
DAMAGED = {
    "empty": (b"", r"is empty"),
    "whitespace": (b"  \n\t\n", r"is empty"),
    "binary": (b"\x00\xff\xfe\x89PNG\r\n\x1a\n\x00\x00", r"not UTF-8 text \(at byte offset 1"),
    "latin1_inside_json": ('{"schema": 1, "rollout": {"id": "caf\xe9"}}'.encode("latin-1"), r"not UTF-8 text"),
    "truncated": (json.dumps(GOOD).encode()[:70], r"not valid JSON"),
    "bom": (b"\xef\xbb\xbf" + json.dumps(GOOD).encode(), r"not valid JSON"),
    "nan": (b'{"schema": 1, "rollout": {"id": NaN}}', r"not valid JSON.*NaN"),
    "duplicate_key": (b'{"schema": 1, "last_known_good": {}, "last_known_good": {"driver": {"version": "550.90.07"}}}', r"twice"),
    "top_level_list": (b"[1, 2]", r"not an object"),
    "lkg_entry_is_a_string": (b'{"last_known_good": {"driver": "535.161.08"}}', r"last_known_good\.driver must be an object with a version"),
    "lkg_is_a_list": (b'{"last_known_good": ["535.161.08"]}', r"last_known_good must be an object"),
    "lkg_version_a_number": (b'{"last_known_good": {"driver": {"version": 535.16}}}', r"last_known_good\.driver\.version"),
    "lkg_version_cut_off": (b'{"last_known_good": {"driver": {"version": "535.161.8"}}}', r"last_known_good\.driver\.version '535\.161\.8' is not a whole"),
    "lkg_version_newline": (b'{"last_known_good": {"driver": {"version": "535.161.08\\n"}}}', r"last_known_good\.driver\.version"),
    "lkg_version_missing": (b'{"last_known_good": {"fabricmanager": {"recorded_at": "t"}}}', r"last_known_good\.fabricmanager\.version"),
    "lkg_firmware_version_empty": (b'{"last_known_good": {"gpu_firmware": {"version": ""}}}', r"last_known_good\.gpu_firmware\.version"),
    "lkg_method_unknown": (b'{"last_known_good": {"driver": {"version": "550.90.07", "method": "rpm"}}}', r"last_known_good\.driver\.method"),
    "history_is_an_object": (b'{"history": {"0": {}}}', r"history must be a list"),
    "history_entry_is_a_string": (b'{"history": ["upgrade"]}', r"history\[0\] must be an object"),
    "history_result_a_number": (b'{"history": [{"time": "t", "component": "driver", "action": "x", "result": 1}]}', r"history\[0\]\.result"),
    "rollout_is_a_string": (b'{"rollout": "r-1"}', r"rollout must be an object"),
    "rollout_id_a_number": (b'{"rollout": {"id": 7}}', r"rollout\.id"),
    "rollout_heartbeat_a_string": (b'{"rollout": {"id": "r", "heartbeat_at": "yesterday"}}', r"rollout\.heartbeat_at must be a number"),
    "rollout_status_unknown": (b'{"rollout": {"id": "r", "status": "held"}}', r"rollout\.status is 'held', expected one of running"),
    "rollout_wave_negative": (b'{"rollout": {"id": "r", "wave": -1}}', r"rollout\.wave"),
    "rollout_result_unknown": (b'{"rollout": {"id": "r", "result": "fine"}}', r"rollout\.result"),
    "rollout_phases_an_object": (b'{"rollout": {"phases": {"drain": 1}}}', r"rollout\.phases must be a list"),
    "rollout_phase_end_a_string": (b'{"rollout": {"phases": [{"name": "drain", "start": 1.0, "end": "t", "status": "ok"}]}}',
                                   r"rollout\.phases\[0\]\.end"),
    "rollout_phase_status_unknown": (b'{"rollout": {"phases": [{"name": "drain", "start": 1.0, "status": "done"}]}}',
                                     r"rollout\.phases\[0\]\.status"),
    "rollout_detail_a_number": (b'{"rollout": {"id": "r", "detail": 7}}', r"rollout\.detail must be a string"),
    "rollout_before_a_list": (b'{"rollout": {"id": "r", "before": ["570.124.06"]}}', r"rollout\.before must be an object"),
    "rollout_rollback_a_string": (b'{"rollout": {"id": "r", "rollback": "validate"}}', r"rollout\.rollback must be an object"),
    "rollout_rollback_reason_missing": (b'{"rollout": {"id": "r", "rollback": {"decided_by": "validate", "result": "validated"}}}',
                                        r"rollout\.rollback\.reason must be a string"),
    "rollout_rollback_result_unknown": (b'{"rollout": {"rollback": {"decided_by": "v", "reason": "x", "result": "fine"}}}',
                                        r"rollout\.rollback\.result is 'fine', expected one of validated, failed"),
    "schema_newer": (b'{"schema": 2}', r"schema 2: a newer gpufleet"),
    "schema_a_string": (b'{"schema": "1"}', r"schema"),
    "deep_list": (DEEP.encode(), r"nested"),
    "deep_object": (('{"a":' * 100_000 + "1" + "}" * 100_000).encode(), r"nested"),
    "deep_but_parseable": (('{"x": ' + "[" * 40 + "]" * 40 + "}").encode(), r"nested more than"),
    "huge": (json.dumps(dict(GOOD, padding="x" * (5 * 1024 * 1024))).encode(), r"larger than"),
}


def _repair_hint(message):
    return "python3 -m json.tool" in message and "move it aside" in message and "last known good" in message


@pytest.mark.parametrize("content, message", list(DAMAGED.values()), ids=list(DAMAGED))
def test_damaged_file_is_refused_with_a_repair_hint_and_left_untouched(tmp_path, content, message):
    path = tmp_path / "gpufleet.fact"
    path.write_bytes(content)
    with pytest.raises(_state.StateFileError, match=message) as info:
        _state.load(str(path))
    assert str(path) in info.value.msg, info.value.msg
    if "newer" in message:
        assert "upgrade" in info.value.msg and "Do not move the file aside" in info.value.msg
    else:
        assert _repair_hint(info.value.msg), info.value.msg
    assert info.value.path == str(path)
    # update() refuses too, before calling the change, and writes nothing (no reset, no .prev over a good one)
    calls = []
    with pytest.raises(_state.StateFileError, match=message):
        _state.update(str(path), lambda doc: calls.append(doc) or True)
    assert calls == []
    assert path.read_bytes() == content
    assert sorted(os.listdir(tmp_path)) == ["gpufleet.fact", "gpufleet.fact.lock"]


def test_damage_message_points_at_the_previous_copy(tmp_path):
    path = str(tmp_path / "gpufleet.fact")
    _state.save(path, GOOD)
    _state.update(path, lambda doc: _state.set_phase(doc, "r-2", "validate"))
    with open(path, "w") as handle:  # an in-place truncation, as `> file` or a full disk leaves it
        handle.write("")
    with pytest.raises(_state.StateFileError) as info:
        _state.load(path)
    assert f"{path}.prev" in info.value.msg and f"python3 -m json.tool {path}.prev" in info.value.msg
    assert _state.load(path + ".prev")["rollout"]["id"] == "r-1"


def test_damage_message_without_a_previous_copy_says_so(tmp_path):
    path = tmp_path / "gpufleet.fact"
    path.write_text("")
    with pytest.raises(_state.StateFileError, match="no previous copy"):
        _state.load(str(path))


def test_huge_file_is_not_read_whole(tmp_path):
    path = tmp_path / "gpufleet.fact"
    with open(path, "wb") as handle:
        handle.truncate(2 * 1024 * 1024 * 1024)  # 2 GiB, sparse
    with pytest.raises(_state.StateFileError, match="larger than"):
        _state.load(str(path))


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink"])
def test_state_path_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    path = tmp_path / "gpufleet.fact"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # opening it for reading must not block
    else:
        target = tmp_path / "elsewhere.json"
        target.write_text(json.dumps(GOOD))
        path.symlink_to(target)
    with pytest.raises(_state.StateFileError, match=r"regular file|symbolic link"):
        _state.load(str(path))
    with pytest.raises(_state.StateFileError):
        _state.save(str(path), GOOD)
    if kind == "symlink":
        assert json.loads((tmp_path / "elsewhere.json").read_text()) == GOOD and path.is_symlink()


# -- writing: validated, previous copy kept, folder fsynced ------------------------------------------


def test_save_keeps_the_previous_copy(tmp_path):
    path = str(tmp_path / "gpufleet.fact")
    _state.save(path, GOOD)
    assert not os.path.exists(path + ".prev")
    _state.update(path, lambda doc: _state.record_last_known_good(doc, "driver", "570.124.06", now="t9"))
    assert _state.load(path + ".prev")["last_known_good"]["driver"]["version"] == "550.90.07"
    assert _state.load(path)["last_known_good"]["driver"]["version"] == "570.124.06"
    for name in (path, path + ".prev"):
        assert stat.S_IMODE(os.stat(name).st_mode) == 0o644
    # Ansible reads every *.fact in facts.d as a fact: only the state file itself may end so
    assert glob.glob(str(tmp_path / "*.fact")) == [path]


def test_save_does_not_keep_a_damaged_file_as_the_previous_copy(tmp_path):
    path = tmp_path / "gpufleet.fact"
    _state.save(str(path), GOOD)
    _state.save(str(path), dict(GOOD, rollout={"id": "r-2", "phase": None, "updated_at": None}))
    path.write_text("{broken")
    _state.save(str(path), _state.empty())  # an explicit overwrite of a damaged file by the caller
    assert _state.load(str(path) + ".prev")["rollout"]["id"] == "r-1"


def test_save_fsyncs_the_file_and_the_folder(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(_state.os, "fsync", recording_fsync)
    _state.save(str(tmp_path / "gpufleet.fact"), GOOD)
    assert False in synced and synced[-1] is True


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"schema": 1, "last_known_good": {"driver": {"version": "535.161.8"}}}, r"last_known_good\.driver\.version"),
        ({"schema": 1, "history": [{"time": "t", "details": {"when": object()}}]}, r"history\[0\]\.details"),
        ({"schema": 1, "last_known_good": {"driver": {"version": "550.90.07", "note": float("nan")}}}, r"last_known_good\.driver\.note"),
        ({"schema": 1, "padding": "x" * (5 * 1024 * 1024)}, r"larger than"),
    ],
    ids=["cut_off_version", "not_json", "nan", "huge"],
)
def test_save_refuses_what_load_would_refuse(tmp_path, doc, message):
    path = tmp_path / "gpufleet.fact"
    _state.save(str(path), GOOD)
    before = path.read_bytes()
    with pytest.raises(_state.StateFileError, match=message):
        _state.save(str(path), doc)
    assert path.read_bytes() == before
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


@pytest.mark.parametrize("component, version", [("driver", "535.161.8"), ("fabricmanager", "550.90.07\n"), ("gpu_firmware", "96.00 5E"), ("driver", None)])
def test_record_last_known_good_refuses_what_the_file_cannot_hold(tmp_path, component, version):
    """A StateFileError (callers map it to 'nothing was changed') that is also a ValueError; nothing written."""
    path = tmp_path / "gpufleet.fact"
    _state.save(str(path), GOOD)
    before = path.read_bytes()
    with pytest.raises(_state.StateFileError, match=f"last known good {component}") as info:
        _state.update(str(path), lambda doc: _state.record_last_known_good(doc, component, version))
    assert isinstance(info.value, ValueError)
    assert path.read_bytes() == before


# -- the lock ----------------------------------------------------------------------------------------

WRITERS = 4
UPDATES = 300


def _count(doc):
    doc["test_counter"] = doc.get("test_counter", 0) + 1
    return True


def _writer(path, start):
    start.wait()
    for _update in range(UPDATES):
        _state.update(path, _count)


def test_concurrent_writers_lose_no_update(tmp_path):
    """4 writer processes x 300 updates each: all 1,200 land (without the lock, most were lost)."""
    path = str(tmp_path / "gpufleet.fact")
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(path, start)) for _writer_number in range(WRITERS)]
    for proc in procs:
        proc.start()
    start.set()
    for proc in procs:
        proc.join(120)
    assert [proc.exitcode for proc in procs] == [0] * WRITERS
    assert _state.load(path)["test_counter"] == WRITERS * UPDATES


def test_lock_file_sits_beside_the_state_and_is_no_fact(tmp_path):
    path = str(tmp_path / "facts.d" / "gpufleet.fact")
    assert _state.lock_path(path) == path + ".lock"
    _state.update(path, lambda doc: _state.set_phase(doc, "r-1", "drain"))
    assert os.path.exists(path + ".lock") and not (path + ".lock").endswith(".fact")


def test_a_held_lock_times_out_with_a_message_naming_it(tmp_path):
    path = str(tmp_path / "gpufleet.fact")
    _state.save(path, GOOD)
    before = open(path, "rb").read()
    with _state.locked(_state.lock_path(path), purpose="nvidia_driver upgrade"):
        started = time.monotonic()
        with pytest.raises(_state.StateFileError) as info:
            _state.update(path, lambda doc: _state.set_phase(doc, "r-2", "drain"), timeout=0.3)
        waited = time.monotonic() - started
    assert 0.3 <= waited < 3
    assert isinstance(info.value, _state.LockTimeout)
    assert path + ".lock" in info.value.msg and "another gpufleet task holds it" in info.value.msg
    assert "nvidia_driver upgrade" in info.value.msg and f"pid {os.getpid()}" in info.value.msg
    assert open(path, "rb").read() == before
    # and once released, the update goes through
    assert _state.update(path, lambda doc: _state.set_phase(doc, "r-2", "drain"), timeout=0.3)[0]


def test_lock_held_by_a_plain_flock_of_another_tool(tmp_path):
    """Any flock holder (a shell's `flock`, another version of the collection) counts, holder unknown."""
    lock = tmp_path / "gpufleet.fact.lock"
    lock.write_text("")
    with open(lock) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        with pytest.raises(_state.LockTimeout, match="another gpufleet task holds it"):
            with _state.locked(str(lock), timeout=0.1):
                pass


@pytest.mark.parametrize(
    "content",
    [b"[" * 4000, b'{"pid": ' + b"[" * 3000, b'{"pid": 100000000000000000000000000000}', b'{"pid": "\xff"}', b"\xff\xfe"],
    ids=["nested-deep", "pid-nested-deep", "pid-too-large", "not-utf8-value", "not-utf8"],
)
def test_lock_held_with_a_lock_file_of_any_content_names_no_holder(tmp_path, content):
    """Issue 21: the lock file's content is read only for the message; a hostile one is "holder not recorded", no traceback."""
    lock = tmp_path / "gpufleet.fact.lock"
    lock.write_bytes(content)
    with open(lock) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        with pytest.raises(_state.LockTimeout, match=r"another gpufleet task holds it \(holder not recorded\)"):
            with _state.locked(str(lock), timeout=0.1):
                pass


@pytest.mark.parametrize("pid", [0, -1, True, "1", 1.0], ids=["zero", "negative", "bool", "string", "float"])
def test_a_recorded_pid_that_is_no_process_id_names_no_holder(tmp_path, pid):
    """kill(0, 0) and kill(-1, 0) succeed (a process group, every process): such a pid is no holder, nor is one of another type."""
    lock = tmp_path / "gpufleet.fact.lock"
    lock.write_text(json.dumps({"pid": pid, "host": "node-1", "purpose": "test", "since": "2026-01-01T00:00:00Z"}))
    with open(lock) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        with pytest.raises(_state.LockTimeout, match=r"another gpufleet task holds it \(holder not recorded\)"):
            with _state.locked(str(lock), timeout=0.1):
                pass


def test_a_recorded_live_holder_is_named(tmp_path):
    lock = tmp_path / "gpufleet.fact.lock"
    lock.write_text(json.dumps({"pid": os.getpid(), "host": "node-1", "purpose": "a test", "since": "2026-01-01T00:00:00Z"}))
    with open(lock) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        with pytest.raises(_state.LockTimeout, match=rf"holds it \(pid {os.getpid()} on node-1, a test, since 2026-01-01T00:00:00Z\)"):
            with _state.locked(str(lock), timeout=0.1):
                pass


def test_lock_file_replaced_while_waiting_is_locked_again(tmp_path):
    """A waiter that gets the lock on a file someone removed meanwhile takes it again on the file now there."""
    lock = tmp_path / "x.lock"
    first = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(first, fcntl.LOCK_EX)
    inside, leave = threading.Event(), threading.Event()

    def waiter():
        with _state.locked(str(lock), timeout=10):
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.2)
    os.unlink(lock)  # the holder removes the lock file (an admin cleaning up) and releases
    os.close(first)
    assert inside.wait(10)
    probe = os.open(lock, os.O_RDWR)  # the lock file there now is the one held
    with pytest.raises(BlockingIOError):
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(probe)
    leave.set()
    thread.join(10)


def test_a_command_started_under_the_lock_does_not_keep_it(tmp_path):
    """The driver module runs installers while it records state: a daemon they leave behind must not hold the lock."""
    lock = str(tmp_path / "x.lock")
    with _state.locked(lock, timeout=1):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"], close_fds=False)
    try:
        with _state.locked(lock, timeout=1):
            pass
    finally:
        child.kill()
        child.wait()


def test_locked_is_released_when_the_body_raises(tmp_path):
    lock = str(tmp_path / "x.lock")
    with pytest.raises(RuntimeError):
        with _state.locked(lock, timeout=0.1):
            raise RuntimeError("boom")
    with _state.locked(lock, timeout=0.1):
        pass


@pytest.mark.parametrize("timeout", [0, -1, True, "5", float("inf"), float("nan"), 10_000])
def test_lock_timeout_is_checked(tmp_path, timeout):
    with pytest.raises(_state.StateFileError, match="lock timeout"):
        with _state.locked(str(tmp_path / "x.lock"), timeout=timeout):
            pass
    assert not (tmp_path / "x.lock").exists()


def test_lock_file_that_is_a_symlink_is_refused(tmp_path):
    target = tmp_path / "target"
    target.write_text("keep")
    (tmp_path / "x.lock").symlink_to(target)
    with pytest.raises(_state.StateFileError, match="symbolic link"):
        with _state.locked(str(tmp_path / "x.lock"), timeout=0.1):
            pass
    assert target.read_text() == "keep"
