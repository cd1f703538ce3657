"""gpu_facts: the facts it returns and the processes it starts, with recorded argument lists."""

from __future__ import annotations

import json
import pathlib
import re
import threading

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.filter.audit import audit_records
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _host
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import gather as _gpu_facts
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.fleet import REPORT_GPU_KEYS, REPORT_NIC_KEYS, build_report
from ansible_collections.gpufleet.lifecycle.plugins.modules import gpu_facts

from tests.conftest import real_params

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "gpu_facts"
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)


def fixture(name):
    return (FIXTURES / name).read_text()


def make_node(root, driver_text=None, pci=(), nvswitch_devices=(), boot_id="b6c1a7f0-0000-4000-8000-000000000001"):
    """A fake / with the /proc and /sys files gpu_facts reads."""
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text(boot_id + "\n")
    (root / "proc/sys/kernel/osrelease").write_text("6.1.0-28-amd64\n")
    if driver_text is not None:
        (root / "proc/driver/nvidia").mkdir(parents=True)
        (root / "proc/driver/nvidia/version").write_text(driver_text)
    for address in nvswitch_devices:
        (root / "proc/driver/nvidia-nvswitch/devices" / address).mkdir(parents=True)
    for address, vendor, pci_class in pci:
        device = root / "sys/bus/pci/devices" / address
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(pci_class + "\n")
    return root


@pytest.fixture
def node(tmp_path, monkeypatch):
    def _make(**kwargs):
        root = make_node(tmp_path, **kwargs)
        monkeypatch.setattr(_gpu_facts, "Host", lambda: RealHost(str(root)))
        return root

    return _make


RealHost = _host.Host


HGX_PCI = (
    ("0000:18:00.0", "0x10de", "0x030200"),
    ("0000:2a:00.0", "0x10de", "0x030200"),
    ("0000:1a:00.0", "0x15b3", "0x020700"),
)


def full_node(commands, node, smi_xml=None):
    node(driver_text=fixture("proc_version_open_550.90.07.txt"), pci=HGX_PCI, nvswitch_devices=("0000:05:00.0", "0000:06:00.0"))
    smi = commands.tool("nvidia-smi")
    fm = commands.tool("nv-fabricmanager", "/usr/bin/nv-fabricmanager")
    systemctl = commands.tool("systemctl", "/usr/bin/systemctl")
    dmesg = commands.tool("dmesg", "/usr/bin/dmesg")
    mlx = commands.tool("mlxfwmanager", "/usr/bin/mlxfwmanager")
    commands.on([smi, "-q", "-x"], stdout=smi_xml or fixture("nvsmi_qx_2xH100_550.90.07.xml"))
    commands.on([fm, "--version"], stdout=fixture("fm_version_550.90.07.txt"))
    commands.on([systemctl, "is-active", "nvidia-fabricmanager", "nvidia-persistenced"], rc=0, stdout="active\nactive\n")
    commands.on([dmesg], stdout=fixture("dmesg_xid79.txt"))
    # mlxfwmanager exits non-zero when an update is available and still prints the report.
    commands.on([mlx, "--query", "--query-format", "XML"], rc=1, stdout=fixture("mlxfwmanager_query_2xCX7.xml"))


def test_full_node_facts_and_exact_commands(commands, node, run_module):
    full_node(commands, node)
    result = run_module(gpu_facts.main, {})
    assert result["changed"] is False
    facts = result["ansible_facts"]["gpufleet"]

    assert facts["driver"] == {"installed": True, "loaded": True, "version": "550.90.07", "flavor": "open", "branch": "R550", "arch": "x86_64"}
    assert facts["cuda_version"] == "12.4"
    assert facts["kernel"] == "6.1.0-28-amd64"
    assert facts["boot_id"] == "b6c1a7f0-0000-4000-8000-000000000001"
    assert facts["gpu_count"] == 2 and facts["pci_gpu_count"] == 2
    first, second = facts["gpus"]
    assert first["uuid"] == "GPU-5c0b6e0e-8b8f-4c4b-9a53-0f1b2e1c3d4e"
    assert first["pci_bus_id"] == "00000000:18:00.0"
    assert first["vbios_version"] == "96.00.74.00.0D"
    assert second["ecc"]["volatile_dbe"] == 2 and second["ecc"]["aggregate_dbe"] == 5
    assert second["remapped_rows"]["pending"] is True
    assert second["temperature_c"] == 88
    assert "sw_thermal" in " ".join(second["clocks_event_reasons_active"])
    assert [p["pid"] for p in facts["gpu_processes"]] == [41234]
    assert facts["gpu_processes"][0]["gpu_uuid"] == second["uuid"]
    assert facts["nvswitch"] == {"present": True, "count": 2, "devices": ["0000:05:00.0", "0000:06:00.0"]}
    assert facts["fabricmanager"]["version"] == "550.90.07"
    assert facts["fabricmanager"]["matches_driver"] is True and facts["fabricmanager"]["running"] is True
    assert facts["persistenced"]["running"] is True
    assert [nic["psid"] for nic in facts["nics"]] == ["MT_0000000838", "MT_0000000838"]
    assert facts["nics"][0]["fw_current"] == "28.39.1002"
    assert facts["xid"]["counts"] == {79: 1, 13: 1}
    assert facts["xid"]["critical"] == [79]

    # Exactly these processes, each an argument list, each with LC_ALL=C (started at the same time: in any order).
    assert sorted(call["argv"] for call in commands.calls) == [
        ["/usr/bin/dmesg"],
        ["/usr/bin/mlxfwmanager", "--query", "--query-format", "XML"],
        ["/usr/bin/nv-fabricmanager", "--version"],
        ["/usr/bin/nvidia-smi", "-q", "-x"],
        ["/usr/bin/systemctl", "is-active", "nvidia-fabricmanager", "nvidia-persistenced"],
    ]
    assert all(call["environ_update"]["LC_ALL"] == "C" for call in commands.calls)
    assert facts["commands_run"] == 5


