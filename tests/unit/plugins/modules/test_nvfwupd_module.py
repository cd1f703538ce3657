"""gpufleet.lifecycle.nvfwupd with recorded commands: exact argument lists, the secret never in one,
the 0600 config file removed on every exit path, sha256 before anything, downgrades, force_update
disabled again on every exit path, the -j Error Code judged (nvfwupd exits 0 when it cannot connect)."""

from __future__ import annotations

import http.server
import json
import os
import pathlib
import socket
import ssl
import stat
import threading

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _tools
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware import bmc_certificate, force_update_record
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware import nvfwupd as manager
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._state import load
from ansible_collections.gpufleet.lifecycle.plugins.modules import nvfwupd

from tests.gpusim.bmc.cert import make_self_signed

PASSWORD = "S3cret-BMC-pw"  # noqa: S105 - a test secret, that must appear nowhere
SCRIPT = "/opt/nvfwupd/nvfwupd.py"
PYTHON = "/opt/nvfwupd/venv/bin/python"
OLD_GPU, NEW_GPU, OLDER_GPU = "96.00.A5.00.01", "96.00.AF.00.01", "96.00.99.00.01"


def show_version(gpu_sys, gpu_pkg, hmc=("HGX-22.10-1", "HGX-24.04-2"), staged=None, package="HGX-24.04-2"):
    rows = [
        {"AP Name": "HGX_FW_BMC_0", "Sys Version": hmc[0], "Staged Version": "N/A", "Pkg Version": hmc[1], "Up-To-Date": "No"},
        {"AP Name": "HGX_FW_CPLD_0", "Sys Version": "0.1C", "Staged Version": "N/A", "Pkg Version": "N/A", "Up-To-Date": "No"},
    ]
    for i in range(2):
        rows.append(
            {"AP Name": f"HGX_FW_GPU_SXM_{i + 1}", "Sys Version": gpu_sys, "Staged Version": staged or "N/A", "Pkg Version": gpu_pkg, "Up-To-Date": "No"}
        )
    return json.dumps(
        {"Error Code": 0, "System Model": "NVIDIA HGX H100 80GB HBM3 8-GPU", "Packages": [package], "System IP": "10.0.0.1", "Firmware Devices": rows}
    )


def task(task_id, state, messages=()):
    return json.dumps(
        {
            "Error": [],
            "Error Code": 0,
            "Output": [
                {
                    "Id": task_id,
                    "TaskState": state,
                    "TaskStatus": "OK" if state != "Exception" else "Critical",
                    "PercentComplete": 100 if state == "Completed" else 40,
                    "Messages": list(messages),
                }
            ],
        }
    )


def msg(message_id, *args):
    return {"MessageId": message_id, "MessageArgs": list(args), "Message": f"{message_id} {' '.join(args)}"}


STARTED = json.dumps({"Error": [], "Error Code": 0, "Output": [{"Messages": [msg("Task.1.0.New", "/redfish/v1/TaskService/Tasks/0")]}]})
CONNECT_FAILED = json.dumps(
    {"Error": ["Error: Failed to connect to target: ip=XXXX user=XXXX password=XXXX", "Error : Unable to access DUT ip=XXXX"], "Error Code": 1, "Output": []}
)


def force_status(value):
    return json.dumps({"Error": [], "Error Code": 0, "Output": [{"Id": "UpdateService", "HttpPushUriOptions": {"ForceUpdate": value}}]})


@pytest.fixture
def env(tmp_path, commands, monkeypatch):
    """The package, the fake nvfwupd.py, a fixed private folder, and a check of the config file at each call."""
    pkg = tmp_path / "hgx.fwpkg"
    pkg.write_bytes(b"PLDM package bytes")
    folder = tmp_path / "ansible-tmp-1-task" / "private"  # in the task's Ansible tmp dir (AnsibleModule.tmpdir)
    folder.parent.mkdir()
    made_in = []
    real_mkdtemp = manager.tempfile.mkdtemp

    def mkdtemp(prefix=None, dir=None, **kwargs):
        if prefix != manager.CONFIG_PREFIX:  # anyone else's (another thread's) folder: a real one
            return real_mkdtemp(prefix=prefix, dir=dir, **kwargs)
        made_in.append(dir)
        folder.mkdir(mode=0o700)
        return str(folder)

    monkeypatch.setattr(manager.tempfile, "mkdtemp", mkdtemp)
    records = tmp_path / "records"
    monkeypatch.setattr(force_update_record, "DEFAULT_FOLDER", str(records))
    monkeypatch.setattr(manager.time, "sleep", lambda s: None)
    seen = []
    package_reads = []  # (the -p path nvfwupd was given, its bytes then): the verified private copy, never the package's path
    inner = _tools.run_process

    def run_command(module, args, **kwargs):
        config = folder / "target.yaml"
        seen.append({"mode": stat.S_IMODE(config.stat().st_mode), "doc": json.loads(config.read_text()), "cwd": os.getcwd()})
        # The argument lists of these tests name the package: its private copy is mapped back to it, its bytes kept.
        mapped = list(args)
        for i, arg in enumerate(mapped):
            parent, name = os.path.split(str(arg))
            if os.path.basename(parent).startswith("gpufleet-artifact.") and name == pkg.name:
                package_reads.append((arg, pathlib.Path(arg).read_bytes()))
                mapped[i] = str(pkg)
        return inner(module, mapped, **kwargs)

    monkeypatch.setattr(_tools, "run_process", run_command)
    # No BMC here: the certificate check is recorded, not made (the tests with a TLS server below make it for real).
    certificate_checks = []

    def check_certificate(address, port, ca_path=None, timeout=None):
        certificate_checks.append({"bmc": f"{address}:{port}", "ca_path": ca_path, "timeout": timeout, "config_written": folder.exists()})
        return 200

    monkeypatch.setattr(bmc_certificate, "check", check_certificate)
    real_isfile, real_access = os.path.isfile, os.access
    monkeypatch.setattr(manager.os.path, "isfile", lambda p: p == SCRIPT or real_isfile(p))
    monkeypatch.setattr(manager.os, "access", lambda p, m: p == PYTHON or real_access(p, m))
    commands.tool("python", PYTHON)
    import hashlib

    commands.on([PYTHON, SCRIPT, "-c", str(folder / "target.yaml"), "force_update", "status", "-j"], stdout=force_status(False))
    return {
        "pkg": str(pkg),
        "sha": "sha256:" + hashlib.sha256(pkg.read_bytes()).hexdigest(),
        "folder": folder,
        "config": str(folder / "target.yaml"),
        "seen": seen,
        "made_in": made_in,
        "records": records,
        "ansible_tmp": str(folder.parent),
        "package_reads": package_reads,
        "certificate_checks": certificate_checks,
    }


