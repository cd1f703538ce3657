"""fleet_report: the files it writes, check mode, idempotence, unreachable nodes."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.modules import fleet_report

BOM = {"driver": {"version": "550.90.07"}, "gpu": {"count": 8}}


def record(name, driver="550.90.07", gpus=8, sku="hgx-h100"):
    return {
        "name": name,
        "sku": sku,
        "bom": BOM,
        "facts": {
            "driver": {"version": driver, "installed": True, "loaded": True},
            "gpu_count": gpus,
            "gpus": [],
            "xid": {"critical": [79] if gpus < 8 else []},
        },
    }


def args(tmp_path, **extra):
    base = {
        "nodes": [record("gpu-002", driver="535.161.08"), record("gpu-001"), record("gpu-003", gpus=7)],
        "expected_hosts": ["gpu-001", "gpu-002", "gpu-003", "gpu-004"],
        "dest": str(tmp_path / "reports"),
    }
    base.update(extra)
    return base


def test_writes_three_formats_with_drift_and_unreachable(tmp_path, run_module):
    result = run_module(fleet_report.main, args(tmp_path))
    assert result["changed"] is True
    assert result["report"]["totals"] == {"nodes": 4, "ok": 1, "drift": 2, "unknown": 0, "error": 0, "unreachable": 1}
    data = json.loads((tmp_path / "reports/fleet-report.json").read_text())
    assert [n["name"] for n in data["nodes"]] == ["gpu-001", "gpu-002", "gpu-003"]
    assert data["unreachable"] == ["gpu-004"]
    driver_item = next(i for i in data["nodes"][1]["items"] if i["component"] == "driver")
    assert driver_item == {"component": "driver", "installed": "535.161.08", "wanted": "550.90.07", "status": "drift"}
    markdown = (tmp_path / "reports/fleet-report.md").read_text()
    assert "| gpu-002 | driver | 535.161.08 | 550.90.07 | drift |" in markdown
    assert "| gpu-004 | — | unreachable |" in markdown
    assert "| gpu-003 | hgx-h100 | drift | 550.90.07 | 7 | 79 | gpu_count |" in markdown
    html = (tmp_path / "reports/fleet-report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and '<tr class="drift"><td>gpu-002</td>' in html


def test_second_run_changes_nothing(tmp_path, run_module):
    run_module(fleet_report.main, args(tmp_path))
    again = run_module(fleet_report.main, args(tmp_path))
    assert again["changed"] is False


def test_check_mode_writes_nothing(tmp_path, run_module):
    result = run_module(fleet_report.main, args(tmp_path), check_mode=True)
    assert result["changed"] is True
    assert result["report"]["totals"]["drift"] == 2
    assert not (tmp_path / "reports").exists()


def test_bad_bom_fails_and_writes_nothing(tmp_path, run_module):
    bad = record("gpu-001")
    bad["bom"] = {"driver": ["550.90.07"]}
    result = run_module(fleet_report.main, args(tmp_path, nodes=[bad]))
    assert result["failed"] is True
    assert "gpufleet_bom" in result["msg"] and "section 'driver' must be a mapping" in result["msg"]
    assert not (tmp_path / "reports").exists()


def test_html_escapes_node_names(tmp_path, run_module):
    run_module(fleet_report.main, args(tmp_path, nodes=[record("<script>")], expected_hosts=[]))
    html = (tmp_path / "reports/fleet-report.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_node_whose_facts_failed_is_reported_with_the_error(tmp_path, run_module):
    failed = {"name": "gpu-004", "sku": "hgx-h100", "error": "nvidia-smi -q -x failed with exit status 255: Unknown Error"}
    result = run_module(fleet_report.main, args(tmp_path, nodes=[record("gpu-001"), failed], expected_hosts=["gpu-001", "gpu-004"]))
    assert result["report"]["totals"] == {"nodes": 2, "ok": 1, "drift": 0, "unknown": 0, "error": 1, "unreachable": 0}
    node = result["report"]["nodes"][1]
    assert node["status"] == "error" and node["error"].startswith("nvidia-smi -q -x failed")
    markdown = (tmp_path / "reports/fleet-report.md").read_text()
    assert "| gpu-004 | hgx-h100 | error | — | — | — | nvidia-smi -q -x failed with exit status 255: Unknown Error |" in markdown


def test_dest_that_is_a_file_fails_cleanly_and_keeps_the_file(tmp_path, run_module):
    dest = tmp_path / "reports"
    dest.write_text("not a folder\n")
    result = run_module(fleet_report.main, args(tmp_path))
    assert result["failed"] is True
    assert result["msg"] == f"dest {dest} is not a folder: remove it or choose another dest"
    assert result["path"] == str(dest)
    assert dest.read_text() == "not a folder\n"


def test_basename_that_is_a_path_is_refused_and_nothing_is_written(tmp_path, run_module):
    for basename in ("../escape", "sub/report", ".hidden", "report\n", ""):
        result = run_module(fleet_report.main, args(tmp_path, basename=basename))
        assert result["failed"] is True, basename
        assert result["msg"].startswith(f"basename {basename!r} is not a plain file name"), result["msg"]
    assert not (tmp_path / "reports").exists()
    assert not (tmp_path / "escape.json").exists()


def test_bmc_inventory_reaches_the_report_and_the_password_never_does(tmp_path, run_module):
    """Issue 9: the HGX bundle read from the BMC is compared with the BOM; BMC passwords given as secrets are redacted (invariant 7)."""
    password = "hunter2-BMC-pw"  # noqa: S105 - a test value, that the report must not show
    node = record("b200-03")
    node["bom"] = dict(BOM, gpu_firmware={"version": "HGX-B200-24.12-1"})
    node["bmc"] = {"entries": [{"Id": "HGX_FW_BMC_0", "Version": "HGX-B200-24.08-2"}]}
    unread = record("b200-05")
    unread["bom"] = node["bom"]
    unread["bmc"] = {"error": f"HTTP Error 401 (user admin, password {password})"}
    result = run_module(fleet_report.main, args(tmp_path, nodes=[node, unread], expected_hosts=[], secrets=[password]))
    assert result["report"]["totals"]["drift"] == 1 and result["report"]["totals"]["unknown"] == 1
    markdown = (tmp_path / "reports/fleet-report.md").read_text()
    assert "| b200-03 | gpu_firmware | HGX-B200-24.08-2 | HGX-B200-24.12-1 | drift |" in markdown
    for name in ("fleet-report.json", "fleet-report.md", "fleet-report.html"):
        assert password not in (tmp_path / "reports" / name).read_text(), name
    assert password not in json.dumps(result)


def test_bmc_inventories_of_one_call_fill_the_nodes_without_their_own(tmp_path, run_module):
    """bmc_inventory's inventories (one call for the fleet) reach each node; a node's own bmc record wins."""
    bom = dict(BOM, gpu_firmware={"version": "HGX-B200-24.12-1"})
    nodes = [dict(record(name), bom=bom) for name in ("b200-01", "b200-02", "b200-03")]
    nodes[2]["bmc"] = {"entries": [{"Id": "HGX_FW_BMC_0", "Version": "HGX-B200-24.12-1"}]}
    inventories = {
        "b200-01": {"entries": [{"Id": "HGX_FW_BMC_0", "Version": "HGX-B200-24.08-2"}], "requests": 4, "connections": 1, "seconds": 0.1},
        "b200-02": {"error": "10.0.0.2:443: no answer to GET /redfish/v1/ within 30 s", "requests": 0, "connections": 1, "seconds": 30.0},
        "b200-03": {"entries": [{"Id": "HGX_FW_BMC_0", "Version": "HGX-B200-20.01-1"}]},
    }
    result = run_module(fleet_report.main, args(tmp_path, nodes=nodes, expected_hosts=[], bmc_inventories=inventories))
    by_name = {n["name"]: n for n in result["report"]["nodes"]}
    assert by_name["b200-01"]["gpu_firmware"] == "HGX-B200-24.08-2" and by_name["b200-01"]["status"] == "drift"
    assert by_name["b200-02"]["bmc_inventory"] == "error: 10.0.0.2:443: no answer to GET /redfish/v1/ within 30 s"
    assert by_name["b200-02"]["status"] == "unknown"
    assert by_name["b200-03"]["gpu_firmware"] == "HGX-B200-24.12-1" and by_name["b200-03"]["status"] == "ok"


def test_a_bmc_inventory_that_is_not_a_dict_is_refused(tmp_path, run_module):
    result = run_module(fleet_report.main, args(tmp_path, bmc_inventories={"gpu-001": ["not", "a", "dict"]}))
    assert result["failed"] is True
    assert result["msg"].startswith("bmc_inventories['gpu-001'] is a list")
    assert not (tmp_path / "reports").exists()


def with_facts(**facts):
    node = record("gpu-004")
    node["facts"] = dict(node["facts"], **facts)
    return node


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (with_facts(driver="550.90.07"), "nodes[3] (node gpu-004): facts.driver must be a mapping, not str"),
        (with_facts(gpus="8"), "nodes[3] (node gpu-004): facts.gpus must be a list, not str"),
        (with_facts(gpus=[{"vbios_version": 960074}, {"vbios_version": "96.00.74.00.0D"}]),
         "nodes[3] (node gpu-004): facts.gpus[0].vbios_version must be a string or null, not int"),
        (with_facts(gpus=["GPU 0"]), "nodes[3] (node gpu-004): facts.gpus[0] must be a mapping, not str"),
        (with_facts(driver={"version": ["550.90.07"], "installed": True}), "nodes[3] (node gpu-004): facts.driver.version must be a string or null, not list"),
        (with_facts(driver={"version": "550.90.07", "loaded": "no"}), "nodes[3] (node gpu-004): facts.driver.loaded must be true or false or null, not str"),
        (with_facts(gpu_count="8"), "nodes[3] (node gpu-004): facts.gpu_count must be a whole number or null, not str"),
        (with_facts(nics={"psid": "MT_0000000838"}), "nodes[3] (node gpu-004): facts.nics must be a list, not dict"),
        (with_facts(nics=[{"psid": ["MT_0000000838"], "fw_current": "28.43.1014"}]), "nodes[3] (node gpu-004): facts.nics[0].psid must be a string or null"),
        (with_facts(fabricmanager="550.90.07"), "nodes[3] (node gpu-004): facts.fabricmanager must be a mapping, not str"),
        (with_facts(xid={"critical": "79"}), "nodes[3] (node gpu-004): facts.xid.critical must be a list of Xid codes (whole numbers)"),
        (dict(record("gpu-004"), bmc={"entries": "HGX_FW_BMC_0"}),
         "nodes[3] (node gpu-004): bmc.entries must be a list of firmware inventory members, not str"),
    ],
    ids=["driver-str", "gpus-str", "vbios-int-and-str", "gpu-str", "driver-version-list", "loaded-str", "gpu-count-str", "nics-dict",
         "psid-list", "fabricmanager-str", "xid-critical-str", "bmc-entries-str"],
)
def test_a_fact_of_the_wrong_type_is_refused_naming_the_field_and_nothing_is_written(tmp_path, run_module, node, message):
    """Each crashed with a traceback (AttributeError, TypeError: '<' between str and int, unhashable list...)."""
    nodes = [record("gpu-001"), record("gpu-002"), record("gpu-003"), node]
    result = run_module(fleet_report.main, args(tmp_path, nodes=nodes))
    assert result.get("failed") is True, result
    assert result["msg"].startswith(message), result["msg"]
    assert result["msg"].endswith("docs/audit.md)")  # and what to pass instead
    assert not (tmp_path / "reports").exists()


def test_the_facts_of_a_node_whose_gather_failed_are_not_read(tmp_path, run_module):
    failed = {"name": "gpu-004", "sku": "hgx-h100", "error": "nvidia-smi failed", "facts": {"driver": "not read"}}
    result = run_module(fleet_report.main, args(tmp_path, nodes=[record("gpu-001"), failed]))
    assert not result.get("failed") and result["report"]["totals"]["error"] == 1


def test_a_node_given_twice_is_refused_naming_it_and_both_entries(tmp_path, run_module):
    """It was counted twice: 4 nodes, 2 drift, for three nodes."""
    nodes = [record("gpu-001"), record("gpu-003", gpus=7), record("gpu-002"), record("gpu-003", gpus=8)]
    result = run_module(fleet_report.main, args(tmp_path, nodes=nodes))
    assert result.get("failed") is True, result
    assert result["msg"] == "nodes[3] (node gpu-003): name 'gpu-003' is given twice (also nodes[1]): give each node once"
    assert not (tmp_path / "reports").exists()


def test_a_bmc_inventory_with_entries_of_the_wrong_type_is_refused(tmp_path, run_module):
    result = run_module(fleet_report.main, args(tmp_path, bmc_inventories={"gpu-001": {"entries": "HGX_FW_BMC_0"}}))
    assert result.get("failed") is True, result
    assert result["msg"].startswith("bmc_inventories['gpu-001'].entries is a str, not a list")
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize("blocked", ["md", "html"])
def test_a_directory_where_a_report_goes_writes_no_file(tmp_path, run_module, blocked):
    """fleet-report.json was written before the Markdown failed."""
    (tmp_path / "reports" / f"fleet-report.{blocked}").mkdir(parents=True)
    result = run_module(fleet_report.main, args(tmp_path))
    assert result.get("failed") is True
    assert f"fleet-report.{blocked} is a directory" in result["msg"]
    assert os.listdir(tmp_path / "reports") == [f"fleet-report.{blocked}"]


def test_the_json_report_is_written_last(tmp_path, run_module, replaced):
    run_module(fleet_report.main, args(tmp_path))
    assert replaced == ["fleet-report.md", "fleet-report.html", "fleet-report.json"]


def test_a_secret_in_the_title_or_a_host_name_is_masked_in_every_file(tmp_path, run_module):
    """The result masked it (no_log) while the three files showed it."""
    password = "hunter2-BMC-pw"  # noqa: S105 - a test value, that the report must not show
    arguments = args(tmp_path, nodes=[record("gpu-001")], title=f"audit {password}", generated_at=f"now {password}",
                     expected_hosts=["gpu-001", f"gpu-{password}"], secrets=[password])
    result = run_module(fleet_report.main, arguments)
    assert result["report"]["title"] == "audit ********" and result["report"]["unreachable"] == ["gpu-********"]
    for name in ("fleet-report.json", "fleet-report.md", "fleet-report.html"):
        text = (tmp_path / "reports" / name).read_text()
        assert password not in text and "audit ********" in text, name


def test_every_record_audit_records_writes_is_accepted_by_the_module(tmp_path):
    """The contract between playbooks/audit.yml's two halves: what the audit_records filter builds (a tray with the
    inventory's nvlink_domain, a node whose facts failed) passes fleet_report's argument spec. The nvlink_domain key was
    once missing there, so the audit of any inventory that names NVLink domains failed at its report."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    from ansible_collections.gpufleet.lifecycle.plugins.filter.audit import audit_records
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.fleet_task import ARGUMENT_SPEC

    facts = {"ansible_facts": {"gpufleet": {"driver": {"version": "580.95.05"}, "gpus": []}}}
    hosts = [
        {"inventory_hostname": "nvl-a01", "gpufleet_sku": "gb200_nvl72", "nvlink_domain": "rack-a", "gpufleet_audit_gathered": facts},
        {"inventory_hostname": "hgx-01", "gpufleet_sku": "hgx", "gpufleet_audit_gathered": facts},
        {"inventory_hostname": "bad-01", "gpufleet_audit_gathered": {"failed": True, "msg": "nvidia-smi: garbled XML"}},
    ]
    records = audit_records(hosts)
    assert [r["name"] for r in records] == ["nvl-a01", "hgx-01", "bad-01"] and records[0]["nvlink_domain"] == "rack-a"
    checked = ArgumentSpecValidator(ARGUMENT_SPEC).validate({"nodes": records, "dest": str(tmp_path)})
    assert checked.error_messages == []
    assert checked.validated_parameters["nodes"][0]["nvlink_domain"] == "rack-a"