def test_check_mode_reports_the_same_and_changes_nothing(commands, node, run_module):
    full_node(commands, node)
    result = run_module(gpu_facts.main, {}, check_mode=True)
    assert result["changed"] is False
    assert result["ansible_facts"]["gpufleet"]["driver"]["version"] == "550.90.07"


def test_nic_that_mlxfwmanager_could_not_open_is_reported_not_fatal(commands, node, run_module):
    """Issue 8: one device 'Failed to open device' beside healthy ones: reported with its status, the rest still read."""
    full_node(commands, node)
    failed_xml = (FIXTURES.parent / "mlx" / "mlxfwmanager_query_one-device-failed-to-open_own.xml").read_text()
    commands.on(["/usr/bin/mlxfwmanager", "--query", "--query-format", "XML"], rc=1, stdout=failed_xml)
    result = run_module(gpu_facts.main, {"gather_subset": ["nics"]})
    nics = result["ansible_facts"]["gpufleet"]["nics"]
    assert [(nic["pci"], nic["psid"], nic["fw_current"], nic["status"], nic["query_failed"]) for nic in nics] == [
        ("/dev/mst/mt4129_pciconf0", "MT_0000000834", "28.40.1000", "Update required", False),
        ("/dev/mst/mt4129_pciconf1", None, None, "Failed to open device", True),
        ("0000:0d:00.0", "MT_0000000359", "22.43.1014", "Up to date", False),
    ]
    assert nics[1]["update_required"] is None


def test_gather_subset_limits_processes(commands, node, run_module):
    full_node(commands, node)
    result = run_module(gpu_facts.main, {"gather_subset": ["driver", "gpus"]})
    facts = result["ansible_facts"]["gpufleet"]
    assert "nics" not in facts and "xid" not in facts and "fabricmanager" not in facts
    assert sorted(call["argv"][1:] for call in commands.calls) == [["-q", "-x"], ["is-active", "nvidia-fabricmanager", "nvidia-persistenced"]]


def test_node_without_gpu_or_driver_says_so(commands, node, run_module):
    node()
    result = run_module(gpu_facts.main, {})
    facts = result["ansible_facts"]["gpufleet"]
    assert result.get("failed") is not True
    assert facts["driver"] == {"installed": False, "loaded": False, "version": None, "flavor": None, "branch": None, "arch": None}
    assert facts["gpu_count"] == 0 and facts["gpus"] == [] and facts["nvidia_smi"] == "absent"
    assert facts["nvswitch"]["present"] is False
    assert facts["nics"] == [] and facts["fabricmanager"]["installed"] is False
    assert commands.calls == []


def test_installed_driver_not_loaded(commands, node, run_module):
    node(pci=HGX_PCI[:2])
    smi = commands.tool("nvidia-smi")
    modinfo = commands.tool("modinfo", "/usr/sbin/modinfo")
    commands.on([smi, "-q", "-x"], rc=9, stdout=NO_DRIVER)
    commands.on(
        [modinfo, "nvidia"],
        stdout="filename:       /lib/modules/6.1.0-28-amd64/updates/dkms/nvidia.ko\nversion:        550.90.07\nlicense:        Dual MIT/GPL\n",
    )
    facts = run_module(gpu_facts.main, {"gather_subset": ["driver"]})["ansible_facts"]["gpufleet"]
    assert facts["driver"]["installed"] is True and facts["driver"]["loaded"] is False
    assert facts["driver"]["version"] == "550.90.07" and facts["driver"]["branch"] == "R550"
    assert facts["nvidia_smi"] == "no_driver" and "couldn't communicate" in facts["nvidia_smi_message"]
    assert facts["pci_gpu_count"] == 2 and facts["gpu_count"] == 0


def test_fabricmanager_mismatch_is_reported_not_hidden(commands, node, run_module):
    full_node(commands, node)
    commands.on([commands.binaries["nv-fabricmanager"], "--version"], stdout="Fabric Manager version is : 535.161.08\n")
    facts = run_module(gpu_facts.main, {})["ansible_facts"]["gpufleet"]
    assert facts["fabricmanager"]["version"] == "535.161.08"
    assert facts["fabricmanager"]["matches_driver"] is False


