"""The fleet report: firmware read out of band from the BMC, unknown never shown as ok, the JSON shape kept."""

from __future__ import annotations

import json

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.fleet import build_report, render_html, render_json, render_markdown

BOM = {
    "driver": {"version": "570.133.20"},
    "gpu": {"model": "NVIDIA B200", "count": 8},
    "gpu_firmware": {"version": "HGX-B200-24.12-1"},
}


def b200(name, bundle="HGX-B200-24.12-1", bmc=True, error=None):
    record = {
        "name": name,
        "sku": "hgx_b200",
        "bom": BOM,
        "facts": {
            "driver": {"installed": True, "loaded": True, "version": "570.133.20"},
            "nvidia_smi": "ok",
            "gpu_count": 8,
            "gpus": [{"name": "NVIDIA B200", "vbios_version": "97.00.7D.00.0B"}] * 8,
        },
    }
    if error:
        record["bmc"] = {"error": error}
    elif bmc:
        record["bmc"] = {"entries": [{"Id": "HGX_FW_BMC_0", "Version": bundle}, {"Id": "HGX_FW_GPU_SXM_1", "Version": "97.00.7D.00.0B"}]}
    return record


def test_old_gpu_firmware_bundle_is_a_drift_line_with_the_component_and_versions():
    report = build_report([b200("b200-01"), b200("b200-03", bundle="HGX-B200-24.08-2")])
    assert report["totals"]["ok"] == 1 and report["totals"]["drift"] == 1
    node = next(n for n in report["nodes"] if n["name"] == "b200-03")
    assert node["gpu_firmware"] == "HGX-B200-24.08-2" and node["bmc_inventory"] == "read"
    markdown = render_markdown(report)
    assert "| b200-03 | gpu_firmware | HGX-B200-24.08-2 | HGX-B200-24.12-1 | drift |" in markdown
    assert "| b200-03 | hgx_b200 | drift | 570.133.20 | 8 | — | gpu_firmware |" in markdown
    assert "b200-01 | gpu_firmware" not in markdown
    assert '<tr class="drift"><td>b200-03</td><td>gpu_firmware</td><td>HGX-B200-24.08-2</td><td>HGX-B200-24.12-1</td>' in render_html(report)


def test_firmware_nothing_could_read_is_unknown_with_the_reason_in_every_format():
    report = build_report([b200("b200-05", bmc=False), b200("b200-06", error="HTTP Error 503 on GET request to 'https://127.0.0.1/redfish/v1/'")])
    assert report["totals"] == {"nodes": 2, "ok": 0, "drift": 0, "unknown": 2, "error": 0, "unreachable": 0}
    by_name = {n["name"]: n for n in report["nodes"]}
    assert by_name["b200-05"]["status"] == "unknown" and by_name["b200-05"]["gpu_firmware"] is None
    assert by_name["b200-05"]["bmc_inventory"] == "no BMC credentials"
    assert by_name["b200-06"]["bmc_inventory"].startswith("error: HTTP Error 503")
    markdown = render_markdown(report)
    assert "| b200-05 | gpu_firmware | — | HGX-B200-24.12-1 | no BMC credentials for this host" in markdown
    assert "| b200-06 | gpu_firmware | — | HGX-B200-24.12-1 | the BMC's firmware inventory could not be read: HTTP Error 503" in markdown
    assert "| b200-05 | hgx_b200 | ok |" not in markdown
    assert '<tr class="unknown"><td>b200-05</td><td>gpu_firmware</td>' in render_html(report)


def test_json_shape_keeps_every_key_of_report_version_1():
    report = json.loads(render_json(build_report([b200("b200-01")], expected_hosts=["b200-01", "b200-02"])))
    assert {"report_version", "title", "generated_at", "totals", "nodes", "unreachable", "mixed_within_sku"} <= set(report)
    assert report["report_version"] == 1
    node = report["nodes"][0]
    assert {"name", "sku", "status", "counts", "driver", "driver_flavor", "gpu_count", "critical_xids", "items"} <= set(node)
    assert {"component", "installed", "wanted", "status"} <= set(node["items"][0])
    assert report["unreachable"] == ["b200-02"]


def test_node_without_a_driver_is_reported_as_such():
    record = b200("b200-07")
    record["facts"].update(driver={"installed": False, "loaded": False, "version": None}, nvidia_smi="no_driver", gpus=[], gpu_count=0)
    markdown = render_markdown(build_report([record]))
    assert "| b200-07 | driver | — | 570.133.20 | no NVIDIA driver is installed |" in markdown
    assert "installed but not loaded" not in markdown


def test_secrets_given_are_redacted_from_every_string_of_the_records():
    record = b200("b200-08", error="401 for admin:S3cr3t-pw@127.0.0.1")
    report = build_report([record], secrets=["S3cr3t-pw"])
    for text in (render_json(report), render_markdown(report), render_html(report)):
        assert "S3cr3t-pw" not in text and "********" in text


def test_json_keeps_what_the_audit_read_of_each_node_and_each_skus_bom():
    record = b200("b200-01")
    record["facts"].update(kernel="6.1.0-18-amd64", nvswitch={"present": True, "count": 4, "devices": ["0000:05:00.0"]},
                           nics=[{"pci": "0000:1a:00.0", "type": "ConnectX7", "psid": "MT_0000000834", "part_number": "MCX755106AS-HEA_Ax",
                                  "fw_current": "28.43.1014", "fw_available": None, "status": None, "query_failed": False}])
    other = b200("b200-02")
    other["bom"] = dict(BOM, driver={"version": "580.95.05"})
    report = json.loads(render_json(build_report([record, other, {"name": "b200-09", "sku": "hgx_b200", "error": "boom"}])))
    assert report["boms"] == {"hgx_b200": BOM}
    by_name = {n["name"]: n for n in report["nodes"]}
    hardware = by_name["b200-01"]["hardware"]
    assert hardware["kernel"] == "6.1.0-18-amd64" and hardware["nvswitch"] == {"present": True, "count": 4}
    assert hardware["nics"] == [{"pci": "0000:1a:00.0", "type": "ConnectX7", "psid": "MT_0000000834", "part_number": "MCX755106AS-HEA_Ax",
                                 "fw_current": "28.43.1014", "query_failed": False}]
    assert hardware["gpus"][0] == {"index": None, "name": "NVIDIA B200", "vbios_version": "97.00.7D.00.0B"}
    assert hardware["firmware_inventory"] == {"HGX_FW_BMC_0": "HGX-B200-24.12-1", "HGX_FW_GPU_SXM_1": "97.00.7D.00.0B"}
    assert "bom" not in by_name["b200-01"] and by_name["b200-02"]["bom"]["driver"] == {"version": "580.95.05"}
    assert by_name["b200-09"]["hardware"] is None
