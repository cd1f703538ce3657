# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The runfile install method: fetch, verify the sha256, run the NVIDIA installer with its real flags (private)."""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _artifact
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.node import DriverError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import NvidiaInstaller, NvidiaUninstall, ToolError

# R560 renamed the flag that picks the kernel modules; older installers only know -m=kernel-open.
MODULE_TYPE_FLAG_SINCE = 560
# fetch_url's timeout bounds each socket operation, not the whole download.
DOWNLOAD_SOCKET_TIMEOUT = (30, 3600)


def installer_args(version, kernel_module, dkms, kernel_source_path=None):
    """The nvidia-installer flags: unattended, module type, DKMS, kernel sources."""
    args = ["--silent", "--no-questions"]
    if int(version.split(".", maxsplit=1)[0]) >= MODULE_TYPE_FLAG_SINCE:
        args.append("--kernel-module-type=" + kernel_module)
    else:
        args.append("-m=" + ("kernel-open" if kernel_module == "open" else "kernel"))
    args.append("--dkms" if dkms else "--no-dkms")
    if kernel_source_path:
        args.append("--kernel-source-path=" + kernel_source_path)
    return args


_DKMS = re.compile(r"dkms build|Building kernel modules|Bad return status for module build|kernel module compilation", re.IGNORECASE)
_HEADERS = re.compile(r"Unable to find the kernel source tree", re.IGNORECASE)
_IN_USE = re.compile(r"appears to already be loaded|appears to be in use", re.IGNORECASE)
# nvidia-installer's test load under Secure Boot (kernel.c ignore_load_error), or the kernel's own words.
_UNTRUSTED = re.compile(r"not signed by a key that is trusted|Key was rejected by service", re.IGNORECASE)


def explain_failure(output, kernel):
    """A message for a failed installer run that says what to do."""
    if _UNTRUSTED.search(output):
        return (
            "the NVIDIA installer built the modules but the kernel refused them at its test load: they are not signed by a key this node "
            "trusts (Secure Boot). Give module_signing_key and module_signing_certificate, the certificate enrolled as a MOK "
            "(mokutil --import, then a reboot through the MOK manager)"
        )
    if _HEADERS.search(output):
        return (
            f"the NVIDIA installer found no kernel sources for the running kernel {kernel}: install the headers for `uname -r` "
            f"(linux-headers-{kernel} or kernel-devel-{kernel}) or set kernel_source_path"
        )
    if _DKMS.search(output):
        return (
            f"the kernel module build (DKMS) failed for kernel {kernel}: are the kernel headers for `uname -r` "
            f"(linux-headers-{kernel} or kernel-devel-{kernel}) installed, and does this driver support this kernel? "
            "See /var/log/nvidia-installer.log and /var/lib/dkms/nvidia/*/build/make.log"
        )
    if _IN_USE.search(output):
        return "the NVIDIA installer found the nvidia module still loaded or in use: stop the programs using the GPU, or reboot and retry"
    return "the NVIDIA installer failed: see /var/log/nvidia-installer.log"


class RunfileMethod:
    """Install from NVIDIA-Linux-<arch>-<version>.run; the file is verified before anything else."""

    name = "runfile"

    def __init__(self, module, options, counter=None):
        self.module = module
        self.options = options
        self.counter = counter
        self.path = None
        self.artifact = None
        self.signing_args = []  # set by ModuleSigning.applied for the install only

    def prepare(self):
        """Download (``source`` a URL, or ``presigned_url``) or copy (a path) the runfile into a private folder and verify
        the sha256 of that copy; DriverError on mismatch. Returns the path of the copy, the file the installer runs.

        A path on the node is never run where it lies: a job user who can write its folder could swap it between
        the check and the installer. ``self.artifact`` says what was verified (URLs without their secrets).
        """
        if self.options.get("state") == "absent":
            return None  # nvidia-uninstall needs no runfile
        source = self.options.get("presigned_url") or self.options["source"]
        try:
            if _artifact.is_url(source):
                low, high = DOWNLOAD_SOCKET_TIMEOUT
                dest = os.path.join(_artifact.private_folder(self.module.tmpdir), f"NVIDIA-Linux-{self.options['version']}.run")
                got = _artifact.fetch(
                    self.module, source, dest, self.options["checksum_hex"],
                    headers=self.options.get("url_headers"), url_username=self.options.get("url_username"),
                    url_password=self.options.get("url_password"), timeout=max(low, min(self.options["timeout"], high)),
                )
                path = got["path"]
                self.artifact = {"source": _artifact.redact_url(source), "url": got["url"], "redirects": got["redirects"], "sha256": got["sha256"]}
            else:
                path, sha256 = _artifact.private_copy(source, self.options["checksum_hex"], self.module.tmpdir)
                self.artifact = {"source": source, "sha256": sha256}
        except _artifact.ArtifactError as exc:
            raise DriverError(exc.msg, **exc.details) from exc
        self.path = path
        return path

    def install(self, version, kernel):
        tool = NvidiaInstaller(self.module, counter=self.counter, required=True)
        args = [self.path, *installer_args(version, self.options["kernel_module"], self.options["dkms"], self.options.get("kernel_source_path"))]
        args += self.signing_args
        try:
            tool.run(args, timeout=self.options["timeout"])
        except ToolError as exc:
            raise DriverError.from_tool(exc, explain_failure(exc.stdout + "\n" + exc.stderr, kernel) + f" (installer exit status {exc.rc})") from exc

    def remove(self):
        tool = NvidiaUninstall(self.module, counter=self.counter, required=True)
        try:
            tool.run(["--silent"], timeout=self.options["timeout"])
        except ToolError as exc:
            raise DriverError.from_tool(exc, f"nvidia-uninstall failed: {exc.msg}") from exc


__all__ = ["RunfileMethod", "explain_failure", "installer_args"]
