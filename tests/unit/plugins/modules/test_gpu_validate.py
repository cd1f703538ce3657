"""gpu_validate: verdicts, recorded argument lists, levels, baselines, fail_on and timeouts."""

from __future__ import annotations

import pathlib
import re

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import levels as _validate_levels
from ansible_collections.gpufleet.lifecycle.plugins.modules import gpu_validate

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures"
# A healthy node running a job (python3, pid 41234 on GPU 1); IDLE_XML is the same node with no process on its GPUs.
HEALTHY_XML = (FIXTURES / "validate" / "nvsmi_qx_2xH100_550.90.07_healthy.xml").read_text()
IDLE_XML = re.sub(r"\s*<process_info>.*?</process_info>", "", HEALTHY_XML, flags=re.DOTALL)
FAULTY_XML = (FIXTURES / "gpu_facts" / "nvsmi_qx_2xH100_550.90.07.xml").read_text()
DMESG_CLEAN = "[    4.211532] nvidia: loading out-of-tree module taints kernel.\n"
DMESG_XID79 = (FIXTURES / "gpu_facts" / "dmesg_xid79.txt").read_text()
FM_VERSION = (FIXTURES / "gpu_facts" / "fm_version_550.90.07.txt").read_text()
PROC_VERSION = (FIXTURES / "gpu_facts" / "proc_version_open_550.90.07.txt").read_text()
NVLINK_UP = (FIXTURES / "validate" / "nvsmi_nvlink_s_2gpu_up.txt").read_text()
NVLINK_DOWN = (FIXTURES / "validate" / "nvsmi_nvlink_s_2gpu_gpu1-link1-inactive.txt").read_text()
DCGM_PASS = (FIXTURES / "dcgm" / "diag_r1_j_all-pass_dcgm3-shape.json").read_text()
DCGM_FAIL = (FIXTURES / "dcgm" / "diag_r2_j_gpu1-memory-fail_dcgm4-schema.json").read_text()
NCCL = (FIXTURES / "validate" / "all_reduce_perf_2gpu_1G-8G.txt").read_text()
BURN = (FIXTURES / "validate" / "gpu_burn_2gpu_10s_pass.txt").read_text()
BOOT_ID = "b6c1a7f0-0000-4000-8000-000000000001"
TIMEOUT = ["/usr/bin/timeout", "--kill-after=10", "1800"]


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A fake / with an HGX node's /proc (driver 550.90.07, two NVSwitches)."""
    root = tmp_path
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text(BOOT_ID + "\n")
    (root / "proc/sys/kernel/osrelease").write_text("6.1.0-28-amd64\n")
    (root / "proc/uptime").write_text("7200.00 100000.00\n")
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(PROC_VERSION)
    for address in ("0000:05:00.0", "0000:06:00.0"):
        (root / "proc/driver/nvidia-nvswitch/devices" / address).mkdir(parents=True)
    real_host = _validate_levels.Host
    monkeypatch.setattr(_validate_levels, "Host", lambda: real_host(str(root)))
    return root


@pytest.fixture
def tools(commands):
    """Paths of every tool; responses of a healthy node for the quick level."""
    paths = {name: commands.tool(name) for name in ("nvidia-smi", "nv-fabricmanager", "systemctl", "dmesg", "dcgmi", "all_reduce_perf", "gpu_burn", "timeout")}
    commands.on([paths["nvidia-smi"], "-q", "-x"], stdout=IDLE_XML)
    commands.on([paths["nv-fabricmanager"], "--version"], stdout=FM_VERSION)
    commands.on([paths["systemctl"], "is-active", "nvidia-fabricmanager", "nvidia-persistenced"], stdout="active\nactive\n")
    commands.on([paths["dmesg"]], stdout=DMESG_CLEAN)
    commands.on([paths["nvidia-smi"], "nvlink", "-s"], stdout=NVLINK_UP)
    return paths


def by_name(result):
    return {check["name"]: check for check in result["checks"]}


def argvs(commands):
    """The commands as run: with their ``timeout`` prefix where the check gives a limit of its own."""
    return [call["cmd"] if call["timeout"] != 120 else call["argv"] for call in commands.calls]


