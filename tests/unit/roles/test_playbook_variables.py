"""playbooks/audit.yml, validate.yml and rehearse.yml refuse a misspelt variable first, on the controller.

Runs the real playbooks against nodes at an address that is never reached (TEST-NET-1): the refusal comes before any
node is contacted, so a connection attempt would show as UNREACHABLE. The variable's value is never shown.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN = pathlib.Path(sys.executable).parent
SHOWN_NEVER = "value-never-shown"
INVENTORY = f"""
gpu_nodes:
  hosts:
    gpu-01: {{ansible_host: 192.0.2.1, ansible_connection: ssh, ansible_ssh_timeout: 2}}
    gpu-02: {{ansible_host: 192.0.2.2, ansible_connection: ssh, ansible_ssh_timeout: 2, gpu_validate_levle: {SHOWN_NEVER}}}
"""


def run_playbook(tmp_path, playbook, inventory=INVENTORY, **extra):
    (tmp_path / "hosts.yml").write_text(inventory)
    env = dict(
        os.environ,
        HOME=str(tmp_path),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_LOCALHOST_WARNING="False",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOST_KEY_CHECKING="False",
    )
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(ROOT / "playbooks" / playbook), "-e", json.dumps(extra)],
        capture_output=True, text=True, env=env, timeout=120, check=False, cwd=tmp_path,
    )
    return result, " ".join((result.stdout + result.stderr).split())


REHEARSAL = {"gpufleet_rehearsal_report": "fleet-report.json", "gpufleet_rehearsal_spec": "rehearsal.yml"}


@pytest.mark.parametrize(
    ("playbook", "extra", "words"),
    [
        ("audit.yml", {}, "gpu_validate_levle (set for gpu-02) is not a variable of gpufleet.lifecycle: did you mean gpu_validate_level?"),
        ("audit.yml", {"gpufleet_report_dri": SHOWN_NEVER},
         "gpufleet_report_dri (set for gpu-01, gpu-02) is not a variable of gpufleet.lifecycle: did you mean gpufleet_report_dir?"),
        ("validate.yml", {}, "gpu_validate_levle (set for gpu-02) is not a variable of gpufleet.lifecycle: did you mean gpu_validate_level?"),
        ("validate.yml", {"gpufleet_host": "gpu_nodes"}, "did you mean gpufleet_hosts?"),
        ("rehearse.yml", REHEARSAL, "gpu_validate_levle (set for gpu-02) is not a variable of gpufleet.lifecycle"),
        ("rehearse.yml", dict(REHEARSAL, gpufleet_rehearsal_spce="x.yml"), "did you mean gpufleet_rehearsal_spec?"),
    ],
)
def test_a_misspelt_variable_is_refused_before_any_node_is_contacted(tmp_path, playbook, extra, words):
    result, output = run_playbook(tmp_path, playbook, **extra)
    assert result.returncode != 0
    assert words in output, output[-3000:]
    assert "no node was contacted" in output and "UNREACHABLE" not in output, output[-3000:]
    assert SHOWN_NEVER not in output, output[-3000:]
    assert not (tmp_path / "rehearsal.yml").exists()


@pytest.mark.parametrize(
    ("playbook", "extra", "after"),
    [
        ("audit.yml", {"gpufleet_report_dir": "reports", "gpufleet_bmc_timeout": 5}, "UNREACHABLE"),
        ("validate.yml", {"gpu_validate_level": "quick", "gpufleet_report_dir": "reports"}, "UNREACHABLE"),
        # no node to reach: past the check, the rehearsal stops at the audit's report, which this test did not write
        ("rehearse.yml", dict(REHEARSAL, gpufleet_rehearsal_name="copy"), "Read the audit's report"),
    ],
)
def test_known_variables_pass_to_the_nodes(tmp_path, playbook, extra, after):
    result, output = run_playbook(tmp_path, playbook, INVENTORY.replace(f", gpu_validate_levle: {SHOWN_NEVER}", ""), **extra)
    assert result.returncode != 0  # the nodes are never reached (or the report is missing)
    assert "unknown variable" not in output, output[-3000:]
    assert after in output, output[-3000:]
