"""nvidia_driver where mokutil is a wrapper whose program is gone (exit 126/127, "command not found"): not installed, as
gpu_facts reads it, so the install goes on unsigned instead of failing "cannot tell whether Secure Boot is enforced" (seen
on every simulated GB200 tray of tests/integration/test_rollout_resume.py, which has no mokutil)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.modules import nvidia_driver
from test_nvidia_driver import runfile_args

# Fixtures come in by import (pytest finds them by name): pylint sees them unused.
# pylint: disable=unused-import
from test_nvidia_driver_secureboot import LIST_ENROLLED, SB_STATE, installer_run, secure  # noqa: F401


@pytest.mark.parametrize("rc", [126, 127])
def test_a_mokutil_whose_program_is_gone_is_not_installed(secure, tmp_path, commands, run_module, monkeypatch, rc):  # noqa: F811
    n = secure(state="SecureBoot disabled\n")
    commands.on(SB_STATE, rc=rc, stderr="bash: mokutil: command not found\n")
    args = runfile_args(n.node, tmp_path, fabricmanager="skip")
    monkeypatch.setattr(commands, "run_command", installer_run(n, tmp_path, args))
    result = run_module(nvidia_driver.main, args)
    assert not result.get("failed"), result.get("msg")
    assert n.seen["flags"] == {} and LIST_ENROLLED not in [c["argv"] for c in commands.calls]
    assert result["module_signing"]["secure_boot"] == "unknown (mokutil is not installed)" and result["module_signing"]["signed"] is False