def args(env, **extra):
    base = {
        "bmc": {"address": "10.0.0.1", "user": "admin", "password": PASSWORD},
        "package": env["pkg"],
        "checksum": env["sha"],
        "nvfwupd_path": SCRIPT,
        "nvfwupd_interpreter": PYTHON,
        "poll_interval": 1,
        "_ansible_tmpdir": env["ansible_tmp"],
    }
    base.update(extra)
    return base


def cmd(env, *tool_args):
    return [PYTHON, SCRIPT, "-c", env["config"], *tool_args]


def on_show(commands, env, text):
    commands.on(cmd(env, "show_version", "-p", env["pkg"], "-s", "-j"), stdout=text)


def answers(commands, argv, *outputs):
    """``argv`` answers each of ``outputs`` in turn, then the last one again."""
    responses = iter(outputs)
    key = tuple(argv)
    original = commands.run_command
    last = [outputs[-1]]

    def run_command(module, call, **kwargs):
        if tuple(call[3:]) == key:
            last[0] = next(responses, last[0])
            commands.responses[key] = (0, last[0], "")
        return original(module, call, **kwargs)

    commands.run_command = run_command


def assert_no_secret(commands, result):
    for call in commands.calls:
        assert not any(PASSWORD in part for part in call["cmd"]), call["cmd"]
        assert PASSWORD not in json.dumps(call["environ_update"])
    assert PASSWORD not in json.dumps(result, default=str)


def test_check_mode_is_the_plan_and_runs_show_version_only(commands, env, run_module):
    on_show(commands, env, show_version(OLD_GPU, NEW_GPU))
    result = run_module(nvfwupd.main, args(env), check_mode=True)
    assert [c["argv"] for c in commands.calls] == [cmd(env, "show_version", "-p", env["pkg"], "-s", "-j"), cmd(env, "force_update", "status", "-j")]
    assert result["changed"] is True
    assert [(r["component"], r["installed"], r["package"], r["action"], r["activation"]) for r in result["plan"]] == [
        ("HGX_FW_BMC_0", "HGX-22.10-1", "HGX-24.04-2", "update", "bmc_reset"),
        ("HGX_FW_GPU_SXM_1", OLD_GPU, NEW_GPU, "update", "gpu_reset"),
        ("HGX_FW_GPU_SXM_2", OLD_GPU, NEW_GPU, "update", "gpu_reset"),
    ]
    assert result["activation_required"] == ["gpu_reset", "bmc_reset"]
    assert result["state_record"]["result"] == "planned"
    assert_no_secret(commands, result)


def test_update_exact_commands_config_file_and_environment(commands, env, run_module):
    on_show(commands, env, show_version(OLD_GPU, NEW_GPU))
    commands.on(cmd(env, "update_fw", "-p", env["pkg"], "-y", "-b", "-j"), stdout=STARTED)
    done = [msg("Update.1.0.UpdateSuccessful", n, "image.fwpkg") for n in ("HGX_FW_BMC_0", "HGX_FW_GPU_SXM_1", "HGX_FW_GPU_SXM_2")]
    commands.on(cmd(env, "show_update_progress", "-i", "0", "-j"), stdout=task("0", "Completed", done))
    # The second show_version (after the task) sees the staged versions.
    responses = iter([show_version(OLD_GPU, NEW_GPU), show_version(OLD_GPU, NEW_GPU, hmc=("HGX-24.04-2", "HGX-24.04-2"), staged=NEW_GPU)])
    key = tuple(cmd(env, "show_version", "-p", env["pkg"], "-s", "-j"))
    original = commands.run_command

    def run_command(module, argv, **kwargs):
        if tuple(argv[3:]) == key:
            commands.responses[key] = (0, next(responses), "")
        return original(module, argv, **kwargs)

    commands.run_command = run_command
    result = run_module(nvfwupd.main, args(env))
    assert [c["argv"] for c in commands.calls] == [
        cmd(env, "show_version", "-p", env["pkg"], "-s", "-j"),
        cmd(env, "force_update", "status", "-j"),  # every run: a ForceUpdate left on by a killed run is closed first
        cmd(env, "update_fw", "-p", env["pkg"], "-y", "-b", "-j"),
        cmd(env, "show_update_progress", "-i", "0", "-j"),
        cmd(env, "show_version", "-p", env["pkg"], "-s", "-j"),
    ]
    assert result["changed"] is True and result["task_ids"] == ["0"]
    assert result["staged"]["HGX_FW_GPU_SXM_1"] == NEW_GPU and "HGX_FW_GPU_SXM_1" in result["finished"]
    assert result["state_record"]["result"] == "ok" and result["state_record"]["package_version"] == "HGX-24.04-2"
    # The secret only ever in the 0600 config file, in the private folder nvfwupd runs in; both gone afterwards.
    assert {s["mode"] for s in env["seen"]} == {0o600}
    assert env["seen"][0]["doc"] == {"TargetPlatform": "HGX", "BMC_IP": "10.0.0.1", "RF_USERNAME": "admin", "RF_PASSWORD": PASSWORD, "SANITIZE_LOG": True}
    assert {s["cwd"] for s in env["seen"]} == {str(env["folder"])}
    assert env["made_in"] == [env["ansible_tmp"]]  # Ansible removes that folder even when the module is killed
    assert not env["folder"].exists()
    environ = commands.calls[0]["environ_update"]
    assert environ["http_proxy"] == environ["HTTP_PROXY"] == "http://plain-http-refused.invalid:9"
    assert environ["no_proxy"] == environ["NO_PROXY"] == "" and environ["LC_ALL"] == "C"
    assert_no_secret(commands, result)


