"""_tools.run_process against real processes: a command's output is read to its end, whatever the scheduler does.

The race it exists for (ansible/ansible#51393): AnsibleModule.run_command waits for output one second at a time;
when a wait ends with nothing to read, and the command has written its output and exited by the time run_command
looks, it stops without reading that output. Here that delay is made certain (the wait's thread "sleeps" 1.5 s after
an empty wait, as a thread on a loaded node does when another holds the CPU or the GIL), and run_command is shown
to lose the output that run_process keeps.
"""

from __future__ import annotations

import os
import selectors
import sys
import time

import pytest
from ansible.module_utils import basic
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _tools

try:  # ansible-core >= 2.19
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core 2.16 - 2.18
    import contextlib
    import json

    @contextlib.contextmanager
    def patch_module_args(args=None):
        original = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": args or {}}).encode()
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = original

SILENT_THEN_EXIT = ["sh", "-c", "sleep 1.2; echo 'Fabric Manager version is : 570.124.06'"]


def late_selector(base):
    """A selector class whose thread is descheduled for 1.5 s after each wait that found nothing."""

    class Late(base):
        def select(self, timeout=None):
            events = super().select(timeout)
            if not events:
                time.sleep(1.5)
            return events

    return Late


@pytest.fixture
def module():
    with patch_module_args({}):
        return basic.AnsibleModule(argument_spec={})


def test_output_written_while_the_reader_was_descheduled_is_kept(monkeypatch, module):
    monkeypatch.setattr(_tools.selectors, "DefaultSelector", late_selector(selectors.DefaultSelector))
    assert _tools.run_process(module, SILENT_THEN_EXIT) == (0, "Fabric Manager version is : 570.124.06\n", "")


def test_run_command_loses_that_output_which_is_why_run_process_exists(monkeypatch, module):
    """If this fails, ansible-core no longer loses the output (#51393 fixed): run_process may give way to it."""
    monkeypatch.setattr(selectors, "PollSelector", late_selector(selectors.PollSelector))
    assert module.run_command(SILENT_THEN_EXIT) == (0, "", "")


def test_exit_status_stdout_and_stderr_each_their_own(module):
    rc, out, err = _tools.run_process(module, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (rc, out, err) == (3, "out\n", "err\n")


def test_a_large_output_is_read_whole(module):
    code = "import sys; sys.stdout.write('x' * 3000000); sys.stderr.write('y' * 200000)"
    rc, out, err = _tools.run_process(module, [sys.executable, "-c", code])
    assert (rc, len(out), len(err)) == (0, 3000000, 200000)


def test_a_daemon_that_keeps_the_pipes_open_does_not_hold_the_call(module):
    started = time.monotonic()
    rc, out, _err = _tools.run_process(module, ["sh", "-c", "echo started; sleep 30 & exit 0"])
    assert (rc, out) == (0, "started\n")
    assert time.monotonic() - started < 10


def test_data_is_the_standard_input_followed_by_a_newline_and_otherwise_it_is_empty(module):
    assert _tools.run_process(module, ["cat"], data="line one") == (0, "line one\n", "")
    assert _tools.run_process(module, ["cat"]) == (0, "", "")


def test_bytes_that_are_not_utf8_are_kept_as_surrogates(module):
    rc, out, _err = _tools.run_process(module, ["printf", "caf\\351\\n"])
    assert rc == 0
    assert out == "caf\udce9\n"
    assert out.encode("utf-8", "surrogateescape") == b"caf\xe9\n"


def test_the_environment_is_updated_and_the_modules_own_paths_leave_pythonpath(monkeypatch, module):
    monkeypatch.setenv("PYTHONPATH", "/tmp/ansible_x/ansible_modlib.zip:/opt/site:/tmp/y/debug_dir")
    rc, out, _err = _tools.run_process(module, ["sh", "-c", 'echo "$LC_ALL|$PYTHONPATH"'], environ_update={"LC_ALL": "C"})
    assert (rc, out) == (0, "C|/opt/site\n")
    monkeypatch.setenv("PYTHONPATH", "/tmp/ansible_x/ansible_modlib.zip")
    assert _tools.run_process(module, ["sh", "-c", 'echo "${PYTHONPATH-unset}"'])[1] == "unset\n"
    assert os.environ["PYTHONPATH"] == "/tmp/ansible_x/ansible_modlib.zip"  # the module's own environment is left as it was


def test_an_argument_is_passed_as_written(module):
    assert _tools.run_process(module, ["printf", "%s|", "$HOME", "~", "a b", "*"])[1] == "$HOME|~|a b|*|"


def test_a_tool_that_cannot_be_run_is_a_tool_error_naming_it(module, tmp_path, monkeypatch):
    script = tmp_path / "nvidia-smi"
    script.write_text("not a program\n")
    script.chmod(0o644)  # not executable
    tool = _tools.NvidiaSmi(module, path=str(script))
    # coreutils timeout starts it, and says why it could not (exit status 126).
    with pytest.raises(_tools.ToolError, match=r"nvidia-smi failed with exit status 126: .*Permission denied"):
        tool.run(["-L"], timeout=5)
    # When not even timeout can be started, the same kind of error, naming the tool.
    monkeypatch.setattr(module, "get_bin_path", lambda name, required=False, opt_dirs=None: str(script))
    with pytest.raises(_tools.ToolError, match=r"nvidia-smi could not be started .*Permission denied"):
        tool.run(["-L"], timeout=5)


def test_a_wrapper_reads_through_run_process_with_its_limit(module, monkeypatch):
    seen = []

    def fake(mod, args, environ_update=None, data=None):
        seen.append((mod, args, environ_update))
        return 0, "ok\n", ""

    monkeypatch.setattr(_tools, "run_process", fake)
    tool = _tools.Dmesg(module, path="/bin/dmesg")
    assert tool.run([], timeout=7) == (0, "ok\n", "")
    (mod, args, env), = seen
    assert mod is module
    assert args[1:] == ["--kill-after=10", "7", "/bin/dmesg"]
    assert env["LC_ALL"] == "C"