def test_quick_level_on_a_healthy_node_passes_with_exact_commands(node, tools, commands, run_module):
    result = run_module(gpu_validate.main, {"expected_gpu_count": 2, "expected_driver_version": "550.90.07"})
    assert not result.get("failed"), result.get("msg")
    assert result["status"] == "pass"
    assert result["changed"] is False
    checks = by_name(result)
    assert list(checks) == ["gpu_count", "driver_version", "fabricmanager", "xid", "ecc", "temperature", "clocks_event_reasons", "pcie_link", "nvlink",
                            "ib_ports", "peermem", "dcgm"]
    # Without expected_stack the stack checks are skips that say why, and start no process (the commands below).
    assert {name for name, c in checks.items() if c["status"] == "skip"} == {"ib_ports", "peermem", "dcgm"}
    assert {c["status"] for c in checks.values() if c["status"] != "skip"} == {"pass"}
    assert checks["gpu_count"]["observed"]["gpu_count"] == 2
    assert checks["gpu_count"]["expected"] == 2
    assert checks["driver_version"]["observed"] == "550.90.07"
    assert checks["fabricmanager"]["observed"] == {"version": "550.90.07", "state": "active"}
    assert checks["temperature"]["observed"]["max_c"] == 36
    assert checks["nvlink"]["observed"]["active_links"] == {0: 2, 1: 2}
    assert result["measurements"]["temperature_c"] == [34, 36]
    assert result["measurements"]["busbw_gbps"] is None
    assert result["snapshot"]["boot_id"] == BOOT_ID
    # Quick means no load: facts (4 processes, run at the same time, so in any order) and then the NVLink query only.
    run = argvs(commands)
    assert sorted(run[:4]) == sorted([
        [tools["nvidia-smi"], "-q", "-x"],
        [tools["systemctl"], "is-active", "nvidia-fabricmanager", "nvidia-persistenced"],
        [tools["nv-fabricmanager"], "--version"],
        [tools["dmesg"]],
    ])
    assert run[4:] == [[tools["nvidia-smi"], "nvlink", "-s"]]
    assert all(call["environ_update"]["LC_ALL"] == "C" for call in commands.calls)
    assert result["commands_run"] == 5


def test_check_mode_runs_the_same_read_only_checks(node, tools, commands, run_module):
    result = run_module(gpu_validate.main, {"expected_gpu_count": 2}, check_mode=True)
    assert result["status"] == "pass"
    assert len(commands.calls) == 5


def test_check_mode_skips_the_checks_that_load_the_gpus(node, tools, commands, run_module):
    result = run_module(gpu_validate.main, {"level": "full", "expected_gpu_count": 2, "cuda_smoke_command": ["/opt/smoke/vectorAdd"]},
                        check_mode=True)
    assert not result.get("failed"), result.get("msg")
    checks = by_name(result)
    for name in ("cuda_smoke", "dcgm_diag", "nccl_busbw", "gpu_burn"):
        assert checks[name]["status"] == "skip"
        assert checks[name]["message"] == "not run in check mode (it loads the GPUs)"
    assert checks["nvlink"]["status"] == "pass"
    assert result["status"] == "pass"
    ran = [" ".join(argv) for argv in argvs(commands)]
    assert len(ran) == 5  # the quick level's read-only commands only
    assert not any(word in line for line in ran for word in ("dcgmi", "all_reduce_perf", "gpu_burn", "vectorAdd", "timeout"))


def test_faulty_node_fails_the_right_checks_with_observed_and_expected(node, tools, commands, run_module):
    commands.on([tools["nvidia-smi"], "-q", "-x"], stdout=FAULTY_XML)
    commands.on([tools["dmesg"]], stdout=DMESG_XID79)
    commands.on([tools["nvidia-smi"], "nvlink", "-s"], stdout=NVLINK_DOWN)
    result = run_module(gpu_validate.main, {"expected_gpu_count": 2})
    assert result["failed"] is True
    checks = by_name(result)
    assert result["failed_checks"] == ["xid", "ecc", "temperature", "clocks_event_reasons", "nvlink"]
    assert checks["xid"]["observed"]["critical"] == {79: 1}
    assert "Xid 79 (GPU has fallen off the bus)" in checks["xid"]["message"]
    assert "0000:2a:00" in checks["xid"]["message"]
    ecc = checks["ecc"]["observed"]
    assert {"gpu": 1, "problem": "volatile_dbe", "value": 2} in ecc
    assert {"gpu": 1, "problem": "remap_pending", "value": True} in ecc
    assert checks["temperature"]["observed"]["max_c"] == 88
    assert checks["temperature"]["expected"] == {"max_c": 85}
    assert checks["clocks_event_reasons"]["observed"] == {"slowdown": {1: ["sw_thermal"]}}
    assert checks["nvlink"]["observed"]["inactive"] == {1: [1]}
    assert result["msg"].startswith("gpu_validate (quick): 5 of 12 checks failed: xid: critical Xid")


