"""The rollout report: what it counts, what each format says, and the records it refuses."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report import rollout
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.rollout_records import RecordError, redact, validate_records
from ansible_collections.gpufleet.lifecycle.tests.browser.rollout_sample import T0, sample_rollout

RID = "r-1a2b3c4d5e"
EXTRA = {"who": "alice@ctl-01 job 42", "failure_budget": 1, "max_unavailable": "10%", "stop_file": "/var/tmp/gpufleet.stop", "stop_file_present": True,
         "stopped_reason": "failure budget exceeded after wave 2", "ticket": "CHG-1234"}


@pytest.fixture
def report():
    records, plan = sample_rollout(24, rollback=("gpu-07",), drained=("gpu-05",), skipped=("gpu-12",), rollout_id=RID)
    return rollout.build_report(records, RID, plan=plan, summary_extra=EXTRA)


def test_summary_counts_and_budget(report):
    s = report["summary"]
    assert {r: s[r] for r in rollout.RESULTS} == {"upgraded": 21, "unchanged": 0, "rolled_back": 1, "failed_drained": 1, "skipped": 1,
                                                  "not_started": 0}
    assert (s["nodes"], s["failed"], s["failure_budget"], s["failure_budget_exceeded"]) == (24, 2, 1, True)
    assert s["started_epoch"] == T0 and s["started"] == "2025-12-01T11:53:20Z"
    assert s["duration_s"] == round(s["ended_epoch"] - T0, 3)
    assert (s["waves_planned"], s["waves_done"], s["unavailable_budget"]) == (4, 4, 2)
    assert report["extra"] == {"ticket": "CHG-1234"}


def test_waves_in_order_canary_first_with_counts(report):
    assert [(w["label"], w["planned"], len(w["nodes"])) for w in report["waves"]] == [
        ("canary", 1, 1), ("wave 1", 2, 2), ("wave 2", 5, 5), ("wave 3", 16, 16)]
    wave2 = report["waves"][2]
    assert (wave2["counts"]["rolled_back"], wave2["counts"]["failed_drained"], wave2["done"]) == (1, 1, 5)


def test_a_planned_node_without_a_record_is_not_started_not_done():
    records, plan = sample_rollout(24, rollout_id=RID)
    kept = [r for r in records if r["wave"] != 3]  # the rollout stopped before wave 3
    report = rollout.build_report(kept, RID, plan=plan)
    assert report["summary"]["not_started"] == 16 and report["summary"]["upgraded"] == 8
    assert report["summary"]["waves_done"] == 3 and report["waves"][3]["done"] == 0
    assert rollout.node_evidence(report).keys() == {r["node"] for r in kept}  # no evidence file for what never ran
    junit = ET.fromstring(rollout.render_junit(report))  # noqa: S314 - our own output
    assert junit.get("skipped") == "16"


def test_node_view_derives_duration_and_reason(report):
    by_name = {n["node"]: n for n in report["nodes"]}
    rolled = by_name["gpu-07"]
    assert rolled["reason"] == "xid: Xid 79 since boot" and rolled["failed_check"].startswith("xid: Xid 79")
    assert rolled["duration_s"] == round(rolled["end"] - rolled["start"], 3) > 600
    assert by_name["gpu-12"]["reason"] == "drained by others: hw: DIMM replacement"
    assert by_name["gpu-01"]["reason"] == ""


def test_a_wave_starts_with_its_first_admitted_node_and_a_waiting_node_is_not_draining():
    """Issue 22: every wave started at the preflight, and a node waiting for another node's job counted as working."""
    def node(name, admitted, drained, done):
        return {"node": name, "rollout_id": RID, "wave": 1, "result": "upgraded", "phases": [
            {"name": "preflight", "start": T0, "end": T0 + 10, "status": "ok"},
            {"name": "drain", "start": T0 + admitted, "end": T0 + drained, "status": "ok"},
            {"name": "driver", "start": T0 + drained, "end": T0 + done, "status": "ok"}]}

    report = rollout.build_report([node("gpu-01", 300, 900, 960), node("gpu-02", 310, 320, 380)], RID)
    assert report["summary"]["started_epoch"] == T0
    assert report["waves"][0]["start"] == T0 + 300
    quick = next(n for n in report["nodes"] if n["node"] == "gpu-02")
    assert (quick["start"], quick["duration_s"]) == (T0 + 310, 70.0)
    assert quick["times"] == {"queued_s": 300.0, "capacity_s": None, "jobs_s": 10.0, "work_s": 60.0, "observation_s": None}
    assert "| gpu-02 | upgraded | — | 1m 10s (queued 5m 00s · jobs 10s · work 1m 00s) |" in rollout.render_markdown(report)


