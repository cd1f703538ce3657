"""The node_maintenance role run by ansible-playbook on the controller: the none backend's facts, and every refusal
before anything changes (the Slurm backend against real Slurm is tests/integration/test_node_maintenance.py; the
Kubernetes decisions are tests/unit/plugins/module_utils/_maintenance/test_kubernetes.py)."""

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
- name: node_maintenance on the controller
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Run the entry point
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.node_maintenance
        tasks_from: "{{ entry }}"

    - name: Report
      ansible.builtin.debug:
        msg: "FACTS={{ {'drained': node_maintenance_drained | default(None), 'skip': node_maintenance_skip | default(None),
                        'skip_reason': node_maintenance_skip_reason | default(None), 'drain': node_maintenance_drain | default(None),
                        'resumed': node_maintenance_resumed | default(None)} | to_json }}"
"""


def run_role(tmp_path, entry, **variables):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=f"{ROOT / '.collections'}:{ROOT / '.venv' / 'lib' / 'python3.11' / 'site-packages'}",
        ANSIBLE_LOCALHOST_WARNING="False",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        ANSIBLE_NOCOLOR="1",
    )
    extra = {"entry": entry, **variables}
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml"), "-e", json.dumps(extra)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    facts = None
    for line in done.stdout.splitlines():
        if '"msg": "FACTS=' in line:
            facts = json.loads(json.loads("{" + line.strip() + "}")["msg"][len("FACTS="):])
    return done, facts


def test_none_backend_holds_the_node_then_gives_it_back(tmp_path):
    done, facts = run_role(tmp_path, "drain", gpufleet_maintenance_backend="none", gpufleet_rollout_id="r-0a1b2c3d4e",
                           gpufleet_maintenance_reason="driver upgrade")
    assert done.returncode == 0, done.stdout + done.stderr
    assert facts == {"drained": True, "skip": False, "skip_reason": "", "drain": {"ours": True, "reason": "driver upgrade"}, "resumed": None}
    done, facts = run_role(tmp_path, "resume", gpufleet_maintenance_backend="none", gpufleet_rollout_id="r-0a1b2c3d4e")
    assert done.returncode == 0, done.stdout + done.stderr
    assert facts["drained"] is False and facts["resumed"] is True


def test_main_entry_point_is_drain(tmp_path):
    done, facts = run_role(tmp_path, "main", gpufleet_maintenance_backend="none", gpufleet_rollout_id="r-1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert facts["drained"] is True


@pytest.mark.parametrize(
    ("entry", "rollout_id"),
    [("drain", ""), ("drain", "r-1\n"), ("drain", "gpufleet:r1"), ("resume", "r 1"), ("reboot", "a" * 65)],
)
def test_bad_or_missing_rollout_id_is_refused_before_anything(tmp_path, entry, rollout_id):
    done, facts = run_role(tmp_path, entry, gpufleet_maintenance_backend="slurm", gpufleet_rollout_id=rollout_id)
    assert done.returncode == 2, done.stdout
    assert "node_maintenance_rollout_id (gpufleet_rollout_id)" in done.stdout
    assert "only our drains are ever resumed" in done.stdout
    assert facts is None


def test_unknown_slurm_client_is_refused(tmp_path):
    done = run_role(tmp_path, "drain", gpufleet_rollout_id="r-1", gpufleet_slurm_client="slurm-ctl-99")[0]
    assert done.returncode == 2, done.stdout
    assert 'node_maintenance_slurm_client (gpufleet_slurm_client) "slurm-ctl-99" is not a host of the inventory' in done.stdout


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"gpufleet_maintenance_backend": "lsf"}, "node_maintenance_backend"),
        ({"gpufleet_drain_timeout_action": "kill"}, "node_maintenance_drain_timeout_action"),
        ({"gpufleet_drain_timeout": "soon"}, "node_maintenance_drain_timeout"),
    ],
)
def test_argument_specs_refuse_bad_values(tmp_path, variables, message):
    done, facts = run_role(tmp_path, "drain", gpufleet_rollout_id="r-1", **variables)
    assert done.returncode == 2, done.stdout
    assert message in done.stdout
    assert facts is None


def test_kubernetes_backend_stops_at_its_first_api_read_without_a_cluster(tmp_path):
    # No API server here (and no Python kubernetes package in the venv): the backend's tasks load, and the host
    # fails at the first read of the Node, before any mark, cordon or eviction.
    done = run_role(tmp_path, "drain", gpufleet_maintenance_backend="kubernetes", gpufleet_rollout_id="r-1",
                    node_maintenance_k8s_kubeconfig=str(tmp_path / "no-such-kubeconfig"))[0]
    assert done.returncode == 2, done.stdout
    failed = [line for line in done.stdout.splitlines() if line.startswith("fatal:")]
    assert len(failed) == 1, done.stdout
    last_task = done.stdout.split("fatal:")[0].rsplit("TASK [", 1)[1]
    assert last_task.startswith("gpufleet.lifecycle.node_maintenance : Read the Kubernetes node]"), done.stdout
    assert "Mark the node" not in done.stdout and "Cordon the node" not in done.stdout
