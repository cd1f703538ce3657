"""The simulator's output has the structure of the real samples of the same GPU generation and
driver branch, and the project's parsers read it.

Documented differences allowed between a simulated data-centre GPU and the closest real XML sample
(the real -q -x samples are consumer/workstation boards):
- remapped_rows children: present on Ampere+ data-centre GPUs, "N/A" on the consumer samples;
- T.Limit temperature names (gpu_temp_*_tlimit_threshold): per GPU (Ada/Hopper/Blackwell), not per branch;
- Volta's single_bit/double_bit ECC layout (the Pascal quadro-p2000 525 sample has the same layout);
- processes/process_info: only when a process runs.
"""

import re
import xml.etree.ElementTree as ET

import pytest
from gpusim import catalog
from test_tools_support import REAL, node_factory


@pytest.fixture
def make_node(tmp_path):
    return node_factory(tmp_path)


MODELS = sorted(catalog.GPU_MODELS)
BRANCHES = sorted(catalog.SUPPORTED_BRANCHES.items())
ALLOWED = ("remapped_rows/", "processes/process_info", "temperature/gpu_temp_", "ecc_errors/volatile/",
           "ecc_errors/aggregate/", "ecc_errors/aggregate_uncorrectable_sram_sources")
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason="../shared/fixtures/real is absent")


def _paths(root: ET.Element) -> set[str]:
    out = set()

    def walk(e, p):
        p = f"{p}/{e.tag}"
        out.add(p)
        for c in e:
            walk(c, p)

    walk(root, "")
    return {p.replace("/nvidia_smi_log/gpu/", "") for p in out}


def _xml(text: str) -> ET.Element:
    return ET.fromstring(re.sub(r"^<\?xml[^>]*>\s*<!DOCTYPE[^>]*>", "", text))  # noqa: S314 - simulator output / stored fixture


def _parsers(name):
    return pytest.importorskip(f"ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.{name}")


@needs_real
@pytest.mark.parametrize(("key", "driver"), BRANCHES)
@pytest.mark.parametrize("model", MODELS)
def test_qx_element_paths_match_real_sample(make_node, model, key, driver):
    node = make_node(gpu_model=model, gpu_count=2, driver=driver, fabricmanager=driver)
    text = node.run("nvidia-smi", "-q", "-x").stdout
    var = catalog.variant(driver)
    assert var.key == key
    assert f'SYSTEM "{var.dtd}"' in text
    real_text = (REAL / var.sample).read_text()
    assert var.dtd in real_text
    sim, real = _paths(_xml(text)), _paths(ET.parse(REAL / var.sample).getroot())  # noqa: S314 - simulator output / stored fixture
    # A multi-node NVLink tray's Fabric health block follows the real GB200 capture instead (test_gb200.py).
    allowed = (*ALLOWED, "fabric/health/") if catalog.gpu_model(model).mnnvl else ALLOWED
    diff = {p for p in sim ^ real if not p.startswith(allowed)}
    assert diff == set()
    ecc_parent = {p.rsplit("/", 1)[0] for p in sim if p.startswith("ecc_errors/volatile/")}
    assert ecc_parent  # the ECC block is there in one of the two real layouts
    # the renamed throttle/event element follows the branch, exactly like the sample
    assert ("clocks_event_reasons" in sim) == ("clocks_event_reasons" in real)


@pytest.mark.parametrize(("key", "driver"), BRANCHES)
def test_parse_xml_reads_simulated_output(make_node, key, driver):
    nvsmi = _parsers("nvsmi")
    node = make_node(driver=driver, fabricmanager=driver)
    node.fault("ecc_dbe", gpu=1, count=3)
    doc = nvsmi.parse_xml(node.run("nvidia-smi", "-q", "-x").stdout)
    assert doc["driver_version"] == driver
    assert doc["cuda_version"] == catalog.cuda_version(driver)
    assert len(doc["gpus"]) == 8
    g1 = doc["gpus"][1]
    assert g1["name"] == "NVIDIA H100 80GB HBM3"
    assert g1["pci_bus_id"] == "00000000:2A:00.0"
    assert g1["uuid"] == node.state["gpus"][1]["uuid"]
    assert g1["ecc"]["volatile_dbe"] == 3


def test_parse_query_csv_reads_simulated_output(make_node):
    nvsmi = _parsers("nvsmi")
    node = make_node()
    fields = ["index", "uuid", "memory.total", "temperature.gpu", "driver_version"]
    for fmt in ("csv", "csv,noheader", "csv,noheader,nounits"):
        rows = nvsmi.parse_query_csv(node.run("nvidia-smi", f"--query-gpu={','.join(fields)}", f"--format={fmt}").stdout,
                                     fields)
        assert len(rows) == 8
        assert str(rows[0]["driver_version"]) == "550.90.07"
        assert rows[3]["uuid"] == node.state["gpus"][3]["uuid"]


