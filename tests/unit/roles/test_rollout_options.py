"""playbooks/upgrade.yml refuses before any node is touched: a misspelt variable, a stop file others could create.

Runs the real playbook against nodes at an address that is never reached (TEST-NET-1): each refusal happens in the
preflight's first tasks, on the controller, so a node connection attempt would show as UNREACHABLE.
"""

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
INVENTORY = """
gpu:
  hosts:
    gpu-01: {ansible_host: 192.0.2.1, ansible_connection: ssh, ansible_ssh_timeout: 2}
    gpu-02: {ansible_host: 192.0.2.2, ansible_connection: ssh, ansible_ssh_timeout: 2, gpu_firmware_activte: false}
"""


def run_upgrade(tmp_path, inventory=INVENTORY, **extra):
    (tmp_path / "hosts.yml").write_text(inventory)
    extra.setdefault("gpufleet_report_dir", str(tmp_path / "report"))
    env = dict(
        os.environ,
        HOME=str(tmp_path),  # the default stop file's folder, ~/.gpufleet, is the test's
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_LOCALHOST_WARNING="False",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOST_KEY_CHECKING="False",
    )
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(ROOT / "playbooks" / "upgrade.yml"), "-e", json.dumps(extra)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    return result, " ".join((result.stdout + result.stderr).split())


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"gpufleet_target": "gpu-07"}, "gpufleet_target (set for gpu-01, gpu-02) is not a variable of gpufleet.lifecycle: did you mean "
                                        "gpufleet_targets?"),
        ({"gpufleet_stop_flie": "/x"}, "did you mean gpufleet_stop_file?"),
        ({}, "gpu_firmware_activte (set for gpu-02) is not a variable of gpufleet.lifecycle: did you mean gpu_firmware_activate?"),
    ],
)
def test_a_misspelt_variable_is_refused_before_any_node_is_touched(tmp_path, extra, words):
    result, output = run_upgrade(tmp_path, **extra)
    assert result.returncode != 0
    assert words in output, output[-3000:]
    assert "no node was touched" in output and "UNREACHABLE" not in output, output[-3000:]


def test_a_stop_file_in_a_world_writable_folder_is_refused(tmp_path):
    result, output = run_upgrade(tmp_path, INVENTORY.replace(", gpu_firmware_activte: false", ""), gpufleet_stop_file="/var/tmp/gpufleet.stop")
    assert result.returncode != 0
    assert "the folder /var/tmp of gpufleet_stop_file is writable by everyone" in output, output[-3000:]
    assert "No node was touched" in output and "UNREACHABLE" not in output, output[-3000:]


def test_known_variables_and_the_default_stop_file_pass_to_the_nodes(tmp_path):
    result, output = run_upgrade(tmp_path, INVENTORY.replace(", gpu_firmware_activte: false", ""), gpufleet_soak_seconds=5,
                                 gpu_firmware_allow_downgrade=False)
    assert result.returncode != 0  # the nodes are never reached
    assert re.search(r"Make this run's nonce\] \**\s*ok: \[gpu-01 -> localhost\]", output), output[-3000:]
    assert "unknown variable" not in output and "gpufleet_stop_file" not in output, output[-3000:]
    assert "UNREACHABLE" in output, output[-3000:]
