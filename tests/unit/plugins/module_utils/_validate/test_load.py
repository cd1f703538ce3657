"""gpu_validate tool checks without a module: levels, baseline forms, NVLink and gpu-burn verdicts (the NVLink parser: _parsers/test_nvlink.py)."""

from __future__ import annotations

import pathlib

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import baseline, levels, load
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.load import nccl_argv

OWN = pathlib.Path(__file__).resolve().parents[4] / "fixtures" / "validate"


def test_levels_include_each_other_and_document_their_checks():
    quick = levels.checks_for_level("quick")
    standard = levels.checks_for_level("standard")
    full = levels.checks_for_level("full")
    assert quick == ["gpu_count", "driver_version", "fabricmanager", "xid", "ecc", "temperature", "clocks_event_reasons", "pcie_link", "nvlink",
                     "ib_ports", "peermem", "dcgm"]
    assert standard == [*quick, "cuda_smoke", "dcgm_diag"]
    assert full == [*standard, "nccl_busbw", "gpu_burn"]


def test_select_checks_overrides_level_keeps_run_order_and_refuses_unknown_names():
    assert levels.select_checks("quick", checks=["gpu_burn", "xid"]) == ["xid", "gpu_burn"]
    assert levels.select_checks("full", skip_checks=["gpu_burn", "nccl_busbw", "dcgm_diag"])[-1] == "cuda_smoke"
    with pytest.raises(ValueError, match="unknown check burn"):
        levels.select_checks("quick", checks=["burn"])
    with pytest.raises(ValueError, match="unknown level"):
        levels.checks_for_level("extreme")


def test_nccl_default_arguments_use_every_gpu():
    assert nccl_argv({}, 8) == ["-b", "1G", "-e", "8G", "-f", "2", "-g", "8"]
    assert nccl_argv({"nccl_args": ["-b", "8", "-e", "128M"]}, 8) == ["-b", "8", "-e", "128M"]


FACTS = {
    "boot_id": "boot-1",
    "driver": {"version": "550.90.07"},
    "gpus": [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:18:00.0", "ecc": {"volatile_dbe": 0, "aggregate_dbe": 2},
              "remapped_rows": {"uncorrectable": 1}, "retired_pages": None}],
    "xid": {"counts": {"13": 2}},
}


@pytest.mark.parametrize("form", [
    pytest.param({"ansible_facts": {"gpufleet": FACTS}, "changed": False}, id="registered-gpu_facts"),
    pytest.param({"gpufleet": FACTS}, id="ansible_facts"),
    pytest.param(FACTS, id="facts"),
    pytest.param({"snapshot": baseline.snapshot(FACTS), "measurements": {"busbw_gbps": 350.5}, "status": "pass"}, id="gpu_validate-result"),
])
def test_baseline_forms_reduce_to_the_same_snapshot(form):
    found = baseline.normalize(form)
    assert found["boot_id"] == "boot-1"
    assert found["xid_counts"] == {13: 2}
    assert found["gpus"][0]["aggregate_dbe"] == 2
    assert found["gpus"][0]["remapped_uncorrectable"] == 1


def test_baseline_from_a_result_carries_bandwidth_and_floor():
    found = baseline.normalize({"snapshot": baseline.snapshot(FACTS), "measurements": {"busbw_gbps": 400.0}})
    assert baseline.busbw_floor(found, 10) == 360.0
    assert baseline.busbw_floor(baseline.normalize(FACTS), 10) is None


def test_baseline_refuses_other_dicts_and_accepts_none():
    assert baseline.normalize(None) is None
    assert baseline.normalize({}) is None
    with pytest.raises(baseline.BaselineError, match="keys seen: rc, stdout"):
        baseline.normalize({"rc": 0, "stdout": ""})


def test_ecc_growth_matches_gpus_by_uuid_not_position():
    before = baseline.snapshot(FACTS)
    after_facts = {"gpus": [
        {"index": 0, "uuid": "GPU-b", "ecc": {"aggregate_dbe": 9}},  # another GPU now enumerates first
        {"index": 1, "uuid": "GPU-a", "ecc": {"aggregate_dbe": 2}, "remapped_rows": {"uncorrectable": 1}},
    ]}
    assert baseline.ecc_growth(baseline.snapshot(after_facts), before) == []


# --------------------------------------------------------------------------- check_nvlink verdicts


