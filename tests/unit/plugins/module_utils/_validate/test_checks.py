"""gpu_validate fact checks: a pass and a fail case each, with observed and expected values."""

from __future__ import annotations

import copy
import time

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import checks
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.baseline import snapshot
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.levels import Context


def gpu(index, **changes):
    base = {
        "index": index,
        "uuid": f"GPU-{index:04d}",
        "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "ecc": {"volatile_dbe": 0, "aggregate_dbe": 0},
        "remapped_rows": {"uncorrectable": 0, "pending": False, "failure": False},
        "retired_pages": None,
        "temperature_c": 35,
        "clocks_event_reasons_active": ["gpu_idle"],
        "performance_state": "P0",
        "pcie": {"gen_max": 5, "gen_current": 5, "width_max": 16, "width_current": 16},
    }
    base.update(changes)
    return base


def healthy_facts(count=2):
    return {
        "boot_id": "boot-1",
        "driver": {"installed": True, "loaded": True, "version": "550.90.07"},
        "nvidia_smi": "ok",
        "gpu_count": count,
        "pci_gpu_count": count,
        "gpus": [gpu(i) for i in range(count)],
        "nvswitch": {"present": True, "count": 4},
        "fabricmanager": {"installed": True, "version": "550.90.07", "state": "active", "running": True},
        "xid": {"source": "dmesg", "events": [], "counts": {}, "critical": []},
    }


def ctx(facts=None, baseline=None, boot_time=None, **options):
    opts = {"max_temperature_c": 85, "xid_since": "boot"}
    opts.update(options)
    return Context(opts, facts=facts if facts is not None else healthy_facts(), baseline=baseline, boot_time=boot_time)


# --------------------------------------------------------------------------- gpu_count


def test_gpu_count_pass_and_missing_gpu():
    result = checks.check_gpu_count(ctx(expected_gpu_count=2))
    assert (result["status"], result["observed"]["gpu_count"], result["expected"]) == ("pass", 2, 2)
    facts = healthy_facts(7)
    facts["pci_gpu_count"] = 8
    result = checks.check_gpu_count(ctx(facts, expected_gpu_count=8))
    assert result["status"] == "fail"
    assert result["observed"] == {"gpu_count": 7, "pci_gpu_count": 8, "nvidia_smi": "ok"}
    assert result["expected"] == 8
    assert "sees 7 GPUs, 8 expected" in result["message"]


def test_gpu_count_without_expectation_compares_with_the_pci_bus():
    facts = healthy_facts(7)
    facts["pci_gpu_count"] = 8
    result = checks.check_gpu_count(ctx(facts))
    assert (result["status"], result["expected"]) == ("fail", 8)


def test_gpu_count_gpu_lost_says_what_happened():
    facts = healthy_facts()
    facts.update(nvidia_smi="gpu_lost", gpus=[], gpu_count=0, nvidia_smi_message="Unable to determine the device handle for GPU0000:2A:00.0: Unknown Error")
    result = checks.check_gpu_count(ctx(facts, expected_gpu_count=2))
    assert result["status"] == "fail"
    assert "fallen off the bus" in result["message"]
    assert "Unable to determine the device handle" in result["message"]


def test_unreadable_facts_fail_gpu_count_and_skip_per_gpu_checks():
    context = Context({"max_temperature_c": 85}, facts=None, facts_error="nvidia-smi -q -x printed garbage")
    assert checks.check_gpu_count(context)["status"] == "fail"
    assert checks.check_ecc(context)["status"] == "skip"
    assert "nvidia-smi -q -x printed garbage" in checks.check_temperature(context)["message"]


# --------------------------------------------------------------------------- driver


def test_driver_version_pass_and_mismatch():
    assert checks.check_driver_version(ctx(expected_driver_version="550.90.07"))["status"] == "pass"
    result = checks.check_driver_version(ctx(expected_driver_version="570.124.06"))
    assert (result["status"], result["observed"], result["expected"]) == ("fail", "550.90.07", "570.124.06")


