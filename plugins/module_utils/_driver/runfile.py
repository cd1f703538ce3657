# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The runfile install method: fetch, verify the sha256, run the NVIDIA installer with its real flags (private)."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from urllib.parse import urlsplit, urlunsplit

from ansible.module_utils.urls import fetch_url
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.node import DriverError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import NvidiaInstaller, NvidiaUninstall, ToolError

# R560 renamed the flag that picks the kernel modules; older installers only know -m=kernel-open.
MODULE_TYPE_FLAG_SINCE = 560
_CHUNK = 1 << 20


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def redact_url(url):
    """``url`` without ``user:password@``, query string and fragment (presigned URLs carry their signature there).

    Text that is not a URL (a local path) is returned unchanged.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<url not shown>"
    if not parts.scheme or not parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def redact_urls_in(text):
    """``text`` with every URL in it passed through :func:`redact_url` (messages of the HTTP client)."""
    return _URL.sub(lambda match: redact_url(match.group(0)), str(text or ""))


class _RaisingModule:
    """The module as fetch_url sees it: credentials sent with the first request, and a ``fail_json`` that
    raises a DriverError with the URL redacted instead of ending the module with the URL in its result."""

    def __init__(self, module, url):
        self._module = module
        self._url = url
        self.params = dict(module.params, force_basic_auth=bool(module.params.get("url_username")))

    def __getattr__(self, name):
        return getattr(self._module, name)

    def fail_json(self, msg, **_kwargs):
        raise DriverError(f"cannot download {redact_url(self._url)}: {redact_urls_in(msg)}. Nothing was changed. Check the URL or give a local path as source")


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


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


def explain_failure(output, kernel):
    """A message for a failed installer run that says what to do."""
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

    def installed(self):
        return None  # the installed version is read with modinfo (see Node.read)

    def prepare(self):
        """Download (when ``source`` is a URL) and verify the sha256; DriverError on mismatch. Returns the path."""
        source = self.options["source"]
        expected = self.options["checksum_hex"]
        if re.match(r"^(https?|ftp)://", source):
            path = self._download(source)
        else:
            path = source
            if not os.path.isfile(path):
                raise DriverError(f"runfile {redact_url(path)} does not exist on the node: copy it there first or give an https:// URL as source")
        actual = sha256_of(path)
        if actual != expected:
            if path != source:
                os.unlink(path)
            raise DriverError(
                f"checksum mismatch for {redact_url(source)}: sha256 is {actual}, expected {expected}. Nothing was changed. "
                "The file is damaged or not the one you meant: download it again from NVIDIA, or correct checksum",
                sha256=actual,
            )
        self.path = path
        return path

    def _download(self, url):
        response, info = fetch_url(_RaisingModule(self.module, url), url, timeout=max(30, min(int(self.options["timeout"]), 3600)))
        if response is None or info.get("status") != 200:
            raise DriverError(
                f"cannot download {redact_url(url)}: HTTP {info.get('status')} {redact_urls_in(info.get('msg'))}. Nothing was changed. "
                "Check the URL (and url_username, url_password) or give a local path as source"
            )
        fd, path = tempfile.mkstemp(prefix="nvidia-driver.", suffix=".run", dir=getattr(self.module, "tmpdir", None))
        with os.fdopen(fd, "wb") as handle:
            for chunk in iter(lambda: response.read(_CHUNK), b""):
                handle.write(chunk)
        return path

    def install(self, version, kernel):
        tool = NvidiaInstaller(self.module, counter=self.counter, required=True)
        args = [self.path, *installer_args(version, self.options["kernel_module"], self.options["dkms"], self.options.get("kernel_source_path"))]
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


__all__ = ["RunfileMethod", "explain_failure", "installer_args", "redact_url", "redact_urls_in", "sha256_of"]