@needs_real
def test_query_csv_header_matches_real_capture(make_node):
    real = (REAL / "nvgpuexp_captures/split_h100-80gb-hbm3__590.48.01/"
            "h100-80gb-hbm3__590.48.01__idle-query-gpu-csv-what-the-exporter-parses.txt").read_text().splitlines()[0]
    real_header = dict(h.split(" [", 1) if " [" in h else (h, "") for h in real.split(", "))
    node = make_node(driver="590.48.01", fabricmanager="590.48.01")
    wanted = ["name", "uuid", "memory.total", "memory.used", "power.draw", "clocks.max.graphics", "utilization.gpu",
              "temperature.gpu", "pstate", "ecc.errors.uncorrected.volatile.total", "remapped_rows.pending"]
    header = node.run("nvidia-smi", f"--query-gpu={','.join(wanted)}", "--format=csv").stdout.splitlines()[0]
    for col in header.split(", "):
        name, _sep, unit = col.partition(" [")
        assert real_header[name] == unit, col


def test_default_table_columns(make_node):
    node = make_node(driver="590.48.01", fabricmanager="590.48.01")
    lines = node.run("nvidia-smi").stdout.splitlines()
    if REAL.is_dir():
        real = (REAL / "nvgpuexp_captures/split_h100-80gb-hbm3__590.48.01/"
                "h100-80gb-hbm3__590.48.01__idle-nvidia-smi-default-table.txt").read_text().splitlines()
        assert lines[4:8] == real[4:8]  # column headings
        assert [len(x) for x in lines[1:12]] == [len(x) for x in real[1:12]]
        assert [x.index("|", 1) for x in lines[8:11]] == [x.index("|", 1) for x in real[8:11]]


def test_dcgm_nccl_burn_parsers(make_node):
    dcgm, nccl, gpuburn = _parsers("dcgm"), _parsers("nccl"), _parsers("gpuburn")
    node = make_node()
    assert dcgm.parse_diag(node.run("dcgmi", "diag", "-r", "3").stdout)["result"] == "pass"
    node.fault("dcgm_fail", test="GPU Memory", gpu=0)
    for args in (("-r", "3"), ("-r", "3", "-j")):
        res = dcgm.parse_diag(node.run("dcgmi", "diag", *args).stdout)
        assert res["result"] == "fail"
        assert any(t["result"] == "fail" for t in res["tests"])
    res = nccl.parse_tests(node.run("all_reduce_perf", "-b", "8", "-e", "1G", "-f", "2", "-g", "8").stdout)
    assert res["avg_busbw_gbps"] > 0 and res["wrong"] == 0 and len(res["rows"]) == 28
    node.fault("ecc_dbe", gpu=4)
    burn = gpuburn.parse(node.run("gpu_burn", "-d", "10").stdout)
    assert burn["result"] != "pass"
    assert [g["ok"] for g in burn["gpus"]] == [True] * 4 + [False] + [True] * 3


def test_mlx_fm_xid_procfs_parsers(make_node):
    """(nvfwupd's output comes from the real tool against the simulated BMC: test_bmc_nvfwupd.py.)"""
    from gpusim import artifacts

    mlx, fm = _parsers("mlx"), _parsers("fabricmanager")
    xid, procfs = _parsers("xid"), _parsers("procfs")
    node = make_node()
    img = artifacts.write_mlx_image(node.dir / "art", "MT_0000000838", "28.43.1014")
    text = mlx.parse_fwmanager_text(node.run("mlxfwmanager", "--query", "-i", str(img)).stdout)
    xml = mlx.parse_fwmanager_xml(node.run("mlxfwmanager", "--query", "-i", str(img), "--query-format", "XML").stdout)
    for devs in (text, xml):
        assert devs[0]["psid"] == "MT_0000000838"
        assert devs[0]["fw_current"] == "28.39.1002" and devs[0]["fw_available"] == "28.43.1014"
    q = mlx.parse_flint_query(node.run("flint", "-d", "/dev/mst/mt4129_pciconf0", "q").stdout)
    assert q["psid"] == "MT_0000000838"
    assert fm.parse_version(node.run("nv-fabricmanager", "--version").stdout) == "550.90.07"
    node.fault("xid79", gpu=2)
    node.fault("xid48", gpu=0)
    for args in ((), ("-T",)):
        events = xid.parse_kernel_log(node.run("dmesg", *args).stdout)
        assert [e["xid"] for e in events] == [79, 48, 63]
        assert "3a:00" in events[0]["pci_bus_id"].lower()
    ver = procfs.parse_driver_version((node.dir / "proc_driver" / "nvidia" / "version").read_text())
    assert ver["version"] == "550.90.07" and ver["flavor"] == "open"
