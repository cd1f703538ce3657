"""Every report writer takes its files' modes from the one decision in _fileio (replacement_mode, through
_report/files.py): new reports 0640 in 0750 folders, and a file planted where a report goes passes on neither its mode
nor its setuid bit. One test per writer: validation_report, fleet_report (the audit's files: module and action plugin)
and rollout_report (its reports and nodes/*.json)."""

from __future__ import annotations

import os
import stat

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.gpufleet.lifecycle.plugins.action.fleet_report import ActionModule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.fleet_task import ARGUMENT_SPEC
from ansible_collections.gpufleet.lifecycle.plugins.modules import fleet_report, rollout_report, validation_report
from ansible_collections.gpufleet.lifecycle.tests.browser.rollout_sample import sample_rollout

BOM = {"driver": {"version": "550.90.07"}, "gpu": {"count": 8}}
FLEET_NODES = [{"name": "gpu-001", "sku": "hgx-h100", "bom": BOM,
                "facts": {"driver": {"version": "550.90.07", "installed": True, "loaded": True}, "gpu_count": 8, "gpus": [], "xid": {"critical": []}}}]
PLANTED = 0o4777  # setuid, world-writable, executable


@pytest.fixture(autouse=True)
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def plant(dest, *names, someone_else=None, monkeypatch=None):
    """A file at each name, mode 4777; with someone_else, the writer runs as another uid than the files' owner."""
    for name in names:
        path = dest / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("planted\n")
        os.chmod(path, PLANTED)
    if someone_else:
        owner = os.stat(dest / names[0]).st_uid
        monkeypatch.setattr(os, "geteuid", lambda: owner + 1)


def assert_report_modes(dest, written, someone_else=True):
    """0640 for a new report or one replacing another user's file; of our own 4777 file only rw for owner and group."""
    assert mode(dest) == 0o750
    for path in written:
        assert mode(path) == (0o640 if someone_else else 0o660), path


def written_files(paths):
    """Every path of a result's files/paths mapping (nested for rollout_report's nodes)."""
    for value in paths.values():
        if isinstance(value, dict):
            yield from written_files(value)
        else:
            yield value


@pytest.mark.parametrize("someone_else", [False, True], ids=["own-file", "planted-by-another-user"])
def test_validation_report(run_module, tmp_path, monkeypatch, someone_else):
    dest = tmp_path / "out"
    result = run_module(validation_report.main, {"nodes": [], "dest": str(dest)})
    assert_report_modes(dest, written_files(result["files"]))
    plant(dest, *(os.path.basename(p) for p in written_files(result["files"])), someone_else=someone_else, monkeypatch=monkeypatch)
    result = run_module(validation_report.main, {"nodes": [], "dest": str(dest)})
    assert result["changed"]
    assert_report_modes(dest, written_files(result["files"]), someone_else)


@pytest.mark.parametrize("someone_else", [False, True], ids=["own-file", "planted-by-another-user"])
def test_fleet_report_module(run_module, tmp_path, monkeypatch, someone_else):
    dest = tmp_path / "reports"
    plant(dest, "fleet-report.json", "fleet-report.md", "fleet-report.html", someone_else=someone_else, monkeypatch=monkeypatch)
    os.chmod(dest, 0o750)  # noqa: S103 - an existing folder is left as it is
    result = run_module(fleet_report.main, {"nodes": FLEET_NODES, "expected_hosts": ["gpu-001"], "dest": str(dest)})
    assert result["changed"] and len(result["files"]) == 3
    assert_report_modes(dest, written_files(result["files"]), someone_else)


@pytest.mark.parametrize("someone_else", [False, True], ids=["own-file", "planted-by-another-user"])
def test_fleet_report_action_plugin_in_process(tmp_path, monkeypatch, someone_else):
    dest = tmp_path / "audit" / "reports"
    validation = ArgumentSpecValidator(ARGUMENT_SPEC).validate({"nodes": FLEET_NODES, "expected_hosts": ["gpu-001"], "dest": str(dest)})
    action = ActionModule.__new__(ActionModule)
    result = action.run_task(validation.validated_parameters, check_mode=False)
    assert_report_modes(dest, written_files(result["files"]))
    assert mode(tmp_path / "audit") == 0o750  # a folder above dest that the writer created
    plant(dest, *(os.path.basename(p) for p in written_files(result["files"])), someone_else=someone_else, monkeypatch=monkeypatch)
    result = action.run_task(validation.validated_parameters, check_mode=False)
    assert result["changed"]
    assert_report_modes(dest, written_files(result["files"]), someone_else)


@pytest.mark.parametrize("someone_else", [False, True], ids=["own-file", "planted-by-another-user"])
def test_rollout_report_and_its_node_files(run_module, tmp_path, monkeypatch, someone_else):
    records, plan = sample_rollout(3, rollout_id="r-1")
    args = {"dest": str(tmp_path / "reports"), "rollout_id": "r-1", "records": records, "plan": plan}
    dest = tmp_path / "reports"
    result = run_module(rollout_report.main, args)
    files = list(written_files(result["paths"]))
    assert any("/nodes/" in path for path in files) and len(files) > 4
    assert_report_modes(dest, files)
    assert mode(dest / "nodes") == 0o750
    plant(dest, *(os.path.relpath(p, dest) for p in files), someone_else=someone_else, monkeypatch=monkeypatch)
    result = run_module(rollout_report.main, args)
    assert result["changed"]
    assert_report_modes(dest, written_files(result["paths"]), someone_else)
