"""The driver plan: actions, downgrade refusal, fabric manager following the driver, diff."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.plan import PlanError, diff, parse_checksum, plan

OPTIONS = {"state": "present", "version": "550.90.07", "kernel_module": "open", "fabricmanager": "auto", "allow_downgrade": False}


def current(installed="550.90.07", loaded=None, flavor="open", fm=None, nvswitch=False, held=None):
    loaded = installed if loaded is None else loaded
    return {"driver": {"installed_version": installed, "loaded_version": loaded, "flavor": flavor, "held": held},
            "fabricmanager": {"version": fm}, "nvswitch": nvswitch}


@pytest.mark.parametrize(
    ("node", "options", "driver_action", "fm_action"),
    [
        (current(), {}, "none", "none"),
        (current(installed="535.161.08"), {}, "upgrade", "none"),
        (current(installed=None, flavor=None), {}, "install", "none"),
        (current(installed="570.124.06"), {"allow_downgrade": True}, "downgrade", "none"),
        (current(flavor="proprietary"), {}, "reinstall", "none"),
        (current(loaded="535.161.08"), {}, "activate", "none"),
        (current(held=False), {}, "hold", "none"),
        (current(installed="535.161.08", fm="535.161.08", nvswitch=True), {}, "upgrade", "upgrade"),
        (current(installed="535.161.08", fm="535.161.08", nvswitch=False), {}, "upgrade", "none"),
        (current(fm="535.161.08", nvswitch=True), {}, "none", "upgrade"),
        (current(fm=None, nvswitch=True), {}, "none", "install"),
        (current(fm=None), {"fabricmanager": "present"}, "none", "install"),
        (current(fm="550.90.07"), {"fabricmanager": "absent"}, "none", "remove"),
        (current(fm="535.161.08", nvswitch=True), {"fabricmanager": "skip"}, "none", "none"),
        (current(fm="550.90.07", nvswitch=True), {"state": "absent"}, "remove", "remove"),
        (current(installed=None, loaded=None, flavor=None), {"state": "absent"}, "none", "none"),
    ],
)
def test_actions(node, options, driver_action, fm_action):
    result = plan(node, dict(OPTIONS, **options))
    assert result["driver"]["action"] == driver_action
    assert result["fabricmanager"]["action"] == fm_action
    assert result["changed"] == (driver_action != "none" or fm_action != "none")


def test_downgrade_is_refused_with_the_option_to_set():
    with pytest.raises(PlanError, match=r"driver 570\.124\.06 is installed and 550\.90\.07 is older.*allow_downgrade: true"):
        plan(current(installed="570.124.06"), OPTIONS)


def test_versions_compare_as_numbers_not_text():
    # "550.100.01" > "550.90.07" numerically, < as text
    assert plan(current(installed="550.90.07"), dict(OPTIONS, version="550.100.01"))["driver"]["action"] == "upgrade"


def test_newer_fabric_manager_is_not_silently_downgraded():
    with pytest.raises(PlanError, match=r"fabric manager 570\.124\.06 is newer"):
        plan(current(fm="570.124.06", nvswitch=True), OPTIONS)


def test_bad_version_is_refused():
    with pytest.raises(PlanError, match="not a whole NVIDIA driver version"):
        plan(current(), dict(OPTIONS, version="latest"))


def test_diff_shows_fabricmanager_only_when_managed():
    result = plan(current(installed="535.161.08", fm="535.161.08", nvswitch=True), OPTIONS)
    assert diff(result) == {
        "before": {"driver": "535.161.08", "kernel_module": "open", "fabricmanager": "535.161.08"},
        "after": {"driver": "550.90.07", "kernel_module": "open", "fabricmanager": "550.90.07"},
    }
    assert "fabricmanager" not in diff(plan(current(installed="535.161.08"), OPTIONS))["after"]


@pytest.mark.parametrize("text", ["sha256:" + "AB" * 32, "ab" * 32, "  " + "ab" * 32 + "\n"])
def test_checksum_forms(text):
    assert parse_checksum(text) == "ab" * 32


@pytest.mark.parametrize("text", [None, "md5:" + "ab" * 16, "sha256:" + "ab" * 31, "zz" * 32])
def test_checksum_refused(text):
    with pytest.raises(PlanError, match="not a sha256"):
        parse_checksum(text)