@pytest.mark.parametrize(
    ("tool", "argv_tail", "output", "expected"),
    [
        ("nvidia-smi", ["-q", "-x"], "<html>not nvidia-smi</html>", r"nvidia-smi -q -x printed output that is not the expected XML"),
        ("nv-fabricmanager", ["--version"], "Segmentation fault\n", r"nv-fabricmanager --version printed no whole version"),
    ],
)
def test_unexpected_tool_output_fails_with_tool_command_and_output(commands, node, run_module, tool, argv_tail, output, expected):
    full_node(commands, node)
    commands.on([commands.binaries[tool], *argv_tail], stdout=output)
    result = run_module(gpu_facts.main, {})
    assert result["failed"] is True
    assert re.search(expected, result["msg"])
    assert result["cmd"] == [commands.binaries[tool], *argv_tail]
    assert result["stdout"] == output


def test_nvidia_smi_crash_fails_with_status(commands, node, run_module):
    full_node(commands, node)
    commands.on([commands.binaries["nvidia-smi"], "-q", "-x"], rc=255, stderr="Unknown Error\n")
    result = run_module(gpu_facts.main, {})
    assert result["failed"] is True
    assert "exit status 255" in result["msg"] and "Unknown Error" in result["msg"]


def test_critical_xids_option_overrides_the_catalog(commands, node, run_module):
    full_node(commands, node)
    facts = run_module(gpu_facts.main, {"critical_xids": [13]})["ansible_facts"]["gpufleet"]
    assert facts["xid"]["critical"] == [13]


@pytest.mark.parametrize("path", real_params("nvsmi_qx_*.xml"))
def test_real_nvidia_smi_xml_gives_one_fact_per_gpu(commands, node, run_module, path):
    text = path.read_text()
    full_node(commands, node, smi_xml=text)
    result = run_module(gpu_facts.main, {"gather_subset": ["gpus"]})
    if "<driver_version>" not in text:
        # An excerpt without the driver version (telegraf trimmed some samples) must not pass as facts.
        assert result["failed"] is True and "driver_version" in result["msg"]
        return
    facts = result["ansible_facts"]["gpufleet"]
    assert facts["gpu_count"] == text.count("<gpu id=")
    assert facts["cuda_version"] == re.search(r"<cuda_version>([^<]+)<", text).group(1)
    assert [gpu["uuid"] for gpu in facts["gpus"]] == re.findall(r"<uuid>([^<]+)</uuid>", text)


def test_gpu_fallen_off_the_bus_keeps_the_healthy_gpus(commands, node, run_module):
    full_node(commands, node)
    xml = fixture("nvsmi_qx_2xH100_550.90.07.xml")
    first_gpu_only = xml[: xml.index('\t<gpu id="00000000:2A:00.0">')] + "</nvidia_smi_log>\n"
    commands.on(
        [commands.binaries["nvidia-smi"], "-q", "-x"],
        rc=15,
        stdout=first_gpu_only,
        stderr="Unable to determine the device handle for GPU0000:2A:00.0: Unknown Error\n",
    )
    facts = run_module(gpu_facts.main, {"gather_subset": ["driver", "gpus"]})["ansible_facts"]["gpufleet"]
    assert facts["nvidia_smi"] == "gpu_lost"
    assert "2A:00.0" in facts["nvidia_smi_message"]
    assert facts["gpu_count"] == 1 and facts["pci_gpu_count"] == 2
    assert facts["gpus"][0]["pci_bus_id"] == "00000000:18:00.0"


def test_fabric_manager_wrapper_without_program_is_not_installed(commands, node, run_module):
    full_node(commands, node)
    commands.on([commands.binaries["nv-fabricmanager"], "--version"], rc=127, stderr="nv-fabricmanager: command not found\n")
    facts = run_module(gpu_facts.main, {})["ansible_facts"]["gpufleet"]
    assert facts["fabricmanager"]["installed"] is False and facts["fabricmanager"]["version"] is None


def test_library_version_mismatch_waiting_for_reboot_is_reported_not_failed(commands, node, run_module):
    full_node(commands, node)
    mismatch = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.124\n"
    commands.on([commands.binaries["nvidia-smi"], "-q", "-x"], rc=18, stdout=mismatch)
    facts = run_module(gpu_facts.main, {"gather_subset": ["driver", "gpus"]})["ansible_facts"]["gpufleet"]
    assert facts["nvidia_smi"] == "version_mismatch"
    assert "Driver/library version mismatch" in facts["nvidia_smi_message"]
    assert facts["driver"]["version"] == "550.90.07" and facts["driver"]["loaded"] is True  # the kernel module still loaded
    assert facts["gpu_count"] == 0 and facts["pci_gpu_count"] == 2


# -- time limits, option ranges and typed errors (issue 8) --------------------------------------


def test_hung_nvidia_smi_fails_naming_the_tool_and_the_limit(commands, node, run_module):
    full_node(commands, node)
    # coreutils timeout exits 124 when it stops the tool at the limit.
    commands.on([commands.binaries["nvidia-smi"], "-q", "-x"], rc=124)
    result = run_module(gpu_facts.main, {"command_timeout": 45})
    assert result["failed"] is True
    assert result["msg"] == "nvidia-smi did not finish within 45 s (timed out and was stopped)"
    assert result["rc"] == 124
    assert result["cmd"] == ["/usr/bin/timeout", "--kill-after=10", "45", commands.binaries["nvidia-smi"], "-q", "-x"]


