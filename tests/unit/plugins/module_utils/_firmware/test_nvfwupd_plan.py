"""The nvfwupd plan: version order per field (hex fields as numbers), Up-To-Date where the order is unknown,
staged firmware not flashed again, activations reduced to what is needed."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware import nvfwupd_plan as plan


@pytest.mark.parametrize(
    ("installed", "package", "order"),
    [
        ("96.00.A5.00.01", "96.00.AF.00.01", -1),
        ("96.00.AF.00.01", "96.00.99.00.01", 1),
        ("HGX-22.10-1", "HGX-24.04-2", -1),
        ("HGX-24.04-2", "HGX-22.10-1", 1),
        ("1.7.5F", "1.7.60", -1),
        ("01.03.0250.0000_n04", "01.03.0250.0000_n05", -1),
        ("0.1C", "0.1C", 0),
        ("1.2", "1.2.3", None),
        ("GB200-1.0", "HGX-1.0", None),
    ],
)
def test_compare_versions(installed, package, order):
    assert plan.compare_versions(installed, package) == order


def row(ap, sys, pkg, staged=None, up=False):
    return {"ap": ap, "sys_version": sys, "pkg_version": pkg, "staged_version": staged, "up_to_date": up}


def test_plan_actions_and_activations():
    rows = plan.plan(
        [
            row("HGX_FW_BMC_0", "HGX-22.10-1", "HGX-24.04-2"),
            row("HGX_FW_CPLD_0", "0.1C", None),
            row("HGX_FW_GPU_SXM_1", "96.00.AF.00.01", "96.00.A5.00.01"),
            row("HGX_FW_GPU_SXM_2", "96.00.A5.00.01", "96.00.AF.00.01", staged="96.00.AF.00.01"),
            row("HGX_FW_NVSwitch_0", "1.2", "1.2.3", up=True),  # order unknown: Up-To-Date Yes with another version is a newer system
            row("HGX_FW_PCIeSwitch_0", "1.7.5F", "1.7.5F"),
        ]
    )
    assert [(r["component"], r["action"], r["activation"]) for r in rows] == [
        ("HGX_FW_BMC_0", "update", "bmc_reset"),
        ("HGX_FW_GPU_SXM_1", "downgrade", "gpu_reset"),
        ("HGX_FW_GPU_SXM_2", "activate", "gpu_reset"),
        ("HGX_FW_NVSwitch_0", "downgrade", "ac_power_cycle"),
        ("HGX_FW_PCIeSwitch_0", "none", "none"),
    ]
    assert plan.activations(rows) == ["ac_power_cycle"]
    assert plan.activations(rows[:3]) == ["gpu_reset", "bmc_reset"]
    assert plan.activations([{"activation": "gpu_reset"}, {"activation": "reboot"}]) == ["reboot"]


def test_a_gb200_trays_every_component_activates_with_its_ac_power_cycle():
    """NVIDIA's GB300 compute flow flashes the tray, then AuxPowerCycles it: a GPU reset or the HMC's own reset
    activates nothing there."""
    components = [row("HGX_FW_BMC_0", "HGX-22.10-1", "HGX-24.04-2"), row("HGX_FW_GPU_0", "97.00.B9.00.69", "97.00.C5.00.01"),
                  row("HGX_FW_CPU_0", "02.04.07", "02.04.07")]
    rows = plan.plan(components, tray=True)
    assert [(r["component"], r["action"], r["activation"]) for r in rows] == [
        ("HGX_FW_BMC_0", "update", "ac_power_cycle"),
        ("HGX_FW_GPU_0", "update", "ac_power_cycle"),
        ("HGX_FW_CPU_0", "none", "none"),
    ]
    assert plan.activations(rows) == ["ac_power_cycle"]
    assert plan.activations(plan.plan(components)) == ["gpu_reset", "bmc_reset"]  # the same names on an HGX board


def test_targets_limit_the_plan_and_unknown_ones_are_refused():
    components = [row("HGX_FW_GPU_SXM_1", "a", "b"), row("HGX_FW_GPU_SXM_2", "a", "b")]
    assert [r["component"] for r in plan.plan(components, ["HGX_FW_GPU_SXM_2"])] == ["HGX_FW_GPU_SXM_2"]
    with pytest.raises(plan.PlanError, match="HGX_FW_CPLD_0 are not components"):
        plan.plan(components, ["HGX_FW_CPLD_0"])


def test_another_version_staged_over_the_package_is_replaced():
    """Installed at the package's version, an older one staged: the next reset would leave the package; flash it again."""
    rows = plan.plan([row("HGX_FW_GPU_SXM_1", "96.00.AF.00.01", "96.00.AF.00.01", staged="96.00.99.00.01")])
    assert [(r["action"], r["activation"]) for r in rows] == [("replace_staged", "none")]
    assert plan.plan([row("HGX_FW_GPU_SXM_1", "96.00.AF.00.01", "96.00.AF.00.01", staged="96.00.AF.00.01")])[0]["action"] == "none"


@pytest.mark.parametrize(
    ("found_on", "stale_record", "to_flash", "action"),
    [
        (False, False, False, "none"),
        (False, False, True, "none"),
        (False, True, False, "forget"),  # the killed run's disable got through: only its record is left
        (False, True, True, "forget"),
        (True, True, False, "turn_off"),  # ours, left open by a killed run: closed whatever this run does
        (True, True, True, "turn_off"),
        (True, False, False, "report"),  # someone else's: not ours to close
        (True, False, True, "refuse"),  # and no flash through it
    ],
)
def test_force_update_action(found_on, stale_record, to_flash, action):
    assert plan.force_update_action(found_on, stale_record, to_flash) == action


def test_force_update_action_needs_a_status_read():
    with pytest.raises(plan.PlanError, match="force_update status must be true or false"):
        plan.force_update_action(None, True, True)
