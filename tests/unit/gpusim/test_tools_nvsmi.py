"""Simulated nvidia-smi: flags, errors, faults."""

import xml.etree.ElementTree as ET

import pytest
from test_tools_support import node_factory


@pytest.fixture
def make_node(tmp_path):
    return node_factory(tmp_path)


def test_no_driver_is_exit_9(make_node):
    node = make_node(driver=None, fabricmanager=None)
    r = node.run("nvidia-smi")
    assert r.returncode == 9
    assert r.stdout.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_list_and_missing_gpu(make_node):
    node = make_node()
    assert node.run("nvidia-smi", "-L").stdout.count("GPU ") == 8
    node.fault("gpu_missing", gpu=3)
    lines = node.run("nvidia-smi", "-L").stdout.splitlines()
    assert len(lines) == 7
    assert lines[-1].startswith("GPU 6: NVIDIA H100 80GB HBM3 (UUID: GPU-")


def test_query_gpu_csv_header_units_and_nounits(make_node):
    node = make_node()
    r = node.run("nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv")
    lines = r.stdout.splitlines()
    assert lines[0] == "index, name, memory.total [MiB], driver_version"
    assert lines[1] == "0, NVIDIA H100 80GB HBM3, 81559 MiB, 550.90.07"
    r = node.run("nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "2")
    assert r.stdout == "81559\n"


def test_invalid_field_and_flag(make_node):
    node = make_node()
    r = node.run("nvidia-smi", "--query-gpu=bogus", "--format=csv")
    assert r.returncode == 2
    assert 'Field "bogus" is not a valid field to query.' in r.stdout
    r = node.run("nvidia-smi", "--frobnicate")
    assert r.returncode == 2
    assert "Invalid combination of input arguments" in r.stdout
    assert node.run("nvidia-smi", "-i", "9").returncode == 6


def test_xml_dtd_and_throttle_names_follow_branch(make_node):
    old = make_node(driver="525.147.05", fabricmanager="525.147.05").run("nvidia-smi", "-q", "-x").stdout
    assert 'SYSTEM "nvsmi_device_v12.dtd"' in old
    assert "<clocks_throttle_reasons>" in old and "<clocks_event_reasons>" not in old
    new = make_node(driver="590.48.01", fabricmanager="590.48.01").run("nvidia-smi", "-q", "-x").stdout
    assert 'SYSTEM "nvsmi_device_v13.dtd"' in new
    root = ET.fromstring(new.split("\n", 2)[2])  # noqa: S314 - simulator output / stored fixture
    assert root.findtext("driver_version") == "590.48.01"
    assert root.findtext("cuda_version") == "13.1"
    assert len(root.findall("gpu")) == 8


def test_xid79_gpu_fell_off(make_node):
    node = make_node()
    node.fault("xid79", gpu=1)
    r = node.run("nvidia-smi")
    assert r.returncode == 15
    assert "Unable to determine the device handle for GPU0000:2A:00.0: Unknown Error" in r.stdout
    r = node.run("nvidia-smi", "-q", "-x")
    assert r.returncode == 15
    assert len(ET.fromstring(r.stdout.split("\n", 2)[2]).findall("gpu")) == 7  # noqa: S314 - simulator output / stored fixture
    assert "Xid (PCI:0000:2a:00): 79" in node.run("dmesg").stdout


def test_ecc_dbe_shows_in_xml_and_table(make_node):
    node = make_node(driver="570.124.06", fabricmanager="570.124.06")
    node.fault("ecc_dbe", gpu=0, count=2)
    root = ET.fromstring(node.run("nvidia-smi", "-q", "-x").stdout.split("\n", 2)[2])  # noqa: S314 - simulator output / stored fixture
    gpu0 = root.findall("gpu")[0]
    assert gpu0.findtext("ecc_errors/volatile/dram_uncorrectable") == "2"
    assert gpu0.findtext("remapped_rows/remapped_row_pending") == "Yes"


def test_processes_in_compute_apps(make_node):
    node = make_node()
    node.fault("gpu_process", gpu=2, pid=4321, name="python3", mem_mib=1000)
    r = node.run("nvidia-smi", "--query-compute-apps=pid,process_name,used_gpu_memory", "--format=csv")
    assert r.stdout.splitlines() == ["pid, process_name, used_gpu_memory [MiB]", "4321, python3, 1000 MiB"]