def test_command_timeout_bounds_every_read(commands, node, run_module):
    full_node(commands, node)
    run_module(gpu_facts.main, {"command_timeout": 30})
    assert len(commands.calls) == 5
    assert {call["timeout"] for call in commands.calls} == {30}


def test_every_read_has_the_default_limit(commands, node, run_module):
    full_node(commands, node)
    run_module(gpu_facts.main, {})
    assert {call["timeout"] for call in commands.calls} == {120}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"command_timeout": 0}, r"^command_timeout must be a whole number of seconds from 1 to 3600, got 0"),
        ({"command_timeout": -5}, r"^command_timeout must be a whole number of seconds from 1 to 3600, got -5"),
        ({"command_timeout": 3601}, r"^command_timeout must be a whole number of seconds from 1 to 3600, got 3601"),
        ({"critical_xids": [79, 0]}, r"^critical_xids: 0 is not an Xid code \(a whole number from 1 to 999\)"),
        ({"critical_xids": [-79]}, r"^critical_xids: -79 is not an Xid code"),
        ({"critical_xids": [79000]}, r"^critical_xids: 79000 is not an Xid code"),
    ],
)
def test_out_of_range_options_fail_before_any_command(commands, node, run_module, args, expected):
    full_node(commands, node)
    result = run_module(gpu_facts.main, args)
    assert result["failed"] is True
    assert re.search(expected, result["msg"]), result["msg"]
    assert commands.calls == []


def test_a_parse_error_becomes_fail_json_not_a_traceback(commands, node, run_module, monkeypatch):
    full_node(commands, node)

    def broken(text):
        raise ParseError("dmesg: cannot read the kernel log")

    monkeypatch.setattr(_gpu_facts.xid_parser, "parse_kernel_log", broken)
    result = run_module(gpu_facts.main, {})
    assert result["failed"] is True
    assert result["msg"] == "dmesg printed a kernel log that cannot be read: dmesg: cannot read the kernel log"
    assert result["cmd"] == [commands.binaries["dmesg"]]


def test_a_parse_error_that_escapes_a_collector_is_still_a_fail_json(commands, node, run_module, monkeypatch):
    full_node(commands, node)

    def broken(self):
        raise ParseError("systemctl is-active: unreadable")

    monkeypatch.setattr(_gpu_facts.GpuFactsCollector, "_services", broken)
    result = run_module(gpu_facts.main, {})
    assert result["failed"] is True and result["msg"] == "systemctl is-active: unreadable"


def test_an_unexpected_exception_is_a_bug_and_is_not_swallowed(commands, node, run_module, monkeypatch):
    full_node(commands, node)

    def broken(self):
        raise KeyError("bug")

    monkeypatch.setattr(_gpu_facts.GpuFactsCollector, "_services", broken)
    with pytest.raises(KeyError):
        run_module(gpu_facts.main, {})


@pytest.mark.parametrize("rc", [126, 127])
def test_fabric_manager_wrapper_whose_program_is_gone_is_not_installed_like_nvidia_driver(commands, node, run_module, rc):
    """One rule with nvidia_driver (_host): 126 (not executable) and 127 (not found) both mean not installed."""
    full_node(commands, node)
    commands.on([commands.binaries["nv-fabricmanager"], "--version"], rc=rc, stderr="nv-fabricmanager: cannot execute\n")
    facts = run_module(gpu_facts.main, {})["ansible_facts"]["gpufleet"]
    assert facts["fabricmanager"]["installed"] is False
    assert facts["fabricmanager"]["version"] is None and facts["fabricmanager"]["matches_driver"] is None


def test_cut_off_fabric_manager_version_fails_rather_than_mismatches(commands, node, run_module):
    full_node(commands, node)
    commands.on([commands.binaries["nv-fabricmanager"], "--version"], stdout="Fabric Manager version is : 535.1\n")
    result = run_module(gpu_facts.main, {})
    assert result["failed"] is True
    assert result["msg"].startswith("nv-fabricmanager --version printed no whole version (exit status 0; "), result["msg"]
    assert "535.1" in result["msg"]
    assert result["cmd"] == [commands.binaries["nv-fabricmanager"], "--version"]


def test_nvidia_smi_without_a_kernel_module_is_no_driver_installed_not_installed_but_not_loaded(commands, node, run_module):
    """Issue 9: a node whose nvidia-smi answers 'couldn't communicate' and whose kernel has no nvidia module has no driver."""
    node(pci=HGX_PCI[:2])
    smi = commands.tool("nvidia-smi")
    modinfo = commands.tool("modinfo", "/usr/sbin/modinfo")
    commands.on([smi, "-q", "-x"], rc=9, stdout=NO_DRIVER)
    commands.on([modinfo, "nvidia"], rc=1, stderr="modinfo: ERROR: Module nvidia not found.\n")
    facts = run_module(gpu_facts.main, {"gather_subset": ["driver"]})["ansible_facts"]["gpufleet"]
    assert facts["driver"] == {"installed": False, "loaded": False, "version": None, "flavor": None, "branch": None, "arch": None}
    assert facts["nvidia_smi"] == "no_driver" and facts["pci_gpu_count"] == 2