def test_markdown_says_what_happened(report):
    md = rollout.render_markdown(report)
    assert "**24 nodes: 21 upgraded, 1 rolled back, 1 failed and left drained, 1 skipped.**" in md
    assert "- **run by**: alice@ctl-01 job 42" in md
    assert "- **failure budget**: 2 nodes failed, 1 allowed: exceeded" in md
    assert "- **unavailable budget**: 2 nodes (10%)" in md
    assert "- **stop file**: /var/tmp/gpufleet.stop is present: no new node was started; remove it and run the playbook again to resume" in md
    assert "- **stopped**: failure budget exceeded after wave 2" in md
    assert "- **ticket**: CHG-1234" in md
    # A wave starts when its first node is admitted (after the canary's 20 s preflight), not at the preflight.
    assert "| canary | 1 | 1 | 1 | 1 | 0 | 0 | 0 | 0 | 0 | 2025-12-01T11:53:40Z |" in md
    assert "## Wave 2 (5 nodes)" in md
    assert ("| gpu-04 | upgraded | driver 570.124.06 → 580.95.05; fabricmanager 570.124.06 → 580.95.05; gpu_firmware HGX-22.10-1 → HGX-24.12-1; "
            "nic MT_0000000838 28.41.1000 → 28.43.1014 |") in md
    rollbacks = md.split("## Rollbacks and failures")[1]
    assert "| gpu-05 | wave 2 | failed and left drained | validate | xid: Xid 79 since boot | rollback failed | ours: gpufleet:" in rollbacks
    assert "| gpu-07 | wave 2 | rolled back | validate | xid: Xid 79 since boot | validated after rollback | ours:" in rollbacks
    assert "- **gpu-12** (wave 3): drained by others: hw: DIMM replacement" in md


def test_junit_with_control_characters_in_a_reason_is_well_formed():
    """A rollback reason quoting dcgmi's coloured output (ESC) or a NUL made the JUnit file unreadable to CI."""
    records, plan = sample_rollout(3, rollback=("gpu-02",), rollout_id=RID)
    records[1]["rollback"]["reason"] = "dcgm: dcgmi: \x1b[31mFAIL\x1b[0m \x00 end"
    junit = rollout.render_junit(rollout.build_report(records, RID, plan=plan))
    root = ET.fromstring(junit)  # noqa: S314 - our own output
    assert "\\x1b[31mFAIL" in junit and root.tag == "testsuites"


def test_markdown_escapes_table_breakers():
    records, plan = sample_rollout(3, rollback=("gpu-02",), rollout_id=RID)
    records[1]["rollback"]["reason"] = "a | b\nc"
    md = rollout.render_markdown(rollout.build_report(records, RID, plan=plan))
    assert "a \\| b c" in md and "a | b" not in md


def test_junit_suite_per_wave_case_per_node(report):
    root = ET.fromstring(rollout.render_junit(report))  # noqa: S314 - our own output
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [f"{RID} canary", f"{RID} wave 1", f"{RID} wave 2", f"{RID} wave 3"]
    assert [s.get("id") for s in suites] == ["0", "1", "2", "3"] and suites[0].get("timestamp") == "2025-12-01T11:53:40"
    for suite in suites:
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(1 for c in cases if c.find("failure") is not None)
        assert int(suite.get("skipped")) == sum(1 for c in cases if c.find("skipped") is not None)
        assert abs(float(suite.get("time")) - sum(float(c.get("time")) for c in cases)) < 0.01
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("24", "2", "0", "1")
    case = next(c for c in root.iter("testcase") if c.get("name") == "gpu-07")
    failure = case.find("failure")
    assert failure.get("type") == "rolled_back" and failure.get("message") == "rolled back: xid: Xid 79 since boot"
    assert "decided by: validate" in failure.text
    node = next(n for n in report["nodes"] if n["node"] == "gpu-07")
    assert float(case.get("time")) == pytest.approx(node["duration_s"], abs=0.001)
    skipped = next(c for c in root.iter("testcase") if c.get("name") == "gpu-12").find("skipped")
    assert "drained by others" in skipped.get("message")


