"""Simulated apt-get / apt-mark / dpkg-query (NVIDIA packages only) and modinfo."""

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import procfs
from gpusim import state
from test_tools_support import node_factory

FORMAT = "${Package} ${Version} ${db:Status-Abbrev}\\n"


@pytest.fixture
def make_node(tmp_path):
    return node_factory(tmp_path)


def dpkg(node):
    return node.run("dpkg-query", "-W", "-f=" + FORMAT, "nvidia-driver-*", "nvidia-fabricmanager-*")


def test_dpkg_query_lists_the_fabric_manager_of_a_runfile_node(make_node):
    node = make_node()
    r = dpkg(node)
    # The runfile driver is not a package: dpkg-query says so for that pattern and exits 1.
    assert r.returncode == 1
    assert r.stdout == "nvidia-fabricmanager-550 550.90.07-1 ii \n"
    assert r.stderr == "dpkg-query: no packages found matching nvidia-driver-*\n"
    r = node.run("dpkg-query", "-W", "nvidia-fabricmanager-550")
    assert (r.returncode, r.stdout) == (0, "nvidia-fabricmanager-550\t550.90.07-1\n")
    r = node.run("dpkg-query", "--showformat=${Package;-26}|${db:Status-Want}\\n", "--show", "nvidia-fabricmanager-*")
    assert r.stdout == "nvidia-fabricmanager-550  |install\n"


def test_fabric_manager_install_hold_and_branch_change(make_node):
    node = make_node()
    r = node.run("apt-get", "install", "-y", "-q", "nvidia-fabricmanager-570=570.124.06-1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "The following packages will be REMOVED:\n  nvidia-fabricmanager-550" in r.stdout
    assert "Setting up nvidia-fabricmanager-570 (570.124.06-1) ..." in r.stdout
    assert node.state["fabricmanager"] == {"version": "570.124.06", "staged": None}
    assert node.run("nv-fabricmanager", "--version").stdout == "Fabric Manager version is : 570.124.06\n"
    r = node.run("apt-mark", "hold", "nvidia-fabricmanager-570")
    assert r.stdout == "nvidia-fabricmanager-570 set on hold.\n"
    assert node.run("apt-mark", "hold", "nvidia-fabricmanager-570").stdout == "nvidia-fabricmanager-570 was already set on hold.\n"
    assert dpkg(node).stdout == "nvidia-fabricmanager-570 570.124.06-1 hi \n"
    assert node.run("apt-mark", "showhold").stdout == "nvidia-fabricmanager-570\n"
    # A held package changes only with --allow-change-held-packages.
    r = node.run("apt-get", "install", "-y", "nvidia-fabricmanager-550=550.90.07-1")
    assert r.returncode == 100
    assert r.stderr == "E: Held packages were changed and -y was used without --allow-change-held-packages.\n"
    assert node.state["fabricmanager"]["version"] == "570.124.06"
    r = node.run("apt-get", "install", "-y", "--allow-change-held-packages", "nvidia-fabricmanager-550=550.90.07-1")
    assert r.returncode == 0, r.stderr
    assert node.state["fabricmanager"]["version"] == "550.90.07"
    assert node.state["apt"]["held"] == []  # the replaced package's hold went with it


def test_downgrade_needs_allow_downgrades(make_node):
    node = make_node(fabricmanager="550.127.05", driver="550.127.05")
    r = node.run("apt-get", "install", "-y", "nvidia-fabricmanager-550=550.90.07-1")
    assert r.returncode == 100
    assert "The following packages will be DOWNGRADED:\n  nvidia-fabricmanager-550\n0 upgraded, 0 newly installed, 1 downgraded," in r.stdout
    assert r.stderr == "E: Packages were downgraded and -y was used without --allow-downgrades.\n"
    r = node.run("apt-get", "install", "-y", "--allow-downgrades", "nvidia-fabricmanager-550=550.90.07-1")
    assert r.returncode == 0
    assert node.state["fabricmanager"]["version"] == "550.90.07"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nvidia-fabricmanager-570=570.999.01-1", "E: Version '570.999.01-1' for 'nvidia-fabricmanager-570' was not found"),
        ("nvidia-fabricmanager-570=550.90.07-1", "E: Version '550.90.07-1' for 'nvidia-fabricmanager-570' was not found"),
        ("nvidia-fabricmanager-570=570.124.06-0ubuntu1", "E: Version '570.124.06-0ubuntu1' for 'nvidia-fabricmanager-570' was not found"),
        ("curl", "E: Unable to locate package curl"),
    ],
)
def test_unknown_versions_and_packages_fail_like_apt(make_node, spec, message):
    node = make_node()
    before = node.state
    r = node.run("apt-get", "install", "-y", "-q", spec)
    assert r.returncode == 100
    assert r.stderr.startswith(message + "\n")
    assert node.state["fabricmanager"] == before["fabricmanager"]