NO_DEVICES = "-E- No devices found or specified, mst might be stopped, run 'mst start' to load MST modules\n"


@pytest.mark.parametrize(("rc", "stdout"), [(1, NO_DEVICES), (0, '<?xml version="1.0" encoding="UTF-8" ?>\n<Devices>\n</Devices>\n')])
def test_node_without_connectx_has_no_nics_rather_than_failing(commands, node, run_module, rc, stdout):
    node(driver_text=fixture("proc_version_open_550.90.07.txt"), pci=HGX_PCI[:2])
    commands.tool("mlxfwmanager", "/usr/bin/mlxfwmanager")
    commands.on(["/usr/bin/mlxfwmanager", "--query", "--query-format", "XML"], rc=rc, stdout=stdout)
    result = run_module(gpu_facts.main, {"gather_subset": ["nics"]})
    assert result.get("failed") is not True, result
    assert result["ansible_facts"]["gpufleet"]["nics"] == []


def test_no_device_from_mlxfwmanager_while_the_pci_bus_lists_one_fails(commands, node, run_module):
    node(driver_text=fixture("proc_version_open_550.90.07.txt"), pci=HGX_PCI)
    commands.tool("mlxfwmanager", "/usr/bin/mlxfwmanager")
    commands.on(["/usr/bin/mlxfwmanager", "--query", "--query-format", "XML"], rc=1, stdout=NO_DEVICES)
    result = run_module(gpu_facts.main, {"gather_subset": ["nics"]})
    assert result["failed"] is True
    assert result["msg"].startswith("mlxfwmanager found no device, but the PCI bus lists 1 Mellanox adapter(s) (0000:1a:00.0): run 'mst start'")


# -- the reads run at the same time (issue 11: the audit costs its slowest read, not their sum) -----------------

# Long enough for five threads to start on a loaded CI machine; short enough that a sequential collector fails fast.
RENDEZVOUS_S = 10


def hold_until_all_started(commands, monkeypatch, count):
    """Every fake tool waits until ``count`` tools are running at once; returns the list of reads that saw them."""
    barrier = threading.Barrier(count, timeout=RENDEZVOUS_S)
    together = []
    recorded = commands.run_command

    def run_command(module, args, **kwargs):
        try:
            barrier.wait()
            together.append(tuple(args[3:]))
        except threading.BrokenBarrierError:
            pass  # run one after another: never all in flight, so `together` stays short and the test fails
        return recorded(module, args, **kwargs)

    monkeypatch.setattr(commands, "run_command", run_command)
    return together


def test_the_five_reads_are_in_flight_at_the_same_time(commands, node, run_module, monkeypatch):
    """Each fake tool blocks until all five have started: a collector that runs them one after another never gets there."""
    full_node(commands, node)
    together = hold_until_all_started(commands, monkeypatch, 5)
    result = run_module(gpu_facts.main, {})
    assert result.get("failed") is not True, result.get("msg")
    assert sorted(argv[0] for argv in together) == sorted(
        ["/usr/bin/nvidia-smi", "/usr/bin/systemctl", "/usr/bin/nv-fabricmanager", "/usr/bin/mlxfwmanager", "/usr/bin/dmesg"]
    )
    # Each still bounded, and parsed as before.
    assert {call["timeout"] for call in commands.calls} == {120}
    facts = result["ansible_facts"]["gpufleet"]
    assert facts["gpu_count"] == 2 and facts["fabricmanager"]["matches_driver"] is True
    assert [nic["psid"] for nic in facts["nics"]] == ["MT_0000000838", "MT_0000000838"]
    assert facts["xid"]["critical"] == [79] and facts["commands_run"] == 5


def test_a_subset_runs_its_reads_at_the_same_time(commands, node, run_module, monkeypatch):
    full_node(commands, node)
    together = hold_until_all_started(commands, monkeypatch, 2)
    facts = run_module(gpu_facts.main, {"gather_subset": ["driver"]})["ansible_facts"]["gpufleet"]
    assert sorted(argv[0] for argv in together) == ["/usr/bin/nvidia-smi", "/usr/bin/systemctl"]
    assert facts["driver"]["version"] == "550.90.07" and "nics" not in facts


def test_one_failing_read_fails_the_task_as_before_while_the_others_ran(commands, node, run_module, monkeypatch):
    """mlxfwmanager fails while the others answer: the same fail_json as when the reads ran one after another."""
    full_node(commands, node)
    together = hold_until_all_started(commands, monkeypatch, 5)
    commands.on([commands.binaries["mlxfwmanager"], "--query", "--query-format", "XML"], rc=2, stderr="-E- Failed to open /dev/mst\n")
    result = run_module(gpu_facts.main, {})
    assert len(together) == 5
    assert result["failed"] is True
    assert result["msg"] == "mlxfwmanager --query failed with exit status 2 and printed no device list: -E- Failed to open /dev/mst"
    assert result["cmd"] == ["/usr/bin/mlxfwmanager", "--query", "--query-format", "XML"] and result["rc"] == 2
    assert "ansible_facts" not in result


