"""The rehearsal filters and playbooks/rehearse.yml: the operator's host variables go onto the copy, never their connections."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter.rehearsal import FilterModule, audit_to_gpusim_notes, audit_to_gpusim_spec

ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from gpusim import spec  # noqa: E402

FIXTURE = TESTS / "fixtures" / "rehearsal" / "demo-16-report.json"
REPORT = json.loads(FIXTURE.read_text())
PLAYBOOK = ROOT / "playbooks" / "rehearse.yml"


def test_the_filters_are_registered():
    assert FilterModule().filters() == {"audit_to_gpusim_spec": audit_to_gpusim_spec, "audit_to_gpusim_notes": audit_to_gpusim_notes}


def test_only_the_named_variables_of_the_reports_hosts_are_copied():
    hostvars = {"h100-01": {"rack": "r1", "ansible_host": "10.1.0.1", "leaf": "leaf-3"}, "other-host": {"rack": "r9"}}
    made = audit_to_gpusim_spec(REPORT, hostvars=hostvars, copy_vars=["rack"], loopback=41)
    parsed = spec.parse(made)
    assert parsed.node("h100-01").host_vars == {"rack": "r1"}
    assert all(p.host_vars == {} for p in parsed.nodes if p.name != "h100-01")


def test_a_connection_variable_asked_for_is_refused_with_the_filters_name():
    with pytest.raises(AnsibleFilterError, match=r"^gpufleet.lifecycle.audit_to_gpusim_spec: node 'h100-01', host_vars.ansible_host"):
        audit_to_gpusim_spec(REPORT, hostvars={"h100-01": {"ansible_host": "10.1.0.1"}}, copy_vars=["ansible_host"])


@pytest.mark.parametrize("kwargs, message", [
    ({"loopbak": 41}, r"unknown option\(s\) loopbak; options: hostvars, copy_vars, name"),
    ({"hostvars": {}, "copy_vars": "rack"}, r"copy_vars must be a list of variable names, got 'rack'"),
    ({"loopback": 0}, r"loopback must be an integer between 1 and 254"),
])
def test_bad_options_are_refused_with_the_filters_name(kwargs, message):
    with pytest.raises(AnsibleFilterError, match=r"^gpufleet.lifecycle.audit_to_gpusim_notes: " + message):
        audit_to_gpusim_notes(REPORT, **kwargs)


def _playbook(tmp_path, *extra):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {
        "localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "h100-01": {"ansible_host": "10.1.0.1", "rack": "r1", "nvlink_domain": "nvl-a"},
        "b200-03": {"ansible_host": "10.1.0.9", "rack": "r7", "bmc_password": "not-copied"},
    }}}))
    # Run from tmp_path as a shell would (PWD set): relative paths are the caller's.
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="False",
               PWD=str(tmp_path))
    return subprocess.run([str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), str(PLAYBOOK), *extra],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)


def test_the_playbook_writes_a_spec_gpusim_accepts_with_the_inventorys_racks(tmp_path):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "fleet-report.json").write_text(FIXTURE.read_text())
    dest = tmp_path / "copy.yml"
    done = _playbook(tmp_path, "-e", "gpufleet_rehearsal_report=reports/fleet-report.json", "-e", "gpufleet_rehearsal_spec=copy.yml",
                     "-e", "gpufleet_rehearsal_loopback=41", "-e", "gpufleet_rehearsal_slurm_port=16200", "-e", "gpufleet_rehearsal_name=copy")
    assert done.returncode == 0, done.stdout + done.stderr
    text = dest.read_text()
    assert text.startswith(f"# A simulated copy of the fleet audited in {tmp_path / 'reports' / 'fleet-report.json'} (the audit ran at\n"
                           f"# {REPORT['generated_at']}), written by gpufleet.lifecycle.rehearse.")
    assert "#   - the copy starts with no Slurm jobs" in text
    fleet = spec.load(dest)
    assert fleet.name == "copy" and fleet.slurm_port == 16200 and len(fleet.nodes) == 16
    assert fleet.node("h100-01").host_vars == {"rack": "r1", "nvlink_domain": "nvl-a"}
    assert fleet.node("b200-03").host_vars == {"rack": "r7"}
    assert "10.1.0" not in text and "not-copied" not in text
    assert "16 nodes in" in done.stdout


def test_the_playbook_fails_naming_the_node_and_writes_nothing(tmp_path):
    report = dict(REPORT, nodes=[dict(n, sku="unknown") if n["name"] == "l40s-02" else n for n in REPORT["nodes"]])
    source = tmp_path / "report.json"
    source.write_text(json.dumps(report))
    dest = tmp_path / "copy.yml"
    done = _playbook(tmp_path, "-e", f"gpufleet_rehearsal_report={source}", "-e", f"gpufleet_rehearsal_spec={dest}")
    assert done.returncode != 0
    assert re.search(r"gpufleet.lifecycle.audit_to_gpusim_(spec|notes): node 'l40s-02', sku: has no SKU", done.stdout + done.stderr)
    assert not dest.exists()


def test_the_playbook_without_its_variables_says_which_to_set(tmp_path):
    done = _playbook(tmp_path)
    assert done.returncode != 0
    assert "set gpufleet_rehearsal_report" in done.stdout
