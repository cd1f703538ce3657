"""The simulated OFED (issue 24): mlnxofedinstall and DOCA-OFED's apt flash every older NIC unless the firmware updater is
off, ofed_info names the new release, openibd refuses under opensm / nvme-rdma / a loaded nvidia_peermem, and
nvidia_peermem fails with the real Unknown symbol error until DKMS rebuilds it. Outputs read by the project's parsers."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile

import pytest
from gpusim import ofed as sim_ofed
from gpusim import spec as gspec
from gpusim import state as st
from test_tools_support import node_factory

OLD, NEW = "24.04-0.6.6", "24.10-1.1.4.0"
NIC_FW = "28.39.1002"


def _parsers(name):
    return pytest.importorskip(f"ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.{name}")


@pytest.fixture
def make(tmp_path):
    factory = node_factory(tmp_path)

    def _make(**ofed):
        return factory(ofed={"flavor": "mlnx-ofed", "version": OLD, "dkms": True, **ofed})

    return _make


def _install(node, *args):
    return node.run("gpusim-mlnxofedinstall", f"--bundle-version={NEW}", "--", "--force", *args)


def test_install_without_fw_update_leaves_the_nics_and_changes_ofed_info(make):
    ofed_install, ofed_info = _parsers("ofed_install"), _parsers("ofed")
    node = make()
    done = _install(node, "--without-fw-update")
    assert done.returncode == 0, done.stderr
    parsed = ofed_install.parse_install_output(done.stdout)
    assert (parsed["result"], parsed["firmware"], parsed["fw_updater_onboot"]) == ("passed", "skipped", "no")
    assert [(n["fw"], n["staged_fw"]) for n in node.state["nics"]] == [(NIC_FW, None)]
    assert ofed_info.parse_ofed_info(node.run("ofed_info", "-s").stdout)["version"] == NEW
    assert node.state["stack"]["ofed"]["loaded"] == OLD  # the kernel runs the old stack until openibd restart or a boot


def test_install_with_the_updater_flashes_every_older_nic(make):
    ofed_install = _parsers("ofed_install")
    node = make()
    done = _install(node)
    parsed = ofed_install.parse_install_output(done.stdout)
    assert parsed["firmware"] == "updated" and parsed["restart_needed"]
    assert [(d["fw_current"], d["fw_available"], d["status"]) for d in parsed["devices"]] == [(NIC_FW, "28.43.2026", "Update required")]
    # on flash, not running: the next reset or boot runs it
    assert [(n["fw"], n["staged_fw"]) for n in node.state["nics"]] == [(NIC_FW, "28.43.2026")]


def test_unknown_installer_option_is_refused_with_its_exit_status(make):
    node = make()
    assert _install(node, "--frobnicate").returncode == 22


def test_installer_without_force_stops_at_the_prompt(make):
    node = make()
    done = node.run("gpusim-mlnxofedinstall", f"--bundle-version={NEW}", "--", "--without-fw-update")
    assert done.returncode == 1 and "Do you want to continue?[y/N]:" in done.stdout
    assert node.state["stack"]["ofed"]["version"] == OLD


def test_peermem_fails_with_the_real_error_until_dkms_rebuilds_it(make):
    openibd = _parsers("openibd")
    node = make()
    assert node.run("modprobe", "nvidia_peermem").returncode == 0  # built against the OFED it runs
    assert node.run("modprobe", "-r", "nvidia_peermem").returncode == 0
    _install(node, "--without-fw-update")
    restart = node.run("openibd", "restart")
    assert restart.returncode == 0 and openibd.parse_restart(restart.stdout)["ok"]
    failed = node.run("modprobe", "nvidia_peermem")
    assert failed.returncode == 1
    assert failed.stderr.strip() == "modprobe: ERROR: could not insert 'nvidia_peermem': Unknown symbol in module, or unknown parameter (see dmesg)"
    assert "nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -2)" in node.run("dmesg").stdout
    kernel, driver = node.state["kernel"], node.state["driver"]["version"]
    for verb in ("build", "install"):
        assert node.run("dkms", verb, "-m", "nvidia", "-v", driver, "-k", kernel, "--force").returncode == 0
    assert node.run("modprobe", "nvidia_peermem").returncode == 0
    assert "nvidia_peermem" in node.state["modules"]


def test_a_rebuild_before_the_reload_loads_only_after_it(make):
    node = make()
    node.run("modprobe", "-r", "nvidia_peermem")
    _install(node, "--without-fw-update")
    kernel, driver = node.state["kernel"], node.state["driver"]["version"]
    node.run("dkms", "install", "-m", "nvidia", "-v", driver, "-k", kernel, "--force")
    assert node.run("modprobe", "nvidia_peermem").returncode == 1  # built for the new stack, the kernel runs the old one
    st.boot(node.dir)
    assert node.state["stack"]["ofed"]["loaded"] == NEW
    assert node.run("modprobe", "nvidia_peermem").returncode == 0


def test_dkms_refuses_a_driver_it_does_not_hold(tmp_path):
    node = node_factory(tmp_path)(ofed={"flavor": "mlnx-ofed", "version": OLD})
    st.update(node.dir, lambda s: s["stack"].setdefault("dkms", {}))
    done = node.run("dkms", "install", "-m", "nvidia", "-v", node.state["driver"]["version"], "--force")
    assert done.returncode == 3 and "is not located in the DKMS tree" in done.stderr


@pytest.mark.parametrize(
    ("ofed", "loaded_peermem", "holders", "in_use"),
    [
        ({"opensm": True}, False, [("opensm", 1632, "issm0"), ("opensm", 1632, "umad0")], []),
        ({"nvme_rdma": True}, False, [], [("mlx_compat", ["nvme_core", "nvme_fabrics"])]),
        ({}, True, [], [("ib_core", ["nvidia_peermem"])]),
    ],
)
def test_openibd_refuses_while_something_holds_the_stack(make, ofed, loaded_peermem, holders, in_use):
    openibd = _parsers("openibd")
    node = make(**ofed)
    if loaded_peermem:
        node.run("modprobe", "nvidia_peermem")
    _install(node, "--without-fw-update")
    done = node.run("openibd", "restart")
    parsed = openibd.parse_restart(done.stdout)
    assert done.returncode == 1 and not parsed["ok"]
    assert [(h["process"], h["pid"], h["device"]) for h in parsed["holders"]] == holders
    assert [(m["module"], m["users"]) for m in parsed["in_use"]] == in_use
    assert node.state["stack"]["ofed"]["loaded"] == OLD


def test_openibd_is_absent_without_ofed(tmp_path):
    node = node_factory(tmp_path)()
    assert node.run("openibd", "restart").returncode == 127


def test_doca_apt_keeps_the_updater_out_or_flashes_with_it(make):
    ofed_install = _parsers("ofed_install")
    node = make(flavor="doca-ofed", repo="24.10-1.1.4.0.200", fw_updater=True)
    kept = node.run("apt-get", "install", "-y", "--no-install-recommends", "doca-ofed", "mlnx-fw-updater-")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert node.state["stack"]["ofed"] == {"flavor": "doca-ofed", "version": "24.10-1.1.4.0.200", "loaded": OLD, "fw_updater": False,
                                           "repo": "24.10-1.1.4.0.200"}
    assert node.state["nics"][0]["staged_fw"] is None
    assert node.run("dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\\n", "mlnx-fw-updater").returncode == 1
    flashed = node.run("apt-get", "install", "-y", "doca-ofed", "mlnx-fw-updater")
    assert ofed_install.parse_install_output(flashed.stdout)["firmware"] == "updated"
    assert node.state["nics"][0]["staged_fw"] == "28.43.2026"
    listed = node.run("dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\\n", "mlnx-fw-updater")
    assert _parsers("packages").parse_dpkg_query(listed.stdout)[0]["installed"] is True


def test_doca_apt_without_a_repository_cannot_locate_it(make):
    node = make(flavor="doca-ofed")
    done = node.run("apt-get", "install", "-y", "doca-ofed")
    assert done.returncode == 100 and "Unable to locate package doca-ofed" in done.stderr


def test_the_bundle_script_hands_its_release_to_the_simulator(make, tmp_path):
    node = make()
    bundle = sim_ofed.write_bundle(tmp_path / "bundles", NEW)
    with tarfile.open(bundle) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    script = tmp_path / "x" / f"MLNX_OFED_LINUX-{NEW}-ubuntu22.04-x86_64" / "mlnxofedinstall"
    assert os.access(script, os.X_OK)
    wrapper = node.bin / "gpusim-mlnxofedinstall"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gpusim.tools gpusim-mlnxofedinstall "$@"\n')
    wrapper.chmod(0o755)
    env = dict(node.env(), GPUSIM_OFED_INSTALLER=str(wrapper))
    done = subprocess.run([str(script), "--without-fw-update", "--force"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert node.state["stack"]["ofed"]["version"] == NEW


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"flavor": "inbox", "version": OLD}, "ofed.flavor"),
        ({"flavor": "doca-ofed", "version": "24.10"}, "ofed.version"),
        ({"flavor": "doca-ofed", "version": OLD, "opensm": "yes"}, "ofed.opensm"),
        ({"flavor": "doca-ofed", "version": OLD, "colour": 1}, "ofed: must be a mapping"),
    ],
)
def test_spec_refuses_a_bad_ofed_naming_the_field(value, field):
    with pytest.raises(ValueError, match=field):
        sim_ofed.spec_value(value, "nodes[0].ofed")


def test_spec_key_reaches_the_node(tmp_path):
    ofed = {"flavor": "doca-ofed", "version": OLD, "opensm": True}
    fleet = gspec.parse({"fleet": {"name": "t"}, "skus": {"h100": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8}},
                         "nodes": [{"names": ["gpu-o1"], "sku": "h100", "driver": "550.90.07", "ofed": ofed}]})
    node_spec = fleet.nodes[0].spec
    state = st.new_node_state(node_spec)
    assert state["stack"]["ofed"]["version"] == OLD and state["services"]["opensmd"]["active"] is True
    assert state["driver"]["peermem_ofed"] == f"doca-ofed-{OLD}"


@pytest.mark.parametrize(
    ("release", "current", "bundled"),
    [("23.10-1.1.9.0", "28.39.1002", "28.39.2048"), ("24.10-1.1.4.0.200", "22.39.1002", "22.43.2026"), ("26.01-0.1.0.0", "28.39.1002", "28.51.1000")],
)
def test_bundled_firmware_keeps_the_family(release, current, bundled):
    assert sim_ofed.bundled_firmware(release, current) == bundled