def test_when_two_reads_fail_the_error_is_the_one_a_sequential_run_stopped_at(commands, node, run_module, monkeypatch):
    """nv-fabricmanager fails first in time, nvidia-smi later: the task reports nvidia-smi's failure (it comes first in order)."""
    full_node(commands, node)
    fabricmanager_done = threading.Event()
    recorded = commands.run_command

    def run_command(module, args, **kwargs):
        if args[3] == commands.binaries["nvidia-smi"]:
            assert fabricmanager_done.wait(RENDEZVOUS_S), "nv-fabricmanager never ran beside nvidia-smi"
        answer = recorded(module, args, **kwargs)
        if args[3] == commands.binaries["nv-fabricmanager"]:
            fabricmanager_done.set()
        return answer

    monkeypatch.setattr(commands, "run_command", run_command)
    commands.on([commands.binaries["nvidia-smi"], "-q", "-x"], rc=255, stderr="Unknown Error\n")
    commands.on([commands.binaries["nv-fabricmanager"], "--version"], stdout="Segmentation fault\n")
    result = run_module(gpu_facts.main, {})
    assert result["failed"] is True
    assert result["msg"] == "nvidia-smi -q -x failed with exit status 255: Unknown Error"
    assert result["cmd"] == [commands.binaries["nvidia-smi"], "-q", "-x"]


def test_a_refused_kernel_log_is_still_a_finding_not_a_failure_beside_the_other_reads(commands, node, run_module, monkeypatch):
    full_node(commands, node)
    hold_until_all_started(commands, monkeypatch, 5)
    commands.on([commands.binaries["dmesg"]], rc=1, stderr="dmesg: read kernel buffer failed: Operation not permitted\n")
    facts = run_module(gpu_facts.main, {})["ansible_facts"]["gpufleet"]
    assert facts["xid"] == {"source": "dmesg", "error": "dmesg: read kernel buffer failed: Operation not permitted", "events": [], "counts": {},
                            "critical": []}
    assert facts["driver"]["version"] == "550.90.07"


def test_run_reads_raises_the_first_error_in_order_with_its_traceback():
    def first():
        raise _gpu_facts.FactsError("first read failed")

    def second():
        raise ValueError("a bug in the second read")

    with pytest.raises(_gpu_facts.FactsError, match="first read failed") as caught:
        _gpu_facts.run_reads({"one": first, "two": second, "three": lambda: 3})
    assert caught.value.__traceback__ is not None
    with pytest.raises(ValueError, match="a bug in the second read"):
        _gpu_facts.run_reads({"three": lambda: 3, "two": second})
    assert _gpu_facts.run_reads({"a": lambda: 1, "b": lambda: 2}) == {"a": 1, "b": 2}


def test_run_reads_runs_a_single_read_in_the_callers_thread():
    assert _gpu_facts.run_reads({"only": threading.current_thread}) == {"only": threading.current_thread()}


# The captures that name their driver (the skip that real_params gives when ../shared is absent is kept).
@pytest.mark.parametrize("path", [p for p in real_params("nvsmi_qx_*.xml") if p.values[0] is None or "<driver_version>" in p.values[0].read_text()])
def test_the_audit_record_keeps_every_fact_the_report_reads(commands, node, run_module, path):
    """audit_records carries each node's facts cut to what the fleet report reads (a tenth of them for an H100 node):
    over every real nvidia-smi capture, the report built from the cut facts equals the one built from the whole."""
    full_node(commands, node, smi_xml=path.read_text())
    facts = run_module(gpu_facts.main, {})["ansible_facts"]["gpufleet"]
    gpu = facts["gpus"][0]
    # A BOM that asks for every component the report compares, so each comparison reads its facts (some drift).
    bom = {"driver": {"version": "570.124.06", "kernel_module": "open"}, "fabricmanager": {"version": "570.124.06"},
           "gpu": {"model": gpu["name"], "count": 8, "vbios": gpu.get("vbios_version"), "gsp_firmware": "570.124.06",
                   "inforom": gpu.get("inforom_version")},
           "nic_firmware": {"MT_0000000838": "28.43.1014"}}
    hostvars = {"inventory_hostname": "gpu-01", "gpufleet_sku": "hgx", "gpufleet_bom": bom,
                "gpufleet_audit_gathered": {"changed": False, "ansible_facts": {"gpufleet": facts}, "failed_when_result": False}}
    (record,) = audit_records([hostvars])
    whole = build_report([{"name": "gpu-01", "sku": "hgx", "bom": bom, "facts": facts}], generated_at="t")
    assert build_report([record], generated_at="t") == whole
    assert {item["component"] for item in whole["nodes"][0]["items"]} >= {"driver", "fabricmanager", "gpu_count", "gpu_model", "gpu_vbios"}
    assert all(set(g) <= set(REPORT_GPU_KEYS) for g in record["facts"]["gpus"])
    assert all(set(n) <= set(REPORT_NIC_KEYS) for n in record["facts"]["nics"])
    assert len(json.dumps(record["facts"])) < len(json.dumps(facts)) * 0.7


# --- GB200 / GB300 NVL72 tray: fabric, NVLink domain, IMEX, CDMM (issue 23) ------------------------------------------------

GB200_DOMAIN = "6a1b2c3d-0000-4000-8000-00000000000a"
GB200_BUSES = ("00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0", "00000019:01:00.0")


