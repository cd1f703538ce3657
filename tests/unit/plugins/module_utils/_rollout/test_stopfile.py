"""Where the stop file may live: a folder only the controller user (or root) controls; anyone else could halt the rollout."""

from __future__ import annotations

import os
import stat

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.filter import rollout as rollout_filters
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout import stopfile

ME = 1000


class Stat:
    def __init__(self, mode, uid):
        self.st_mode, self.st_uid = mode, uid


def fake_stat(tree):
    def stat_of(path):
        if path not in tree:
            raise FileNotFoundError(path)
        if isinstance(tree[path], OSError):
            raise tree[path]
        return tree[path]

    return stat_of


DIR = stat.S_IFDIR
TREE = {
    "/": Stat(DIR | 0o755, 0),
    "/home": Stat(DIR | 0o755, 0),
    "/home/op": Stat(DIR | 0o700, ME),
    "/home/op/.gpufleet": Stat(DIR | 0o700, ME),
    "/srv/team": Stat(DIR | 0o2770, ME),
    "/srv": Stat(DIR | 0o755, 0),
    "/var": Stat(DIR | 0o755, 0),
    "/var/tmp": Stat(DIR | 0o1777, 0),
    "/var/open": Stat(DIR | 0o777, 0),
    "/var/lib": Stat(DIR | 0o755, 0),
    "/home/bob": Stat(DIR | 0o755, 1001),
    "/etc/file": Stat(stat.S_IFREG | 0o644, 0),
    "/etc": Stat(DIR | 0o755, 0),
    "/locked": PermissionError(13, "Permission denied"),
}


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/home/op/.gpufleet/rollout.stop", None),  # the operator's own folder
        ("/home/op/.gpufleet/new/deeper/x.stop", None),  # not made yet, under a folder only the operator writes
        ("/srv/team/rollout.stop", None),  # group-writable: the team may stop it
        ("/var/lib/gpufleet/gpufleet.stop", None),  # root's folder (the AWX survey's default), not made yet
        ("/var/tmp/gpufleet.stop", "the folder /var/tmp of gpufleet_stop_file is writable by everyone: anyone on the controller could "
                                   "create the stop file and halt the rollout (the sticky bit does not stop anyone creating the file)"),
        ("/var/open/x.stop", "is writable by everyone"),
        ("/var/tmp/mine/x.stop", "the folder /var/tmp (where /var/tmp/mine would be made) of gpufleet_stop_file is writable by everyone"),
        ("/home/bob/x.stop", "the folder /home/bob of gpufleet_stop_file belongs to uid 1001, not to you (uid 1000) or root"),
        ("/etc/file/x.stop", "/etc/file, on the path of gpufleet_stop_file, is not a folder"),
        ("/locked/x.stop", "the folder /locked of gpufleet_stop_file cannot be read (Permission denied)"),
        ("relative/x.stop", "gpufleet_stop_file 'relative/x.stop' must be an absolute path"),
        ("", "gpufleet_stop_file must be a path on the controller"),
        (None, "gpufleet_stop_file must be a path on the controller"),
        ("/x\x00y", "gpufleet_stop_file must be a path on the controller"),
    ],
)
def test_stop_file_folder_table(path, words):
    found = stopfile.problem(path, stat_of=fake_stat(TREE), uid=ME)
    if words is None:
        assert found is None
    else:
        assert found is not None and words in found, found
        if "writable by everyone" in words or "belongs to" in words:
            assert "~/.gpufleet/rollout.stop" in found  # says what to do


def test_the_default_and_the_filter_on_the_real_controller(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert stopfile.problem(stopfile.DEFAULT) is None  # ~/.gpufleet not made yet, under a home only we write
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    os.chmod(open_folder, 0o1777)  # noqa: S103  the world-writable folder the check refuses
    assert "writable by everyone" in rollout_filters.stop_file_problem(str(open_folder / "x.stop"))
    assert rollout_filters.stop_file_problem(str(tmp_path / "x.stop")) == ""