def test_json_round_trips_and_is_deterministic(report):
    text = rollout.render_json(report)
    assert json.loads(text)["summary"]["rolled_back"] == 1
    records, plan = sample_rollout(24, rollback=("gpu-07",), drained=("gpu-05",), skipped=("gpu-12",), rollout_id=RID)
    assert rollout.render_json(rollout.build_report(list(reversed(records)), RID, plan=plan, summary_extra=EXTRA)) == text


def test_html_escapes_and_holds_the_chart(report):
    records, plan = sample_rollout(3, rollback=("gpu-02",), rollout_id=RID)
    records[1]["rollback"]["reason"] = "<script>alert(1)</script>"
    page = rollout.render_html(rollout.build_report(records, RID, plan=plan, title="<b>x</b>"))
    assert "<script>" not in page and "&lt;script&gt;" in page and "<title>&lt;b&gt;x&lt;/b&gt;</title>" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # no external asset
    assert "<script" not in page and "<link" not in page


# --------------------------------------------------------------------------- validation


def one(**changes):
    records, _plan = sample_rollout(2, rollout_id=RID)
    record = copy.deepcopy(records[0])
    record.update(changes)
    return record


@pytest.mark.parametrize(
    ("record", "field", "words"),
    [
        ("not a dict", "the record", "must be a mapping"),
        ({"node": "gpu-01", "rollout_id": RID}, "result", "is missing from the record"),
        (one(node="../etc/passwd"), "node", "not a plain host name"),
        (one(node=""), "node", "not a plain host name"),
        (one(wave=-1), "wave", "0 (canary)"),
        (one(wave=True), "wave", "0 (canary)"),
        (one(result="ok"), "result", "'ok': one of upgraded"),
        (one(phases={"name": "drain"}), "phases", "must be a list"),
        (one(phases=[{"name": "drain", "start": T0, "status": "ok"}]), "phases[0].end", "a closed phase has an end time"),
        (one(phases=[{"name": "drain", "start": T0, "end": T0 - 0.5, "status": "ok"}]), "phases[0].end", "before its start"),
        (one(phases=[{"name": "drain", "start": "soon", "end": T0, "status": "ok"}]), "phases[0].start", "must be a number"),
        (one(phases=[{"name": "drain", "start": True, "end": T0, "status": "ok"}]), "phases[0].start", "must be a number"),
        (one(phases=[{"name": "drain", "start": 42.0, "end": 84.0, "status": "ok"}]), "phases[0].start", "not a duration or milliseconds"),
        (one(phases=[{"name": "drain", "start": T0 * 1000, "end": T0 * 1000, "status": "ok"}]), "phases[0].start", "milliseconds"),
        (one(phases=[{"name": "drain", "start": T0, "end": float("nan"), "status": "ok"}]), "phases[0].end", "finite"),
        (one(phases=[{"name": "drain", "start": T0, "end": T0, "status": "done"}]), "phases[0].status", "one of started"),
        (one(phases=[{"name": "drain", "start": T0, "end": T0, "status": "ok", "who": "x"}]), "phases[0].who", "is not a field of phases[0]"),
        (one(bmc_url="https://bmc"), "bmc_url", "is not a field of the record"),
        (one(checks=[{"name": "xid", "status": "bad"}]), "checks[0].status", "one of pass"),
        (one(rollback={"decided_by": "validate", "reason": "x"}), "rollback.result", "is missing from rollback"),
        (one(rollback={"decided_by": "validate", "reason": "x", "result": "ok"}), "rollback.result", "one of validated, failed"),
        (one(result="rolled_back", rollback=None), "rollback", "is null but the result is rolled_back"),
        (one(drain={"ours": "yes"}), "drain.ours", "true or false"),
        (one(before={"driver": 570}), "before.driver", "must be a string"),
        (one(after={"nic_firmware": ["28.43.1014"]}), "after.nic_firmware", "mapping of PSID"),
        (one(after={"bad key!": "1"}), "after", "not a plain name"),
        (one(domain={"rack": ["r1"]}), "domain", "host variable names"),
        (one(skip_reason=3), "skip_reason", "must be a string"),
    ],
)
def test_bad_records_are_refused_naming_the_field(record, field, words):
    with pytest.raises(RecordError) as caught:
        validate_records([record], RID)
    assert caught.value.details["field"] == field
    assert field in caught.value.msg and words in caught.value.msg