def gb200_xml(uuids=(GB200_DOMAIN,) * 4, status="Success", driver="580.95.05"):
    gpus = "".join(
        f'<gpu id="{bus}"><product_name>NVIDIA GB200</product_name><uuid>GPU-0000000{i}-0000-4000-8000-000000000000</uuid>'
        f"<addressing_mode>ATS</addressing_mode><fabric><state>Completed</state><status>{status}</status><cliqueId>2</cliqueId>"
        f"<clusterUuid>{uuid}</clusterUuid><health><summary>Healthy</summary></health></fabric></gpu>"
        for i, (bus, uuid) in enumerate(zip(GB200_BUSES, uuids))
    )
    head = f"<driver_version>{driver}</driver_version><cuda_version>13.0</cuda_version><attached_gpus>4</attached_gpus>"
    return f'<?xml version="1.0" ?>\n<nvidia_smi_log>{head}{gpus}</nvidia_smi_log>\n'


IMEX_N_UP = (
    "Connectivity Table Legend:\n!V! - Version mismatch, communication disabled.\nC - Connected - Ready for operation\n\n"
    "Nodes:\nNode #0   - 10.0.0.1        - READY                - Version: 580.95\n"
    "Node #1   - 10.0.0.2        - READY                - Version: 580.95\n\n"
    " Nodes From\\To  0   1\n       0        C   C\n       1        C   C\n\nDomain State: UP\n"
)


# nvidia-imex-ctl -N -j of the same domain (the key names of NVIDIA's ai-cloud-validation shape, gb200/imex in ../shared).
IMEX_N_J_UP = json.dumps({"nodes": {
    str(i): {"status": "READY", "host": f"10.0.0.{i + 1}", "version": "580.95.05", "changed": True,
             "connections": {"0": {"host": "10.0.0.1", "status": "CONNECTED", "changed": True},
                             "1": {"host": "10.0.0.2", "status": "CONNECTED", "changed": True}}} for i in range(2)},
    "timestamp": "12/6/2026 01:20:00.000", "status": "UP"}, indent=2)
IMEX_CTL_USAGE = ("Usage: nvidia-imex-ctl [-i <IP> <PORT>|-u <unix domain socket path>|-c <nvidia-imex config.cfg path>] "
                  "<-n|-N|-q|-s|-d|-m> [-t <timeout>]\n")


def gb200_node(commands, node, tmp_path, imex_version="580.95.05", ctl_rc=0, ctl_out=IMEX_N_UP, smi_xml=None, json_rc=None, json_out=IMEX_N_J_UP):
    gb200_pci = tuple((bus.lower()[4:], "0x10de", "0x030200") for bus in GB200_BUSES)
    node(driver_text="NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build  (dvs-builder@U22)  Tue Sep 23 2025\n", pci=gb200_pci)
    (tmp_path / "proc/driver/nvidia/params").write_text('ResmanDebugLevel: 4294967295\nCoherentGPUMemoryMode: "driver"\n')
    (tmp_path / "etc/nvidia-imex").mkdir(parents=True)
    (tmp_path / "etc/nvidia-imex/nodes_config.cfg").write_text("10.0.0.1\n10.0.0.2")  # no final newline: a file read whole is not cut
    smi = commands.tool("nvidia-smi")
    systemctl = commands.tool("systemctl", "/usr/bin/systemctl")
    imex = commands.tool("nvidia-imex", "/usr/bin/nvidia-imex")
    ctl = commands.tool("nvidia-imex-ctl", "/usr/bin/nvidia-imex-ctl")
    commands.on([smi, "-q", "-x"], stdout=smi_xml or gb200_xml())
    commands.on([systemctl, "is-active", "nvidia-fabricmanager", "nvidia-persistenced"], rc=3, stdout="inactive\nactive\n")
    commands.on([systemctl, "is-active", "nvidia-imex"], stdout="active\n")
    commands.on([imex, "--version"], stdout=f"IMEX version is: {imex_version}\n")
    commands.on([ctl, "-N"], rc=ctl_rc, stdout=ctl_out)
    commands.on([ctl, "-N", "-j"], rc=ctl_rc if json_rc is None else json_rc, stdout=json_out)


def test_gb200_tray_facts_fabric_domain_imex_cdmm(commands, node, run_module, tmp_path):
    gb200_node(commands, node, tmp_path)
    facts = run_module(gpu_facts.main, {"gather_subset": ["driver", "gpus", "imex"]})["ansible_facts"]["gpufleet"]
    assert [gpu["fabric"]["cluster_uuid"] for gpu in facts["gpus"]] == [GB200_DOMAIN] * 4
    assert facts["gpus"][0]["addressing_mode"] == "ATS"
    assert facts["nvlink"] == {"cluster_uuid": GB200_DOMAIN, "clique_id": 2, "multi_node": True, "fabric_ok": True, "problems": []}
    assert facts["cdmm"] == {"mode": "driver", "enabled": True}
    imex = facts["imex"]
    assert (imex["installed"], imex["version"], imex["matches_driver"], imex["service_state"]) == (True, "580.95.05", True, "active")
    assert imex["nodes_config"] == ["10.0.0.1", "10.0.0.2"]
    assert imex["domain"]["domain_up"] is True and imex["problems"] == []
    assert sorted(call["argv"] for call in commands.calls) == [
        ["/usr/bin/nvidia-imex", "--version"],
        ["/usr/bin/nvidia-imex-ctl", "-N", "-j"],
        ["/usr/bin/nvidia-smi", "-q", "-x"],
        ["/usr/bin/systemctl", "is-active", "nvidia-fabricmanager", "nvidia-persistenced"],
        ["/usr/bin/systemctl", "is-active", "nvidia-imex"],
    ]