def test_nvfwupd_flashes_the_verified_copy_not_the_file_at_the_package_path(commands, env, run_module):
    """The package swapped at its path after the check (a folder a job user can write): update_fw still gets the
    bytes whose sha256 was verified, from a private copy in the module's tmp dir."""
    verified = pathlib.Path(env["pkg"]).read_bytes()
    on_show(commands, env, show_version(OLD_GPU, NEW_GPU))
    commands.on(cmd(env, "update_fw", "-p", env["pkg"], "-y", "-b", "-j"), stdout=STARTED)
    done = [msg("Update.1.0.UpdateSuccessful", n, "image.fwpkg") for n in ("HGX_FW_BMC_0", "HGX_FW_GPU_SXM_1", "HGX_FW_GPU_SXM_2")]
    commands.on(cmd(env, "show_update_progress", "-i", "0", "-j"), stdout=task("0", "Completed", done))
    original = commands.run_command

    def run_command(module, argv, **kwargs):
        pathlib.Path(env["pkg"]).write_bytes(b"a package planted after the check")
        return original(module, argv, **kwargs)

    commands.run_command = run_command
    result = run_module(nvfwupd.main, args(env))
    flashed = [data for path, data in env["package_reads"]]
    assert len(flashed) >= 2, "nvfwupd was given the file at the package's path, not the verified private copy"
    assert set(flashed) == {verified}
    assert all(path.startswith(env["ansible_tmp"]) for path, data in env["package_reads"])
    assert result["state_record"]["package"] == env["pkg"]  # the record names the operator's path


def test_idempotent_when_installed_or_staged(commands, env, run_module):
    on_show(commands, env, show_version(NEW_GPU, NEW_GPU, hmc=("HGX-24.04-2", "HGX-24.04-2")))
    result = run_module(nvfwupd.main, args(env))
    assert result["changed"] is False and len(commands.calls) == 2
    commands.calls.clear()
    on_show(commands, env, show_version(OLD_GPU, NEW_GPU, hmc=("HGX-24.04-2", "HGX-24.04-2"), staged=NEW_GPU))
    result = run_module(nvfwupd.main, args(env))
    assert result["changed"] is False and len(commands.calls) == 2
    assert {r["action"] for r in result["plan"]} == {"none", "activate"} and result["activation_required"] == ["gpu_reset"]


def test_checksum_mismatch_runs_nothing(commands, env, run_module):
    result = run_module(nvfwupd.main, args(env, checksum="sha256:" + "0" * 64))
    assert result["failed"] and "checksum mismatch" in result["msg"] and "Nothing was changed" in result["msg"]
    assert commands.calls == [] and not env["folder"].exists()


def test_downgrade_refused_without_allow_downgrade(commands, env, run_module):
    on_show(commands, env, show_version(OLD_GPU, OLDER_GPU, hmc=("HGX-22.10-1", "N/A"), package="HGX-22.09-1"))
    result = run_module(nvfwupd.main, args(env))
    assert result["failed"] and "would downgrade HGX_FW_GPU_SXM_1 (96.00.A5.00.01 -> 96.00.99.00.01)" in result["msg"]
    assert "allow_downgrade" in result["msg"] and len(commands.calls) == 2 and not env["folder"].exists()


def test_downgrade_failing_midway_disables_force_update_and_names_the_components(commands, env, run_module):
    on_show(commands, env, show_version(OLD_GPU, OLDER_GPU, hmc=("HGX-22.10-1", "N/A"), package="HGX-22.09-1"))
    commands.on(cmd(env, "force_update", "enable", "-j"), stdout=force_status(True))
    commands.on(cmd(env, "update_fw", "-p", env["pkg"], "-y", "-b", "-j"), stdout=STARTED)
    failed = [msg("Update.1.0.UpdateSuccessful", "HGX_FW_GPU_SXM_1", "image.fwpkg"), msg("Update.1.0.ApplyFailed", "HGX_FW_GPU_SXM_2")]
    commands.on(cmd(env, "show_update_progress", "-i", "0", "-j"), stdout=task("0", "Exception", failed))
    commands.on(cmd(env, "force_update", "disable", "-j"), stdout=force_status(False))
    commands.on(cmd(env, "force_update", "status", "-j"), stdout=force_status(False))
    result = run_module(nvfwupd.main, args(env, allow_downgrade=True))
    argvs = [c["argv"][4:] for c in commands.calls]
    assert argvs[:6] == [
        ["show_version", "-p", env["pkg"], "-s", "-j"],
        ["force_update", "status", "-j"],
        ["force_update", "enable", "-j"],
        ["update_fw", "-p", env["pkg"], "-y", "-b", "-j"],
        ["show_update_progress", "-i", "0", "-j"],
        ["force_update", "disable", "-j"],
    ]
    assert argvs[6] == ["force_update", "status", "-j"]
    assert list(env["records"].iterdir()) == []  # checked off: the record went with it
    assert result["failed"] and result["force_update"] == {
        "enabled": True,
        "disabled_after": True,
        "found_on": False,
        "stale_record": False,
        "turned_off": None,
    }
    assert "not finished HGX_FW_GPU_SXM_1, HGX_FW_GPU_SXM_2" in result["msg"] or "HGX_FW_GPU_SXM_2" in result["unfinished"]
    assert result["state_record"]["result"] in ("failed", "partial") and "HGX_FW_GPU_SXM_2" in result["state_record"]["unfinished"]
    assert not env["folder"].exists()
    assert_no_secret(commands, result)


