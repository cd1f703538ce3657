"""The GPU firmware rollback's target: the node state file gives a version, the controller's gpu_firmware_packages the file."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter.firmware import gpu_firmware_rollback_target
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware.rollback import RollbackError, rollback_target

SUM_OLD = "sha256:" + "a" * 64
SUM_NEW = "sha256:" + "b" * 64
PACKAGES = {
    "HGX-22.10-1": {"package": "/srv/firmware/hgx-22.10-1.fwpkg", "checksum": SUM_OLD},
    "HGX-24.04-2": {"package": "/srv/firmware/hgx-24.04-2.fwpkg", "checksum": SUM_NEW},
}
# What root on the node wrote: a package the controller holds for another purpose, an older one, anything.
NODE_PATH = "/srv/firmware/hgx-21.01-0-vulnerable.fwpkg"


def state(lkg_version="HGX-24.04-2", previous="HGX-22.10-1", last_result="ok"):
    lkg = {"version": lkg_version, "package": NODE_PATH, "checksum": "sha256:" + "c" * 64}
    if previous is not None:
        lkg["previous"] = {"version": previous, "package": NODE_PATH, "checksum": "sha256:" + "c" * 64}
    history = [{"component": "nvidia_driver", "result": "failed"}]
    if last_result is not None:
        history.insert(0, {"component": "gpu_firmware", "result": last_result})
    return {"last_known_good": {"gpu_firmware": lkg}, "history": history}


@pytest.mark.parametrize(
    ("node", "version"),
    [
        (state(last_result="ok"), "HGX-22.10-1"),  # the last flash finished: back to the one before it
        (state(last_result="failed"), "HGX-24.04-2"),  # it failed: back to the last known good one
        (state(last_result="partial"), "HGX-24.04-2"),
        (state(last_result=None), "HGX-24.04-2"),  # no flash recorded in the history kept
        (state(lkg_version="HGX-22.10-1", previous=None, last_result="failed"), "HGX-22.10-1"),
    ],
    ids=["after-ok-previous", "after-failed-lkg", "after-partial-lkg", "no-history-lkg", "no-previous"],
)
def test_the_version_comes_from_the_node_and_the_file_from_the_controller(node, version):
    target = rollback_target(node, PACKAGES)
    assert target == {"version": version, "source": "gpu_firmware_packages", **PACKAGES[version]}
    assert NODE_PATH not in repr(target)


@pytest.mark.parametrize(
    ("node", "packages", "words"),
    [
        (state(previous="HGX-21.01-0"), PACKAGES, ["HGX-21.01-0", "gpu_firmware_packages", "HGX-22.10-1, HGX-24.04-2"]),
        (state(), {}, ["HGX-22.10-1", "gpu_firmware_packages", "it is empty"]),
        (state(), None, ["HGX-22.10-1", "gpu_firmware_packages"]),
        ({}, PACKAGES, ["records none", "last_known_good.gpu_firmware.version", "gpu_firmware_rollback_package"]),
        (None, PACKAGES, ["records none"]),
        (state(previous=None, last_result="ok"), PACKAGES, ["records none", "previous.version"]),
        (state(previous="HGX\n-22"), PACKAGES, ["not a firmware version", "previous.version"]),
        (state(previous=["HGX-22.10-1"]), PACKAGES, ["not a firmware version"]),
        (state(previous="x" * 500), PACKAGES, ["not a firmware version", "..."]),
        ({"last_known_good": {"gpu_firmware": "HGX-22.10-1"}, "history": "x"}, PACKAGES, ["records none"]),
    ],
    ids=["unknown-version", "no-packages", "packages-none", "no-record", "no-state", "ok-without-previous", "newline",
         "list", "long", "odd-shapes"],
)
def test_a_version_the_controller_lacks_is_refused_naming_it(node, packages, words):
    target = rollback_target(node, packages)
    assert set(target) == {"refused"}
    for word in words:
        assert word in target["refused"], target["refused"]
    assert target["refused"].endswith("Nothing was changed")
    assert NODE_PATH not in target["refused"]
    assert len(target["refused"]) < 1000  # a hostile version is not echoed whole


def test_the_operators_own_package_wins():
    package = "/srv/firmware/chosen.fwpkg"
    target = rollback_target(state(previous="HGX-21.01-0"), PACKAGES, package=package, checksum=SUM_OLD)
    assert target == {"version": None, "package": package, "checksum": SUM_OLD, "source": "gpu_firmware_rollback_package"}


@pytest.mark.parametrize(
    ("packages", "package", "checksum", "field"),
    [
        ([PACKAGES], "", "", "gpu_firmware_packages must be a mapping"),
        ({"HGX-22.10-1": "/srv/x.fwpkg"}, "", "", "gpu_firmware_packages['HGX-22.10-1'] must be a mapping"),
        ({"HGX-22.10-1": {"package": "x.fwpkg", "checksum": SUM_OLD}}, "", "", "gpu_firmware_packages['HGX-22.10-1'].package"),
        ({"HGX-22.10-1": {"package": "/srv/x.fwpkg", "checksum": "md5:00"}}, "", "", "gpu_firmware_packages['HGX-22.10-1'].checksum"),
        ({22.1: {"package": "/srv/x.fwpkg", "checksum": SUM_OLD}}, "", "", "has the key 22.1"),
        (PACKAGES, "/srv/x.fwpkg", "", "gpu_firmware_rollback_package / gpu_firmware_rollback_checksum.checksum"),
        (PACKAGES, "", SUM_OLD, "gpu_firmware_rollback_package / gpu_firmware_rollback_checksum.package"),
    ],
    ids=["list", "entry-str", "relative", "bad-sum", "float-key", "package-without-sum", "sum-without-package"],
)
def test_the_controllers_bad_variables_fail_naming_the_field(packages, package, checksum, field):
    with pytest.raises(RollbackError) as caught:
        rollback_target(state(), packages, package=package, checksum=checksum)
    assert field in str(caught.value)
    with pytest.raises(AnsibleFilterError, match=r"^gpufleet\.lifecycle\.gpu_firmware_rollback_target: "):
        gpu_firmware_rollback_target(state(), packages, package=package, checksum=checksum)


def test_the_filter_returns_what_the_function_does():
    assert gpu_firmware_rollback_target(state(), PACKAGES) == rollback_target(state(), PACKAGES)