def test_fail_on_never_returns_the_failures_without_failing(node, tools, commands, run_module):
    commands.on([tools["dmesg"]], stdout=DMESG_XID79)
    result = run_module(gpu_validate.main, {"fail_on": "never"})
    assert not result.get("failed")
    assert result["status"] == "fail"
    assert result["failed_checks"] == ["xid"]


def test_missing_gpu_fails_gpu_count_only(node, tools, commands, run_module):
    result = run_module(gpu_validate.main, {"expected_gpu_count": 8, "fail_on": "never"})
    assert result["failed_checks"] == ["gpu_count"]
    gpu_count = by_name(result)["gpu_count"]
    assert gpu_count["observed"]["gpu_count"] == 2
    assert gpu_count["expected"] == 8


def test_fabric_manager_mismatch_and_inactive(node, tools, commands, run_module):
    commands.on([tools["nv-fabricmanager"], "--version"], stdout="Fabric Manager version is : 550.54.15\n")
    commands.on([tools["systemctl"], "is-active", "nvidia-fabricmanager", "nvidia-persistenced"], rc=3, stdout="failed\nactive\n")
    result = run_module(gpu_validate.main, {"fail_on": "never"})
    assert result["failed_checks"] == ["fabricmanager"]
    fm = by_name(result)["fabricmanager"]
    assert fm["observed"] == {"version": "550.54.15", "state": "failed"}
    assert fm["expected"] == {"version": "550.90.07", "state": "active"}
    assert "install nvidia-fabricmanager 550.90.07" in fm["message"]


def test_standard_level_runs_dcgm_level_2_json_and_skips_cuda_smoke_without_a_tool(node, tools, commands, run_module):
    commands.on([*TIMEOUT, tools["dcgmi"], "diag", "-r", "2", "-j"], stdout=DCGM_PASS)
    result = run_module(gpu_validate.main, {"drained": True, "level": "standard"})
    assert result["status"] == "pass", result.get("msg")
    checks = by_name(result)
    assert checks["cuda_smoke"]["status"] == "skip"
    assert "cuda_smoke_command" in checks["cuda_smoke"]["message"]
    assert checks["dcgm_diag"]["status"] == "pass"
    assert checks["dcgm_diag"]["expected"] == {"result": "pass", "level": 2}
    assert [*TIMEOUT, tools["dcgmi"], "diag", "-r", "2", "-j"] in argvs(commands)


def test_dcgm_failure_names_the_test_and_gpu(node, tools, commands, run_module):
    commands.on([*TIMEOUT, tools["dcgmi"], "diag", "-r", "2", "-j"], rc=226, stdout=DCGM_FAIL)
    result = run_module(gpu_validate.main, {"drained": True, "checks": ["dcgm_diag"], "fail_on": "never"})
    dcgm = by_name(result)["dcgm_diag"]
    assert dcgm["status"] == "fail"
    assert dcgm["observed"]["result"] == "fail"
    assert [p["gpus"] for p in dcgm["observed"]["problems"] if p["result"] == "fail"] == [[1]]
    assert "on GPU 1" in dcgm["message"]