def test_force_update_left_on_is_a_failure(commands, env, run_module):
    on_show(commands, env, show_version(OLD_GPU, OLDER_GPU, hmc=("HGX-22.10-1", "N/A"), package="HGX-22.09-1"))
    commands.on(cmd(env, "force_update", "enable", "-j"), stdout=force_status(True))
    commands.on(cmd(env, "update_fw", "-p", env["pkg"], "-y", "-b", "-j"), stdout=CONNECT_FAILED)
    commands.on(cmd(env, "force_update", "disable", "-j"), stdout=force_status(True))
    answers(commands, cmd(env, "force_update", "status", "-j"), force_status(False), force_status(True))
    result = run_module(nvfwupd.main, args(env, allow_downgrade=True))
    assert result["failed"] and "ForceUpdate could not be turned off again" in result["msg"]
    assert result["force_update"]["disabled_after"] is False
    assert [p.name for p in env["records"].iterdir()] == ["10.0.0.1_443.json"]  # kept: the next run turns it off


def test_wrong_password_is_judged_from_the_json_not_the_exit_status(commands, env, run_module):
    on_show(commands, env, CONNECT_FAILED)  # rc 0, as the real tool with -j
    result = run_module(nvfwupd.main, args(env))
    assert result["failed"] and "Error Code 1" in result["msg"] and "bmc.password" in result["msg"]
    assert not env["folder"].exists()
    assert_no_secret(commands, result)


def test_bmc_not_answering_is_a_timeout(commands, env, run_module):
    commands.on(cmd(env, "show_version", "-p", env["pkg"], "-s", "-j"), rc=124)
    result = run_module(nvfwupd.main, args(env, timeout=20))
    assert result["failed"] and "did not finish within 20 s" in result["msg"] and "does not answer" in result["msg"]
    assert commands.calls[0]["timeout"] == 20 and not env["folder"].exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bmc": {"address": "10.0.0.1\n", "user": "admin", "password": PASSWORD}}, "bmc.address"),
        ({"bmc": {"address": "10.0.0.1", "user": "admin", "password": "pw\nmore"}}, "bmc_password"),
        ({"bmc": {"address": "10.0.0.1", "user": "admin", "password": PASSWORD, "port": 0}}, "bmc.port"),
        ({"package": "relative.fwpkg"}, "absolute path"),
        ({"checksum": None}, "checksum is required"),
        ({"checksum": "md5:abc"}, "is not a sha256"),
        ({"targets": ["../x"]}, "targets entry"),
        ({"timeout": 0}, "timeout must be"),
        ({"nvfwupd_interpreter": None}, "nvfwupd_interpreter"),
        ({"stage_only": True}, "stage_only needs bmc.servertype GB200 or GB300"),
    ],
)
def test_bad_options_fail_before_any_command(commands, env, run_module, change, message):
    result = run_module(nvfwupd.main, args(env, **change))
    assert result["failed"] and message in result["msg"], result["msg"]
    assert commands.calls == []
    assert PASSWORD not in json.dumps(result)


def test_target_not_in_the_package_fails_before_flashing(commands, env, run_module):
    on_show(commands, env, show_version(OLD_GPU, NEW_GPU))
    result = run_module(nvfwupd.main, args(env, targets=["HGX_FW_CPLD_0"]))
    assert result["failed"] and "HGX_FW_CPLD_0" in result["msg"] and len(commands.calls) == 1


def test_targets_go_into_the_config_file_for_this_update_only(commands, env, run_module):
    on_show(commands, env, show_version(NEW_GPU, NEW_GPU))
    run_module(nvfwupd.main, args(env, targets=["HGX_FW_GPU_SXM_1"], bmc={"address": "10.0.0.1", "user": "admin", "password": PASSWORD, "port": 8443}))
    doc = env["seen"][0]["doc"]
    assert doc["FwUpdateMethod"] == "MultipartHttpPushUri" and doc["TUNNEL_TCP_PORT"] == "8443"
    assert doc["UpdateParametersTargets"] == ["/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_GPU_SXM_1"]


def test_record_writes_history_and_last_known_good(commands, run_module, tmp_path):
    path = tmp_path / "gpufleet.fact"
    record = {
        "component": "gpu_firmware",
        "action": "update",
        "result": "ok",
        "package_version": "HGX-24.04-2",
        "package": "/p.fwpkg",
        "checksum": "sha256:" + "a" * 64,
        "finished": ["HGX_FW_BMC_0"],
        "unfinished": [],
        "before": {},
        "after": {},
    }
    result = run_module(nvfwupd.main, {"state": "record", "record": record, "state_file": str(path)})
    assert result["changed"] is True and commands.calls == []
    doc = load(str(path))
    assert doc["last_known_good"]["gpu_firmware"]["version"] == "HGX-24.04-2"
    assert doc["history"][-1]["result"] == "ok" and doc["history"][-1]["component"] == "gpu_firmware"
    failed = dict(record, result="partial", unfinished=["HGX_FW_GPU_SXM_2"], package_version="HGX-25.01-1")
    run_module(nvfwupd.main, {"state": "record", "record": failed, "state_file": str(path)})
    doc = load(str(path))
    assert doc["last_known_good"]["gpu_firmware"]["version"] == "HGX-24.04-2"  # a partial flash is no known good
    assert doc["history"][-1]["details"]["unfinished"] == ["HGX_FW_GPU_SXM_2"]
    assert run_module(nvfwupd.main, {"state": "record", "record": dict(record, action="none"), "state_file": str(path)})["changed"] is False
    newer = dict(record, package_version="HGX-25.01-1", package="/n.fwpkg")
    run_module(nvfwupd.main, {"state": "record", "record": newer, "state_file": str(path)})
    known = load(str(path))["last_known_good"]["gpu_firmware"]
    assert known["version"] == "HGX-25.01-1" and known["previous"] == {"version": "HGX-24.04-2", "package": "/p.fwpkg", "checksum": record["checksum"]}
    assert load(str(path))["history"][-1]["before"] == "HGX-24.04-2"


