"""The OFED component's decisions: options, the installer's and package manager's argument lists (firmware updater always
off), the plan (action, downgrade refusal, openibd restart refused under opensm / nvme-rdma, peermem rebuild)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._ofed import plan as planner
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._ofed.plan import OfedError

SUM = "sha256:" + "ab" * 32
OPTIONS = {"flavor": "doca-ofed", "version": "24.10-1.1.4.0.200", "method": "package", "source": None, "checksum": None,
           "packages": None, "installer_args": [], "reload": "auto", "peermem": "auto", "package_manager": "auto", "allow_downgrade": False}


def options(**changes):
    return planner.check_options(dict(OPTIONS, **changes))


def current(flavor="doca-ofed", version="24.04-0.6.6", driver="570.124.06", dkms=True, peermem_installed=True, peermem_loaded=True,
            opensm=None, modules=None, fw_updater=False, onboot="no"):
    ofed = {"installed": flavor != "inbox", "flavor": flavor, "version": None if flavor == "inbox" else version}
    loaded = {"nvidia": {"used_by": []}, "ib_core": {"used_by": []}, **({"nvidia_peermem": {"used_by": []}} if peermem_loaded else {})}
    loaded.update(modules or {})
    return {
        "kernel": "6.8.0-90-generic",
        "ofed": ofed,
        "modules": loaded,
        "opensm_units": {"opensmd": "active" if opensm == "opensmd" else "inactive", "opensm": "active" if opensm == "opensm" else "inactive"},
        "driver": {"version": driver, "dkms": dkms},
        "peermem": {"installed": peermem_installed, "loaded": peermem_loaded},
        "fw_updater": {"installed": fw_updater, "onboot": onboot},
    }


@pytest.mark.parametrize(
    ("node", "changes", "action", "reload", "peermem"),
    [
        (current(version="24.10-1.1.4.0.200"), {}, "none", "none", "none"),
        (current(), {}, "upgrade", "restart", "rebuild"),
        (current(flavor="inbox"), {}, "install", "restart", "rebuild"),
        (current(flavor="mlnx-ofed", version="24.10-1.1.4.0"), {}, "replace", "restart", "rebuild"),
        (current(version="25.10-1.7.1"), {"allow_downgrade": True}, "downgrade", "restart", "rebuild"),
        (current(), {"reload": "reboot"}, "upgrade", "reboot", "rebuild"),
        (current(opensm="opensmd"), {}, "upgrade", "reboot", "rebuild"),
        (current(opensm="opensm"), {}, "upgrade", "reboot", "rebuild"),
        (current(modules={"nvme_rdma": {"used_by": []}}), {}, "upgrade", "reboot", "rebuild"),
        (current(modules={"nvmet_rdma": {"used_by": []}}), {}, "upgrade", "reboot", "rebuild"),
        (current(modules={"mlx_compat": {"used_by": ["nvme_core", "nvme_fabrics"]}}), {}, "upgrade", "reboot", "rebuild"),
        (current(modules={"mlx_compat": {"used_by": ["mlx5_core", "ib_core"]}}), {}, "upgrade", "restart", "rebuild"),
        # opensm running on a node whose OFED does not change: nothing to reload, nothing refused
        (current(version="24.10-1.1.4.0.200", opensm="opensmd"), {}, "none", "none", "none"),
        (current(), {"peermem": "skip"}, "upgrade", "restart", "skip"),
        (current(driver=None), {}, "upgrade", "restart", "none"),
        (current(peermem_installed=False, peermem_loaded=False), {}, "upgrade", "restart", "none"),
        (current(version="24.10-1.1.4.0.200", peermem_loaded=False), {"peermem": "required"}, "none", "none", "load"),
        (current(version="24.10-1.1.4.0.200", peermem_loaded=False), {}, "none", "none", "none"),
    ],
)
def test_plan(node, changes, action, reload, peermem):
    result = planner.plan(node, options(**changes))
    assert (result["action"], result["reload"], result["peermem"]) == (action, reload, peermem)
    assert result["changed"] == (action != "none" or peermem in ("load", "rebuild"))


def test_opensm_and_nvme_name_what_holds_the_stack():
    node = current(opensm="opensmd", modules={"nvme_rdma": {"used_by": []}, "mlx_compat": {"used_by": ["nvme_fabrics"]}})
    assert planner.plan(node, options())["holders"] == ["opensmd is running", "nvme_rdma is loaded", "mlx_compat is in use by nvme_fabrics"]


def test_unknown_modules_hold_nothing():
    assert planner.stack_holders({}, None) == []


def test_downgrade_refused_without_allow_downgrade():
    with pytest.raises(OfedError, match=r"refusing to downgrade.*allow_downgrade: true.*Nothing was changed"):
        planner.plan(current(version="25.10-1.7.1"), options())


def test_peermem_of_a_driver_without_dkms_refused_before_anything_changes():
    with pytest.raises(OfedError, match=r"570\.124\.06 was not installed with DKMS.*peermem: skip.*Nothing was changed"):
        planner.plan(current(dkms=False), options())


def test_peermem_skip_lets_a_driver_without_dkms_through():
    assert planner.plan(current(dkms=False), options(peermem="skip"))["peermem"] == "skip"


@pytest.mark.parametrize(
    ("node", "method", "fw_updater"),
    [
        (current(version="24.10-1.1.4.0.200", fw_updater=True), "package", ["remove"]),
        (current(version="24.10-1.1.4.0.200", fw_updater=True), "installer", []),  # the installer's own, never run (--without-fw-update)
        (current(version="24.10-1.1.4.0.200", onboot="yes"), "package", ["disable_onboot"]),
        (current(version="24.10-1.1.4.0.200", onboot="yes", fw_updater=True), "package", ["disable_onboot", "remove"]),
        (current(version="24.10-1.1.4.0.200", onboot=None), "package", []),
    ],
)
def test_firmware_updater_kept_off(node, method, fw_updater):
    extra = {"source": "/tmp/b.tgz", "checksum": SUM} if method == "installer" else {}
    result = planner.plan(node, options(method=method, **extra))
    assert result["fw_updater"] == fw_updater
    assert result["changed"] == bool(fw_updater)


# -- the argument lists: the firmware updater is off in every one ------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ([], ["--without-fw-update", "--force"]),
        (["--add-kernel-support"], ["--without-fw-update", "--force", "--add-kernel-support"]),
        (["--without-fw-update", "--skip-distro-check"], ["--without-fw-update", "--force", "--skip-distro-check"]),
    ],
)
def test_installer_args_always_without_fw_update(extra, expected):
    args = planner.installer_args(options(method="installer", source="/tmp/b.tgz", checksum=SUM, installer_args=extra))
    assert args == expected
    assert args.count("--without-fw-update") == 1


@pytest.mark.parametrize("arg", ["--fw-image-dir=/tmp/fw", "--force-fw-update", "--fw-update-only", "--with-fw-update", "--firmware"])
def test_installer_args_that_touch_firmware_refused(arg):
    with pytest.raises(OfedError, match=r"installer_args: .*nic_firmware role.*Nothing was changed"):
        options(method="installer", source="/tmp/b.tgz", checksum=SUM, installer_args=[arg])


@pytest.mark.parametrize("arg", ["-y", "--x; rm -rf /", "--a b", 7, "--name=$(id)"])
def test_installer_args_not_options_refused(arg):
    with pytest.raises(OfedError, match="installer_args"):
        options(method="installer", source="/tmp/b.tgz", checksum=SUM, installer_args=[arg])


@pytest.mark.parametrize(
    ("manager", "packages", "expected"),
    [
        ("apt", ["doca-ofed"], ["install", "-y", "--no-install-recommends", "doca-ofed", "mlnx-fw-updater-"]),
        ("dnf", ["doca-ofed"], ["install", "-y", "--exclude=mlnx-fw-updater", "doca-ofed"]),
        ("apt", ["mlnx-ofed-all"], ["install", "-y", "--no-install-recommends", "mlnx-ofed-all", "mlnx-fw-updater-"]),
    ],
)
def test_package_install_keeps_the_firmware_updater_out(manager, packages, expected):
    assert planner.package_install_args(manager, packages) == expected


@pytest.mark.parametrize("packages", [["doca-ofed", "mlnx-fw-updater"], ["mlnx-fw-updater=25.10-1.7.1"]])
def test_firmware_updater_package_refused(packages):
    with pytest.raises(OfedError, match=r"packages: mlnx-fw-updater flashes every NIC.*Nothing was changed"):
        options(packages=packages)


def test_default_packages_by_flavor():
    assert options()["packages"] == ["doca-ofed"]
    assert options(flavor="mlnx-ofed", version="23.10-1.1.9.0")["packages"] == ["mlnx-ofed-all"]


# -- bad options: each names its field ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"flavor": "inbox"}, "flavor inbox"),
        ({"flavor": "rdma-core"}, "flavor must be"),
        ({"version": "24.10"}, "version must be"),
        ({"version": "MLNX_OFED_LINUX-24.10-1.1.4.0"}, "version must be"),
        ({"method": "rpm"}, "method must be"),
        ({"method": "installer"}, "method installer needs source"),
        ({"method": "installer", "source": "bundle.tgz", "checksum": SUM}, "source must be an absolute path"),
        ({"method": "installer", "source": "/tmp/b.tgz", "checksum": "md5:abc"}, "checksum must be the sha256"),
        ({"source": "/tmp/doca-host.deb"}, "checksum must be the sha256"),
        ({"reload": "now"}, "reload must be"),
        ({"peermem": "yes"}, "peermem must be"),
        ({"packages": ["doca ofed"]}, "packages: "),
    ],
)
def test_bad_options_name_the_field(changes, field):
    with pytest.raises(OfedError, match=field) as caught:
        options(**changes)
    assert caught.value.msg.endswith("Nothing was changed")


@pytest.mark.parametrize(
    ("a", "b"),
    [("24.04-0.6.6", "24.10-1.1.4.0"), ("24.10-1.1.4.0", "24.10-1.1.4.0.200"), ("5.8-3.0.7.0", "23.10-1.1.9.0"), ("23.10-1.1.9.0", "23.10-2.1.3.1")],
)
def test_version_order(a, b):
    assert planner.version_key(a) < planner.version_key(b)


def test_diff_names_inbox_and_flavour():
    result = planner.plan(current(flavor="inbox"), options())
    assert planner.diff(result) == {"before": {"ofed": "inbox"}, "after": {"ofed": "doca-ofed 24.10-1.1.4.0.200"}}


@pytest.mark.parametrize(
    ("the_plan", "action"),
    [
        ({"action": "upgrade", "peermem": "rebuild", "fw_updater": []}, "upgrade"),
        ({"action": "none", "peermem": "load", "fw_updater": []}, "peermem_load"),
        ({"action": "none", "peermem": "none", "fw_updater": ["disable_onboot", "remove"]}, "fw_updater_disable_onboot_remove"),
        ({"action": "none", "peermem": "none", "fw_updater": []}, "none"),
    ],
)
def test_history_names_what_changed(the_plan, action):
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils._ofed.manager import history_action

    assert history_action(the_plan) == action