def test_full_level_commands_measurements_and_verdicts(node, tools, commands, run_module):
    commands.on([*TIMEOUT, tools["dcgmi"], "diag", "-r", "3", "-j"], stdout=DCGM_PASS)
    commands.on([*TIMEOUT, tools["all_reduce_perf"], "-b", "1G", "-e", "8G", "-f", "2", "-g", "2"], stdout=NCCL)
    commands.on(["/usr/bin/timeout", "--kill-after=10", "1800", tools["gpu_burn"], "10"], stdout=BURN)
    # the CUDA smoke test is the user's command, its path used as given
    commands.on([*TIMEOUT, "/opt/smoke/vectorAdd"], stdout="Test PASSED\n")
    result = run_module(
        gpu_validate.main,
        {"drained": True, "level": "full", "expected_gpu_count": 2, "nccl_min_busbw_gbps": 300, "burn_seconds": 10,
         "cuda_smoke_command": ["/opt/smoke/vectorAdd"]},
    )
    assert result["status"] == "pass", result.get("msg")
    checks = by_name(result)
    assert checks["nccl_busbw"]["observed"]["busbw_gbps"] == pytest.approx(353.642)
    assert checks["nccl_busbw"]["expected"] == {"min_busbw_gbps": 300}
    assert checks["gpu_burn"]["observed"]["gflops"] == [41230.0, 38950.0]
    assert result["measurements"]["busbw_gbps"] == pytest.approx(353.642)
    assert result["measurements"]["gflops_min"] == 38950.0
    assert result["snapshot"]["busbw_gbps"] == pytest.approx(353.642)
    assert argvs(commands)[5:] == [
        [*TIMEOUT, "/opt/smoke/vectorAdd"],
        [*TIMEOUT, tools["dcgmi"], "diag", "-r", "3", "-j"],
        [*TIMEOUT, tools["all_reduce_perf"], "-b", "1G", "-e", "8G", "-f", "2", "-g", "2"],
        ["/usr/bin/timeout", "--kill-after=10", "1800", tools["gpu_burn"], "10"],
    ]


def test_low_busbw_fails_nccl_only(node, tools, commands, run_module):
    commands.on([*TIMEOUT, tools["all_reduce_perf"], "-b", "8M", "-e", "1G", "-f", "2", "-g", "2"], stdout=NCCL)
    result = run_module(
        gpu_validate.main,
        {"drained": True, "checks": ["gpu_count", "nccl_busbw"], "nccl_min_busbw_gbps": 400,
         "nccl_args": ["-b", "8M", "-e", "1G", "-f", "2", "-g", "2"], "fail_on": "never"},
    )
    assert result["failed_checks"] == ["nccl_busbw"]
    nccl = by_name(result)["nccl_busbw"]
    assert nccl["observed"]["busbw_gbps"] == pytest.approx(353.642)
    assert nccl["expected"]["min_busbw_gbps"] == 400
    assert "below the minimum 400 GB/s" in nccl["message"]


@pytest.mark.parametrize("check,argv_tail", [
    ("dcgm_diag", ["dcgmi", "diag", "-r", "3", "-j"]),
    ("nccl_busbw", ["all_reduce_perf", "-b", "1G", "-e", "8G", "-f", "2", "-g", "2"]),
])
def test_timeout_gives_a_failing_check_not_a_crash(node, tools, commands, run_module, check, argv_tail):
    commands.on(["/usr/bin/timeout", "--kill-after=10", "600", tools[argv_tail[0]], *argv_tail[1:]], rc=124)
    result = run_module(gpu_validate.main, {"drained": True, "checks": [check], "level": "full", "timeout": 600, "fail_on": "never", "expected_gpu_count": 2})
    found = by_name(result)[check]
    assert found["status"] == "fail"
    assert found["observed"]["rc"] == 124
    assert "did not finish within 600 s" in found["message"]
    assert "raise the timeout option" in found["message"]


def test_burn_timeout_is_at_least_the_burn_time(node, tools, commands, run_module):
    commands.on(["/usr/bin/timeout", "--kill-after=10", "960", tools["gpu_burn"], "900"], rc=124)
    result = run_module(gpu_validate.main, {"drained": True, "checks": ["gpu_burn"], "burn_seconds": 900, "timeout": 60, "fail_on": "never"})
    burn = by_name(result)["gpu_burn"]
    assert burn["status"] == "fail"
    assert "did not finish within 960 s" in burn["message"]


