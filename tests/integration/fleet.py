"""Plumbing shared by the integration tests: a simulated fleet (gpusim) driven over real SSH and Ansible.

Each test file keeps its own spec and its own module-scoped fleet; this module only holds what they all do:
run a command in its own session (killing the whole session on timeout: Ansible forks workers), call
`python -m gpusim`, the skip marks, the Ansible environment, SSH to a node and read the json callback's results.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
from typing import ClassVar, Iterator

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
if str(TESTS) not in sys.path:  # the test files import gpusim's modules
    sys.path.insert(0, str(TESTS))

PYTHON = REPO / ".venv" / "bin" / "python"
ANSIBLE = REPO / ".venv" / "bin" / "ansible"
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"


def needs_fleet(slurm: bool = True) -> list:
    """The marks of a test file that brings up a fleet: integration, root, sshd (and Slurm's daemons unless slurm=False)."""
    if slurm:
        missing = not all(os.path.exists(f"/usr/sbin/{tool}") for tool in ("sshd", "slurmctld", "slurmd", "munged"))
        reason = "sshd/slurmctld/slurmd/munged missing: run tests/gpusim/install-deps.sh"
    else:
        missing = not shutil.which("sshd") and not os.path.exists("/usr/sbin/sshd")
        reason = "the simulated fleet needs sshd (tests/gpusim/install-deps.sh)"
    return [
        pytest.mark.integration,
        pytest.mark.skipif(os.geteuid() != 0, reason="the simulated fleet needs root (namespaces, bind mounts, sshd)"),
        pytest.mark.skipif(missing, reason=reason),
    ]


def run(cmd: list[str], *, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run cmd in its own session; on timeout kill the whole session (Ansible forks workers) and fail the test.

    Standard input is /dev/null, not the pytest worker's: a test that left it non-blocking (Mitogen does so to the
    descriptors it shares) made every later ansible of the same worker refuse to start ("Ansible requires blocking
    IO on stdin"), seen in a clean-clone run of 2026-12-03."""
    with subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"{' '.join(cmd)} timed out after {timeout}s:\n{out[-3000:]}\n{err[-2000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def gpusim(*args: str, workdir: pathlib.Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m gpusim ARGS --workdir WORKDIR` with tests/ on PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    return run([str(PYTHON), "-m", "gpusim", *args, "--workdir", str(workdir)], env=env, timeout=timeout)


@contextlib.contextmanager
def fleet_up(spec: pathlib.Path, workdir: pathlib.Path, *, timeout: float = 120, check_down: bool = True) -> Iterator[pathlib.Path]:
    """`gpusim up` the spec in workdir (asserting it came up), yield workdir, then `gpusim down` if workdir is still there."""
    up = gpusim("up", "--spec", str(spec), workdir=workdir, timeout=timeout)
    try:
        assert up.returncode == 0, f"gpusim up failed:\n{up.stdout}\n{up.stderr}"
        yield workdir
    finally:
        if workdir.exists():
            down = gpusim("down", workdir=workdir, timeout=timeout)
            if check_down:
                assert down.returncode == 0, down.stdout + down.stderr


def ansible_env(json_output: bool = False, **extra: str) -> dict[str, str]:
    """The environment of ansible/ansible-playbook: this collection, no host key checking, no colour, SSH pipelining;
    the json callback on request.

    Pipelining is what the fleet's own ansible.cfg (gpusim up) and a tuned controller use: a module runs in one SSH
    round trip instead of four (measured on test_rollout_waves' rollout: 18 % less CPU). The suite is CPU-bound on
    two cores, so that is its time. test_nvidia_driver.py runs with it off (Fleet.env_extra): the path where Ansible
    copies each module to the node stays tested."""
    env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="False", ANSIBLE_RETRY_FILES_ENABLED="False",
               ANSIBLE_PIPELINING="True")
    if json_output:
        env.update(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    env.update(extra)
    return env


def json_doc(proc: subprocess.CompletedProcess) -> dict:
    """The json stdout callback's document (plays, tasks, stats), or a test failure showing what ansible printed."""
    try:
        return json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"ansible printed no JSON (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def task_hosts(proc: subprocess.CompletedProcess) -> dict[str, dict]:
    """{host: result} of the first task of an ad hoc `ansible -m` run with the json callback; no host may be unreachable."""
    hosts = json_doc(proc)["plays"][0]["tasks"][0]["hosts"]
    assert not any(r.get("unreachable") for r in hosts.values()), hosts
    return hosts


def steady(state: str) -> str:
    """A Slurm State= without NOT_RESPONDING, for tests that compare what a module or a rollout left.

    slurmctld sets NOT_RESPONDING by itself when one of its pings to slurmd goes unanswered within MessageTimeout (on a
    loaded 2-core CI machine a simulated node's slurmd can be that slow), and clears it at the next answer. Nothing of
    the collection sets or clears it, so no comparison of before and after may depend on it. (Budget checks keep it:
    the rollout counts a node that does not respond as unavailable.)
    """
    return "+".join(flag for flag in state.split("+") if flag != "NOT_RESPONDING")


def scontrol_node(line: str) -> tuple[str, str | None]:
    """(steady State=, reason without the [user@time] suffix) from one `scontrol show node -o` line."""
    state = steady(next(w.split("=", 1)[1] for w in line.split() if w.startswith("State=")))
    reason = line.split(" Reason=", 1)[1].rsplit(" [", 1)[0] if " Reason=" in line else None
    return state, reason


class Fleet:
    """A fleet that gpusim brought up in workdir: its record (fleet.json), inventory, SSH and Ansible."""

    # Extra environment of this fleet's ansible and ansible-playbook runs (e.g. {"ANSIBLE_PIPELINING": "False"}).
    env_extra: ClassVar[dict[str, str]] = {}

    def __init__(self, workdir: pathlib.Path):
        self.workdir = workdir
        self.record = json.loads((workdir / "fleet.json").read_text())
        self.address = {r["name"]: r["address"] for r in self.record["nodes"]}
        self.inventory = workdir / "inventory" / "hosts.yml"
        self.slurm_env = dict(os.environ, SLURM_CONF=str(workdir / "slurm" / "etc" / "slurm.conf"))

    def node_dir(self, name: str) -> pathlib.Path:
        return self.workdir / "nodes" / name

    def ssh(self, name: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run command on the node as root over the fleet's SSH."""
        return run(
            ["ssh", "-i", str(self.workdir / "ssh" / "id_ed25519"), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-p", str(self.record["ssh_port"]), f"root@{self.address[name]}", command],
            timeout=timeout,
        )

    def ssh_ok(self, name: str, command: str) -> str:
        proc = self.ssh(name, command)
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
        return proc.stdout

    def ansible(self, pattern: str, *args: str, timeout: float = 300, json_output: bool = False) -> subprocess.CompletedProcess:
        """`ansible PATTERN -i INVENTORY ARGS`."""
        return run([str(ANSIBLE), pattern, "-i", str(self.inventory), *args], env=ansible_env(json_output, **self.env_extra),
                   timeout=timeout)

    def ansible_playbook(self, playbook: pathlib.Path, *args: str, timeout: float = 300, json_output: bool = False,
                         env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """`ansible-playbook -i INVENTORY PLAYBOOK ARGS` (env: the whole environment, instead of ansible_env(json_output))."""
        return run([str(ANSIBLE_PLAYBOOK), "-i", str(self.inventory), str(playbook), *args],
                   env=env if env is not None else ansible_env(json_output, **self.env_extra), timeout=timeout)

    def module(self, module: str, pattern: str, args: dict, *, check: bool = False, diff: bool = False, timeout: float = 240) -> dict[str, dict]:
        """`ansible PATTERN -m MODULE -a ARGS [--diff] [--check]` with the json callback -> {host: result}."""
        extra = ["-m", module, "-a", json.dumps(args), *(["--diff"] if diff else []), *(["--check"] if check else [])]
        return task_hosts(self.ansible(pattern, *extra, timeout=timeout, json_output=True))
