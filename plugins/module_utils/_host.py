# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a node's /proc and /sys say, NVSwitch presence and the fabric manager version (private).

One implementation shared by gpu_facts (``_facts``), gpu_validate (``_validate``) and
nvidia_driver (``_driver``): the PCI vendor and class ids, the NVSwitch rule and the
``nv-fabricmanager --version`` read used to live twice, with different rules.
"""

from __future__ import annotations

import os
import platform

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _version
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import fabricmanager as fm_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError

NVIDIA_VENDOR = "0x10de"
MELLANOX_VENDOR = "0x15b3"
# PCI class codes (first two bytes of the class file): 3D / VGA controllers, other bridges (NVSwitch), network controllers.
GPU_CLASS_PREFIXES = ("0x0300", "0x0302")
NVSWITCH_CLASS_PREFIX = "0x0680"
NIC_CLASS_PREFIXES = ("0x0200", "0x0207")
NVSWITCH_PROC_DEVICES = "proc/driver/nvidia-nvswitch/devices"
# What a shell wrapper or an alternatives link exits with when its program is gone (126: not executable,
# 127: not found): the fabric manager package is not installed, whatever file is left on $PATH.
RC_PROGRAM_GONE = (126, 127)


class HostError(GpufleetError):
    """A node file or a read of the node says something that cannot be trusted."""

    def __init__(self, msg, cmd=None, rc=None, stdout="", stderr="", **details):
        super().__init__(msg, cmd=cmd, rc=rc, stdout=stdout, stderr=stderr, **details)
        self.cmd = cmd
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr


class Host:
    """Read-only view of the node's /proc and /sys (``root`` lets tests point it elsewhere)."""

    def __init__(self, root="/"):
        self.root = root

    def path(self, *parts):
        return os.path.join(self.root, *[p.lstrip("/") for p in parts])

    def read(self, *parts):
        """The file's text, or None when it cannot be read (absent, a directory, no permission)."""
        try:
            with open(self.path(*parts)) as handle:
                return handle.read()
        except (OSError, UnicodeDecodeError):
            return None

    def listdir(self, *parts):
        try:
            return sorted(os.listdir(self.path(*parts)))
        except OSError:
            return []

    def kernel_release(self):
        release = self.read("proc/sys/kernel/osrelease")
        return release.strip() if release and release.strip() else platform.release()

    def boot_id(self):
        return (self.read("proc/sys/kernel/random/boot_id") or "").strip() or None

    def pci_devices(self, vendor, class_prefixes):
        """PCI addresses under /sys/bus/pci/devices with exactly this vendor id and a class starting with a prefix."""
        found = []
        for address in self.listdir("sys/bus/pci/devices"):
            if (self.read("sys/bus/pci/devices", address, "vendor") or "").strip().lower() != vendor:
                continue
            pci_class = (self.read("sys/bus/pci/devices", address, "class") or "").strip().lower()
            if pci_class.startswith(tuple(class_prefixes)):
                found.append(address)
        return found

    def gpus(self):
        """PCI addresses of the NVIDIA GPUs (display and 3D controllers)."""
        return self.pci_devices(NVIDIA_VENDOR, GPU_CLASS_PREFIXES)

    def nvswitches(self):
        """The NVSwitches: the nvidia-nvswitch driver's devices, else NVIDIA bridges on the PCI bus (driver not loaded)."""
        return self.listdir(NVSWITCH_PROC_DEVICES) or self.pci_devices(NVIDIA_VENDOR, (NVSWITCH_CLASS_PREFIX,))


def fabricmanager_version(tool, timeout=None):
    """``{"installed", "version"}`` read with ``nv-fabricmanager --version`` (a ``_tools.FabricManager``).

    Not installed when the tool is absent or its wrapper's program is gone (exit status 126 or 127).
    A tool that answers without a whole driver version (``535.161`` is cut off) raises HostError with the
    command and its output: a fabric manager whose version is unknown cannot be said to match the driver.
    A hung tool raises the ToolError of ``Tool.run`` (it names the limit).
    """
    if not tool.available:
        return {"installed": False, "version": None}
    cmd = [tool.path, "--version"]
    rc, out, err = tool.run(["--version"], ok_rcs=None, timeout=timeout)
    if rc in RC_PROGRAM_GONE:
        return {"installed": False, "version": None}
    try:
        version = fm_parser.parse_version(out + "\n" + err)
    except ParseError as exc:
        raise HostError(
            f"nv-fabricmanager --version printed no whole version (exit status {rc}; {exc}): reinstall the fabric manager package",
            cmd=cmd,
            rc=rc,
            stdout=out,
            stderr=err,
        ) from exc
    if not _version.is_driver_version(version):
        raise HostError(
            f"nv-fabricmanager --version printed {version!r}, which is not a whole driver version: reinstall the fabric manager package",
            cmd=cmd,
            rc=rc,
            stdout=out,
            stderr=err,
        )
    return {"installed": True, "version": version}


__all__ = [
    "GPU_CLASS_PREFIXES",
    "MELLANOX_VENDOR",
    "NIC_CLASS_PREFIXES",
    "NVIDIA_VENDOR",
    "NVSWITCH_CLASS_PREFIX",
    "Host",
    "HostError",
    "fabricmanager_version",
]
