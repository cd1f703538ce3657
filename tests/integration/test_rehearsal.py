"""Rehearsal on a copy of the fleet: audit demo-16, make its copy with playbooks/rehearse.yml, bring it up, audit it again.

The original is tests/gpusim/specs/demo-16.yml moved onto 127.0.39.x (slurmctld 16100), with racks as host variables
in its inventory; the copy runs on 127.0.41.x (slurmctld 16200). The original goes down before the copy comes up (a
2-core machine). The two audits must agree node by node and component by component: installed, wanted, status,
what was read of each node, the BOMs, the totals; only the time of the run differs.
"""

from __future__ import annotations

import json
import pathlib

import yaml
from fleet import REPO, Fleet, fleet_up, needs_fleet

pytestmark = needs_fleet()

DEMO = REPO / "tests" / "gpusim" / "specs" / "demo-16.yml"
RACKS = {"h100-": "r1", "l40s-": "r2", "b200-": "r3"}


def original_spec(path: pathlib.Path) -> pathlib.Path:
    data = yaml.safe_load(DEMO.read_text())
    data["fleet"].update(name="demo-16-original", loopback=39, slurm_port=16100)
    for group in data["nodes"]:
        first = group["names"][0] if "names" in group else group["prefix"]
        group["vars"] = {"rack": next(rack for prefix, rack in RACKS.items() if first.startswith(prefix)), "leaf": "leaf-1"}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def audit(fleet: Fleet, report_dir: pathlib.Path) -> dict:
    done = fleet.ansible_playbook(REPO / "playbooks" / "audit.yml", "-e", f"gpufleet_report_dir={report_dir}",
                                  "-e", f"gpufleet_bmc_ca_path={fleet.workdir / 'bmc' / 'cert.pem'}", "-f", "8", timeout=240)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return json.loads((report_dir / "fleet-report.json").read_text())


def test_the_copy_of_an_audited_fleet_audits_the_same(tmp_path):
    copy_spec = tmp_path / "copy.yml"
    with fleet_up(original_spec(tmp_path / "original.yml"), tmp_path / "original") as workdir:
        original = Fleet(workdir)
        first = audit(original, tmp_path / "audit-original")
        made = original.ansible_playbook(
            REPO / "playbooks" / "rehearse.yml", "-e", f"gpufleet_rehearsal_report={tmp_path / 'audit-original' / 'fleet-report.json'}",
            "-e", f"gpufleet_rehearsal_spec={copy_spec}", "-e", "gpufleet_rehearsal_name=demo-16-copy",
            "-e", "gpufleet_rehearsal_loopback=41", "-e", "gpufleet_rehearsal_slurm_port=16200",
            "-e", '{"gpufleet_rehearsal_copy_vars": ["rack"]}', timeout=120)
        assert made.returncode == 0, made.stdout[-4000:] + made.stderr[-2000:]

    # The original's audit saw demo-16's drift: the comparison below is not of two empty reports.
    assert first["totals"] == {"nodes": 16, "ok": 11, "drift": 5, "unknown": 0, "error": 0, "unreachable": 0}
    drift = {(n["name"], i["component"]) for n in first["nodes"] for i in n["items"] if i["status"] != "ok"}
    assert {("h100-05", "driver"), ("h100-06", "fabricmanager"), ("l40s-05", "driver_kernel_module"),
            ("b200-03", "gpu_firmware")} <= drift

    with fleet_up(copy_spec, tmp_path / "copy") as workdir:
        copy = Fleet(workdir)
        assert copy.address["b200-01"] == "127.0.41.1" and copy.record["slurm_port"] == 16200
        second = audit(copy, tmp_path / "audit-copy")
        hosts = yaml.safe_load(copy.inventory.read_text())
    host_vars = {}

    def walk(group):
        for name, values in (group.get("hosts") or {}).items():
            host_vars.setdefault(name, {}).update(values or {})
        for child in (group.get("children") or {}).values():
            walk(child or {})
    walk(hosts["all"])
    racks = {n["name"]: next(rack for prefix, rack in RACKS.items() if n["name"].startswith(prefix)) for n in first["nodes"]}
    assert {name: values.get("rack") for name, values in host_vars.items() if name != "slurmctl"} == racks
    assert not any("leaf" in values for values in host_vars.values()), "only the variables named in copy_vars are copied"

    assert [n["name"] for n in second["nodes"]] == [n["name"] for n in first["nodes"]]
    for before, after in zip(first["nodes"], second["nodes"]):
        assert after["status"] == before["status"], before["name"]
        assert after["items"] == before["items"], before["name"]  # installed, wanted, status, detail of every component
        assert after == before, before["name"]
    assert {k: v for k, v in second.items() if k != "generated_at"} == {k: v for k, v in first.items() if k != "generated_at"}
    assert second["generated_at"] != first["generated_at"]
