"""validation_report: the fleet report in JSON, Markdown, HTML and JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

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
    root = ET.fromstring((tmp_path / "out" / "validation-report.junit.xml").read_text())  # noqa: S314 - the file this test just wrote
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