def test_force_update_enable_failing_still_disables(commands, env, run_module):
    """An enable that the tool reports as failed may still have reached the BMC: disable and check anyway."""
    on_show(commands, env, show_version(OLD_GPU, OLDER_GPU, hmc=("HGX-22.10-1", "N/A"), package="HGX-22.09-1"))
    commands.on(cmd(env, "force_update", "enable", "-j"), stdout=CONNECT_FAILED)
    commands.on(cmd(env, "force_update", "disable", "-j"), stdout=force_status(False))
    commands.on(cmd(env, "force_update", "status", "-j"), stdout=force_status(False))
    result = run_module(nvfwupd.main, args(env, allow_downgrade=True))
    argvs = [c["argv"][4:] for c in commands.calls]
    assert ["force_update", "disable", "-j"] in argvs and ["force_update", "status", "-j"] in argvs
    assert ["update_fw", "-p", env["pkg"], "-y", "-b", "-j"] not in argvs
    assert result["failed"] and "force_update enable failed" in result["msg"] and result["force_update"]["disabled_after"] is True


# -- hostile content ---------------------------------------------------------------------------------

ROLLOUT_ID_REFUSED = "rollout_id 'r1\\n' may hold only letters, digits, '.', '_' and '-' (1 to 64)"


@pytest.mark.parametrize("state", ["present", "query"])
def test_rollout_id_with_a_newline_is_refused_before_any_command(commands, env, run_module, state):
    result = run_module(nvfwupd.main, args(env, rollout_id="r1\n", state=state))
    assert result["failed"] and ROLLOUT_ID_REFUSED in result["msg"], result["msg"]
    assert commands.calls == [] and not env["folder"].exists()


def test_record_with_a_rollout_id_holding_a_newline_writes_nothing(commands, run_module, tmp_path):
    path = tmp_path / "gpufleet.fact"
    record = {"component": "gpu_firmware", "action": "update", "result": "ok", "package_version": "HGX-24.04-2", "rollout_id": "r1\n"}
    result = run_module(nvfwupd.main, {"state": "record", "record": record, "state_file": str(path)})
    assert result["failed"] and "record.rollout_id 'r1\\n' may hold only letters" in result["msg"], result["msg"]
    assert not path.exists()
    result = run_module(nvfwupd.main, {"state": "record", "record": dict(record, rollout_id="r1"), "state_file": str(path), "rollout_id": "r1\n"})
    assert result["failed"] and ROLLOUT_ID_REFUSED in result["msg"] and not path.exists()


def test_one_component_listed_twice_with_contradictory_versions_is_refused_before_update_fw(commands, env, run_module):
    document = json.loads(show_version(OLD_GPU, NEW_GPU))
    twin = dict(document["Firmware Devices"][2], **{"Sys Version": NEW_GPU, "Up-To-Date": "Yes"})
    document["Firmware Devices"].append(twin)  # HGX_FW_GPU_SXM_1 at A5 (No) and at AF (Yes)
    on_show(commands, env, json.dumps(document))
    result = run_module(nvfwupd.main, args(env))
    assert result["failed"] and "HGX_FW_GPU_SXM_1" in result["msg"] and OLD_GPU in result["msg"] and NEW_GPU in result["msg"], result["msg"]
    assert "nothing was flashed" in result["msg"].lower()
    assert [c["argv"][4] for c in commands.calls] == ["show_version"]
    assert not result.get("changed") and not env["folder"].exists()


def test_one_component_listed_twice_alike_counts_once(commands, env, run_module):
    document = json.loads(show_version(NEW_GPU, NEW_GPU, hmc=("HGX-24.04-2", "HGX-24.04-2")))
    document["Firmware Devices"].append(dict(document["Firmware Devices"][2]))
    on_show(commands, env, json.dumps(document))
    result = run_module(nvfwupd.main, args(env))
    assert result["changed"] is False and [r["component"] for r in result["plan"]] == ["HGX_FW_BMC_0", "HGX_FW_GPU_SXM_1", "HGX_FW_GPU_SXM_2"]


DEEP = "[" * 100000 + "]" * 100000


def _two_show_versions(commands, env, before, after):
    """show_version answers ``before``, then ``after`` (the read after the update)."""
    answers(commands, cmd(env, "show_version", "-p", env["pkg"], "-s", "-j"), before, after)


def test_deeply_nested_progress_fails_clearly_with_the_record_of_an_unknown_outcome(commands, env, run_module, tmp_path):
    _two_show_versions(commands, env, show_version(OLD_GPU, NEW_GPU), show_version(OLD_GPU, NEW_GPU))
    commands.on(cmd(env, "update_fw", "-p", env["pkg"], "-y", "-b", "-j"), stdout=STARTED)
    commands.on(cmd(env, "show_update_progress", "-i", "0", "-j"), stdout=DEEP)
    result = run_module(nvfwupd.main, args(env, rollout_id="r1"))
    assert result["failed"] and "show_update_progress" in result["msg"] and "nested too deeply" in result["msg"], result["msg"]
    assert "nvfwupd show_update_progress -i 0" in result["msg"]  # what to do: follow the task that may still run
    assert result["finished"] == [] and result["unfinished"] == ["HGX_FW_BMC_0", "HGX_FW_GPU_SXM_1", "HGX_FW_GPU_SXM_2"]
    record = result["state_record"]
    assert (record["action"], record["result"], record["task_ids"], record["task_result"]) == ("update", "failed", ["0"], "unknown")
    assert not env["folder"].exists()
    path = tmp_path / "gpufleet.fact"
    assert run_module(nvfwupd.main, {"state": "record", "record": record, "state_file": str(path)})["changed"] is True
    entry = load(str(path))["history"][-1]
    assert (entry["component"], entry["action"], entry["result"], entry["rollout_id"]) == ("gpu_firmware", "update", "failed", "r1")
    assert entry["details"]["task_ids"] == ["0"] and entry["details"]["task_result"] == "unknown"
    assert "gpu_firmware" not in load(str(path)).get("last_known_good", {})