def test_missing_tool_fails_with_how_to_skip(node, tools, commands, run_module):
    del commands.binaries["dcgmi"]
    result = run_module(gpu_validate.main, {"drained": True, "checks": ["dcgm_diag"], "fail_on": "never"})
    dcgm = by_name(result)["dcgm_diag"]
    assert dcgm["status"] == "fail"
    assert "dcgmi was not found" in dcgm["message"]
    assert "skip_checks" in dcgm["message"]


def test_baseline_dbe_growth_fails_ecc(node, tools, commands, run_module):
    before = run_module(gpu_validate.main, {"fail_on": "never"})
    # GPU 0's volatile counter (first entry) stays 0, its aggregate (second entry) grows to 3
    grown = HEALTHY_XML.replace(
        "<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>@</dram_uncorrectable>", 2
    ).replace("<dram_uncorrectable>@</dram_uncorrectable>", "<dram_uncorrectable>0</dram_uncorrectable>", 1).replace("@", "3")
    commands.on([tools["nvidia-smi"], "-q", "-x"], stdout=grown)
    after = run_module(gpu_validate.main, {"baseline": before, "fail_on": "never"})
    assert after["failed_checks"] == ["ecc"]
    ecc = by_name(after)["ecc"]
    assert ecc["observed"] == [
        {"gpu": 0, "uuid": "GPU-5c0b6e0e-8b8f-4c4b-9a53-0f1b2e1c3d4e", "counter": "aggregate_dbe", "before": 0, "after": 3,
         "problem": "aggregate_dbe_growth", "value": 3}
    ]
    assert ecc["expected"]["growth_since_baseline"] == 0


def test_baseline_busbw_drop_beyond_tolerance_fails(node, tools, commands, run_module):
    commands.on([*TIMEOUT, tools["all_reduce_perf"], "-b", "1G", "-e", "8G", "-f", "2", "-g", "2"], stdout=NCCL)
    base = {"snapshot": {"snapshot_version": 1, "gpus": [], "xid_counts": {}}, "measurements": {"busbw_gbps": 420.0}}
    result = run_module(gpu_validate.main,
                        {"drained": True, "checks": ["nccl_busbw"], "baseline": base, "baseline_busbw_tolerance_pct": 10, "fail_on": "never"})
    nccl = by_name(result)["nccl_busbw"]
    assert nccl["status"] == "fail"
    assert nccl["expected"]["baseline_floor_gbps"] == 378.0
    assert "more than 10% below the baseline 420 GB/s" in nccl["message"]
    # within tolerance: pass
    base["measurements"]["busbw_gbps"] = 380.0
    result = run_module(gpu_validate.main, {"drained": True, "checks": ["nccl_busbw"], "baseline": base, "fail_on": "never"})
    assert by_name(result)["nccl_busbw"]["status"] == "pass"


def test_bad_baseline_and_bad_xid_since_fail_clearly(node, tools, commands, run_module):
    result = run_module(gpu_validate.main, {"baseline": {"foo": 1}})
    assert result["failed"] and result["msg"].startswith("baseline: baseline is neither")
    result = run_module(gpu_validate.main, {"xid_since": "yesterday"})
    assert result["failed"] and "xid_since 'yesterday'" in result["msg"]
    assert commands.calls == []


def test_skip_checks_and_explicit_checks(node, tools, commands, run_module):
    result = run_module(gpu_validate.main, {"skip_checks": ["nvlink", "xid"]})
    assert "nvlink" not in by_name(result) and "xid" not in by_name(result)
    assert [tools["nvidia-smi"], "nvlink", "-s"] not in argvs(commands)


