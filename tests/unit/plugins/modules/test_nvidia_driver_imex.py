"""nvidia_driver on a GB200 / GB300 tray: IMEX installed and held at exactly the driver's version, stopped before the driver
changes and left for the role's verify to start, refused when the repositories lack that version (issue 23)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.modules import nvidia_driver
from test_nvidia_driver import APT_OPTS, NEW, OLD, Node, apt_tools, runfile_args

IMEX_QUERY = ["/usr/bin/dpkg-query", "-W", "-f=${Package} ${Version} ${db:Status-Abbrev}\\n", "nvidia-imex*"]
IMEX_ACTIVE = ["/usr/bin/systemctl", "is-active", "nvidia-imex"]
IMEX_OFFERED = ["/usr/bin/apt-get", "install", "-s", "-q", "--allow-change-held-packages", "--allow-downgrades", f"nvidia-imex-550={NEW}-1"]
IMEX_INSTALL = ["/usr/bin/apt-get", "install", "-y", "-q", "--allow-change-held-packages", *APT_OPTS, f"nvidia-imex-550={NEW}-1"]
IMEX_HOLD = ["/usr/bin/apt-mark", "hold", "nvidia-imex-550"]
STOP_IMEX = ["/usr/bin/systemctl", "stop", "nvidia-imex"]
START_IMEX = ["/usr/bin/systemctl", "start", "nvidia-imex"]


@pytest.fixture
def tray(tmp_path, commands, monkeypatch):
    """A PCIe-style tray (no NVSwitch, no local fabric manager) with nvidia-imex at the old driver's version, running."""
    n = Node(tmp_path, commands, monkeypatch, nvswitch=False)
    apt_tools(commands)
    commands.tool("nvidia-imex")
    commands.on(IMEX_QUERY, stdout=f"nvidia-imex-535 {OLD}-1 hi \n")
    commands.on(IMEX_ACTIVE, stdout="active\n")
    commands.on(IMEX_OFFERED, stdout="Inst nvidia-imex-550\n")
    commands.on(IMEX_INSTALL)
    commands.on(IMEX_HOLD)
    commands.on(STOP_IMEX)
    commands.on(START_IMEX)
    n.hooks[tuple(IMEX_INSTALL)] = lambda: commands.on(IMEX_QUERY, stdout=f"nvidia-imex-535 {OLD}-1 rc \nnvidia-imex-550 {NEW}-1 ii \n")
    n.hooks[tuple(IMEX_HOLD)] = lambda: commands.on(IMEX_QUERY, stdout=f"nvidia-imex-550 {NEW}-1 hi \n")
    return n


def installer_for(args):
    return ["/usr/bin/sh", args["source"], "--silent", "--no-questions", "-m=kernel-open", "--dkms"]


def test_imex_follows_the_driver_stopped_first_and_left_for_verify(tray, tmp_path, commands, run_module):
    args = runfile_args(tray, tmp_path)
    installer = installer_for(args)
    commands.on(installer)
    tray.hooks[tuple(installer)] = lambda: tray.set_driver(NEW)

    result = run_module(nvidia_driver.main, args)

    assert not result.get("failed"), result.get("msg")
    assert result["plan"]["imex"] == {"action": "upgrade", "before": OLD, "after": NEW, "package": "nvidia-imex-550", "managed": True}
    assert result["diff"]["after"]["imex"] == NEW and result["diff"]["before"]["imex"] == OLD
    calls = tray.argvs()
    first_rmmod = next(i for i, argv in enumerate(calls) if argv[0] == "/usr/bin/rmmod")
    assert calls.index(STOP_IMEX) < first_rmmod, "IMEX must stop before the driver's modules are unloaded"
    assert calls.index(IMEX_OFFERED) < calls.index(STOP_IMEX), "IMEX's version is checked before anything changes"
    assert calls.index(IMEX_INSTALL) < calls.index(IMEX_HOLD)
    assert START_IMEX not in calls, "IMEX starts only from the role's verify, once the domain runs the new driver"
    assert result["after"]["imex"]["version"] == NEW and result["after"]["imex"]["held"] is True


def test_imex_not_offered_at_the_driver_version_refuses_before_anything_changes(tray, tmp_path, commands, run_module):
    commands.on(IMEX_OFFERED, rc=100, stdout="Reading package lists...\n", stderr=f"E: Version '{NEW}-1' for 'nvidia-imex-550' was not found\n")
    args = runfile_args(tray, tmp_path)
    for check_mode in (True, False):
        result = run_module(nvidia_driver.main, args, check_mode=check_mode)
        assert result["failed"]
        assert f"nvidia-imex-550 {NEW}" in result["msg"] and "Nothing was changed" in result["msg"]
    calls = tray.argvs()
    assert STOP_IMEX not in calls and not any(argv[0] in ("/usr/bin/rmmod", "/usr/bin/sh") for argv in calls)
    assert not tray.state_file.exists()


def test_a_failed_change_starts_imex_again_with_the_old_driver(tray, tmp_path, commands, run_module):
    args = runfile_args(tray, tmp_path)
    commands.on(installer_for(args), rc=1, stdout="ERROR: An error occurred while performing the step: \"Building kernel modules\".\n")

    result = run_module(nvidia_driver.main, args)

    assert result["failed"]
    calls = tray.argvs()
    assert calls.index(STOP_IMEX) < calls.index(START_IMEX)
    assert IMEX_INSTALL not in calls


def test_check_mode_on_a_tray_whose_imex_is_one_release_off(tray, tmp_path, commands, run_module):
    tray.set_driver(NEW)
    commands.on(IMEX_QUERY, stdout=f"nvidia-imex-535 {OLD}-1 hi \n")
    args = runfile_args(tray, tmp_path)
    result = run_module(nvidia_driver.main, args, check_mode=True)
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is True
    assert (result["plan"]["driver"]["action"], result["plan"]["imex"]["action"]) == ("none", "upgrade")
    assert STOP_IMEX not in tray.argvs() and IMEX_INSTALL not in tray.argvs()