def test_extra_versions_from_the_state(make_node):
    node = make_node()
    state.update(node.dir, lambda s: s.setdefault("apt", {}).update(extra_versions=["570.999.01"]))
    assert node.run("apt-get", "install", "-y", "nvidia-fabricmanager-570=570.999.01-1").returncode == 0


def test_other_tools_and_packages_are_refused(make_node):
    node = make_node()
    r = node.run("dpkg-query", "-W", "bash")
    assert r.returncode == 2 and "package pattern 'bash' is not simulated" in r.stderr
    r = node.run("apt-get", "dist-upgrade", "-y")
    assert r.returncode == 100 and r.stderr.startswith("E: Invalid operation dist-upgrade")
    r = node.run("apt-mark", "hold", "linux-image-6.1.0-18-amd64")
    assert r.returncode == 100 and r.stderr.startswith("E: Unable to locate package linux-image-6.1.0-18-amd64")


def _unload_all(node):
    node.run("systemctl", "stop", "nvidia-persistenced")
    for mod in ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"):
        assert node.run("rmmod", mod).returncode == 0, mod


def test_driver_package_installs_and_stages_while_loaded(make_node):
    node = make_node(driver="550.90.07", fabricmanager="550.90.07")
    # Loaded modules stay; the package's module is on disk for the next boot.
    r = node.run("apt-get", "install", "-y", "nvidia-driver-570-open=570.124.06-1")
    assert r.returncode == 0, r.stderr
    assert node.state["driver"]["version"] == "550.90.07"
    assert node.state["driver"]["staged"]["version"] == "570.124.06"
    assert node.run("modinfo", "-F", "version", "nvidia").stdout == "570.124.06\n"
    assert "nvidia-driver-570-open 570.124.06-1 ii \n" in dpkg(node).stdout
    state.boot(node.dir)
    assert node.state["driver"]["version"] == "570.124.06"
    assert node.state["driver"]["method"] == "package"


def test_driver_package_dkms_failure(make_node):
    node = make_node(faults=[{"kind": "dkms_fail"}])
    _unload_all(node)
    r = node.run("apt-get", "install", "-y", "nvidia-driver-570-open=570.124.06-1")
    assert r.returncode == 100
    assert "Error! Bad return status for module build on kernel: 5.15.0-119-generic (x86_64)" in r.stderr
    assert r.stderr.endswith("E: Sub-process /usr/bin/dpkg returned an error code (1)\n")
    assert node.state["driver"]["version"] == "550.90.07"


def test_modinfo_reads_like_the_real_one(make_node):
    node = make_node(kernel_module="proprietary")
    r = node.run("modinfo", "nvidia")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0] == "filename:       /lib/modules/5.15.0-119-generic/kernel/drivers/video/nvidia.ko"
    assert "version:        550.90.07" in lines
    assert "license:        NVIDIA" in lines
    parsed = procfs.parse_modinfo(r.stdout)
    assert (parsed["version"], parsed["flavor"]) == ("550.90.07", "proprietary")
    assert parsed["firmware"] == ["nvidia/550.90.07/gsp_tu10x.bin", "nvidia/550.90.07/gsp_ga10x.bin"]
    assert parsed["vermagic"] == "5.15.0-119-generic SMP preempt mod_unload modversions"


def test_modinfo_without_a_driver(make_node):
    node = make_node(driver=None, fabricmanager=None)
    r = node.run("modinfo", "nvidia")
    assert (r.returncode, r.stdout, r.stderr) == (1, "", "modinfo: ERROR: Module nvidia not found.\n")


def test_the_repository_holds_every_release_of_the_compatibility_data():
    """A BOM the compatibility filters accept (any Linux driver of CUDA's Table 3 from R535 on) installs here."""
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _compat_data
    from gpusim.tools import packages

    known = {row[2] for row in _compat_data.TOOLKIT_DRIVER_ROWS if row[2] and int(row[2].split(".")[0]) >= packages.OLDEST_BRANCH}
    assert {"580.95.05", "580.82.07", "575.51.03", "570.26", "595.71.05"} <= known
    assert known <= set(packages.REPOSITORY)
    assert list(packages.REPOSITORY) == sorted(packages.REPOSITORY, key=packages._vkey)  # oldest first, no duplicates
    assert len(set(packages.REPOSITORY)) == len(packages.REPOSITORY)


def test_a_bom_of_580_95_05_installs_its_fabric_manager(make_node):
    node = make_node(fabricmanager="580.82.07", driver="580.82.07")
    r = node.run("apt-get", "install", "-y", "-q", "nvidia-fabricmanager-580=580.95.05-1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Setting up nvidia-fabricmanager-580 (580.95.05-1) ..." in r.stdout
    assert node.state["fabricmanager"]["version"] == "580.95.05"
    r = node.run("apt-get", "install", "-y", "-q", "nvidia-fabricmanager-580=580.95.06-1")  # not a release
    assert r.returncode == 100