class FakeTools:
    """ValidationTools stand-in: every tool answers ``argv`` from a table and records the call."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def tool(self, cls, option=None):
        return self

    def run(self, args, ok_rcs=(0,), timeout=None, data=None):
        self.calls.append(list(args))
        return self.answers[tuple(args)]


def nvlink_ctx(text, nvswitch, rc=0):
    tools = FakeTools({("nvlink", "-s"): (rc, text, "")})
    return levels.Context({}, facts={"nvswitch": {"present": nvswitch, "count": 4 if nvswitch else 0}}, tools=tools)


H100 = "GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:04d})\n"
LINKS_UP = "\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n"


def test_nvlink_all_gpus_with_the_same_links_pass():
    result = load.check_nvlink(nvlink_ctx(H100.format(i=0) + LINKS_UP + H100.format(i=1) + LINKS_UP, nvswitch=True))
    assert result["status"] == "pass"
    assert result["observed"]["active_links"] == {0: 2, 1: 2}
    assert result["message"] == "2 NVLink links up on each of 2 GPUs"


def test_nvlink_gpu_without_link_lines_counts_as_zero_links():
    # GPU 1 prints only its header: it lost every link (the old check passed with "on each of 1 GPUs").
    result = load.check_nvlink(nvlink_ctx(H100.format(i=0) + LINKS_UP + H100.format(i=1), nvswitch=False))
    assert result["status"] == "fail"
    assert result["observed"]["active_links"] == {0: 2, 1: 0}
    assert result["expected"]["active_links_per_gpu"] == 2
    assert "GPU 1 has 0" in result["message"]


def test_nvlink_majority_count_is_the_expectation():
    text = "".join(H100.format(i=i) + LINKS_UP for i in range(3)) + H100.format(i=3) + "\t Link 0: 26.562 GB/s\n"
    result = load.check_nvlink(nvlink_ctx(text, nvswitch=True))
    assert result["status"] == "fail"
    assert result["observed"]["active_links"] == {0: 2, 1: 2, 2: 2, 3: 1}
    assert result["expected"]["active_links_per_gpu"] == 2
    assert "GPU 3 has 1" in result["message"] and "GPU 0" not in result["message"]


def test_nvlink_nvswitch_node_without_any_link_fails_not_skips():
    result = load.check_nvlink(nvlink_ctx(H100.format(i=0) + H100.format(i=1), nvswitch=True))
    assert result["status"] == "fail"
    assert result["observed"] == {"links": 0, "gpus": 2, "nvswitch": True}
    assert "NVSwitch" in result["message"]


def test_nvlink_without_nvswitch_and_without_links_is_skipped():
    result = load.check_nvlink(nvlink_ctx(H100.format(i=0) + H100.format(i=1), nvswitch=False))
    assert result["status"] == "skip"
    assert "no NVLink" in result["message"]


def test_nvlink_mig_gpus_are_skipped_even_on_nvswitch_nodes():
    unsupported = "Nvlink queries are not supported for Devices in MIG mode\n"  # as a real H100 in MIG mode prints it
    result = load.check_nvlink(nvlink_ctx(H100.format(i=0) + unsupported, nvswitch=True))
    assert result["status"] == "skip"
    assert "not supported" in result["message"]


# --------------------------------------------------------------------------- check_gpu_burn: every GPU tested

BURN = (OWN / "gpu_burn_2gpu_10s_pass.txt").read_text()  # "Tested 2 GPUs", both OK


def burn_ctx(facts_gpus, **options):
    tools = FakeTools({("10",): (0, BURN, ""), ("-i", "0", "10"): (0, BURN, "")})
    return levels.Context(dict({"burn_seconds": 10}, **options), facts={"gpu_count": facts_gpus}, tools=tools)


def test_gpu_burn_passes_when_it_tested_every_gpu():
    result = load.check_gpu_burn(burn_ctx(2))
    assert result["status"] == "pass"
    assert result["observed"]["tested_gpus"] == 2


@pytest.mark.parametrize(("facts_gpus", "options"), [(3, {}), (2, {"expected_gpu_count": 3})])
def test_gpu_burn_fails_when_it_tested_fewer_gpus_than_the_node_has(facts_gpus, options):
    result = load.check_gpu_burn(burn_ctx(facts_gpus, **options))
    assert result["status"] == "fail"
    assert result["observed"]["tested_gpus"] == 2
    assert result["expected"]["tested_gpus"] == 3
    assert "tested 2 of 3 GPUs" in result["message"]


def test_gpu_burn_on_one_chosen_gpu_is_not_counted():
    result = load.check_gpu_burn(burn_ctx(8, burn_args=["-i", "0"]))
    assert result["status"] == "pass"
