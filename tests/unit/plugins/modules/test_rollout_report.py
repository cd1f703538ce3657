"""rollout_report: the files it writes, check mode, idempotence, a bad record writes nothing, secrets never written."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.modules import rollout_report
from ansible_collections.gpufleet.lifecycle.tests.browser.rollout_sample import sample_rollout

RID = "r-1a2b3c4d5e"
PASSWORD = "hunter2-Zq9"  # noqa: S105 - the secret the test hunts for
BMC_URL = f"https://admin:{PASSWORD}@10.0.0.41/redfish/v1"


def args(tmp_path, count=24, **extra):
    records, plan = sample_rollout(count, rollback=("gpu-07",), skipped=("gpu-12",), rollout_id=RID)
    base = {
        "dest": str(tmp_path / "reports"),
        "rollout_id": RID,
        "records": records,
        "plan": plan,
        "summary_extra": {"who": "alice@ctl-01", "failure_budget": 2, "max_unavailable": "10%", "stop_file": "/var/tmp/gpufleet.stop",
                          "stop_file_present": False},
    }
    base.update(extra)
    return base


def all_text(folder):
    return "".join(path.read_text() for path in sorted(folder.rglob("*")) if path.is_file())


def test_writes_every_format_and_a_file_per_node(tmp_path, run_module):
    result = run_module(rollout_report.main, args(tmp_path))
    dest = tmp_path / "reports"
    assert result["changed"] is True
    summary = result["summary"]
    assert (summary["nodes"], summary["upgraded"], summary["rolled_back"], summary["skipped"], summary["failed"]) == (24, 22, 1, 1, 1)
    assert result["headline"] == "24 nodes: 22 upgraded, 1 rolled back, 1 skipped."  # the line the rollout prints at its end
    assert result["paths"]["json"] == str(dest / "rollout-report.json")
    assert result["paths"]["junit"] == str(dest / "rollout-junit.xml")
    assert sorted(p.name for p in dest.iterdir()) == ["nodes", "rollout-junit.xml", "rollout-report.html", "rollout-report.json", "rollout-report.md"]
    assert len(list((dest / "nodes").iterdir())) == 24
    node = json.loads((dest / "nodes" / "gpu-07.json").read_text())
    assert node["result"] == "rolled_back" and node["rollback"]["decided_by"] == "validate"
    assert [p["name"] for p in node["phases"]][-3:] == ["validate", "rollback", "resume"]
    assert result["paths"]["nodes"]["gpu-07"] == str(dest / "nodes" / "gpu-07.json")
    report = json.loads((dest / "rollout-report.json").read_text())
    assert report["summary"]["failure_budget"] == 2 and [w["label"] for w in report["waves"]] == ["canary", "wave 1", "wave 2", "wave 3"]
    markdown = (dest / "rollout-report.md").read_text()
    assert "| gpu-07 | rolled back | driver 570.124.06 (restored) |" in markdown
    assert "- **failure budget**: 1 node failed of 2 allowed" in markdown
    suites = ET.parse(dest / "rollout-junit.xml").getroot()  # noqa: S314 - our own output
    assert (suites.get("tests"), suites.get("failures"), suites.get("skipped")) == ("24", "1", "1")
    html = (dest / "rollout-report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and '<svg class="timeline"' in html


def test_second_run_changes_nothing(tmp_path, run_module):
    run_module(rollout_report.main, args(tmp_path))
    again = run_module(rollout_report.main, args(tmp_path))
    assert again["changed"] is False


def test_a_changed_record_rewrites_only_what_changed(tmp_path, run_module):
    run_module(rollout_report.main, args(tmp_path))
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "reports" / "nodes").iterdir()}
    changed = args(tmp_path)
    changed["records"][2]["phases"][0]["detail"] = "re-run"
    result = run_module(rollout_report.main, changed)
    assert result["changed"] is True
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "reports" / "nodes").iterdir()}
    assert [name for name in before if before[name] != after[name]] == ["gpu-03.json"]


def test_check_mode_writes_nothing(tmp_path, run_module):
    result = run_module(rollout_report.main, args(tmp_path), check_mode=True)
    assert result["changed"] is True and result["summary"]["rolled_back"] == 1
    assert not (tmp_path / "reports").exists()


def test_formats_subset(tmp_path, run_module):
    result = run_module(rollout_report.main, args(tmp_path, formats=["junit"]))
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == ["rollout-junit.xml"]
    assert set(result["paths"]) == {"junit"}


@pytest.mark.parametrize(
    ("breakage", "node", "field"),
    [
        (lambda r: r[3]["phases"][2].update(end=r[3]["phases"][2]["start"] - 1), "gpu-04", "phases[2].end"),
        (lambda r: r[3]["phases"][1].update(name="flash"), "gpu-04", "phases[1].name"),
        (lambda r: r[5].update(result="done"), "gpu-06", "result"),
        (lambda r: r[5].update(wave="1"), "gpu-06", "wave"),
        (lambda r: r[0]["phases"][0].update(start=float("nan")), "gpu-01", "phases[0].start"),
        (lambda r: r[0]["phases"][0].update(start=float("inf")), "gpu-01", "phases[0].start"),
        (lambda r: r[1].update(bmc_url="x"), "gpu-02", "bmc_url"),
        (lambda r: r[1].update(rollout_id="r-other"), "gpu-02", "rollout_id"),
    ],
)
def test_a_bad_record_fails_naming_node_and_field_and_writes_nothing(tmp_path, run_module, breakage, node, field):
    bad = args(tmp_path)
    breakage(bad["records"])
    result = run_module(rollout_report.main, bad)
    assert result["failed"] is True
    assert (result["node"], result["field"]) == (node, field)
    assert f"node {node}" in result["msg"] and field in result["msg"]
    assert not (tmp_path / "reports").exists()


def test_a_bad_record_after_a_good_run_leaves_the_old_report(tmp_path, run_module):
    run_module(rollout_report.main, args(tmp_path))
    old = all_text(tmp_path / "reports")
    bad = args(tmp_path)
    bad["records"][-1]["phases"][0]["status"] = "maybe"
    assert run_module(rollout_report.main, bad)["failed"] is True
    assert all_text(tmp_path / "reports") == old


def test_a_bmc_url_with_a_password_is_redacted_everywhere(tmp_path, run_module):
    records, plan = sample_rollout(24, rollback=("gpu-07",), rollout_id=RID, secret_url=BMC_URL)
    records[6]["rollback"]["reason"] = f"redfish {BMC_URL} answered 500"
    result = run_module(rollout_report.main, args(tmp_path, records=records, plan=plan))
    assert result["summary"]["redactions"] == 2
    text = all_text(tmp_path / "reports")
    assert PASSWORD not in text and "admin:" not in text
    assert "https://10.0.0.41/redfish/v1" in text  # where it pointed stays readable
    assert PASSWORD not in json.dumps(result)


def test_secrets_option_is_redacted(tmp_path, run_module):
    extra = args(tmp_path)
    extra["records"][0]["phases"][0]["detail"] = "bmc password tokenXYZ rejected"
    extra["secrets"] = ["tokenXYZ"]
    result = run_module(rollout_report.main, extra)
    assert "tokenXYZ" not in all_text(tmp_path / "reports") and "********" in (tmp_path / "reports" / "nodes" / "gpu-01.json").read_text()
    assert result["summary"]["redactions"] == 1


def test_dest_that_is_a_file_fails(tmp_path, run_module):
    (tmp_path / "reports").write_text("not a folder")
    result = run_module(rollout_report.main, args(tmp_path))
    assert result["failed"] is True and "is not a folder" in result["msg"]


def test_a_link_at_nodes_is_refused(tmp_path, run_module):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "nodes").symlink_to(elsewhere)
    result = run_module(rollout_report.main, args(tmp_path))
    assert result["failed"] is True and "symbolic link" in result["msg"]
    assert list(elsewhere.iterdir()) == []
