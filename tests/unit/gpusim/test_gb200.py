"""The GB200 NVL72 SKU (issue 23): trays print the real captures' Fabric block, IMEX and CDMM formats, read back
by the project's own parsers; the IMEX domain state follows the trays' driver / IMEX versions."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from gpusim import catalog, node, spec
from gpusim import state as st
from test_tools_support import REAL, TESTS

needs_real = pytest.mark.skipif(not REAL.is_dir(), reason="../shared/fixtures/real is absent")
DRIVER = "580.95.05"
SPEC = {
    "fleet": {"name": "nvl"},
    "skus": {"gb200": {"gpu_model": "NVIDIA GB200", "gpu_count": 4},
             "hgx": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "nvswitch": True}},
    "nodes": [
        {"prefix": "nvla", "width": 1, "count": 4, "sku": "gb200", "driver": DRIVER, "nvlink_domain": "rack-a", "clique_id": 2},
        {"prefix": "nvlb", "width": 1, "count": 4, "sku": "gb200", "driver": DRIVER, "nvlink_domain": "rack-b", "cdmm": "driver"},
        {"prefix": "hgx", "width": 1, "count": 1, "sku": "hgx", "driver": "550.90.07"},
    ],
}


def _parsers(name):
    return pytest.importorskip(f"ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.{name}")


class Tray:
    def __init__(self, root, plan):
        self.dir = root / plan.name
        self.dir.mkdir(parents=True)
        (self.dir / "proc_driver").mkdir()
        st.save(self.dir, st.new_node_state(plan.spec, nodes_root=root))
        node.write_nvlink_files(self.dir, plan.spec)
        self.plan = plan

    def run(self, tool, *args):
        env = dict(os.environ, GPUSIM_NODE_DIR=str(self.dir), PYTHONPATH=str(TESTS), GPUSIM_NO_SLEEP="1", LC_ALL="C")
        return subprocess.run([sys.executable, "-m", "gpusim.tools", tool, *args], env=env, capture_output=True, text=True,
                              timeout=60, check=False)

    def update(self, fn):
        return st.update(self.dir, fn)


@pytest.fixture
def fleet(tmp_path):
    plans = spec.parse(SPEC).nodes
    root = tmp_path / "nodes"
    return {plan.name: Tray(root, plan) for plan in plans}


def test_spec_gives_each_tray_its_domain_members_and_imex(fleet):
    a1 = fleet["nvla1"].plan.spec
    assert a1["nvlink"]["domain"] == "rack-a" and a1["nvlink"]["clique_id"] == 2
    assert [m["name"] for m in a1["nvlink"]["members"]] == ["nvla1", "nvla2", "nvla3", "nvla4"]
    assert a1["imex"] == DRIVER and "nvlink" not in fleet["hgx1"].plan.spec


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ({"nvlink_domain": "Rack A"}, "nvlink_domain"),
        ({"clique_id": 0}, "clique_id"),
        ({"cdmm": "on"}, "cdmm"),
    ],
)
def test_spec_refuses_bad_nvlink_fields(group, message):
    data = {"fleet": {"name": "x"}, "skus": SPEC["skus"], "nodes": [{"prefix": "t", "count": 1, "sku": "gb200", "driver": DRIVER, **group}]}
    with pytest.raises(spec.SpecError, match=message):
        spec.parse(data)


def test_spec_refuses_nvlink_fields_on_hgx():
    data = {"fleet": {"name": "x"}, "skus": SPEC["skus"], "nodes": [{"prefix": "h", "count": 1, "sku": "hgx", "nvlink_domain": "r"}]}
    with pytest.raises(spec.SpecError, match="multi-node NVLink trays"):
        spec.parse(data)


def test_tray_fabric_read_by_the_parsers(fleet):
    nvsmi = _parsers("nvsmi")
    for fmt in (("-q", "-x"), ("-q",)):
        text = fleet["nvla2"].run("nvidia-smi", *fmt).stdout
        doc = nvsmi.parse_xml(text) if "-x" in fmt else nvsmi.parse_query_text(text)
        assert [g["pci_bus_id"] for g in doc["gpus"]] == list(catalog.GB200_BUS_IDS)
        assert {g["name"] for g in doc["gpus"]} == {"NVIDIA GB200"} and {g["addressing_mode"] for g in doc["gpus"]} == {"ATS"}
        fabrics = [g["fabric"] for g in doc["gpus"]]
        assert fabrics == [{"state": "Completed", "status": "Success", "clique_id": 2, "cluster_uuid": catalog.cluster_uuid("rack-a"),
                            "health": "Healthy", "multi_node": True}] * 4
    other = nvsmi.parse_xml(fleet["nvlb1"].run("nvidia-smi", "-q", "-x").stdout)["gpus"][0]["fabric"]
    assert other["cluster_uuid"] == catalog.cluster_uuid("rack-b") != catalog.cluster_uuid("rack-a")
    assert fleet["nvla1"].run("nv-fabricmanager", "--version").returncode != 0 or not fleet["nvla1"].plan.spec["fabricmanager"]


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("fabric_insufficient_resources", ("Completed", "Insufficient Resources", 0, catalog.ZERO_CLUSTER_UUID, "Healthy")),
        ("fabric_unhealthy", ("Completed", "Success", 2, None, "Unhealthy")),
        ("fabric_in_progress", ("In Progress", None, 0, catalog.ZERO_CLUSTER_UUID, None)),
    ],
)
def test_fabric_faults_show_the_real_failure_shapes(fleet, fault, expected):
    nvsmi = _parsers("nvsmi")
    tray = fleet["nvla1"]
    tray.update(lambda s: st.apply_fault(s, fault))
    fabric = nvsmi.parse_xml(tray.run("nvidia-smi", "-q", "-x").stdout)["gpus"][0]["fabric"]
    uuid = expected[3] or catalog.cluster_uuid("rack-a")
    assert (fabric["state"], fabric["status"], fabric["clique_id"], fabric["cluster_uuid"], fabric["health"]) == (*expected[:3], uuid, expected[4])


def _fabric_paths(root):
    out = set()

    def walk(e, p):
        out.add(p)
        for c in e:
            walk(c, f"{p}/{c.tag}")

    walk(root.find("gpu/fabric"), "fabric")
    return out


@needs_real
def test_fabric_block_has_the_real_gb200_shape(fleet):
    real = ET.parse(next(REAL.glob("gb200/nvidia-smi/nvsmi_qx_4xGB200_*.xml"))).getroot()  # noqa: S314 - stored fixture
    text = fleet["nvla1"].run("nvidia-smi", "-q", "-x").stdout
    sim = ET.fromstring(re.sub(r"^<\?xml[^>]*>\s*<!DOCTYPE[^>]*>", "", text))  # noqa: S314 - simulator output
    assert _fabric_paths(sim) == _fabric_paths(real)
    for path in ("gpu/fabric/state", "gpu/fabric/status", "gpu/fabric/health/summary", "gpu/fabric/health/bandwidth", "gpu/addressing_mode"):
        assert sim.find(path).text == real.find(path).text, path


def test_hgx_output_has_no_mnnvl_fabric_and_no_imex(fleet):
    nvsmi = _parsers("nvsmi")
    fabric = nvsmi.parse_xml(fleet["hgx1"].run("nvidia-smi", "-q", "-x").stdout)["gpus"][0]["fabric"]
    assert fabric["multi_node"] is False and fabric["health"] is None
    assert "imex" not in fleet["hgx1"].update(lambda s: s)


def test_imex_version_and_domain_up(fleet):
    imex = _parsers("imex")
    tray = fleet["nvla3"]
    assert imex.parse_version(tray.run("nvidia-imex", "--version").stdout) == DRIVER
    result = imex.parse_ctl_nodes(tray.run("nvidia-imex-ctl", "-N").stdout)
    assert result["domain_state"] == "UP" and result["versions"] == ["580.95"]
    assert [n["address"] for n in result["nodes"]] == [m["address"] for m in tray.plan.spec["nvlink"]["members"]]
    assert tray.run("systemctl", "is-active", "nvidia-imex").stdout == "active\n"


def _upgrade(version):
    def change(s):
        s["driver"]["version"] = version
        s["imex"]["version"] = version
        st.imex_check(s)

    return change


def test_a_tray_on_another_driver_shows_version_mismatch_and_the_domain_is_down(fleet):
    imex = _parsers("imex")
    fleet["nvla2"].update(_upgrade("580.105.08"))
    for name in ("nvla1", "nvla2"):
        result = imex.parse_ctl_nodes(fleet[name].run("nvidia-imex-ctl", "-N").stdout)
        assert result["domain_state"] == "DOWN" and result["version_mismatch"]
        assert result["connectivity"][0][1] == "version_mismatch" and result["connectivity"][0][2] == "connected"
        assert result["versions"] == ["580.105", "580.95"]
    # the other domain does not see it
    assert imex.parse_ctl_nodes(fleet["nvlb1"].run("nvidia-imex-ctl", "-N").stdout)["domain_up"]


def test_imex_not_at_the_driver_version_does_not_start(fleet):
    imex = _parsers("imex")
    tray = fleet["nvla4"]
    tray.update(lambda s: (s["imex"].update(version="580.82.07"), st.imex_check(s)))
    assert tray.run("systemctl", "is-active", "nvidia-imex").stdout == "failed\n"
    failed = tray.run("nvidia-imex-ctl", "-N")
    assert failed.returncode == 1 and "IMEX daemon" in failed.stderr
    result = imex.parse_ctl_nodes(fleet["nvla1"].run("nvidia-imex-ctl", "-N").stdout)
    assert result["nodes"][3]["state"] == "UNAVAILABLE" and result["connectivity"][0][3] == "invalid" and not result["domain_up"]


def test_nodes_config_is_the_domain_and_a_differing_one_is_a_node_map_mismatch(fleet):
    imex = _parsers("imex")
    tray = fleet["nvlb2"]
    config = tray.dir / "disk" / "etc" / "upper" / "nvidia-imex" / "nodes_config.cfg"
    assert imex.parse_nodes_config(config.read_text()) == [m["address"] for m in tray.plan.spec["nvlink"]["members"]]
    config.write_text(config.read_text() + "127.0.9.9\n")
    result = imex.parse_ctl_nodes(fleet["nvlb1"].run("nvidia-imex-ctl", "-N").stdout)
    assert result["node_map_mismatch"] and result["connectivity"][0][1] == "node_map_mismatch" and not result["domain_up"]


@needs_real
def test_imex_ctl_output_has_the_real_shape(fleet):
    real = next(REAL.glob("gb200/imex/imex-ctl_N_18nodes-*.txt")).read_text().splitlines()
    fleet["nvla4"].update(_upgrade("580.105.08"))  # a !V! cell must keep the 4-character columns
    sim = fleet["nvla1"].run("nvidia-imex-ctl", "-N").stdout.splitlines()
    assert sim[:10] == real[:10]  # the legend and the blank line after it
    assert re.fullmatch(r"\d{1,2}/\d{1,2}/\d{4} \d\d:\d\d:\d\d\.\d{3}", sim[10]) and sim[11] == real[11] == "Nodes:"
    for line, real_line in zip(sim[12:16], real[12:16]):
        assert [m.start() for m in re.finditer(" - ", line)] == [m.start() for m in re.finditer(" - ", real_line)], line
    header = sim.index(" Nodes From\\To  0   1   2   3")
    assert real[real.index(next(x for x in real if x.startswith(" Nodes From"))) + 1].startswith(sim[header + 1][:17])
    assert sim[header + 1] == "       0        C   C   C   !V!" and sim[-2:] == ["", "Domain State: DOWN"] and real[-2:] == ["", "Domain State: UP"]


def test_cdmm_through_the_module_parameter(fleet):
    procfs = _parsers("procfs")
    on = procfs.parse_nvidia_params((fleet["nvlb1"].dir / "proc_driver" / "nvidia" / "params").read_text())
    assert on["cdmm"] is True and on["cdmm_mode"] == "driver"
    tray = fleet["nvla1"]
    off = procfs.parse_nvidia_params((tray.dir / "proc_driver" / "nvidia" / "params").read_text())
    assert off["cdmm"] is None
    # the option written to the tray's own /etc/modprobe.d takes effect at the next load of the module
    conf = tray.dir / "disk" / "etc" / "upper" / "modprobe.d"
    conf.mkdir(parents=True)
    (conf / "nvidia-openrm.conf").write_text("options nvidia NVreg_CoherentGPUMemoryMode=driver\n")
    tray.update(lambda s: (s.__setitem__("modules", []), st.load_modules(s)))
    assert procfs.parse_nvidia_params((tray.dir / "proc_driver" / "nvidia" / "params").read_text())["cdmm"] is True


def test_imex_package_install_and_hold(fleet):
    """The driver role installs nvidia-imex=<driver version> and holds it: the package follows the node state."""
    imex = _parsers("imex")
    tray = fleet["nvla1"]
    assert tray.run("dpkg-query", "-W", "nvidia-imex").stdout == f"nvidia-imex\t{DRIVER}-1\n"
    tray.update(lambda s: s.setdefault("apt", {"held": []}).setdefault("extra_versions", []).append("580.105.08"))
    done = tray.run("apt-get", "install", "-y", "nvidia-imex=580.105.08-1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert imex.parse_version(tray.run("nvidia-imex", "--version").stdout) == "580.105.08"
    # the running daemon keeps its version until restarted; restarted on the old driver it refuses to start
    assert imex.parse_ctl_nodes(fleet["nvla2"].run("nvidia-imex-ctl", "-N").stdout)["versions"] == ["580.95"]
    assert tray.run("systemctl", "restart", "nvidia-imex").returncode == 1
    assert tray.run("apt-mark", "hold", "nvidia-imex").returncode == 0
    assert "nvidia-imex" in tray.update(lambda s: s)["apt"]["held"]