def test_nvidia_smi_without_driver_fails_gpu_count_and_skips_gpu_checks(node, tools, commands, run_module):
    commands.on([tools["nvidia-smi"], "-q", "-x"], rc=9, stdout="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    commands.on([tools["nvidia-smi"], "nvlink", "-s"], rc=9, stdout="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    result = run_module(gpu_validate.main, {"fail_on": "never", "expected_gpu_count": 2})
    checks = by_name(result)
    assert checks["gpu_count"]["status"] == "fail"
    assert "no_driver" in checks["gpu_count"]["message"]
    for name in ("ecc", "temperature", "clocks_event_reasons", "pcie_link"):
        assert checks[name]["status"] == "skip"
    assert checks["nvlink"]["status"] == "fail"


# -- time limits of the reads, option ranges and typed errors (issue 8) ---------------------------


def test_command_timeout_bounds_every_read_the_nvlink_query_too(node, tools, commands, run_module):
    result = run_module(gpu_validate.main, {"expected_gpu_count": 2, "command_timeout": 30})
    assert result["status"] == "pass", result.get("msg")
    assert [call["timeout"] for call in commands.calls] == [30] * 5
    assert commands.calls[-1]["argv"] == [tools["nvidia-smi"], "nvlink", "-s"]


def test_hung_nvlink_query_is_a_failed_verdict_naming_the_limit_and_the_option(node, tools, commands, run_module):
    commands.on(["/usr/bin/timeout", "--kill-after=10", "30", tools["nvidia-smi"], "nvlink", "-s"], rc=124)
    result = run_module(gpu_validate.main, {"expected_gpu_count": 2, "command_timeout": 30, "fail_on": "never"})
    nvlink = by_name(result)["nvlink"]
    assert nvlink["status"] == "fail"
    assert nvlink["message"] == (
        "nvidia-smi did not finish within 30 s (timed out and was stopped): raise the command_timeout option or look for a hung GPU (dmesg, nvidia-smi)"
    )
    assert nvlink["observed"]["rc"] == 124
    assert nvlink["observed"]["cmd"] == ["/usr/bin/timeout", "--kill-after=10", "30", tools["nvidia-smi"], "nvlink", "-s"]
    assert result["failed_checks"] == ["nvlink"]


def test_hung_nvidia_smi_query_fails_the_facts_checks_with_the_limit(node, tools, commands, run_module):
    commands.on(["/usr/bin/timeout", "--kill-after=10", "30", tools["nvidia-smi"], "-q", "-x"], rc=124)
    result = run_module(gpu_validate.main, {"expected_gpu_count": 2, "command_timeout": 30})
    assert result["failed"] is True
    gpu_count = by_name(result)["gpu_count"]
    assert gpu_count["status"] == "fail"
    assert "nvidia-smi did not finish within 30 s" in gpu_count["message"]
    assert "gpu_count: the node's GPU state could not be read: nvidia-smi did not finish within 30 s" in result["msg"]


def test_unreadable_nvlink_output_with_exit_status_0_is_a_failed_verdict(node, tools, commands, run_module):
    commands.on([tools["nvidia-smi"], "nvlink", "-s"], stdout="Failed to initialize NVML: Unknown Error\n")
    result = run_module(gpu_validate.main, {"expected_gpu_count": 2, "fail_on": "never"})
    nvlink = by_name(result)["nvlink"]
    assert nvlink["status"] == "fail"
    assert nvlink["message"].startswith("nvidia-smi nvlink -s: no 'GPU n:' line in the output, which starts 'Failed to initialize NVML")
    assert "skip_checks" in nvlink["message"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"burn_seconds": -1}, "burn_seconds must be a whole number from 1 to 43200 seconds, got -1"),
        ({"burn_seconds": 0}, "burn_seconds must be a whole number from 1 to 43200 seconds, got 0"),
        ({"timeout": 0}, "timeout must be a whole number from 1 to 86400 seconds, got 0"),
        ({"command_timeout": 0}, "command_timeout must be a whole number of seconds from 1 to 3600, got 0"),
        ({"command_timeout": 7200}, "command_timeout must be a whole number of seconds from 1 to 3600, got 7200"),
        ({"max_temperature_c": 0}, "max_temperature_c must be a whole number from 1 to 125 degrees Celsius, got 0"),
        ({"max_temperature_c": 850}, "max_temperature_c must be a whole number from 1 to 125 degrees Celsius, got 850"),
        ({"expected_gpu_count": 0}, "expected_gpu_count must be a whole number from 1 to 64 GPUs, got 0"),
        ({"expected_gpu_count": -8}, "expected_gpu_count must be a whole number from 1 to 64 GPUs, got -8"),
        ({"nccl_min_busbw_gbps": -1}, "nccl_min_busbw_gbps must be a number from 0.001 to 10000 GB/s, got -1.0"),
        ({"nccl_min_busbw_gbps": 1e9}, "nccl_min_busbw_gbps must be a number from 0.001 to 10000 GB/s, got 1000000000.0"),
        ({"nccl_min_busbw_gbps": "nan"}, "nccl_min_busbw_gbps must be a number from 0.001 to 10000 GB/s, got nan"),
        ({"baseline_busbw_tolerance_pct": -5}, "baseline_busbw_tolerance_pct must be a number from 0 to 99.9 percent, got -5.0"),
        ({"baseline_busbw_tolerance_pct": 100}, "baseline_busbw_tolerance_pct must be a number from 0 to 99.9 percent, got 100.0"),
        ({"critical_xids": [79, 0]}, "critical_xids: 0 is not an Xid code (a whole number from 1 to 999)"),
        ({"expected_driver_version": "535.161.8"}, "expected_driver_version '535.161.8' is not a whole NVIDIA driver version"),
        ({"expected_driver_version": "550.90.07\n"}, "expected_driver_version '550.90.07\\n' is not a whole NVIDIA driver version"),
        ({"expected_fabricmanager_version": "latest"}, "expected_fabricmanager_version 'latest' is not a whole NVIDIA driver version"),
        ({"burn_args": ["-tc", ""]}, "burn_args: '' is not an argument"),
    ],
)
def test_out_of_range_options_fail_before_any_command_with_the_range(node, tools, commands, run_module, args, expected):
    result = run_module(gpu_validate.main, args)
    assert result["failed"] is True
    assert result["msg"].startswith(expected), result["msg"]
    assert "checks" not in result
    assert commands.calls == []


