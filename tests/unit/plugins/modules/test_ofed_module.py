"""The ofed module end to end on a fake node (a stateful table of its tools): check mode changes nothing, the install
runs without the firmware updater and leaves the NICs' firmware alone, openibd is not restarted under opensm,
nvidia_peermem is rebuilt and loaded, a second run changes nothing, checksum mismatches and garbled output change
nothing, the last known good OFED is recorded (and not by a rollback)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from ansible.module_utils import basic
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _tools
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._host import Host
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._ofed import manager as manager_mod
from ansible_collections.gpufleet.lifecycle.plugins.modules import ofed

KERNEL = "6.8.0-90-generic"
DRIVER = "570.124.06"
OLD, NEW = "24.04-0.6.6", "24.10-1.1.4.0.200"
BIN = "/usr/bin/"
# Commands that change the node: none may run in check mode, after a refusal, or on a node already at the BOM.
CHANGING = ("mlnxofedinstall", "openibd", "tar", "apt-get", "dpkg", "dnf", "rpm -U")

XML = """<?xml version="1.0" encoding="UTF-8" ?>
<Devices>
{devices}
</Devices>
"""
DEVICE = """  <Device pciName="{pci}" type="ConnectX7" psid="MT_0000000838" partNumber="MCX75310AAS-NEA_Ax">
    <Versions>
      <FW current="{fw}" available="N/A"/>
    </Versions>
    <MACs Base_Mac="946dae8a0e3a" />
    <Status> No matching image found </Status>
    <Description>NVIDIA ConnectX-7 HHHL adapter card</Description>
  </Device>"""
SKIPPED = ("Logs dir: /tmp/MLNX_OFED_LINUX.29047.logs\nGeneral log file: /tmp/MLNX_OFED_LINUX.29047.logs/general.log\n"
           "Installation passed successfully\n\nAdded 'RUN_FW_UPDATER_ONBOOT=no to /etc/infiniband/openib.conf\n\nSkipping FW update.\n"
           "To load the new driver, run:\n/etc/init.d/openibd restart\n")
FLASHED = ("Logs dir: /tmp/MLNX_OFED_LINUX.1.logs\nInstallation passed successfully\nAttempting to perform Firmware update...\n"
           "Querying Mellanox devices firmware ...\n\nDevice #1:\n----------\n\n  PSID:             MT_0000000838\n"
           "  Versions:         Current        Available\n     FW             28.39.1002     28.43.2026\n\n  Status:           Update required\n\n"
           "---------\nFound 1 device(s) requiring firmware update...\n\nDevice #1: Updating FW ...\nDone\n\nRestart needed for updates to take effect.\n")
OPENIBD_OK = "Unloading HCA driver:                                      [  OK  ]\nLoading HCA driver and Access Layer:                       [  OK  ]\n"
OPENIBD_OPENSM = ('Please stop "opensm" and all applications running over InfiniBand.\n\n'
                  "Please stop the following applications still using Infiniband devices:\n"
                  "opensm(1632) user root is using device issm0\nopensm(1632) user root is using device umad0\n\n\n"
                  "Error: Cannot unload the Infiniband driver stack due to the above issue(s)!\n")


class Node:
    """A fake node: OFED, NICs, the driver and nvidia_peermem, answering each tool from its state."""

    def __init__(self, root):
        self.root = root
        self.ofed = ("doca-ofed", OLD)  # None: inbox
        self.loaded_ofed = OLD
        self.nics = {"0000:17:00.0": "28.39.1002", "0000:3d:00.0": "28.39.1002"}
        self.peermem_built_for = OLD
        self.modules = {"nvidia", "nvidia_peermem", "ib_core", "mlx5_core"}
        self.opensm = "inactive"
        self.installer_output = SKIPPED
        self.installer_flashes = False
        self.openibd = (0, OPENIBD_OK)
        self.ofed_info_text = None
        self.fw_updater_installed = False
        self.calls = []
        self.dmesg = ""

    # -- the table -------------------------------------------------------------------------------
    def run(self, argv):
        tool, args = os.path.basename(argv[0]), list(argv[1:])
        self.calls.append([tool, *args])
        handler = getattr(self, "do_" + tool.replace("-", "_"), None)
        if handler is None:
            raise AssertionError(f"unexpected command: {argv}")
        return handler(args)

    def do_ofed_info(self, args):
        assert args == ["-s"]
        if self.ofed_info_text is not None:
            return 0, self.ofed_info_text, ""
        if self.ofed is None:
            return 127, "", "ofed_info: command not found\n"
        name = "OFED-internal" if self.ofed[0] == "doca-ofed" else "MLNX_OFED_LINUX"
        return 0, f"{name}-{self.ofed[1]}:\n", ""

    def do_lsmod(self, args):
        lines = ["Module                  Size  Used by"] + [f"{name:<24}16384  0" for name in sorted(self.modules)]
        return 0, "\n".join(lines) + "\n", ""

    def do_modinfo(self, args):
        name = args[0]
        version = {"nvidia": DRIVER, "nvidia_peermem": DRIVER}.get(name)
        if version is None:
            return 1, "", f"modinfo: ERROR: Module {name} not found.\n"
        return 0, f"filename:       /lib/modules/{KERNEL}/updates/dkms/{name}.ko.zst\nversion:        {version}\nname:           {name}\n", ""

    def do_dkms(self, args):
        if args == ["status"]:
            return 0, f"nvidia/{DRIVER}, {KERNEL}, x86_64: installed\n", ""
        assert args[0] in ("build", "install") and args[1:] == ["-m", "nvidia", "-v", DRIVER, "-k", KERNEL, "--force"], args
        if args[0] == "install":
            self.peermem_built_for = self.ofed[1] if self.ofed else None
        return 0, "", ""

    def do_systemctl(self, args):
        assert args[0] == "is-active"
        return (0 if self.opensm == "active" else 3), "".join((self.opensm if unit == "opensmd" else "inactive") + "\n" for unit in args[1:]), ""

    def do_dpkg_query(self, args):
        if self.fw_updater_installed:
            return 0, "mlnx-fw-updater 24.04-0.6.6 ii \n", ""
        return 1, "", "dpkg-query: no packages found matching mlnx-fw-updater\n"

    def do_mlxfwmanager(self, args):
        devices = "\n".join(DEVICE.format(pci=pci, fw=fw) for pci, fw in self.nics.items())
        return 0, XML.format(devices=devices), ""

    def do_tar(self, args):
        assert args[0] == "-xzf" and args[2] == "-C"
        folder = os.path.join(args[3], f"MLNX_OFED_LINUX-{NEW}-ubuntu22.04-x86_64")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "mlnxofedinstall"), "w") as handle:
            handle.write("#!/bin/sh\n")
        return 0, "", ""

    def do_mlnxofedinstall(self, args):
        self.install_args = args
        if "--without-fw-update" not in args or self.installer_flashes:
            self.nics = {pci: "28.43.2026" for pci in self.nics}  # what the real one does: every older adapter
            output = FLASHED
        else:
            output = self.installer_output
        self.ofed = ("mlnx-ofed", self.wanted)
        return 0, output, ""

    def do_apt_get(self, args):
        if args[0] == "update":
            return 0, "Reading package lists...\n", ""
        self.apt_args = args
        self.ofed = ("doca-ofed", self.wanted)
        self.fw_updater_installed = False
        return 0, "Setting up doca-ofed (3.0.0) ...\n", ""

    def do_openibd(self, args):
        assert args == ["restart"]
        rc, text = self.openibd
        if rc == 0:
            assert "nvidia_peermem" not in self.modules, "openibd restart under a loaded nvidia_peermem"
            self.loaded_ofed = self.ofed[1]
        return rc, text, ""

    def do_modprobe(self, args):
        if args == ["-r", "nvidia_peermem"]:
            self.modules.discard("nvidia_peermem")
            return 0, "", ""
        assert args == ["nvidia_peermem"], args
        if self.peermem_built_for != self.loaded_ofed:
            self.dmesg += "[ 12.0] nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -2)\n"
            return 1, "", "modprobe: ERROR: could not insert 'nvidia_peermem': Unknown symbol in module, or unknown parameter (see dmesg)\n"
        self.modules.add("nvidia_peermem")
        return 0, "", ""

    def do_dmesg(self, args):
        return 0, self.dmesg, ""

    def changing(self):
        return [call for call in self.calls if call[0] in CHANGING or call[:2] in (["modprobe", "nvidia_peermem"], ["dkms", "build"], ["dkms", "install"])]


@pytest.fixture
def node(monkeypatch, tmp_path):
    fake = Node(tmp_path)
    fake.wanted = NEW
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text(KERNEL + "\n")
    (tmp_path / "etc/infiniband").mkdir(parents=True)
    (tmp_path / "etc/infiniband/openib.conf").write_text("ONBOOT=yes\nRUN_FW_UPDATER_ONBOOT=no\n")
    tools = {"ofed_info", "lsmod", "modinfo", "dkms", "systemctl", "dpkg-query", "mlxfwmanager", "tar", "apt-get", "modprobe", "dmesg", "openibd"}

    def get_bin_path(module, arg, required=False, opt_dirs=None):
        if arg == "timeout":
            return "/usr/bin/timeout"
        if arg in tools:
            return BIN + arg
        if required:
            module.fail_json(msg=f"Failed to find required executable {arg}")
        return None

    def run_process(module, args, **kwargs):
        assert isinstance(args, list) and all(isinstance(a, str) for a in args), args
        assert args[0] == "/usr/bin/timeout" and args[1].startswith("--kill-after="), f"unbounded: {args}"
        return fake.run(args[3:])

    monkeypatch.setattr(_tools, "run_process", run_process)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    monkeypatch.setattr(manager_mod, "Host", lambda: Host(str(tmp_path)))
    monkeypatch.setattr(manager_mod.os.path, "isfile", lambda path, real=os.path.isfile: False if path == "/etc/init.d/openibd" else real(path))
    return fake


@pytest.fixture
def bundle(tmp_path):
    path = tmp_path / f"MLNX_OFED_LINUX-{NEW}-ubuntu22.04-x86_64.tgz"
    path.write_bytes(b"not really a tarball, but its sha256 is what matters here")
    return str(path), "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def args_for(tmp_path, bundle=None, **extra):
    base = {"flavor": "doca-ofed", "version": NEW, "method": "package", "state_file": str(tmp_path / "gpufleet.fact"),
            "work_dir": str(tmp_path / "work")}
    if bundle:
        base.update(flavor="mlnx-ofed", method="installer", source=bundle[0], checksum=bundle[1])
    base.update(extra)
    return base


def state(tmp_path):
    path = tmp_path / "gpufleet.fact"
    return json.loads(path.read_text()) if path.exists() else None


def test_check_mode_changes_nothing(node, run_module, tmp_path):
    result = run_module(ofed.main, args_for(tmp_path), check_mode=True)
    assert result["changed"] is True
    assert result["plan"]["action"] == "upgrade" and result["plan"]["reload"] == "restart" and result["plan"]["peermem"] == "rebuild"
    assert result["diff"] == {"before": {"ofed": f"doca-ofed {OLD}"}, "after": {"ofed": f"doca-ofed {NEW}"}}
    assert node.changing() == []
    assert state(tmp_path) is None


def test_package_install_keeps_fw_updater_out_reloads_and_rebuilds_peermem(node, run_module, tmp_path):
    result = run_module(ofed.main, args_for(tmp_path))
    assert result.get("failed") is not True, result
    assert result["changed"] is True and result["reboot_required"] is False and result["activation"] == "none"
    assert node.apt_args == ["install", "-y", "--no-install-recommends", "doca-ofed", "mlnx-fw-updater-"]
    order = [call[:2] for call in node.changing()]
    assert order == [["apt-get", "update"], ["apt-get", "install"], ["openibd", "restart"],
                     ["dkms", "build"], ["dkms", "install"], ["modprobe", "nvidia_peermem"]]
    assert ["modprobe", "-r", "nvidia_peermem"] in node.calls  # before openibd: it holds ib_core
    assert "nvidia_peermem" in node.modules
    assert result["nic_firmware"]["before"] == result["nic_firmware"]["after"]
    doc = state(tmp_path)
    assert doc["last_known_good"]["ofed"]["version"] == OLD and doc["last_known_good"]["ofed"]["flavor"] == "doca-ofed"
    assert [entry["result"] for entry in doc["history"]] == ["started", "ok"]
    # again: nothing to do, nothing run that changes the node
    node.calls.clear()
    again = run_module(ofed.main, args_for(tmp_path))
    assert again["changed"] is False and node.changing() == []
    again_check = run_module(ofed.main, args_for(tmp_path), check_mode=True)
    assert again_check["changed"] is False


def test_installer_runs_without_fw_update_and_leaves_nic_firmware(node, run_module, tmp_path, bundle):
    result = run_module(ofed.main, args_for(tmp_path, bundle, installer_args=["--add-kernel-support"]))
    assert result.get("failed") is not True, result
    assert node.install_args == ["--without-fw-update", "--force", "--add-kernel-support"]
    assert result["install"]["firmware"] == "skipped"
    assert node.nics == {"0000:17:00.0": "28.39.1002", "0000:3d:00.0": "28.39.1002"}
    assert result["sha256"] == bundle[1].split(":")[1]


def test_an_installer_that_flashes_anyway_fails_naming_the_nics(node, run_module, tmp_path, bundle):
    node.installer_flashes = True
    result = run_module(ofed.main, args_for(tmp_path, bundle))
    assert result["failed"] is True
    assert "ran its firmware updater" in result["msg"] and "nic_firmware role" in result["msg"]
    assert state(tmp_path)["history"][-1]["result"] == "failed"


def test_nic_firmware_moving_silently_fails_the_task(node, run_module, tmp_path, bundle):
    def quiet_flash(args):  # flashes, yet prints that it skipped the firmware step
        node.nics = {pci: "28.43.2026" for pci in node.nics}
        node.ofed = ("mlnx-ofed", NEW)
        return 0, SKIPPED, ""

    node.do_mlnxofedinstall = quiet_flash
    result = run_module(ofed.main, args_for(tmp_path, bundle))
    assert result["failed"] is True
    assert "0000:17:00.0: 28.39.1002 -> 28.43.2026" in result["msg"] and "nic_firmware role" in result["msg"]


def test_opensm_running_leaves_the_reload_to_a_reboot(node, run_module, tmp_path):
    node.opensm = "active"
    result = run_module(ofed.main, args_for(tmp_path))
    assert result["changed"] is True and result["reboot_required"] is True and result["activation"] == "reboot"
    assert result["plan"]["holders"] == ["opensmd is running"]
    assert not [call for call in node.calls if call[0] == "openibd"]
    assert ["modprobe", "nvidia_peermem"] not in node.calls  # it loads at the boot, against the new stack
    assert ["dkms", "install", "-m", "nvidia", "-v", DRIVER, "-k", KERNEL, "--force"] in node.calls


def test_opensm_check_mode_predicts_the_reboot(node, run_module, tmp_path):
    node.opensm = "active"
    result = run_module(ofed.main, args_for(tmp_path), check_mode=True)
    assert result["reboot_required"] is True and node.changing() == []


def test_openibd_refusing_at_run_time_leaves_a_reboot(node, run_module, tmp_path):
    node.openibd = (1, OPENIBD_OPENSM)
    result = run_module(ofed.main, args_for(tmp_path))
    assert result["reboot_required"] is True
    assert any("opensm(1632)" in note for note in result["notes"])


def test_peermem_that_does_not_load_names_the_kernel_message(node, run_module, tmp_path):
    def dkms_without_effect(args):
        return (0, f"nvidia/{DRIVER}, {KERNEL}, x86_64: installed\n", "") if args == ["status"] else (0, "", "")

    node.do_dkms = dkms_without_effect
    result = run_module(ofed.main, args_for(tmp_path))
    assert result["failed"] is True
    assert "Unknown symbol ib_register_peer_memory_client" in result["msg"] and "Reinstall the driver" in result["msg"]


def test_checksum_mismatch_changes_nothing(node, run_module, tmp_path, bundle):
    result = run_module(ofed.main, args_for(tmp_path, (bundle[0], "sha256:" + "0" * 64)))
    assert result["failed"] is True and "checksum mismatch" in result["msg"] and "Nothing was changed" in result["msg"]
    assert node.changing() == [] and state(tmp_path) is None


@pytest.mark.parametrize("text", ["MLNX_OFED_LINUX-24.10\n", "garbage\n", ""])
def test_garbled_ofed_info_changes_nothing(node, run_module, tmp_path, text):
    node.ofed_info_text = text
    result = run_module(ofed.main, args_for(tmp_path))
    assert result["failed"] is True and "ofed_info -s printed unexpected output" in result["msg"] and "Nothing was changed" in result["msg"]
    assert node.changing() == [] and state(tmp_path) is None


def test_bad_option_fails_naming_it_before_any_command(node, run_module, tmp_path):
    result = run_module(ofed.main, args_for(tmp_path, installer_args=["--fw-image-dir=/tmp/fw"]))
    assert result["failed"] is True and result["msg"].startswith("installer_args: --fw-image-dir=/tmp/fw")
    assert node.calls == []


def test_rollback_installs_the_older_release_without_recording_it(node, run_module, tmp_path):
    node.ofed = ("doca-ofed", NEW)
    node.loaded_ofed = node.peermem_built_for = NEW
    node.wanted = OLD
    refused = run_module(ofed.main, args_for(tmp_path, version=OLD))
    assert refused["failed"] is True and "refusing to downgrade" in refused["msg"]
    result = run_module(ofed.main, args_for(tmp_path, version=OLD, allow_downgrade=True, record_last_known_good=False))
    assert result.get("failed") is not True, result
    assert result["plan"]["action"] == "downgrade" and node.ofed == ("doca-ofed", OLD) and "nvidia_peermem" in node.modules
    doc = state(tmp_path)
    assert "ofed" not in doc.get("last_known_good", {})


def test_inbox_node_records_no_last_known_good(node, run_module, tmp_path):
    node.ofed = None
    result = run_module(ofed.main, args_for(tmp_path))
    assert result["plan"]["action"] == "install" and result["diff"]["before"] == {"ofed": "inbox"}
    assert "ofed" not in state(tmp_path).get("last_known_good", {})


def test_fw_updater_left_by_an_earlier_install_is_removed(node, run_module, tmp_path):
    node.ofed = ("doca-ofed", NEW)
    node.loaded_ofed = node.peermem_built_for = NEW
    node.fw_updater_installed = True
    removed = []
    node.do_apt_get = lambda args: (removed.append(args), (0, "Removing mlnx-fw-updater ...\n", ""))[1]
    result = run_module(ofed.main, args_for(tmp_path))
    assert result["changed"] is True and result["plan"]["fw_updater"] == ["remove"]
    assert removed == [["remove", "-y", "mlnx-fw-updater"]]


def test_onboot_updater_is_switched_off(node, run_module, tmp_path):
    node.ofed = ("doca-ofed", NEW)
    node.loaded_ofed = node.peermem_built_for = NEW
    (tmp_path / "etc/infiniband/openib.conf").write_text("ONBOOT=yes\nRUN_FW_UPDATER_ONBOOT=yes\n")
    result = run_module(ofed.main, args_for(tmp_path))
    assert result["plan"]["fw_updater"] == ["disable_onboot"]
    assert (tmp_path / "etc/infiniband/openib.conf").read_text() == "ONBOOT=yes\nRUN_FW_UPDATER_ONBOOT=no\n"
    assert run_module(ofed.main, args_for(tmp_path))["changed"] is False
