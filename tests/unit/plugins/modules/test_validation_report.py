"""validation_report: the fleet report in JSON, Markdown, HTML and JUnit XML."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.modules import validation_report


def check(name, status, observed=None, expected=None, message=""):
    return {"name": name, "status": status, "observed": observed, "expected": expected, "message": message}


def result(status, checks, busbw=None, gflops=None):
    return {
        "status": status,
        "level": "full",
        "summary": {},
        "checks": checks,
        "measurements": {"busbw_gbps": busbw, "gflops_min": gflops},
    }


NODES = [
    {"name": "gpu-02", "result": result("fail", [
        check("gpu_count", "pass", {"gpu_count": 8}, 8, "8 GPUs, as expected"),
        check("xid", "fail", {"critical": {"79": 1}}, {"critical": {}}, "critical Xid since boot: Xid 79 <GPU has fallen off the bus> x1"),
        check("cuda_smoke", "skip", None, None, "no CUDA smoke test"),
    ], 350.0, 41000.0)},
    {"name": "gpu-01", "result": result("pass", [check("gpu_count", "pass", {"gpu_count": 8}, 8, "8 GPUs")], 351.0, 41100.0)},
    {"name": "gpu-03", "result": result("warn", [check("nccl_busbw", "warn", {"busbw_gbps": 352.0}, {"min_busbw_gbps": None}, "not judged")], 352.0, 22000.0)},
    {"name": "gpu-05", "result": {"failed": True, "msg": "Failed to connect to the host via ssh"}},
]
STRAGGLERS = [{"name": "gpu-03", "metric": "gflops_min", "value": 22000.0, "median": 41000.0, "deficit_pct": 46.3, "tolerance_pct": 10.0}]


def run(run_module, tmp_path, **extra):
    args = {"nodes": NODES, "stragglers": STRAGGLERS, "expected_hosts": ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-05"], "dest": str(tmp_path / "out")}
    args.update(extra)
    return run_module(validation_report.main, args)


def test_totals_files_and_second_run_unchanged(run_module, tmp_path):
    first = run(run_module, tmp_path)
    assert first["changed"] is True
    report = first["report"]
    assert report["totals"] == {"nodes": 5, "pass": 1, "warn": 1, "fail": 2, "unreachable": 1, "stragglers": 1}
    assert [n["name"] for n in report["nodes"]] == ["gpu-01", "gpu-02", "gpu-03", "gpu-05"]
    assert report["unreachable"] == ["gpu-04"]
    gpu05 = report["nodes"][3]
    assert gpu05["status"] == "fail" and gpu05["error"] == "Failed to connect to the host via ssh"
    assert first["files"]["junit"].endswith("validation-report.junit.xml")
    on_disk = json.loads((tmp_path / "out" / "validation-report.json").read_text())
    assert on_disk["nodes"][1]["failed_checks"] == ["xid"]
    second = run(run_module, tmp_path)
    assert second["changed"] is False


def test_check_mode_writes_nothing(run_module, tmp_path):
    result_ = run_module(validation_report.main, {"nodes": NODES, "dest": str(tmp_path / "out"), "_ansible_check_mode": True})
    assert result_["changed"] is True
    assert not (tmp_path / "out").exists()


def test_markdown_lists_failures_with_observed_and_expected_and_stragglers(run_module, tmp_path):
    run(run_module, tmp_path)
    md = (tmp_path / "out" / "validation-report.md").read_text()
    assert "**5 nodes: 1 pass, 1 warn, 2 fail, 1 unreachable; 1 stragglers.**" in md
    assert '| gpu-02 | xid | fail | {"critical": {"79": 1}} | {"critical": {}} | critical Xid since boot' in md
    assert "| gpu-03 | gflops_min | 22000 | 41000 | 46.3% |" in md
    assert "| gpu-04 | unreachable |" in md
    assert "cuda_smoke" not in md.split("## Failed and warning checks")[1]


def test_html_escapes_messages(run_module, tmp_path):
    run(run_module, tmp_path)
    page = (tmp_path / "out" / "validation-report.html").read_text()
    assert "Xid 79 &lt;GPU has fallen off the bus&gt;" in page
    assert "<GPU has fallen" not in page
    assert '<tr class="fail"><td>gpu-03</td><td>gflops_min</td>' in page


def test_junit_suites_cases_failures_and_skips(run_module, tmp_path):
    run(run_module, tmp_path)
    root = ET.parse(tmp_path / "out" / "validation-report.junit.xml").getroot()  # noqa: S314 - the file this test just wrote
    assert root.tag == "testsuites"
    assert {key: root.get(key) for key in ("tests", "failures", "errors", "skipped")} == {"tests": "8", "failures": "2", "errors": "2", "skipped": "1"}
    suites = {suite.get("name"): suite for suite in root}
    assert set(suites) == {"gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-05"}
    xid = suites["gpu-02"].find("testcase[@name='xid']/failure")
    assert xid.get("message").startswith("critical Xid since boot")
    assert 'observed: {"critical": {"79": 1}}' in xid.text
    assert suites["gpu-02"].find("testcase[@name='cuda_smoke']/skipped") is not None
    straggler = suites["gpu-03"].find("testcase[@name='straggler_gflops_min']/failure")
    assert straggler.get("message") == "gflops_min 22000 is 46.3% below the fleet median 41000 (tolerance 10%)"
    assert suites["gpu-04"].find("testcase/error").get("type") == "unreachable"


def test_straggler_entries_must_come_from_the_filter(run_module, tmp_path):
    failed = run(run_module, tmp_path, stragglers=[{"name": "gpu-03"}])
    assert failed["failed"] and "lacks metric, value" in failed["msg"]


def test_report_write_failure_is_a_clean_failure(tmp_path, run_module):
    from ansible_collections.gpufleet.lifecycle.plugins.modules import validation_report

    dest = tmp_path / "out"
    dest.write_text("a file\n")
    result = run_module(validation_report.main, {"nodes": [], "dest": str(dest)})
    assert result["failed"] is True
    assert result["msg"] == f"dest {dest} is not a folder: remove it or choose another dest"
    assert dest.read_text() == "a file\n"


def one_node(**result_fields):
    """A node whose gpu_validate result is NODES' gpu-01 with ``result_fields`` put in."""
    good = result("pass", [check("gpu_count", "pass", {"gpu_count": 8}, 8, "8 GPUs")], 351.0, 41100.0)
    return [{"name": "gpu-01", "result": dict(good, **result_fields)}]


