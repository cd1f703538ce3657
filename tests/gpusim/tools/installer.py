"""`gpusim-run-installer`: the installer behind the .run files of artifacts.write_driver_runfile.

Accepts the real nvidia-installer flags and fails the way it does: modules in use, kernel
headers missing, DKMS / kernel module build error (log in NODE_DIR/nvidia-installer.log)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from .. import catalog, secureboot
from .. import ofed as sim_ofed
from .. import state as st
from ._common import fail, load, node_dir, out, update

TYPE_CHECKING = False  # typing is not imported at run time: 4 ms of every simulated tool's start-up
if TYPE_CHECKING:
    from typing import Any

FLAGS = {"--silent", "-s", "--no-questions", "-q", "--accept-license", "-a", "--dkms", "--no-dkms",
         "--disable-nouveau", "--no-nouveau-check", "--no-cc-version-check", "--no-drm", "--install-libglvnd",
         "--no-opengl-files", "--no-x-check", "--no-network", "-N", "--run-nvidia-xconfig", "--extract-only", "-x",
         "--uninstall", "--version", "-v", "--no-kernel-module", "--no-install-compat32-libs", "--systemd",
         "--no-peermem", "--kernel-module-only"}
VALUE_FLAGS = ("--ui", "--kernel-source-path", "-m", "--kernel-module-type", "--log-file-name", "--tmpdir",
               "--kernel-name", "-k", "--kernel-module-build-directory", "--module-signing-secret-key",
               "--module-signing-public-key")

IN_USE = ("ERROR: An NVIDIA kernel module 'nvidia' appears to already be loaded in your kernel.  This may be because "
          "it is in use (for example, by an X server, a CUDA program, or the NVIDIA Persistence Daemon), but this may "
          "also happen if your kernel was configured without support for module unloading.  Please be sure to exit "
          "any programs that may be using the GPU(s) before attempting to upgrade your driver.  If no GPU-based "
          "programs are running, you know that your kernel supports module unloading, and you still receive this "
          "message, then an error may have occurred that has corrupted an NVIDIA kernel module's usage count, for "
          "which the simplest remedy is to reboot your computer.")
NO_HEADERS = ("ERROR: Unable to find the kernel source tree for the currently running kernel.  Please make sure you "
              "have installed the kernel source files for your kernel and that they are properly configured; on Red "
              "Hat Linux systems, for example, be sure you have the 'kernel-source' or 'kernel-devel' RPM installed.  "
              "If you know the correct kernel source files are installed, you may specify the kernel source path with "
              "the '--kernel-source-path' command line option.")
FAILED = ("ERROR: Installation has failed.  Please see the file '/var/log/nvidia-installer.log' for details.  You may "
          "find suggestions on fixing installation problems in the README available on the Linux driver download "
          "page at www.nvidia.com.")


def _log(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    try:
        (node_dir() / "nvidia-installer.log").write_text(text)
    except OSError:
        pass
    update(lambda s: s.__setitem__("installer_log", text))


def main(argv: list[str]) -> int:
    version = fail_kind = None
    args: list[str] = []
    it = iter(argv)
    for a in it:
        if a.startswith("--runfile-version="):
            version = a.split("=", 1)[1]
        elif a.startswith("--runfile-fail="):
            fail_kind = a.split("=", 1)[1] or None
        elif a == "--":
            args = list(it)
    if not version:
        fail("gpusim-run-installer: must be run from an NVIDIA-Linux-x86_64-<version>.run file", 2)
    opts: dict[str, str] = {}
    flags = set()
    for a in args:
        name, eq, val = a.partition("=")
        if name in VALUE_FLAGS and eq:
            opts[name] = val
        elif a in FLAGS:
            flags.add(a)
        else:
            fail(f'nvidia-installer: unrecognized option: "{a}"\n\n'
                 "ERROR: Invalid commandline, please run `nvidia-installer --help` for usage information.", 1, "out")
    if flags & {"--version", "-v"}:
        out(f"\nnvidia-installer:  version {version}\n  The NVIDIA Software Installer for Unix/Linux.\n")
        return 0
    if flags & {"-x", "--extract-only"}:
        d = Path(os.getcwd()) / f"NVIDIA-Linux-x86_64-{version}"
        d.mkdir(exist_ok=True)
        (d / "nvidia-installer").write_text("#!/bin/sh\necho simulated\n")
        return 0
    state = load()
    kernel = state["kernel"]
    log = ["nvidia-installer log file '/var/log/nvidia-installer.log'",
           f"creation time: {time.strftime('%a %b %d %H:%M:%S %Y')}", f"installer version: {version}", "",
           f"command line:\n    ./nvidia-installer {' '.join(args)}", ""]
    if "nvidia" in state["modules"] or state["processes"]:
        _log([*log, IN_USE, FAILED])
        fail(f"\n{IN_USE}\n\n{FAILED}", 1, "out")
    flavor_opt = opts.get("-m") or opts.get("--kernel-module-type")
    if flavor_opt and flavor_opt not in ("kernel-open", "open", "kernel", "proprietary"):
        fail(f'ERROR: Invalid kernel module type "{flavor_opt}".', 1, "out")
    flavor = "open" if flavor_opt in ("kernel-open", "open") else (
        "proprietary" if flavor_opt else ("open" if catalog.branch(version) >= 560 else "proprietary"))
    if (st.fault(state, "headers_missing") or not state.get("kernel_headers", True) or fail_kind == "headers") \
            and "--kernel-source-path" not in opts:
        _log([*log, NO_HEADERS, FAILED])
        fail(f"\n{NO_HEADERS}\n\n{FAILED}", 1, "out")
    dkms = "--dkms" in flags
    if st.dkms_fails(state, version) or fail_kind == "dkms":
        if dkms:
            err = (f"ERROR: Failed to run `/usr/sbin/dkms build -m nvidia -v {version} -k {kernel}`: \n"
                   f"Building module:\nCleaning build area...\n'make' -j16 NV_EXCLUDE_BUILD_MODULES='' KERNEL_UNAME="
                   f"{kernel} modules......(bad exit status: 2)\nError! Bad return status for module build on kernel: "
                   f"{kernel} (x86_64)\nConsult /var/lib/dkms/nvidia/{version}/build/make.log for more information.")
        else:
            err = ('ERROR: An error occurred while performing the step: "Building kernel modules". See '
                   "/var/log/nvidia-installer.log for details.")
        _log([*log, "-> Kernel module compilation complete." if False else "-> Building kernel modules", err, FAILED])
        fail(f"\n{err}\n\n{FAILED}", 1, "out")

    signature = secureboot.runfile_signature(opts.get("--module-signing-secret-key"), opts.get("--module-signing-public-key"), dkms)
    if secureboot.refusal({"stack": state.get("stack"), "driver": {"signature": signature}}):
        # nvidia-installer test-loads the module it built: under Secure Boot an untrusted signature fails the install.
        _log([*log, secureboot.INSTALLER_UNTRUSTED, FAILED])
        fail(f"\n{secureboot.INSTALLER_UNTRUSTED}\n\n{FAILED}", 1, "out")

    def _install(s: dict[str, Any]) -> None:
        s["driver"].update(version=version, flavor=flavor, method="runfile", dkms=dkms, built=True, staged=None,
                           build_date=st._build_date(version), signature=signature)
        s["modules"] = []
        s["driver"]["peermem_ofed"] = sim_ofed.identity(s)  # nvidia_peermem builds against the installed OFED (issue 24)

    update(_install)
    _log([*log, "-> Installing NVIDIA driver version " + version, "-> Kernel module compilation complete.",
          f"-> Installation of the NVIDIA Accelerated Graphics Driver for Linux-x86_64 (version: {version}) is now "
          "complete."])
    if not (flags & {"--silent", "-s"}):
        out(f"\nInstallation of the NVIDIA Accelerated Graphics Driver for Linux-x86_64 (version: {version}) is now "
            "complete.\n")
    return 0
