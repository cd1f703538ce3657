# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The IMEX package at exactly the driver's version, held, for both install methods (private).

The decisions (which package, which action) are ``_driver.imex``'s; this class reads and changes the node:

=============  =================================================  ==========================================
               apt (Debian, Ubuntu)                               dnf (RHEL and friends)
=============  =================================================  ==========================================
read           ``dpkg-query -W 'nvidia-imex*'`` (version, hold)   ``rpm -q nvidia-imex nvidia-imex-<branch>``
available      ``apt-get install -s <name>=<version>-<release>``  ``dnf repoquery <name>-<version>-<release>``
install, hold  ``apt-get install`` + ``apt-mark hold``            ``dnf install`` + ``dnf versionlock add``
=============  =================================================  ==========================================
"""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver import imex as imex_rules
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.node import DriverError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.package import backend
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import packages as packages_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import AptGet, Dnf, DpkgQuery, Imex, Rpm, ToolError

SERVICE = "nvidia-imex"


class ImexPackage:
    """nvidia-imex on the node: what is installed, whether a version is offered, install it held, remove it."""

    def __init__(self, module, options, counter=None, packages=None):
        self.module = module
        self.options = options
        self.counter = counter
        self._packages = packages
        self.release = options.get("package_release") or "1"

    @property
    def packages(self):
        if self._packages is None:
            self._packages = backend(self.module, self.options, self.counter)
        return self._packages

    def present_on_node(self):
        """Whether the nvidia-imex program is on the node (``auto`` manages IMEX only there: no package query elsewhere)."""
        return Imex(self.module, counter=self.counter).available

    def installed(self):
        """``{"version", "held", "package"}``; ``version`` None when no IMEX package is installed."""
        found = {"version": None, "held": None, "package": None}
        try:
            if self.packages.name == "apt":
                _rc, out, _err = DpkgQuery(self.module, counter=self.counter, required=True).run(
                    ["-W", "-f=${Package} ${Version} ${db:Status-Abbrev}\\n", "nvidia-imex*"], ok_rcs=(0, 1))
                for package in packages_parser.parse_dpkg_query(out):
                    if package["installed"] and (package["name"] == "nvidia-imex" or package["name"].startswith("nvidia-imex-")):
                        found.update(version=package["upstream"], held=package["held"], package=package["name"])
            else:
                names = ["nvidia-imex", *(f"nvidia-imex-{branch}" for branch in range(535, 580, 5))]
                _rc, out, _err = Rpm(self.module, counter=self.counter, required=True).run(
                    ["-q", "--qf", "%{NAME} %{VERSION}\\n", *names], ok_rcs=None)
                versions = packages_parser.parse_rpm_query(out, names)
                for name, version in versions.items():
                    found.update(version=version, package=name, held=None)
        except ParseError as exc:
            raise DriverError(f"cannot read what the package manager says about nvidia-imex: {exc}") from exc
        return found

    def spec(self, version):
        name = imex_rules.imex_package(version)
        return name, (f"{name}={version}-{self.release}" if self.packages.name == "apt" else f"{name}-{version}-{self.release}")

    def check_available(self, version):
        """DriverError (nothing changed) when the repositories do not offer IMEX at exactly ``version``. Reads only."""
        name, spec = self.spec(version)
        try:
            if self.packages.name == "apt":
                rc, out, err = AptGet(self.module, counter=self.counter, required=True).run(
                    ["install", "-s", "-q", "--allow-change-held-packages", "--allow-downgrades", spec], ok_rcs=None)
                offered = rc == 0
            else:
                rc, out, err = Dnf(self.module, counter=self.counter, required=True).run(["-q", "repoquery", spec], ok_rcs=None)
                offered = rc == 0 and bool(out.strip())
        except ToolError as exc:
            raise DriverError.from_tool(exc, f"cannot ask the package manager for {spec}: {exc.msg}. Nothing was changed") from exc
        if not offered:
            raise DriverError(imex_rules.unavailable_message(name, version, self.packages.name), cmd=None, rc=rc, stdout=out, stderr=err)

    def install(self, version, allow_downgrade):
        """Install IMEX at exactly ``version`` and hold it (another IMEX package, of another branch, is replaced)."""
        name, spec = self.spec(version)
        try:
            if self.packages.name == "apt":
                self.packages.install([spec], allow_downgrade)
                self.packages.hold([name])
            else:
                self.packages.install([spec], allow_downgrade, unlock=[name])
                self.packages.hold([spec])
        except ToolError as exc:
            raise DriverError.from_tool(
                exc, f"could not install {spec}: {exc.msg}. IMEX does not start until it matches the driver: fix the repository and rerun"
            ) from exc

    def hold(self, version):
        name, spec = self.spec(version)
        try:
            self.packages.hold([name] if self.packages.name == "apt" else [spec])
        except ToolError as exc:
            raise DriverError.from_tool(exc, f"cannot hold {name}: {exc.msg}") from exc

    def remove(self, package):
        try:
            self.packages.remove([package])
        except ToolError as exc:
            raise DriverError.from_tool(exc, f"cannot remove {package}: {exc.msg}") from exc


__all__ = ["SERVICE", "ImexPackage"]