@pytest.mark.parametrize(
    ("nodes", "stragglers", "message"),
    [
        (one_node(checks="gpu_count"), [], "nodes[0] (node gpu-01): result.checks must be a list of check results, not str"),
        (one_node(status=5), [], "nodes[0] (node gpu-01): result.status is 'int': one of pass, warn, fail expected"),
        (one_node(checks=[check("xid", "broken")]), [], "nodes[0] (node gpu-01): result.checks[0].status is 'broken': one of pass, fail, warn, skip"),
        (one_node(checks=["gpu_count"]), [], "nodes[0] (node gpu-01): result.checks[0] must be a mapping (a check result), not str"),
        (one_node(checks=[check("xid", "fail", message=["Xid 79"])]), [], "nodes[0] (node gpu-01): result.checks[0].message must be a string"),
        (one_node(checks=[{"status": "pass"}]), [], "nodes[0] (node gpu-01): result.checks[0].name is missing"),
        (one_node(measurements=[350.0]), [], "nodes[0] (node gpu-01): result.measurements must be a mapping, not list"),
        (one_node(level=3), [], "nodes[0] (node gpu-01): result.level must be a string, not int"),
        (one_node(checks=[], msg={"rc": 1}), [], "nodes[0] (node gpu-01): result.msg must be a string, not dict"),
        (one_node(), [dict(STRAGGLERS[0], name="gpu-01", value="slow")], "stragglers[0] (node gpu-01): value must be a number, not str"),
        (one_node(), [dict(STRAGGLERS[0], median=True)], "stragglers[0] (node gpu-03): median must be a number, not bool"),
        (one_node(), [dict(STRAGGLERS[0], metric=None)], "stragglers[0] (node gpu-03): metric must be a string, not NoneType"),
    ],
    ids=["checks-str", "status-int", "check-status", "check-str", "message-list", "check-unnamed", "measurements-list", "level-int",
         "msg-dict", "straggler-value-str", "straggler-median-bool", "straggler-metric-null"],
)
def test_a_result_of_the_wrong_type_is_refused_naming_the_field_and_nothing_is_written(run_module, tmp_path, nodes, stragglers, message):
    """Each crashed with a traceback (TypeError, AttributeError, KeyError, ValueError) in the renderers."""
    failed = run(run_module, tmp_path, nodes=nodes, stragglers=stragglers, expected_hosts=[])
    assert failed.get("failed") is True, failed
    assert failed["msg"].startswith(message), failed["msg"]
    assert not (tmp_path / "out").exists()


