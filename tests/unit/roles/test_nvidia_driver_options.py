"""nvidia_driver's option values, checked in one task before the module reads the node (ansible-playbook on the
controller, entry point plan): every problem in one message, each naming its variable; nothing else runs."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN = pathlib.Path(sys.executable).parent

PLAYBOOK = """
- name: nvidia_driver's plan on the controller
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Plan
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.nvidia_driver
        tasks_from: plan
"""
CHECK = "Check the driver options (version, time limits, a runfile with its sha256)"
# The header of plan's include of preflight.yml, and of the module's read of the node inside it.
READ = "TASK [gpufleet.lifecycle.nvidia_driver : Check the driver options and read the driver that works now]"
VERSION = "nvidia_driver_version is empty: set it from the bill of materials."
TIMES = "must be whole numbers of seconds from 1 to 86400, nvidia_driver_poll_interval"
RUNFILE = "method runfile needs nvidia_driver_source (or nvidia_driver_presigned_url) and nvidia_driver_checksum"


def run_plan(tmp_path, **variables):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"), ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default")
    extra = {"ansible_python_interpreter": sys.executable, **variables}
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml"), "-e", json.dumps(extra)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)


RUNFILE_OK = {"nvidia_driver_source": "/srv/NVIDIA-Linux-x86_64-580.95.05.run", "nvidia_driver_checksum": "sha256:" + "0" * 64}


@pytest.mark.parametrize(
    ("variables", "present", "absent"),
    [
        ({"nvidia_driver_version": "", **RUNFILE_OK}, [VERSION], [TIMES, RUNFILE]),
        ({"nvidia_driver_version": "580.95.05", "nvidia_driver_timeout": 0, **RUNFILE_OK}, ["nvidia_driver_timeout (0)", TIMES], [VERSION, RUNFILE]),
        ({"nvidia_driver_version": "580.95.05", "nvidia_driver_poll_interval": "5\n", **RUNFILE_OK}, [TIMES], [VERSION, RUNFILE]),
        ({"nvidia_driver_version": "580.95.05", "nvidia_driver_source": "/srv/x.run"}, [RUNFILE + " (or an entry for 580.95.05"], [VERSION, TIMES]),
        # Every problem at once, in one message.
        ({"nvidia_driver_version": "", "nvidia_driver_reboot_timeout": 90000}, [VERSION, TIMES, RUNFILE], []),
    ],
)
def test_bad_options_are_refused_in_one_task_before_the_node_is_read(tmp_path, variables, present, absent):
    proc = run_plan(tmp_path, **variables)
    assert proc.returncode == 2, proc.stdout[-3000:]
    failed = proc.stdout.split(CHECK, 1)[1].split("PLAY RECAP", 1)[0]
    assert "fatal: [localhost]: FAILED!" in failed, proc.stdout[-3000:]
    for words in present:
        assert words in failed, (words, failed)
    for words in absent:
        assert words not in failed, (words, failed)
    assert proc.stdout.count(READ) == 1  # the include only: the module never read the node


def test_good_options_pass_the_check(tmp_path):
    """The same check passes good values (the plan then goes on to read the node, which this controller cannot)."""
    proc = run_plan(tmp_path, nvidia_driver_version="580.95.05", **RUNFILE_OK)
    assert re.search(re.escape(f"TASK [gpufleet.lifecycle.nvidia_driver : {CHECK}]") + r" \**\nok: \[localhost\]", proc.stdout), proc.stdout[-3000:]
    assert proc.stdout.count(READ) == 2  # the include, then the module's read