def test_an_open_phase_is_accepted_and_drawn_to_the_end():
    record = one(phases=[{"name": "drain", "start": T0, "end": T0 + 10, "status": "ok"}, {"name": "driver", "start": T0 + 10, "status": "started"}])
    assert validate_records([record], RID)[0]["phases"][1]["end"] is None


def test_a_node_given_twice_is_refused():
    records, _plan = sample_rollout(2, rollout_id=RID)
    with pytest.raises(RecordError, match="node is given twice"):
        validate_records([records[0], records[0]], RID)


def test_the_node_is_named_in_the_message():
    with pytest.raises(RecordError) as caught:
        validate_records([one(), one(node="gpu-09", result="maybe")], RID)
    assert caught.value.msg.startswith("records[1] (node gpu-09): result ")
    assert caught.value.details["node"] == "gpu-09"


@pytest.mark.parametrize(
    ("plan", "field"),
    [("waves", "plan"), ({"canary": "gpu-01"}, "plan.canary"), ({"waves": [["a"], "b"]}, "plan.waves[1]"), ({"budget": "3"}, "plan.budget")],
)
def test_a_bad_plan_is_refused(plan, field):
    records, _plan = sample_rollout(2, rollout_id=RID)
    with pytest.raises(RecordError) as caught:
        rollout.build_report(records, RID, plan=plan)
    assert caught.value.details["field"] == field


@pytest.mark.parametrize(
    ("extra", "field"),
    [({"failure_budget": "2 nodes"}, "summary_extra.failure_budget"), ({"failure_budget": True}, "summary_extra.failure_budget"),
     ({"stop_file_present": "maybe"}, "summary_extra.stop_file_present"), ({"x": {"a": 1}}, "summary_extra.x")],
)
def test_bad_summary_extra_is_refused(extra, field):
    records, _plan = sample_rollout(2, rollout_id=RID)
    with pytest.raises(RecordError) as caught:
        rollout.build_report(records, RID, summary_extra=extra)
    assert caught.value.details["field"] == field


# --------------------------------------------------------------------------- secrets


def test_redact_removes_credentials_from_urls_anywhere():
    found = []
    value = {"a": ["see https://root:calvin@bmc-7.example/redfish/v1?x=1 now", "https://bmc-8/redfish?token=abc"], "b": 3,
             "c": "https://plain.example/path"}
    out = redact(value, found=found)
    assert out == {"a": ["see https://bmc-7.example/redfish/v1 now", "https://bmc-8/redfish"], "b": 3, "c": "https://plain.example/path"}
    assert len(found) == 2


def test_summary_extra_and_plan_notes_are_redacted_too():
    records, plan = sample_rollout(2, rollout_id=RID)
    plan["notes"] = ["capacity from https://u:pw1@slurm-rest/api"]
    report = rollout.build_report(records, RID, plan=plan, summary_extra={"controller": "https://u:pw2@ctl"})
    text = rollout.render_json(report) + rollout.render_markdown(report) + rollout.render_html(report) + rollout.render_junit(report)
    assert "pw1" not in text and "pw2" not in text and report["summary"]["redactions"] == 2


def test_json_has_one_line_per_node_and_parses_back(report):
    text = rollout.render_json(report)
    assert json.loads(text) == json.loads(json.dumps(report))
    lines = text.splitlines()
    assert sum(1 for line in lines if line.startswith('    {"after"')) == 24
    tricky = dict(report, extra={"note": '\n  "nodes": []'})
    assert json.loads(rollout.render_json(tricky)) == json.loads(json.dumps(tricky))


def test_templated_text_for_budget_and_stop_file_is_read():
    records, _plan = sample_rollout(2, rollout_id=RID)
    s = rollout.build_report(records, RID, summary_extra={"failure_budget": "2", "stop_file": "/x", "stop_file_present": "False"})["summary"]
    assert (s["failure_budget"], s["stop_file_present"]) == (2, False)
