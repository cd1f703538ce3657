# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the nvidia_driver module reads and does on the node besides installing (private).

Reading the driver state (procfs, ``modinfo``, ``nvidia-smi``, ``nv-fabricmanager``, ``systemctl``,
NVSwitch presence), GPU processes (refuse / wait / kill), the services that hold the GPU, and the
kernel modules (unload in dependency order, load again).
"""

from __future__ import annotations

import os
import signal
import time

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _version
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._host import Host, HostError, fabricmanager_version
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import nvsmi as nvsmi_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import procfs as procfs_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import (
    FabricManager,
    Lsmod,
    Modinfo,
    Modprobe,
    NvidiaSmi,
    Rmmod,
    Systemctl,
    ToolError,
)

# Units that keep /dev/nvidia* open; stopped before the modules are unloaded, started again after.
GPU_SERVICES = ("nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm")
# Users first: nvidia_drm uses nvidia_modeset; nvidia_modeset, nvidia_uvm and nvidia_peermem use nvidia.
UNLOAD_ORDER = ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia_peermem", "nvidia")
DEFAULT_LOAD = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm")
APP_FIELDS = ("pid", "process_name", "gpu_uuid", "used_memory")
KILL_GRACE_S = 10


class DriverError(GpufleetError):
    """A step failed; ``node_state`` says what the node is left with."""

    def __init__(self, msg, cmd=None, rc=None, stdout="", stderr="", **extra):
        super().__init__(msg, cmd=cmd, rc=rc, stdout=stdout, stderr=stderr, **extra)
        self.cmd = cmd
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.extra = self.details  # one dict: what callers add to it reaches fail_json

    @classmethod
    def from_tool(cls, exc, msg=None, **extra):
        return cls(msg or exc.msg, cmd=exc.cmd, rc=exc.rc, stdout=exc.stdout, stderr=exc.stderr, **extra)


def describe_processes(processes):
    return ", ".join("{} (pid {}, GPU {})".format(p.get("process_name") or "?", p.get("pid"), p.get("gpu_uuid") or "?") for p in processes)


class Node:
    """The node seen by the driver module. ``sleep``, ``clock`` and ``kill`` are injectable for tests."""

    def __init__(self, module, counter=None, host=None, sleep=time.sleep, clock=time.monotonic, kill=os.kill):
        self.module = module
        self.counter = counter
        self.host = host or Host()
        self.sleep = sleep
        self.clock = clock
        self.kill = kill
        self.smi = NvidiaSmi(module, counter=counter)
        self.systemctl = Systemctl(module, counter=counter)

    # -- reading -----------------------------------------------------------
    def read(self, installed=None):
        """Current driver, fabric manager, services and NVSwitch presence.

        ``installed`` is the package method's ``(version, flavor)`` of the installed packages; without
        it the installed version is the one ``modinfo`` finds for the running kernel (runfile installs).
        """
        driver = {"loaded_version": None, "flavor": None, "installed_version": None, "nvidia_smi": "absent", "nvidia_smi_version": None}
        proc_text = self.host.read("proc/driver/nvidia/version")
        if proc_text is not None:
            try:
                proc = procfs_parser.parse_driver_version(proc_text)
            except ParseError as exc:
                raise DriverError(f"/proc/driver/nvidia/version does not read as an NVIDIA driver version file: {exc}", stdout=proc_text) from exc
            driver.update(loaded_version=proc["version"], flavor=proc["flavor"])
        driver.update(self._smi_status())
        if installed is not None:
            driver["installed_version"], flavor = installed
            driver["flavor"] = flavor or driver["flavor"]
        else:
            modinfo = self._modinfo()
            driver["installed_version"] = modinfo.get("version") or driver["loaded_version"] or driver["nvidia_smi_version"]
            driver["flavor"] = driver["flavor"] or modinfo.get("flavor")
        return {
            "driver": driver,
            "fabricmanager": self._fabricmanager(),
            "services": self.service_states(),
            "nvswitch": bool(self._nvswitches()),
            "kernel": self.host.kernel_release(),
        }

    def _smi_status(self):
        if not self.smi.available:
            return {}
        try:
            rc, out, err = self.smi.run(["--query-gpu=driver_version", "--format=csv,noheader"], ok_rcs=None)
        except ToolError as exc:  # hung (stopped by its time limit): NVML or a GPU does not answer
            raise DriverError.from_tool(
                exc, f"{exc.msg}: the GPU or its driver does not answer. Check dmesg for Xid and NVRM errors, then reboot the node"
            ) from exc
        if rc == 0:
            versions = {line.strip() for line in out.splitlines() if line.strip()}
            if len(versions) > 1 or not all(_version.is_driver_version(v) for v in versions):
                raise DriverError(
                    f"nvidia-smi --query-gpu=driver_version answered {out.strip()[:200]!r}, not one driver version for every GPU: "
                    "check nvidia-smi on the node (a half-loaded driver, a GPU with an error)",
                    cmd=[self.smi.path, "--query-gpu=driver_version", "--format=csv,noheader"], rc=rc, stdout=out, stderr=err,
                )
            return {"nvidia_smi": "ok", "nvidia_smi_version": versions.pop() if versions else None}
        status = {NvidiaSmi.RC_NO_DRIVER: "no_driver", NvidiaSmi.RC_NO_DEVICE: "no_devices", NvidiaSmi.RC_GPU_LOST: "gpu_lost"}.get(rc, "error")
        if "version mismatch" in (out + err).lower():
            status = "version_mismatch"  # user space and kernel module differ: a reload or reboot is pending
        return {"nvidia_smi": status, "nvidia_smi_message": (out or err).strip()[:300]}

    def _modinfo(self):
        tool = Modinfo(self.module, counter=self.counter)
        if not tool.available:
            return {}
        rc, out, _err = tool.module_info("nvidia")
        if rc != 0:
            return {}
        try:
            return procfs_parser.parse_modinfo(out)
        except ParseError:
            return {}

    def _fabricmanager(self):
        # One rule with gpu_facts (_host): absent or a wrapper whose program is gone is not installed.
        try:
            return fabricmanager_version(FabricManager(self.module, counter=self.counter))
        except HostError as exc:
            raise DriverError(f"{exc.msg} or set fabricmanager: skip", cmd=exc.cmd, rc=exc.rc, stdout=exc.stdout, stderr=exc.stderr) from exc

    def _nvswitches(self):
        return self.host.nvswitches()

    def service_states(self):
        if not self.systemctl.available:
            return {}
        return self.systemctl.is_active(GPU_SERVICES)

    # -- GPU processes -----------------------------------------------------
    def gpu_processes(self):
        """The processes that use the GPUs; DriverError when they cannot be listed.

        Only a node without a loaded driver (no ``/proc/driver/nvidia/version``; nvidia-smi absent or
        exit status 9) has no GPU processes. Any other failure (a GPU off the bus, an NVML error, a version
        mismatch, a hang) says nothing about what runs there: acting on it would replace the driver under jobs.
        """
        driver_loaded = self.host.read("proc/driver/nvidia/version") is not None
        if not self.smi.available:
            if not driver_loaded:
                return []
            raise DriverError(
                "cannot list the GPU processes (the nvidia module is loaded but nvidia-smi was not found): nothing was changed; "
                "install nvidia-smi (the driver's user space) or reboot the node, then retry"
            )
        args = ["--query-compute-apps=" + ",".join(APP_FIELDS), "--format=csv,noheader,nounits"]
        try:
            rc, out, err = self.smi.run(args, ok_rcs=None)
        except ToolError as exc:  # hung: says nothing about what runs there
            raise DriverError.from_tool(exc, f"cannot list the GPU processes ({exc.msg}): nothing was changed; check nvidia-smi and dmesg, then retry") from exc
        if rc != 0:
            if rc == NvidiaSmi.RC_NO_DRIVER and not driver_loaded:
                return []  # no driver loaded: nothing can use a GPU
            raise DriverError(
                f"cannot list the GPU processes (nvidia-smi exit status {rc}: {(err or out).strip()[:300] or 'no output'}): "
                "nothing was changed; GPU jobs may still run on this node. Check nvidia-smi and dmesg (Xid errors, a GPU fallen "
                "off the bus), drain the node, reboot it, and retry",
                cmd=[self.smi.path, *args],
                rc=rc,
                stdout=out,
                stderr=err,
            )
        try:
            return nvsmi_parser.parse_compute_apps_csv(out, list(APP_FIELDS))
        except ParseError as exc:
            raise DriverError(f"cannot read the GPU processes: {exc}", stdout=out, stderr=err) from exc

    def clear_gpu_processes(self, policy, timeout):
        """Apply ``gpu_processes`` (refuse / wait / kill); returns the processes killed."""
        processes = self.gpu_processes()
        if not processes:
            return []
        if policy == "refuse":
            raise DriverError(
                f"{len(processes)} process(es) use the GPUs: {describe_processes(processes)}. Nothing was changed. "
                "Stop them (drain the node first), or set gpu_processes: wait (with timeout) or gpu_processes: kill",
                gpu_processes=processes,
            )
        if policy == "wait":
            deadline = self.clock() + timeout
            while processes and self.clock() < deadline:
                self.sleep(min(5, max(0.1, deadline - self.clock())))
                processes = self.gpu_processes()
            if processes:
                raise DriverError(
                    f"processes still use the GPUs after {timeout} s: {describe_processes(processes)}. Nothing was changed. "
                    "Stop them, raise timeout, or set gpu_processes: kill",
                    gpu_processes=processes,
                )
            return []
        return self._kill(processes)

    def _kill(self, processes):
        pids = sorted({int(p["pid"]) for p in processes if p.get("pid") is not None})
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    self.kill(pid, sig)
                except ProcessLookupError:
                    continue
                except OSError as exc:
                    raise DriverError(f"cannot send signal {int(sig)} to GPU process {pid}: {exc}", gpu_processes=processes) from exc
            deadline = self.clock() + KILL_GRACE_S
            while self.clock() < deadline:
                remaining = self.gpu_processes()
                if not remaining:
                    return processes
                self.sleep(1)
        remaining = self.gpu_processes()
        if remaining:
            raise DriverError(f"GPU processes survive SIGKILL: {describe_processes(remaining)}. Nothing was changed.", gpu_processes=remaining)
        return processes

    # -- services ----------------------------------------------------------
    def stop(self, units):
        for unit in units:
            try:
                self.systemctl.run(["stop", unit])
            except ToolError as exc:
                raise DriverError.from_tool(
                    exc, f"cannot stop {unit} before changing the driver: {exc.msg}. Nothing was changed; the units stopped before it are started again"
                ) from exc

    def start(self, units):
        """Start each unit; returns ``{unit: error message}`` for the ones that did not start."""
        failures = {}
        for unit in units:
            try:
                self.systemctl.run(["start", unit])
            except ToolError as exc:
                failures[unit] = exc.msg
        return failures

    # -- kernel modules ----------------------------------------------------
    def loaded_modules(self):
        tool = Lsmod(self.module, counter=self.counter, required=True)
        _rc, out, _err = tool.run([])
        loaded = procfs_parser.parse_lsmod(out)
        return [name for name in UNLOAD_ORDER if name in loaded]

    def unload(self, modules):
        """``rmmod`` each module in dependency order; returns (unloaded, error or None)."""
        rmmod = Rmmod(self.module, counter=self.counter)
        unloaded = []
        for name in UNLOAD_ORDER:
            if name not in modules:
                continue
            try:
                rmmod.run([name])
            except ToolError as exc:
                return unloaded, exc
            unloaded.append(name)
        return unloaded, None

    def load(self, modules):
        """``modprobe`` each module (``nvidia`` first); returns the ToolError of the first failure or None."""
        modprobe = Modprobe(self.module, counter=self.counter)
        for name in reversed(UNLOAD_ORDER):
            if name not in modules:
                continue
            try:
                modprobe.run([name])
            except ToolError as exc:
                return exc
        return None


__all__ = ["DEFAULT_LOAD", "GPU_SERVICES", "UNLOAD_ORDER", "DriverError", "Node", "describe_processes"]