def test_deeply_nested_update_fw_answer_fails_clearly_with_a_record(commands, env, run_module):
    _two_show_versions(commands, env, show_version(OLD_GPU, NEW_GPU), show_version(OLD_GPU, NEW_GPU))
    commands.on(cmd(env, "update_fw", "-p", env["pkg"], "-y", "-b", "-j"), stdout=DEEP)
    result = run_module(nvfwupd.main, args(env))
    assert result["failed"] and "update_fw" in result["msg"] and "nested too deeply" in result["msg"], result["msg"]
    assert result["state_record"]["task_result"] == "unknown" and result["unfinished"]


@pytest.mark.parametrize("stdout", [DEEP, '{"Firmware Devices": ' + DEEP + "}"])
def test_deeply_nested_show_version_fails_clearly_before_anything_is_flashed(commands, env, run_module, stdout):
    on_show(commands, env, stdout)
    result = run_module(nvfwupd.main, args(env))
    assert result["failed"] and "show_version" in result["msg"] and "nothing was flashed" in result["msg"].lower(), result["msg"]
    assert len(commands.calls) == 1 and not env["folder"].exists()


@pytest.mark.parametrize("status", [DEEP, "[]", '{"Output": [{"HttpPushUriOptions": "on"}]}', '{"Error Code": 1, "Error": 5}'])
def test_unreadable_force_update_status_is_a_failure_not_a_crash(commands, env, run_module, status):
    on_show(commands, env, show_version(OLD_GPU, OLDER_GPU, hmc=("HGX-22.10-1", "N/A"), package="HGX-22.09-1"))
    commands.on(cmd(env, "force_update", "enable", "-j"), stdout=force_status(True))
    commands.on(cmd(env, "update_fw", "-p", env["pkg"], "-y", "-b", "-j"), stdout=CONNECT_FAILED)
    commands.on(cmd(env, "force_update", "disable", "-j"), stdout=force_status(False))
    answers(commands, cmd(env, "force_update", "status", "-j"), force_status(False), status)
    result = run_module(nvfwupd.main, args(env, allow_downgrade=True))
    assert result["failed"] and "ForceUpdate could not be turned off again" in result["msg"], result["msg"]
    assert result["force_update"]["disabled_after"] is False and "state_record" in result


def test_a_target_missing_from_the_read_after_the_flash_still_returns_the_record(commands, env, run_module):
    after = json.loads(show_version(OLD_GPU, NEW_GPU))
    after["Firmware Devices"] = [r for r in after["Firmware Devices"] if r["AP Name"] != "HGX_FW_GPU_SXM_1"]
    _two_show_versions(commands, env, show_version(OLD_GPU, NEW_GPU), json.dumps(after))
    commands.on(cmd(env, "update_fw", "-p", env["pkg"], "-y", "-b", "-j"), stdout=STARTED)
    done = [msg("Update.1.0.UpdateSuccessful", "HGX_FW_GPU_SXM_1", "image.fwpkg")]
    commands.on(cmd(env, "show_update_progress", "-i", "0", "-j"), stdout=task("0", "Completed", done))
    result = run_module(nvfwupd.main, args(env, targets=["HGX_FW_GPU_SXM_1"]))
    assert result["failed"] and "HGX_FW_GPU_SXM_1 are not components" in result["msg"], result["msg"]
    assert result["unfinished"] == ["HGX_FW_GPU_SXM_1"] and result["finished"] == []
    assert result["state_record"]["result"] == "failed" and result["state_record"]["task_result"] == "done"


# -- a killed run (issue 21): ForceUpdate recorded before the enable, closed by the next run ------------------------------------


def _stale_record(env, **fields):
    """The record that a run killed between force_update enable and disable leaves (its lock died with it)."""
    env["records"].mkdir(mode=0o700, exist_ok=True)
    path = env["records"] / "10.0.0.1_443.json"
    path.write_text(json.dumps({"force_update": "on", "since": "2026-12-05T10:00:00+00:00", "pid": 1, **fields}))
    return path


def test_a_force_update_left_on_by_a_killed_run_is_turned_off_first(commands, env, run_module):
    path = _stale_record(env)
    on_show(commands, env, show_version(NEW_GPU, NEW_GPU, hmc=("HGX-24.04-2", "HGX-24.04-2")))  # nothing to flash
    answers(commands, cmd(env, "force_update", "status", "-j"), force_status(True), force_status(False))
    commands.on(cmd(env, "force_update", "disable", "-j"), stdout=force_status(False))
    result = run_module(nvfwupd.main, args(env))
    assert [c["argv"][4:] for c in commands.calls] == [
        ["show_version", "-p", env["pkg"], "-s", "-j"],
        ["force_update", "status", "-j"],
        ["force_update", "disable", "-j"],
        ["force_update", "status", "-j"],
    ]
    assert not result.get("failed") and result["changed"] is True, result
    assert result["force_update"] == {"enabled": False, "disabled_after": None, "found_on": True, "stale_record": True, "turned_off": True}
    assert not path.exists()


def test_a_force_update_left_on_that_cannot_be_turned_off_fails_and_keeps_the_record(commands, env, run_module):
    path = _stale_record(env)
    on_show(commands, env, show_version(OLD_GPU, NEW_GPU))
    commands.on(cmd(env, "force_update", "status", "-j"), stdout=force_status(True))
    commands.on(cmd(env, "force_update", "disable", "-j"), stdout=CONNECT_FAILED)
    result = run_module(nvfwupd.main, args(env))
    assert result["failed"] and "left on at the BMC at 10.0.0.1:443 by an earlier run that was stopped" in result["msg"], result["msg"]
    assert "Nothing was flashed" in result["msg"] and path.exists()
    assert "update_fw" not in [c["argv"][4] for c in commands.calls]