def test_a_node_given_twice_is_refused_naming_it_and_both_entries(run_module, tmp_path):
    """It was counted twice: 5 nodes, 2 pass, for a fleet of 4."""
    failed = run(run_module, tmp_path, nodes=[*NODES, NODES[1]])
    assert failed.get("failed") is True, failed
    assert failed["msg"] == "nodes[4] (node gpu-01): name 'gpu-01' is given twice (also nodes[1]): give each node once"
    assert not (tmp_path / "out").exists()


def test_a_directory_where_the_junit_file_goes_writes_no_file(run_module, tmp_path):
    """The three other files were written before the JUnit file failed."""
    (tmp_path / "out" / "validation-report.junit.xml").mkdir(parents=True)
    failed = run(run_module, tmp_path)
    assert failed.get("failed") is True
    assert "validation-report.junit.xml is a directory" in failed["msg"]
    assert sorted(os.listdir(tmp_path / "out")) == ["validation-report.junit.xml"]


def test_the_json_report_is_written_last(run_module, tmp_path, replaced):
    """A new JSON report (what tools read) means the Markdown, HTML and JUnit files beside it are new too."""
    run(run_module, tmp_path)
    assert replaced == ["validation-report.md", "validation-report.html", "validation-report.junit.xml", "validation-report.json"]


def test_junit_with_control_characters_in_messages_is_well_formed(run_module, tmp_path):
    """dcgmi's colours (ESC), a NUL and a bell were written as they were: no XML parser read the file."""
    nodes = [
        {"name": "gpu-01", "result": result("fail", [
            check("dcgm_diag", "fail", {"result": "fail\x00"}, {"result": "pass"}, "dcgmi: \x1b[31mFAIL\x1b[0m"),
            check("nccl_busbw", "warn", "350\x0b", None, "low\x07 busbw\tat\r\n8 GPUs"),
        ])},
        {"name": "gpu-02", "result": {"failed": True, "msg": "ssh: \x1b[1mConnection refused\x1b[0m"}},
    ]
    run(run_module, tmp_path, nodes=nodes, stragglers=[], expected_hosts=[], title="fleet \x0c validation")
    root = ET.parse(tmp_path / "out" / "validation-report.junit.xml").getroot()  # noqa: S314 - the file this test just wrote
    assert root.get("name") == "fleet \\x0c validation"
    suites = {suite.get("name"): suite for suite in root}
    failure = suites["gpu-01"].find("testcase[@name='dcgm_diag']/failure")
    assert failure.get("message") == "dcgmi: \\x1b[31mFAIL\\x1b[0m"
    assert 'observed: {"result": "fail\\u0000"}' in failure.text  # JSON's own escape: never a NUL
    warned = suites["gpu-01"].find("testcase[@name='nccl_busbw']/system-out").text
    assert warned.startswith("warn: low\\x07 busbw\tat\n8 GPUs") and "observed: 350\\x0b" in warned  # tab and newline kept
    assert suites["gpu-02"].find("testcase/error").get("message") == "ssh: \\x1b[1mConnection refused\\x1b[0m"
