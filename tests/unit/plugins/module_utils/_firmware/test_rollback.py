"""The GPU firmware rollback's target: the node state file gives a version, the controller's gpu_firmware_packages the file."""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.filter.firmware import gpu_firmware_rollback_problem, gpu_firmware_rollback_target
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware.rollback import RollbackError, preflight_problem, rollback_target

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


# -- the rollout's preflight: a node whose GPU firmware it changes must be one a rollback could flash back ----------------

def node(name="gpu-01", version="HGX-22.10-1", packages=None, package="", checksum=""):
    return {"node": name, "version": version, "packages": PACKAGES if packages is None else packages, "package": package, "checksum": checksum}


@pytest.mark.parametrize(
    ("nodes", "words"),
    [
        ([], None),
        ([node(), node("gpu-02")], None),  # the version they run now is listed
        ([node(version="HGX-21.01-0", package="/srv/firmware/old.fwpkg", checksum=SUM_OLD)], None),  # the operator's package wins
        ([node(version=None, package="/srv/firmware/old.fwpkg", checksum=SUM_OLD)], None),
        ([node(version="HGX-21.01-0")],
         "gpu-01 runs GPU firmware HGX-21.01-0, which gpu_firmware_packages on the controller lacks: add 'HGX-21.01-0': "
         "{package: <its .fwpkg on gpu_firmware_delegate_to>, checksum: sha256:<hex>} to gpu_firmware_packages (or set "
         "gpu_firmware_rollback_package and gpu_firmware_rollback_checksum)"),
        ([node(version="HGX-21.01-0", packages={})], "gpu-01 runs GPU firmware HGX-21.01-0, which gpu_firmware_packages"),
        ([node(f"gpu-{i:02}", version="HGX-21.01-0") for i in range(1, 7)],
         "gpu-01, gpu-02, gpu-03 and 3 more run GPU firmware HGX-21.01-0"),
        ([node(version=None), node("gpu-02", version="")],
         "the node state file of gpu-01, gpu-02 records no GPU firmware version (no flash through gpufleet finished there yet): "
         "set gpu_firmware_rollback_package and gpu_firmware_rollback_checksum to the package they run now"),
        ([node(), node("gpu-02", version="HGX-21.01-0"), node("gpu-03", version=None)],
         "gpu-02 runs GPU firmware HGX-21.01-0, which gpu_firmware_packages on the controller lacks"),
        ([node(version="HGX\n1")], r"gpu-01 runs GPU firmware 'HGX\n1', which"),  # a node-written value, shown on one line
    ],
    ids=["none", "listed", "rollback-package", "rollback-package-no-version", "unlisted", "no-packages", "many-nodes",
         "no-version", "mixed", "control-characters"],
)
def test_preflight_refuses_a_node_whose_gpu_firmware_could_not_be_rolled_back(nodes, words):
    problem = preflight_problem(nodes)
    if words is None:
        assert problem == ""
        return
    assert problem.startswith("a node that fails after its GPU firmware flash could not be rolled back")
    assert words in problem
    assert "gpu-01" not in problem or nodes[0]["version"] != "HGX-22.10-1"  # a node that could be rolled back is not named


@pytest.mark.parametrize(
    ("nodes", "words"),
    [
        ([node(packages={"HGX-22.10-1": {"package": "fw.fwpkg", "checksum": SUM_OLD}})], "gpu_firmware_packages['HGX-22.10-1'].package must be"),
        ([node(package="/srv/firmware/old.fwpkg")], "gpu-01: gpu_firmware_rollback_package / gpu_firmware_rollback_checksum.checksum must be"),
        ([node(packages=["HGX-22.10-1"])], "gpu_firmware_packages must be a mapping"),
    ],
)
def test_preflight_refuses_malformed_rollback_variables(nodes, words):
    with pytest.raises(RollbackError, match=re.escape(words)):
        preflight_problem(nodes)
    with pytest.raises(AnsibleFilterError, match="gpufleet.lifecycle.gpu_firmware_rollback_problem: " + re.escape(words)):
        gpu_firmware_rollback_problem(nodes)


def test_the_filter_refuses_input_that_is_not_a_list_of_nodes():
    with pytest.raises(AnsibleFilterError, match="must be a list of"):
        gpu_firmware_rollback_problem({"node": "gpu-01"})
