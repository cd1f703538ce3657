"""Report files on the controller: written through a fresh temporary file, never through a planted link."""

from __future__ import annotations

import contextlib
import json
import os
import stat

import pytest
from ansible.module_utils import basic
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._fileio import replacement_mode
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report import files

try:  # ansible-core >= 2.19
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core 2.16 - 2.18
    from ansible.module_utils.common.text.converters import to_bytes

    @contextlib.contextmanager
    def patch_module_args(args=None):
        original = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args or {}}))
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = original


REPORT = "# Fleet report\n\ngpu-001 \u2714 550.90.07\n"  # non-ASCII: written as UTF-8 whatever the locale


@pytest.fixture
def module():
    """A real AnsibleModule (check mode as asked), as the report modules build one."""

    def make(check_mode=False):
        with patch_module_args({"_ansible_check_mode": check_mode}):
            return AnsibleModule(argument_spec={}, supports_check_mode=True)

    return make


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def write(module, dest, content=REPORT, check_mode=False):
    return files.write_reports(module(check_mode), str(dest), "fleet-report", {"md": ("md", content)})


def leftovers(folder):
    return [name for name in os.listdir(folder) if name.endswith(".tmp") and name != "fleet-report.md.tmp"]


def test_writes_and_then_changes_nothing(tmp_path, module, umask_022):
    dest = tmp_path / "reports"
    changed, paths = write(module, dest)
    assert changed and paths == {"md": str(dest / "fleet-report.md")}
    assert (dest / "fleet-report.md").read_bytes() == REPORT.encode("utf-8")
    assert stat.S_IMODE(os.stat(dest / "fleet-report.md").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o750
    assert write(module, dest) == (False, paths)
    assert leftovers(dest) == []


def test_check_mode_writes_nothing(tmp_path, module):
    dest = tmp_path / "reports"
    assert write(module, dest, check_mode=True)[0]
    assert not dest.exists()
    write(module, dest)
    assert write(module, dest, content="other", check_mode=True)[0]
    assert (dest / "fleet-report.md").read_text(encoding="utf-8") == REPORT


def test_symlink_planted_at_the_temporary_name_is_not_followed(tmp_path, module):
    """The old writer opened <dest>/<name>.tmp with open(..., 'w'): a link there overwrote its target."""
    dest = tmp_path / "reports"
    dest.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (dest / "fleet-report.md.tmp").symlink_to(victim)
    assert write(module, dest)[0]
    assert victim.read_text() == "precious\n"
    assert (dest / "fleet-report.md").read_text(encoding="utf-8") == REPORT and not (dest / "fleet-report.md").is_symlink()


@pytest.mark.parametrize("target_content", ["precious\n", REPORT], ids=["other_content", "same_content"])
def test_symlink_planted_at_the_destination_is_replaced_not_followed(tmp_path, module, target_content):
    """The link itself is replaced by the report; its target is neither written nor read as 'already there'."""
    dest = tmp_path / "reports"
    dest.mkdir()
    victim = tmp_path / "victim"
    victim.write_text(target_content, encoding="utf-8")
    os.chmod(victim, 0o600)
    (dest / "fleet-report.md").symlink_to(victim)
    assert write(module, dest)[0]
    assert victim.read_text(encoding="utf-8") == target_content and stat.S_IMODE(os.stat(victim).st_mode) == 0o600
    report = dest / "fleet-report.md"
    assert not report.is_symlink() and report.read_text(encoding="utf-8") == REPORT
    assert stat.S_IMODE(os.lstat(report).st_mode) != 0o600  # not the link target's mode either


def test_an_existing_report_of_ours_keeps_its_read_and_write_bits(tmp_path, module):
    dest = tmp_path / "reports"
    write(module, dest)
    os.chmod(dest / "fleet-report.md", 0o600)
    assert write(module, dest, content="new\n")[0]
    assert stat.S_IMODE(os.stat(dest / "fleet-report.md").st_mode) == 0o600


@pytest.mark.parametrize(
    ("existing", "umask", "mode"),
    [
        (None, 0o022, 0o640),  # a new report
        (None, 0o077, 0o600),  # the umask takes away more
        (None, 0o000, 0o640),  # never more than 0640
        ((0o600, 1000), 0o022, 0o600),  # our own, tighter: kept
        ((0o660, 1000), 0o022, 0o660),  # our own, group-writable: kept
        ((0o644, 1000), 0o022, 0o640),  # our own, world-readable (an older version's report): never world bits
        ((0o6777, 1000), 0o022, 0o660),  # our own with setuid, setgid, execute and world bits: only rw for owner and group
        ((0o1640, 1000), 0o022, 0o640),  # sticky bit dropped
        ((0o000, 1000), 0o022, 0o600),  # the owner always reads and writes its report
        ((0o4777, 0), 0o022, 0o640),  # planted by another user (root here): nothing inherited
        ((0o600, 2000), 0o022, 0o640),  # planted by another user: its mode is not ours to keep
    ],
)
def test_replacement_mode(existing, umask, mode):
    assert replacement_mode(existing, 1000, umask) == mode


def test_a_file_planted_by_another_user_passes_on_nothing(tmp_path, module, umask_022, monkeypatch):
    dest = tmp_path / "reports"
    dest.mkdir()
    planted = dest / "fleet-report.md"
    planted.write_text(REPORT, encoding="utf-8")  # even with the very content: the planted file is replaced
    os.chmod(planted, 0o4777)  # noqa: S103 - the planted file the test is about
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(planted).st_uid + 1)  # the file is someone else's
    assert write(module, dest)[0]
    assert stat.S_IMODE(os.stat(planted).st_mode) == 0o640


