"""The ForceUpdate record (issue 21): written before force_update enable, locked by the live run, found by the next
run after a SIGKILL (the kernel drops the lock), and the config folders that killed runs leave removed."""

from __future__ import annotations

import fcntl
import json
import os
import signal

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware import force_update_record as records
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware import nvfwupd as manager


def _killed_after_write(folder):
    """A child process writes the record, then is SIGKILLed while holding it; returns once it is dead."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a run between force_update enable and disable
        try:
            records.ForceUpdateRecord("10.0.0.1", 443, folder).write(rollout_id="r1")
            os.write(ready_w, b"x")
            signal.pause()
        finally:
            os._exit(1)
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"x"
    os.close(ready_r)
    return pid


def test_a_record_of_a_live_run_is_busy_and_of_a_killed_run_is_found(tmp_path):
    folder = str(tmp_path / "records")
    pid = _killed_after_write(folder)
    try:
        with pytest.raises(records.RecordBusy):
            records.ForceUpdateRecord("10.0.0.1", 443, folder).read()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    found = records.ForceUpdateRecord("10.0.0.1", 443, folder)
    left = found.read()
    assert left["force_update"] == "on" and left["rollout_id"] == "r1" and left["pid"] == pid
    found.remove()
    assert os.listdir(folder) == []
    assert records.ForceUpdateRecord("10.0.0.1", 443, folder).read() is None


def test_the_record_folder_must_be_this_users_and_private(tmp_path):
    folder = tmp_path / "records"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    with pytest.raises(records.RecordError, match="group/world-writable"):
        records.ForceUpdateRecord("10.0.0.1", 443, str(folder)).read()
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(records.RecordError, match="a link"):
        records.ForceUpdateRecord("10.0.0.1", 443, str(link)).read()


def test_an_unreadable_record_still_says_it_was_ours(tmp_path):
    folder = tmp_path / "records"
    folder.mkdir(mode=0o700)
    (folder / "10.0.0.1_443.json").write_text("{cut")
    assert records.ForceUpdateRecord("10.0.0.1", 443, str(folder)).read() == {}


def _orphan(base, name, locked=False):
    folder = base / "ansible-moduletmp-1733400000.1-abc" / name
    folder.mkdir(parents=True)
    (folder / "target.yaml").write_text(json.dumps({"RF_PASSWORD": "x"}))
    (folder / "lock").write_text("")
    return folder


def test_config_folders_of_killed_runs_are_removed_and_live_ones_kept(tmp_path):
    base = tmp_path / "remote_tmp"
    dead = _orphan(base, "gpufleet-nvfwupd-dead")
    live = _orphan(base, "gpufleet-nvfwupd-live")
    other = _orphan(base, "someone-elses")
    mine = base / "ansible-tmp-1733400001.2-def"
    mine.mkdir()
    with open(live / "lock") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a run still going
        removed = manager.remove_orphaned_configs(str(mine))
    assert removed == [str(dead)] and not dead.exists() and live.exists() and other.exists()


def test_private_config_lives_in_the_given_tmpdir_locked_and_is_removed(tmp_path):
    bmc = {"servertype": "HGX", "address": "10.0.0.1", "user": "admin", "password": "pw", "port": 443}
    tmpdir = tmp_path / "ansible-tmp-1733400000.1-abc"
    tmpdir.mkdir()
    with manager.private_config(bmc, [], str(tmpdir)) as (folder, path):
        assert os.path.dirname(folder) == str(tmpdir) and os.path.dirname(path) == folder
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        assert manager.remove_orphaned_configs(str(tmp_path / "ansible-tmp-2-def")) == []  # in use: its lock is held
        assert os.path.exists(path)
    assert not os.path.exists(folder)