def test_gb200_tray_problems_are_reported(commands, node, run_module, tmp_path):
    """IMEX one release off, its daemon down, GPUs that disagree on the domain: facts, not a failed task."""
    uuids = (GB200_DOMAIN,) * 3 + ("6a1b2c3d-0000-4000-8000-00000000000b",)
    gb200_node(commands, node, tmp_path, imex_version="580.82.07", ctl_rc=1, ctl_out="", smi_xml=gb200_xml(uuids=uuids, status="Insufficient Resources"))
    facts = run_module(gpu_facts.main, {"gather_subset": ["driver", "gpus", "imex"]})["ansible_facts"]["gpufleet"]
    assert facts["nvlink"]["cluster_uuid"] is None and facts["nvlink"]["fabric_ok"] is False
    assert any("different ClusterUUIDs" in line for line in facts["nvlink"]["problems"])
    assert any("Insufficient Resources" in line for line in facts["nvlink"]["problems"])
    assert facts["imex"]["matches_driver"] is False and facts["imex"]["domain"] is None
    assert any("install nvidia-imex=580.95.05" in line for line in facts["imex"]["problems"])


@pytest.mark.parametrize(("imex_version", "json_rc", "json_out", "argvs"), [
    # R580+: the JSON form alone
    ("580.95.05", None, IMEX_N_J_UP, [["-N", "-j"]]),
    # before R580 (570.148.08's usage lists no -j): the text form alone
    ("570.172.08", None, "", [["-N"]]),
    # an R580+ IMEX that refuses -j with its usage: asked again with -N
    ("580.95.05", 1, IMEX_CTL_USAGE, [["-N", "-j"], ["-N"]]),
])
def test_gb200_imex_domain_read_as_json_where_imex_prints_it(commands, node, run_module, tmp_path, imex_version, json_rc, json_out, argvs):
    gb200_node(commands, node, tmp_path, imex_version=imex_version, json_rc=json_rc, json_out=json_out)
    facts = run_module(gpu_facts.main, {"gather_subset": ["imex"]})["ansible_facts"]["gpufleet"]
    assert [call["argv"][1:] for call in commands.calls if call["argv"][0].endswith("nvidia-imex-ctl")] == argvs
    domain = facts["imex"]["domain"]
    assert (domain["domain_state"], domain["domain_up"], [n["address"] for n in domain["nodes"]]) == ("UP", True, ["10.0.0.1", "10.0.0.2"])
    assert {n["state"] for n in domain["nodes"]} == {"READY"}


def test_gb200_imex_daemon_down_is_a_state_not_a_failure(commands, node, run_module, tmp_path):
    gb200_node(commands, node, tmp_path, ctl_rc=1, ctl_out="", json_out="")
    facts = run_module(gpu_facts.main, {"gather_subset": ["imex"]})["ansible_facts"]["gpufleet"]
    assert facts["imex"]["domain"] is None and facts["imex"]["domain_error"].startswith("exit status 1")
    assert [call["argv"][1:] for call in commands.calls if call["argv"][0].endswith("nvidia-imex-ctl")] == [["-N", "-j"]]


@pytest.mark.parametrize(("imex_version", "json_out", "ctl_out", "words"), [
    ("570.172.08", "", IMEX_N_UP.replace("       1        C   C\n", "       1        C\n"), "nvidia-imex-ctl -N printed unexpected output"),
    ("580.95.05", IMEX_N_J_UP.replace('"status": "READY"', '"status": 5', 1), IMEX_N_UP, "nvidia-imex-ctl -N -j printed unexpected output"),
    ("580.95.05", '{"nodes": {...}, "status": "UP"}', IMEX_N_UP, "nvidia-imex-ctl -N -j printed unexpected output"),
])
def test_gb200_garbled_imex_ctl_fails_naming_the_tool(commands, node, run_module, tmp_path, imex_version, json_out, ctl_out, words):
    gb200_node(commands, node, tmp_path, imex_version=imex_version, ctl_out=ctl_out, json_out=json_out)
    result = run_module(gpu_facts.main, {"gather_subset": ["imex"]})
    assert result["failed"] is True
    assert words in result["msg"], result["msg"]


def test_hgx_node_reports_imex_absent_not_an_error(commands, node, run_module):
    full_node(commands, node)
    facts = run_module(gpu_facts.main, {})["ansible_facts"]["gpufleet"]
    assert facts["imex"]["installed"] is False and facts["imex"]["problems"] == []
    assert facts["cdmm"] == {"mode": None, "enabled": None}
    assert facts["nvlink"]["multi_node"] is None  # the own H100 fixture has no Fabric block
    assert facts["commands_run"] == 5