def test_driver_not_loaded_and_user_space_mismatch_fail():
    facts = healthy_facts()
    facts["driver"]["loaded"] = False
    assert checks.check_driver_version(ctx(facts))["status"] == "fail"
    facts = healthy_facts()
    facts["nvidia_smi"] = "version_mismatch"
    assert "reboot" in checks.check_driver_version(ctx(facts))["message"]


# --------------------------------------------------------------------------- fabric manager


def test_fabricmanager_pass_defaults_to_the_driver_version():
    result = checks.check_fabricmanager(ctx())
    assert result["status"] == "pass"
    assert result["expected"] == {"version": "550.90.07", "state": "active"}


def test_fabricmanager_mismatch_fails_with_both_versions():
    facts = healthy_facts()
    facts["fabricmanager"].update(version="550.54.15")
    result = checks.check_fabricmanager(ctx(facts))
    assert result["status"] == "fail"
    assert result["observed"] == {"version": "550.54.15", "state": "active"}
    assert "fabric manager 550.54.15 does not match the driver 550.90.07" in result["message"]


def test_fabricmanager_down_fails():
    facts = healthy_facts()
    facts["fabricmanager"].update(state="inactive", running=False)
    result = checks.check_fabricmanager(ctx(facts))
    assert result["status"] == "fail"
    assert result["observed"]["state"] == "inactive"
    assert "nvidia-fabricmanager is inactive" in result["message"]


def test_fabricmanager_skipped_without_nvswitch_unless_a_version_is_expected():
    facts = healthy_facts()
    facts["nvswitch"] = {"present": False, "count": 0}
    assert checks.check_fabricmanager(ctx(facts))["status"] == "skip"
    assert checks.check_fabricmanager(ctx(facts, expected_fabricmanager_version="550.90.07"))["status"] == "pass"


# --------------------------------------------------------------------------- Xid


def with_events(*events):
    facts = healthy_facts()
    facts["xid"]["events"] = [dict({"kind": "xid", "pci_bus_id": "0000:2a:00", "timestamp": None}, **e) for e in events]
    counts = {}
    for e in facts["xid"]["events"]:
        counts[e["xid"]] = counts.get(e["xid"], 0) + 1
    facts["xid"]["counts"] = counts
    return facts


def test_xid_pass_with_only_application_xids():
    result = checks.check_xid(ctx(with_events({"xid": 13})))
    assert result["status"] == "pass"
    assert result["observed"] == {"critical": {}, "counts": {13: 1}}
    assert "other Xids: 13 x1" in result["message"]


def test_xid_79_fails_with_catalog_text():
    result = checks.check_xid(ctx(with_events({"xid": 79}, {"xid": 13})))
    assert result["status"] == "fail"
    assert result["observed"]["critical"] == {79: 1}
    assert result["expected"] == {"critical": {}, "since": "boot"}
    assert "Xid 79 (GPU has fallen off the bus) x1" in result["message"]


def test_xid_configurable_list():
    assert checks.check_xid(ctx(with_events({"xid": 13}), critical_xids=[13]))["status"] == "fail"
    assert checks.check_xid(ctx(with_events({"xid": 79}), critical_xids=[48]))["status"] == "pass"


def test_xid_since_drops_older_events_and_keeps_undated_ones():
    boot = time.mktime((2025, 1, 21, 4, 0, 0, 0, 0, -1))
    facts = with_events({"xid": 79, "timestamp": "100.5"}, {"xid": 48, "timestamp": "7200.0"}, {"xid": 119, "timestamp": None})
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(boot + 3600))
    result = checks.check_xid(ctx(facts, boot_time=boot, xid_since=since))
    assert result["observed"]["critical"] == {48: 1, 119: 1}
    assert result["observed"]["undated_events"] == 1


