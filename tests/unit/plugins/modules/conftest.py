"""Helpers to run a module's main() in-process with recorded commands."""

from __future__ import annotations

import contextlib
import json
import os

import pytest
from ansible.module_utils import basic
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _tools

try:  # ansible-core >= 2.19
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core 2.16 - 2.18
    from ansible.module_utils.common.text.converters import to_bytes

    @contextlib.contextmanager
    def patch_module_args(args=None):
        serialized = to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args or {}}))
        original = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = serialized
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = original


TIMEOUT_BIN = "/usr/bin/timeout"


def split_timeout(argv):
    """``(seconds, rest)`` for ``timeout --kill-after=10 N tool ...``; ``(None, argv)`` for an unbounded command."""
    if len(argv) >= 3 and argv[0] == TIMEOUT_BIN and argv[1].startswith("--kill-after="):
        return int(argv[2]), tuple(argv[3:])
    return None, tuple(argv)


class Commands:
    """Fake tools: a table of argument lists -> (rc, stdout, stderr), and the calls made.

    A key is the tool's path followed by its arguments, as a tuple, with or without the
    ``timeout --kill-after=10 N`` prefix that bounds every command (an entry with the prefix
    matches only that limit). Each call records ``argv`` (without the prefix), ``cmd`` (as run)
    and ``timeout`` (None when the command ran unbounded: the fixture fails the test then).
    """

    def __init__(self):
        self.responses = {}
        self.calls = []
        self.binaries = {"timeout": TIMEOUT_BIN}

    def tool(self, name, path=None):
        self.binaries[name] = path or "/usr/bin/" + name
        return self.binaries[name]

    def on(self, argv, rc=0, stdout="", stderr=""):
        self.responses[tuple(argv)] = (rc, stdout, stderr)

    def run_command(self, module, args, **kwargs):
        full = tuple(args)
        seconds, argv = split_timeout(full)
        self.calls.append({"argv": list(argv), "cmd": list(full), "timeout": seconds, "environ_update": kwargs.get("environ_update"), "kwargs": kwargs})
        if full in self.responses:
            return self.responses[full]
        if argv not in self.responses:
            raise AssertionError(f"unexpected command: {list(full)}")
        return self.responses[argv]

    def get_bin_path(self, module, arg, required=False, opt_dirs=None):
        path = self.binaries.get(arg)
        if path is None and required:
            module.fail_json(msg=f"Failed to find required executable {arg}")
        return path

    split_timeout = staticmethod(split_timeout)

    def unbounded(self):
        """The commands that ran without a time limit."""
        return [call["cmd"] for call in self.calls if call["timeout"] is None]


@pytest.fixture
def commands(monkeypatch):
    """The fake tools, in place of _tools.run_process (every process a module starts goes through it) and of
    AnsibleModule.run_command (which the collection never calls: a call fails the test)."""
    fake = Commands()

    def run_process(module, args, **kwargs):
        assert isinstance(module, basic.AnsibleModule), module
        assert isinstance(args, list) and all(isinstance(a, str) for a in args), f"not an argument list of strings: {args!r}"
        return fake.run_command(module, args, **kwargs)

    def run_command(module, args, **kwargs):
        raise AssertionError(f"AnsibleModule.run_command called with {args!r}: it can lose a command's last output; use _tools")

    def get_bin_path(module, arg, required=False, opt_dirs=None):
        return fake.get_bin_path(module, arg, required, opt_dirs)

    monkeypatch.setattr(_tools, "run_process", run_process)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    yield fake
    # Every command a module runs is bounded (a hung NVML must not hang the task for ever).
    assert fake.unbounded() == [], "commands ran without a time limit"


class ModuleExit(Exception):
    def __init__(self, result, failed):
        super().__init__(result)
        self.result = result
        self.failed = failed


@pytest.fixture
def run_module(monkeypatch):
    """run_module(main, args, check_mode=False) -> result dict (with result['failed'] on fail_json)."""

    def exit_json(self, **kwargs):
        raise ModuleExit(kwargs, False)

    def fail_json(self, msg, **kwargs):
        kwargs["msg"] = msg
        kwargs["failed"] = True
        raise ModuleExit(kwargs, True)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)

    def _run(main, args, check_mode=False):
        args = dict(args)
        if check_mode:
            args["_ansible_check_mode"] = True
        with patch_module_args(args):
            with pytest.raises(ModuleExit) as caught:
                main()
        return caught.value.result

    return _run


@pytest.fixture
def replaced(monkeypatch):
    """The base names of the report files, in the order they were put in place (os.replace of _report/files.py)."""
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report import files

    names = []
    real_replace = files.os.replace

    def recording_replace(src, dst):
        names.append(os.path.basename(dst))
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", recording_replace)
    return names


class Sink:
    """What the module sends to syslog (syslog.syslog) or the journal (journal.send), as they would get it."""

    def __init__(self):
        self.lines = []

    def syslog(self, *args):
        self.lines.append(str(args[-1]))

    def send(self, **fields):
        self.lines.extend(f"{key}={value}" for key, value in fields.items())


@pytest.fixture(params=["syslog", "journal"])
def log(request, monkeypatch):
    """The real AnsibleModule's log sinks (syslog.syslog, journal.send) replaced by a Sink, nothing above them: its
    "Invoked with" line as syslog and the journal would get it."""
    sink = Sink()
    monkeypatch.setattr(basic.syslog, "openlog", lambda *args, **kwargs: None)
    monkeypatch.setattr(basic.syslog, "syslog", sink.syslog)
    monkeypatch.setattr(basic, "has_journal", request.param == "journal")
    monkeypatch.setattr(basic, "journal", sink, raising=False)
    return sink