def test_an_older_world_readable_report_of_ours_is_rewritten_0640(tmp_path, module, umask_022):
    dest = tmp_path / "reports"
    write(module, dest)
    os.chmod(dest / "fleet-report.md", 0o644)
    assert write(module, dest)[0]
    assert stat.S_IMODE(os.stat(dest / "fleet-report.md").st_mode) == 0o640
    assert not write(module, dest)[0]


def test_created_folders_are_0750_and_an_existing_one_is_left_alone(tmp_path, module, umask_022):
    os.chmod(tmp_path, 0o755)  # noqa: S103 - an existing folder that must stay as it is
    dest = tmp_path / "a" / "b" / "reports"
    write(module, dest)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", dest):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o750, folder
    assert stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o755


def test_the_file_and_its_folder_are_fsynced(tmp_path, module, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(files.os, "fsync", recording_fsync)
    write(module, tmp_path / "reports")
    assert synced == ["file", "dir"]


def test_a_failed_rename_keeps_the_old_report_and_leaves_no_temporary_file(tmp_path, module, monkeypatch):
    dest = tmp_path / "reports"
    write(module, dest)

    def broken(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", broken)
    with pytest.raises(files.ReportFileError, match=r"cannot write the report .*fleet-report\.md: .*No space left") as info:
        write(module, dest, content="new\n")
    assert isinstance(info.value, GpufleetError) and info.value.fail_kwargs()["path"] == str(dest / "fleet-report.md")
    assert (dest / "fleet-report.md").read_text(encoding="utf-8") == REPORT
    assert leftovers(dest) == []


def test_dest_that_is_a_file_fails_with_a_message(tmp_path, module):
    dest = tmp_path / "reports"
    dest.write_text("not a folder")
    with pytest.raises(files.ReportFileError, match=r"dest .*reports is not a folder"):
        write(module, dest)
    with pytest.raises(files.ReportFileError, match=r"dest .*reports is not a folder"):
        write(module, dest, check_mode=True)
    assert dest.read_text() == "not a folder"


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_report_path_that_is_not_a_regular_file_fails_without_blocking(tmp_path, module, kind):
    dest = tmp_path / "reports"
    dest.mkdir()
    path = dest / "fleet-report.md"
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)  # the old writer blocked for ever opening it to compare
    for check_mode in (True, False):
        with pytest.raises(files.ReportFileError, match=r"fleet-report\.md is a (directory|pipe).*not a regular file"):
            write(module, dest, check_mode=check_mode)
    assert leftovers(dest) == []


def test_a_refused_target_writes_none_of_the_files(tmp_path, module):
    """The files before it in the list were written, then the refusal came."""
    dest = tmp_path / "reports"
    (dest / "fleet-report.html").mkdir(parents=True)
    outputs = {"json": ("json", "{}\n"), "md": ("md", REPORT), "html": ("html", "<p>\n")}
    with pytest.raises(files.ReportFileError, match=r"fleet-report\.html is a directory"):
        files.write_reports(module(), str(dest), "fleet-report", outputs, last="json")
    assert os.listdir(dest) == ["fleet-report.html"]


def test_last_is_written_after_the_others_and_only_what_changed_is_written(tmp_path, module, monkeypatch):
    dest = tmp_path / "reports"
    outputs = {"json": ("json", "{}\n"), "md": ("md", REPORT), "html": ("html", "<p>\n")}
    written = []
    real_replace = os.replace

    def recording_replace(src, dst):
        written.append(os.path.basename(dst))
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", recording_replace)
    assert files.write_reports(module(), str(dest), "fleet-report", outputs, last="json")[0]
    assert written == ["fleet-report.md", "fleet-report.html", "fleet-report.json"]
    written.clear()
    changed, paths = files.write_reports(module(), str(dest), "fleet-report", dict(outputs, md=("md", "new\n")), last="json")
    assert changed and written == ["fleet-report.md"] and list(paths) == ["json", "md", "html"]


def test_a_lone_surrogate_is_written_as_its_escape(tmp_path, module):
    """A broken escape in a task's arguments ("\\ud800") has no UTF-8 form: it ended the task with a UnicodeEncodeError."""
    dest = tmp_path / "reports"
    assert write(module, dest, content="title \ud800\n")[0]
    assert (dest / "fleet-report.md").read_text(encoding="utf-8") == "title \\ud800\n"
    assert write(module, dest, content="title \ud800\n") == (False, {"md": str(dest / "fleet-report.md")})