def test_xid_unreadable_kernel_log_fails_and_no_reader_skips():
    facts = healthy_facts()
    facts["xid"] = {"source": "dmesg", "error": "dmesg: read kernel buffer failed: Operation not permitted", "events": [], "counts": {}}
    result = checks.check_xid(ctx(facts))
    assert result["status"] == "fail" and "become: true" in result["message"]
    facts["xid"] = {"source": None, "events": [], "counts": {}}
    assert checks.check_xid(ctx(facts))["status"] == "skip"


def test_xid_growth_since_baseline_in_the_same_boot_warns():
    base = snapshot(with_events({"xid": 13}))
    result = checks.check_xid(ctx(with_events({"xid": 13}, {"xid": 13}, {"xid": 31}), baseline=base))
    assert result["status"] == "warn"
    assert result["observed"]["grown"] == {13: {"before": 1, "after": 2}, 31: {"before": 0, "after": 1}}


@pytest.mark.parametrize("text,expected", [
    ("2025-01-21T04:41:44Z", 1737434504.0),
    ("2025-01-21T05:41:44+01:00", 1737434504.0),
    ("2025-01-21T04:41:44,283302+00:00", 1737434504.283302),
    ("1737434504", 1737434504.0),
])
def test_parse_since(text, expected):
    assert checks.parse_since(text) == pytest.approx(expected)


def test_parse_since_boot_and_garbage():
    assert checks.parse_since("boot") is None
    with pytest.raises(ValueError, match="xid_since"):
        checks.parse_since("last tuesday")


@pytest.mark.parametrize("text", ["2025-13-01T00:00:00Z", "2025-02-31T00:00:00Z", "2025-01-21T25:00:00", "2025-01-21T04:41:44Z trailing"])
def test_parse_since_refuses_times_that_do_not_exist_naming_the_option(text):
    # A 13th month used to end as "month must be in 1..12" (no option named); 31 February rolled over to March.
    with pytest.raises(ValueError, match=r"^xid_since '.*' is neither 'boot'"):
        checks.parse_since(text)


def test_event_epoch_of_an_impossible_kernel_log_time_is_unknown_not_a_crash():
    assert checks.event_epoch("2025-13-01T00:00:00+00:00", None) is None


def test_event_epoch_forms():
    assert checks.event_epoch("12.5", 1000.0) == 1012.5
    assert checks.event_epoch("12.5", None) is None
    assert checks.event_epoch("2025-01-21T04:41:44,283302+00:00", None) == pytest.approx(1737434504.283302)
    local = time.mktime((2024, 4, 5, 21, 29, 39, 0, 0, -1))
    assert checks.event_epoch("Fri Apr  5 21:29:39 2024", None) == local
    assert checks.event_epoch("not a time", 0) is None


# --------------------------------------------------------------------------- ECC


def test_ecc_pass():
    result = checks.check_ecc(ctx())
    assert result["status"] == "pass"
    assert result["observed"] == {"volatile_dbe": 0, "aggregate_dbe": 0}


def test_ecc_volatile_dbe_remap_and_retirement_pending_fail():
    facts = healthy_facts()
    facts["gpus"][1]["ecc"]["volatile_dbe"] = 2
    facts["gpus"][1]["remapped_rows"]["pending"] = True
    facts["gpus"][0]["remapped_rows"] = None
    facts["gpus"][0]["retired_pages"] = {"pending": True, "double_bit": 1}
    result = checks.check_ecc(ctx(facts))
    assert result["status"] == "fail"
    assert result["observed"] == [
        {"gpu": 0, "problem": "retirement_pending", "value": True},
        {"gpu": 1, "problem": "volatile_dbe", "value": 2},
        {"gpu": 1, "problem": "remap_pending", "value": True},
    ]
    assert result["expected"] == {"volatile_dbe": 0, "remap_pending": False, "retirement_pending": False}


