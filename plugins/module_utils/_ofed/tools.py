# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The tools the OFED component runs, one wrapper each (private).

Each is a ``_tools.Tool``: an argument list (never a shell string), ``LC_ALL=C`` and a time limit. The read-only
ones the stack audit uses (``ofed_info``, ``lsmod``, ``modinfo``, ``dkms``, ``systemctl``, ``mlxfwmanager``) are
``_tools``' own; these are the ones that change a node.
"""

from __future__ import annotations

import os

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import AptGet, Dnf, Rpm, Tool

OPENIBD_INIT_SCRIPT = "/etc/init.d/openibd"


class MlnxOfedInstall(Tool):
    """``mlnxofedinstall`` of an extracted bundle (its path is always given)."""

    binary = "mlnxofedinstall"
    label = "mlnxofedinstall"
    default_timeout = 3600  # builds kernel modules for the running kernel (--add-kernel-support: longer)


class Tar(Tool):
    binary = "tar"
    label = "tar"
    default_timeout = 600

    def extract(self, archive, dest):
        """``tar -xzf ARCHIVE -C DEST --no-same-owner``: the bundle's folder lands in DEST."""
        return self.run(["-xzf", archive, "-C", dest, "--no-same-owner"])


class Openibd(Tool):
    """MLNX_OFED's / DOCA-OFED's ``openibd`` init script: ``/etc/init.d/openibd`` (else ``openibd`` on the path)."""

    binary = "openibd"
    label = "openibd restart"
    default_timeout = 600

    def __init__(self, module, path=None, counter=None):
        if not path and os.path.isfile(OPENIBD_INIT_SCRIPT):
            path = OPENIBD_INIT_SCRIPT
        super().__init__(module, path=path, counter=counter)

    def restart(self):
        """``openibd restart``: (rc, stdout, stderr), every exit status returned (the caller reads what held the stack)."""
        return self.run(["restart"], ok_rcs=None)


class OfedAptGet(AptGet):
    """The collection's apt-get wrapper, with an OFED install's time (an hour)."""

    default_timeout = 3600


class OfedDnf(Dnf):
    default_timeout = 3600


class OfedDpkg(Tool):
    """``dpkg -i`` of DOCA's local-repository package (doca-host_<version>.deb)."""

    binary = "dpkg"
    label = "dpkg"
    default_timeout = 600
    env = (("DEBIAN_FRONTEND", "noninteractive"),)


class OfedRpm(Rpm):
    default_timeout = 600


class DkmsBuild(Tool):
    """``dkms build|install -m nvidia -v VERSION -k KERNEL --force``: rebuilds nvidia_peermem against OFED's symbols."""

    binary = "dkms"
    label = "dkms"
    default_timeout = 1800

    def rebuild(self, module, version, kernel):
        for verb in ("build", "install"):
            self.run([verb, "-m", module, "-v", version, "-k", kernel, "--force"])


__all__ = ["DkmsBuild", "MlnxOfedInstall", "OfedAptGet", "OfedDnf", "OfedDpkg", "OfedRpm", "Openibd", "Tar"]
