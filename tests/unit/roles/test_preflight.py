"""The preflight role, run by ansible-playbook on the controller: it refuses a BOM that cannot work, naming the rule."""

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
- name: Preflight on the controller
  hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: gpufleet.lifecycle.preflight
      vars:
        preflight_gather_facts: false
        preflight_today: "2026-11-30"
"""


def run_preflight(tmp_path, bom, gpu_names):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    extra = {"gpufleet_bom": bom, "preflight_gpu_names": gpu_names}
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_LOCALHOST_WARNING="False",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        ANSIBLE_NOCOLOR="1",
    )
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml"), "-e", json.dumps(extra)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_sound_bom_passes(tmp_path):
    result = run_preflight(tmp_path, {"driver": {"version": "580.95.05"}, "cuda": ["12.8", "13.0"]}, ["NVIDIA H100 80GB HBM3"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "failed=0" in result.stdout and "would not work" not in result.stdout


@pytest.mark.parametrize(
    ("bom", "gpus", "rule", "detail"),
    [
        ({"driver": {"version": "535.161.08"}, "cuda": ["12.8"]}, ["NVIDIA H100 80GB HBM3"], "driver-cuda", "cannot run CUDA 12.8"),
        ({"driver": {"version": "590.48.01"}, "cuda": []}, ["Tesla V100-SXM2-32GB"], "driver-architecture", "dropped Volta"),
        ({"driver": {"version": "580.65.06"}, "cuda": ["13.0"]}, ["Tesla V100-SXM2-32GB"], "cuda-architecture", "V100"),
        ({"driver": {"version": "470.256.02"}, "cuda": []}, ["Tesla T4"], "branch-eol", "R470"),
    ],
)
def test_unsound_bom_is_refused_naming_the_rule(tmp_path, bom, gpus, rule, detail):
    result = run_preflight(tmp_path, bom, gpus)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "would not work on localhost" in result.stdout
    assert rule + ":" in result.stdout
    assert detail in result.stdout