def test_check_mode_says_a_stale_force_update_would_be_turned_off_and_changes_nothing(commands, env, run_module):
    path = _stale_record(env)
    on_show(commands, env, show_version(NEW_GPU, NEW_GPU, hmc=("HGX-24.04-2", "HGX-24.04-2")))
    commands.on(cmd(env, "force_update", "status", "-j"), stdout=force_status(True))
    result = run_module(nvfwupd.main, args(env), check_mode=True)
    assert result["changed"] is True and result["force_update"]["stale_record"] is True and result["force_update"]["turned_off"] is None
    assert [c["argv"][4:6] for c in commands.calls] == [["show_version", "-p"], ["force_update", "status"]] and path.exists()


def test_a_stale_record_with_force_update_already_off_is_removed_without_a_disable(commands, env, run_module):
    path = _stale_record(env)
    on_show(commands, env, show_version(NEW_GPU, NEW_GPU, hmc=("HGX-24.04-2", "HGX-24.04-2")))
    result = run_module(nvfwupd.main, args(env))
    assert result["changed"] is False and result["force_update"]["stale_record"] is True and not path.exists()
    assert "disable" not in [c["argv"][5] for c in commands.calls if len(c["argv"]) > 5]


def test_someone_elses_force_update_refuses_a_flash_and_is_left_alone(commands, env, run_module):
    on_show(commands, env, show_version(OLD_GPU, NEW_GPU))
    commands.on(cmd(env, "force_update", "status", "-j"), stdout=force_status(True))
    result = run_module(nvfwupd.main, args(env))
    assert result["failed"] and "ForceUpdate is on at the BMC at 10.0.0.1:443 and no record of this collection" in result["msg"], result["msg"]
    assert "Nothing was flashed" in result["msg"] and "force_update disable" in result["msg"]
    assert [c["argv"][4:6] for c in commands.calls] == [["show_version", "-p"], ["force_update", "status"]]


def test_someone_elses_force_update_with_nothing_to_flash_is_a_warning(commands, env, run_module, monkeypatch):
    warnings = []
    monkeypatch.setattr(nvfwupd.AnsibleModule, "warn", lambda self, text: warnings.append(text))
    on_show(commands, env, show_version(NEW_GPU, NEW_GPU, hmc=("HGX-24.04-2", "HGX-24.04-2")))
    commands.on(cmd(env, "force_update", "status", "-j"), stdout=force_status(True))
    result = run_module(nvfwupd.main, args(env))
    assert result["changed"] is False and result["force_update"]["found_on"] is True
    assert any("no record of this collection" in w for w in warnings), warnings
    assert len(commands.calls) == 2


def test_a_record_held_by_a_live_run_refuses_before_any_status_read(commands, env, run_module):
    import fcntl

    path = _stale_record(env)
    with open(path) as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another run, between its enable and disable
        on_show(commands, env, show_version(OLD_GPU, OLDER_GPU, hmc=("HGX-22.10-1", "N/A"), package="HGX-22.09-1"))
        result = run_module(nvfwupd.main, args(env, allow_downgrade=True))
    assert result["failed"] and "another run is between force_update enable and disable on the BMC at 10.0.0.1:443" in result["msg"], result["msg"]
    assert [c["argv"][4] for c in commands.calls] == ["show_version"] and path.exists()


def test_the_record_is_written_before_force_update_enable(commands, env, run_module):
    on_show(commands, env, show_version(OLD_GPU, OLDER_GPU, hmc=("HGX-22.10-1", "N/A"), package="HGX-22.09-1"))
    commands.on(cmd(env, "force_update", "enable", "-j"), stdout=force_status(True))
    commands.on(cmd(env, "update_fw", "-p", env["pkg"], "-y", "-b", "-j"), stdout=CONNECT_FAILED)
    commands.on(cmd(env, "force_update", "disable", "-j"), stdout=force_status(False))
    at_enable = []
    original = commands.run_command

    def run_command(module, call, **kwargs):
        if "enable" in call:
            at_enable.extend(json.loads(p.read_text()) for p in env["records"].iterdir())
        return original(module, call, **kwargs)

    commands.run_command = run_command
    result = run_module(nvfwupd.main, args(env, allow_downgrade=True, rollout_id="r1"))
    assert result["force_update"]["disabled_after"] is True
    assert len(at_enable) == 1 and at_enable[0]["force_update"] == "on" and at_enable[0]["bmc"] == "10.0.0.1:443"
    assert at_enable[0]["rollout_id"] == "r1" and PASSWORD not in json.dumps(at_enable)
    assert list(env["records"].iterdir()) == []
    assert result["state_record"]["force_update"]["enabled"] is True and result["state_record"]["force_update"]["disabled_after"] is True


# --- the BMC's certificate, checked before nvfwupd (which checks none) gets the password ----------------------------

REAL_CERTIFICATE_CHECK = bmc_certificate.check


class _ServiceRoot(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # http.server calls it by this name
        self.server.requests.append((self.path, dict(self.headers)))
        body = b'{"RedfishVersion": "1.15.0"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


@pytest.fixture
def tls_bmc(tmp_path, monkeypatch):
    """A Redfish service root over TLS on 127.0.0.1 (its own CA), the real certificate check in place of env's record."""
    monkeypatch.setattr(bmc_certificate, "check", REAL_CERTIFICATE_CHECK)
    (tmp_path / "bmc").mkdir()
    cert, key = tmp_path / "bmc" / "cert.pem", tmp_path / "bmc" / "key.pem"
    make_self_signed(cert, key, ["127.0.0.1"], ["localhost"], "test BMC")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ServiceRoot)
    server.requests = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {"port": server.server_address[1], "ca": str(cert), "requests": server.requests}
    server.shutdown()
    server.server_close()