@pytest.mark.parametrize("args", [{"burn_seconds": 43200, "timeout": 86400, "command_timeout": 3600, "max_temperature_c": 125,
                                   "expected_gpu_count": 64, "baseline_busbw_tolerance_pct": 0, "nccl_min_busbw_gbps": 0.5}])
def test_the_ends_of_each_range_are_accepted(node, tools, commands, run_module, args):
    result = run_module(gpu_validate.main, dict(args, fail_on="never"))
    assert "checks" in result, result.get("msg")


def test_a_typed_error_in_a_check_is_a_failed_verdict_with_the_command(node, tools, commands, run_module, monkeypatch):
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

    def broken(ctx):
        raise GpufleetError("nvidia-smi printed nonsense", cmd=["/usr/bin/nvidia-smi", "nvlink", "-s"], rc=0)

    monkeypatch.setitem(_validate_levels.CHECKS, "nvlink", (broken, "quick"))
    result = run_module(gpu_validate.main, {"expected_gpu_count": 2, "fail_on": "never"})
    nvlink = by_name(result)["nvlink"]
    assert nvlink["status"] == "fail"
    assert nvlink["message"] == (
        "the nvlink check could not finish: nvidia-smi printed nonsense (command: /usr/bin/nvidia-smi nvlink -s). "
        "Check the tool by hand on the node, or add nvlink to skip_checks"
    )
    assert nvlink["observed"] == {"error": "GpufleetError", "cmd": ["/usr/bin/nvidia-smi", "nvlink", "-s"], "rc": 0}
    assert by_name(result)["gpu_count"]["status"] == "pass"  # the other checks still ran


def test_a_parse_error_in_a_check_is_a_failed_verdict(node, tools, commands, run_module, monkeypatch):
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError

    def broken(ctx):
        raise ParseError("dcgmi diag: no result")

    monkeypatch.setitem(_validate_levels.CHECKS, "nvlink", (broken, "quick"))
    result = run_module(gpu_validate.main, {"expected_gpu_count": 2, "fail_on": "never"})
    assert by_name(result)["nvlink"]["message"].startswith("the nvlink check could not finish: dcgmi diag: no result.")


@pytest.mark.parametrize("exc", [KeyError("bug"), ValueError("a bug, not a tool's answer"), TypeError("bug")])
def test_an_unexpected_exception_in_a_check_is_a_bug_and_is_not_swallowed(node, tools, commands, run_module, monkeypatch, exc):
    def broken(ctx):
        raise exc

    monkeypatch.setitem(_validate_levels.CHECKS, "nvlink", (broken, "quick"))
    with pytest.raises(type(exc)):
        run_module(gpu_validate.main, {"expected_gpu_count": 2, "fail_on": "never"})


