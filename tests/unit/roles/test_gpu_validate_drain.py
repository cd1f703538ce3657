"""The gpu_validate role before the checks that load the GPUs: it reads the node's Slurm state with scontrol (a fake one
on PATH here) and the module refuses a node that is not drained; quick, check mode and gpu_validate_drained read nothing.
Run by ansible-playbook on the controller (the node is localhost, without GPUs: the checks that do run fail)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN = pathlib.Path(sys.executable).parent
SLURM = ROOT / "tests" / "fixtures" / "slurm"
PLAYBOOK = """
- name: Validate localhost
  hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: gpufleet.lifecycle.gpu_validate
      vars:
        gpu_validate_async: false
        gpu_validate_command_timeout: 10
"""


def run_role(tmp_path, record, *args, **extra):
    """(output, whether scontrol ran) of the role with a fake scontrol that prints ``record``."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    called = tmp_path / "scontrol-called"
    (fake / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {called}\ncat {SLURM / record}\n")
    (fake / "scontrol").chmod(0o700)
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False", ANSIBLE_NOCOLOR="1")
    extra = dict({"ansible_python_interpreter": sys.executable}, **extra)
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml"), "-e", json.dumps(extra), *args],
                          capture_output=True, text=True, env=env, timeout=180, check=False)
    return proc.stdout + proc.stderr, called.read_text() if called.exists() else None


def test_a_node_slurm_shows_idle_is_refused_before_any_check(tmp_path):
    output, called = run_role(tmp_path, "show_node_idle.txt", gpu_validate_level="standard", gpufleet_slurm_node_name="idle-03")
    assert called == "show node -o idle-03\n"
    assert "idle-03: Slurm shows it IDLE, not drained with no job left; cuda_smoke, dcgm_diag load every GPU" in output
    assert "Nothing was run" in output and "failed validation" not in output


def test_a_node_slurm_shows_drained_is_validated(tmp_path):
    output, called = run_role(tmp_path, "show_node_idle_drain_others.txt", gpu_validate_level="full")
    assert called is not None
    assert "Nothing was run" not in output
    assert "failed validation (full)" in output  # the checks ran (and fail: this controller has no GPU)


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        ((), {"gpu_validate_level": "quick"}),
        (("--check",), {"gpu_validate_level": "full"}),
        ((), {"gpu_validate_level": "standard", "gpu_validate_drained": True}),
    ],
    ids=["quick", "check-mode", "drained-given"],
)
def test_no_slurm_read_where_no_load_check_runs_or_the_drain_is_given(tmp_path, args, extra):
    output, called = run_role(tmp_path, "show_node_idle.txt", *args, **extra)
    assert called is None
    assert "Nothing was run" not in output
    assert "failed validation" in output  # the read-only checks ran