def tls_args(env, tls_bmc, **bmc):
    return args(env, bmc={"address": "127.0.0.1", "port": tls_bmc["port"], "user": "admin", "password": PASSWORD, **bmc})


def test_a_bmc_certificate_the_ca_does_not_verify_runs_nothing_and_writes_no_config(commands, env, run_module, tls_bmc, tmp_path, monkeypatch):
    (tmp_path / "other").mkdir()
    make_self_signed(tmp_path / "other" / "cert.pem", tmp_path / "other" / "key.pem", ["127.0.0.1"], [], "another CA")
    written = []
    real_private_config = manager.private_config
    monkeypatch.setattr(manager, "private_config", lambda *a, **k: written.append(a) or real_private_config(*a, **k))
    for ca_path in (str(tmp_path / "other" / "cert.pem"), None):  # the wrong CA, and none (the system's CAs)
        result = run_module(nvfwupd.main, tls_args(env, tls_bmc, ca_path=ca_path))
        assert result["failed"], result
        assert f"TLS certificate of the BMC at 127.0.0.1:{tls_bmc['port']} could not be verified" in result["msg"]
        assert "nvfwupd was not run" in result["msg"] and "bmc.ca_path" in result["msg"] and "gpufleet_bmc_ca_path" in result["msg"]
        assert PASSWORD not in json.dumps(result)
    assert commands.calls == [] and written == [] and env["seen"] == [] and not env["folder"].exists()
    assert tls_bmc["requests"] == []  # the handshake failed: nothing, no password either, reached the server


def test_a_bmc_certificate_the_ca_verifies_lets_nvfwupd_run(commands, env, run_module, tls_bmc):
    on_show(commands, env, show_version(OLD_GPU, NEW_GPU))
    result = run_module(nvfwupd.main, tls_args(env, tls_bmc, ca_path=tls_bmc["ca"]), check_mode=True)
    assert not result.get("failed"), result
    assert [c["argv"][4] for c in commands.calls] == ["show_version", "force_update"]
    # one GET of the service root, without credentials
    assert [path for path, _headers in tls_bmc["requests"]] == ["/redfish/v1/"]
    assert not any(name.lower() == "authorization" for name in tls_bmc["requests"][0][1])


def test_validate_certs_false_skips_the_check_with_a_warning(commands, env, run_module, tls_bmc, monkeypatch):
    warned = []
    monkeypatch.setattr(nvfwupd.AnsibleModule, "warn", lambda self, text: warned.append(text))
    on_show(commands, env, show_version(OLD_GPU, NEW_GPU))
    result = run_module(nvfwupd.main, tls_args(env, tls_bmc, validate_certs=False), check_mode=True)
    assert not result.get("failed"), result
    assert len(commands.calls) == 2 and tls_bmc["requests"] == []
    assert len(warned) == 1 and f"127.0.0.1:{tls_bmc['port']} is not checked" in warned[0] and "password" in warned[0]
    assert PASSWORD not in warned[0]


def test_the_certificate_is_checked_before_the_config_file_is_written(commands, env, run_module):
    on_show(commands, env, show_version(OLD_GPU, NEW_GPU))
    run_module(nvfwupd.main, args(env, bmc={"address": "10.0.0.1", "user": "admin", "password": PASSWORD, "ca_path": "/etc/bmc-ca.pem"}),
               check_mode=True)
    assert env["certificate_checks"] == [{"bmc": "10.0.0.1:443", "ca_path": "/etc/bmc-ca.pem", "timeout": 30, "config_written": False}]


def test_a_bmc_that_cannot_be_reached_runs_nothing(commands, env, run_module, monkeypatch):
    monkeypatch.setattr(bmc_certificate, "check", REAL_CERTIFICATE_CHECK)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # bound, not listening: the connection is refused
        result = run_module(nvfwupd.main, args(env, bmc={"address": "127.0.0.1", "port": port, "user": "admin", "password": PASSWORD}))
    assert result["failed"] and f"127.0.0.1:{port} could not be reached" in result["msg"] and "nvfwupd was not run" in result["msg"]
    assert commands.calls == [] and not env["folder"].exists()


def test_an_unreadable_ca_path_names_the_option(commands, env, run_module, monkeypatch, tmp_path):
    monkeypatch.setattr(bmc_certificate, "check", REAL_CERTIFICATE_CHECK)
    result = run_module(nvfwupd.main, args(env, bmc={"address": "10.0.0.1", "user": "admin", "password": PASSWORD, "ca_path": str(tmp_path / "none.pem")}))
    assert result["failed"] and result["msg"].startswith(f"bmc.ca_path {tmp_path / 'none.pem'} could not be read as a CA bundle")
    assert commands.calls == [] and not env["folder"].exists()


def test_stage_only_on_a_gb200_tray_asks_nvfwupd_for_a_staged_update(commands, env, run_module):
    on_show(commands, env, show_version(OLD_GPU, NEW_GPU))
    staged = cmd(env, "update_fw", "-p", env["pkg"], "-u", "-y", "-b", "-j")
    commands.on(staged, stdout=STARTED)
    done = [msg("Update.1.0.UpdateSuccessful", "HGX_FW_GPU_SXM_1", "image.fwpkg")]
    commands.on(cmd(env, "show_update_progress", "-i", "0", "-j"), stdout=task("0", "Completed", done))
    bmc = {"address": "10.0.0.1", "user": "admin", "password": PASSWORD, "servertype": "GB200"}
    result = run_module(nvfwupd.main, args(env, bmc=bmc, stage_only=True))
    assert staged in [c["argv"] for c in commands.calls], [c["argv"] for c in commands.calls]
    assert env["seen"][0]["doc"]["TargetPlatform"] == "GB200" and "MultipartOptions" not in env["seen"][0]["doc"]
    assert {r["activation"] for r in result["plan"] if r["action"] != "none"} == {"ac_power_cycle"}  # AuxPowerCycle, no GPU reset
    assert_no_secret(commands, result)
