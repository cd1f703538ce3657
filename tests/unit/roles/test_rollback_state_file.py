"""The rollback entry points read the node state file through gpufleet.lifecycle.node_state (ansible-playbook on the
controller): a damaged file fails with the module's message (what is wrong, how to repair it), nothing else runs."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN = pathlib.Path(sys.executable).parent

PLAYBOOK = """
- name: A rollback entry point on the controller
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Roll back
      ansible.builtin.include_role:
        name: "gpufleet.lifecycle.{{ role }}"
        tasks_from: rollback
"""

ROLES = {
    "nvidia_driver": "nvidia_driver_state_file",
    "gpu_firmware": "gpu_firmware_state_file",
    "nic_firmware": "nic_firmware_state_file",
}


def run_rollback(tmp_path, role, state_file):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    extra = {"role": role, ROLES[role]: str(state_file), "ansible_python_interpreter": sys.executable}
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_LOCALHOST_WARNING="False",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_NOCOLOR="1",
    )
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml"), "-e", json.dumps(extra)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    doc = json.loads(proc.stdout)
    tasks = [(task["task"]["name"].split(" : ", 1)[-1], task["hosts"].get("localhost", {})) for task in doc["plays"][0]["tasks"]]
    return proc, tasks


@pytest.mark.parametrize("role", sorted(ROLES))
@pytest.mark.parametrize(
    ("content", "damage"),
    [(b'{"schema": 1, "last_known_good": {"driver"', "is not valid JSON")],
    ids=["cut-off"],
)
def test_a_damaged_state_file_fails_with_the_modules_message(tmp_path, role, content, damage):
    state_file = tmp_path / "gpufleet.fact"
    state_file.write_bytes(content)
    proc, tasks = run_rollback(tmp_path, role, state_file)
    assert proc.returncode != 0
    failed = [(name, result) for name, result in tasks if result.get("failed")]
    assert len(failed) == 1, tasks
    name, result = failed[0]
    assert name == "Read the node state file" or name.startswith("Read the last known good"), name
    assert damage in result["msg"] and "To repair" in result["msg"], result["msg"]
    assert state_file.read_bytes() == content


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_new_node_has_nothing_to_roll_back_to(tmp_path, role):
    proc, tasks = run_rollback(tmp_path, role, tmp_path / "absent.fact")
    assert proc.returncode != 0
    failed = [(name, result) for name, result in tasks if result.get("failed")]
    assert len(failed) == 1 and failed[0][0].startswith("Check that there is"), tasks
    assert "Nothing was changed" in failed[0][1]["msg"]


def test_verify_without_a_driver_to_expect_says_what_to_set(tmp_path):
    """nvidia_driver's verify, run alone without nvidia_driver_version, fails before reading the node, naming the variable."""
    (tmp_path / "play.yml").write_text(PLAYBOOK.replace("tasks_from: rollback", "tasks_from: verify"))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"), ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default")
    extra = {"role": "nvidia_driver", "ansible_python_interpreter": sys.executable}
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml"), "-e", json.dumps(extra)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode != 0
    assert "set nvidia_driver_version to the driver that should run" in proc.stdout, proc.stdout[-2000:]
    assert "Read the driver after activation" not in proc.stdout