def test_ecc_disabled_warns_with_observed_and_expected_mode():
    facts = healthy_facts()
    facts["gpus"][1]["ecc_mode_current"] = "Disabled"
    facts["gpus"][1]["ecc"] = {"volatile_dbe": None, "aggregate_dbe": None}
    facts["gpus"][0]["ecc_mode_current"] = "Enabled"
    result = checks.check_ecc(ctx(facts))
    assert result["status"] == "warn"
    assert result["observed"] == {"ecc_mode": {1: "Disabled"}, "volatile_dbe": None}
    assert result["expected"]["ecc_mode"] == "Enabled"
    assert "ECC is disabled on GPU 1" in result["message"]


def test_ecc_mode_unknown_is_not_a_warning():
    # GPUs without ECC support report no mode (nvidia-smi prints N/A): nothing to turn on.
    facts = healthy_facts()
    for item in facts["gpus"]:
        item["ecc_mode_current"] = None
        item["ecc"] = {"volatile_dbe": None, "aggregate_dbe": None}
    assert checks.check_ecc(ctx(facts))["status"] == "pass"


def test_ecc_failure_outranks_disabled_mode():
    facts = healthy_facts()
    facts["gpus"][0]["ecc_mode_current"] = "Disabled"
    facts["gpus"][1]["remapped_rows"]["pending"] = True
    assert checks.check_ecc(ctx(facts))["status"] == "fail"


def test_ecc_growth_since_baseline_fails():
    before = healthy_facts()
    after = copy.deepcopy(before)
    after["gpus"][1]["ecc"]["aggregate_dbe"] = 4
    after["gpus"][1]["remapped_rows"]["uncorrectable"] = 1
    result = checks.check_ecc(ctx(after, baseline=snapshot(before)))
    assert result["status"] == "fail"
    assert [(p["gpu"], p["counter"], p["before"], p["after"]) for p in result["observed"]] == [
        (1, "aggregate_dbe", 0, 4),
        (1, "remapped_uncorrectable", 0, 1),
    ]


# --------------------------------------------------------------------------- temperature and clocks


def test_temperature_pass_and_fail():
    assert checks.check_temperature(ctx())["status"] == "pass"
    facts = healthy_facts()
    facts["gpus"][1]["temperature_c"] = 87
    result = checks.check_temperature(ctx(facts))
    assert result["status"] == "fail"
    assert result["observed"] == {"max_c": 87, "per_gpu": {0: 35, 1: 87}}
    assert result["expected"] == {"max_c": 85}


def test_clocks_thermal_slowdown_fails_power_cap_warns():
    facts = healthy_facts()
    facts["gpus"][1]["clocks_event_reasons_active"] = ["hw_slowdown", "hw_thermal"]
    result = checks.check_clocks(ctx(facts))
    assert result["status"] == "fail"
    assert result["observed"] == {"slowdown": {1: ["hw_slowdown", "hw_thermal"]}}
    facts["gpus"][1]["clocks_event_reasons_active"] = ["sw_power_cap"]
    assert checks.check_clocks(ctx(facts))["status"] == "warn"
    assert checks.check_clocks(ctx())["status"] == "pass"


# --------------------------------------------------------------------------- PCIe


def test_pcie_width_fails_idle_gen_warns_loaded_gen_fails():
    assert checks.check_pcie(ctx())["status"] == "pass"
    facts = healthy_facts()
    facts["gpus"][0]["pcie"]["width_current"] = 8
    result = checks.check_pcie(ctx(facts))
    assert result["status"] == "fail"
    assert result["observed"]["links"][0] == "Gen5/5 x8/16"
    facts = healthy_facts()
    facts["gpus"][0]["pcie"]["gen_current"] = 1
    assert checks.check_pcie(ctx(facts))["status"] == "warn"
    facts["gpus"][0]["clocks_event_reasons_active"] = []
    assert checks.check_pcie(ctx(facts))["status"] == "fail"