def test_a_typed_error_while_gathering_facts_fails_the_facts_checks_not_the_run(node, tools, commands, run_module, monkeypatch):
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

    def broken(self):
        raise GpufleetError("systemctl is-active answered for another unit", cmd=["/usr/bin/systemctl", "is-active"])

    monkeypatch.setattr(_validate_levels.GpuFactsCollector, "_services", broken)
    result = run_module(gpu_validate.main, {"expected_gpu_count": 2, "fail_on": "never"})
    assert by_name(result)["gpu_count"]["status"] == "fail"
    assert "systemctl is-active answered for another unit (command: /usr/bin/systemctl is-active)" in by_name(result)["gpu_count"]["message"]
    assert by_name(result)["nvlink"]["status"] == "pass"


SLURM_FIXTURES = FIXTURES / "slurm"


@pytest.mark.parametrize(
    ("xml", "args", "refused"),
    [
        ("busy", {"level": "standard", "drained": True}, "1 compute process(es) run on its GPUs (pid 41234 python3 on GPU 1)"),
        ("busy", {"level": "full"}, "1 compute process(es) run on its GPUs"),
        ("busy", {"checks": ["gpu_burn"], "drained": True}, "gpu_burn load every GPU"),
        ("idle", {"level": "standard"}, "whether it is drained is not known"),
        ("idle", {"level": "full", "drained": False}, "it is not drained"),
        ("idle", {"level": "standard", "slurm_node_record": "mixed"}, "Slurm shows it MIXED, not drained"),
        ("idle", {"level": "standard", "slurm_node_record": "mixed_drain_ours"}, "Slurm shows it MIXED+DRAIN"),
    ],
)
def test_load_checks_are_refused_on_a_busy_or_undrained_node_before_any_runs(node, tools, commands, run_module, xml, args, refused):
    if xml == "busy":
        commands.on([tools["nvidia-smi"], "-q", "-x"], stdout=HEALTHY_XML)
    if "slurm_node_record" in args:
        args = dict(args, slurm_node_record=(SLURM_FIXTURES / f"show_node_{args['slurm_node_record']}.txt").read_text())
    result = run_module(gpu_validate.main, dict(args, fail_on="never"))
    assert result.get("failed") and refused in result["msg"], result.get("msg")
    assert "Nothing was run" in result["msg"]
    ran = {call["argv"][0] for call in commands.calls}
    assert not ran & {tools["dcgmi"], tools["all_reduce_perf"], tools["gpu_burn"]}, ran


def test_load_checks_run_on_a_node_slurm_shows_drained(node, tools, commands, run_module):
    commands.on([*TIMEOUT, tools["dcgmi"], "diag", "-r", "2", "-j"], stdout=DCGM_PASS)
    record = (SLURM_FIXTURES / "show_node_idle_drain_others.txt").read_text()
    result = run_module(gpu_validate.main, {"level": "standard", "slurm_node_record": record})
    assert result["status"] == "pass", result.get("msg")
    assert by_name(result)["dcgm_diag"]["status"] == "pass"


def test_check_mode_on_a_busy_undrained_node_runs_the_read_only_checks(node, tools, commands, run_module):
    commands.on([tools["nvidia-smi"], "-q", "-x"], stdout=HEALTHY_XML)
    result = run_module(gpu_validate.main, {"level": "full", "fail_on": "never"}, check_mode=True)
    assert not result.get("failed"), result.get("msg")
    assert by_name(result)["dcgm_diag"]["status"] == "skip"


def test_an_unreadable_slurm_record_fails_before_any_command(node, tools, commands, run_module):
    result = run_module(gpu_validate.main, {"level": "standard", "slurm_node_record": ""})
    assert result.get("failed") and "slurm_node_record is not the node's scontrol show node output" in result["msg"]
    assert commands.calls == []


def test_drained_and_slurm_node_record_are_mutually_exclusive(node, tools, commands, run_module):
    result = run_module(gpu_validate.main, {"level": "standard", "drained": True, "slurm_node_record": "x"})
    assert result.get("failed") and "mutually exclusive" in result["msg"]
