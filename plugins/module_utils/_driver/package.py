# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The package install method (apt and dnf), and the fabric manager package for both methods (private).

Package names follow NVIDIA's CUDA repositories (docs.nvidia.com/datacenter/tesla/driver-installation-guide):

=============  ===================================================  ==========================================
               apt (Debian, Ubuntu)                                 dnf (RHEL, Rocky, Alma, Oracle, Fedora)
=============  ===================================================  ==========================================
driver, open   ``nvidia-driver-<branch>-open=<version>-<release>``  ``nvidia-driver-<version>`` +
                                                                    ``kmod-nvidia-open-dkms-<version>``
proprietary    ``nvidia-driver-<branch>=<version>-<release>``       ``nvidia-driver-<version>`` +
                                                                    ``kmod-nvidia-latest-dkms-<version>``
fabric mgr     ``nvidia-fabricmanager-<branch>=<version>-<release>`` ``nvidia-fabricmanager-<version>-<release>``
hold           ``apt-mark hold``                                    ``dnf versionlock add`` (python3-dnf-plugin-versionlock)
=============  ===================================================  ==========================================
"""

from __future__ import annotations

import re

from ansible.module_utils.common.sys_info import get_distribution, get_distribution_version
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _version
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.node import DriverError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.plan import branch
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import packages as packages_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import AptGet, AptMark, Dnf, DpkgQuery, Rpm, ToolError

APT_DISTROS = ("debian", "ubuntu", "linuxmint", "pop", "raspbian")
DNF_DISTROS = ("redhat", "rhel", "centos", "rocky", "almalinux", "oracle", "ol", "fedora", "amazon", "openeuler")
_APT_DRIVER = re.compile(r"nvidia-driver-(?P<branch>\d+)(?:-server)?(?P<open>-open)?")
_APT_FABRICMANAGER = re.compile(r"nvidia-fabricmanager-\d+")  # not nvidia-fabricmanager-dev-<branch>
_KMOD = {"open": "kmod-nvidia-open-dkms", "proprietary": "kmod-nvidia-latest-dkms"}


def detect_package_manager(option="auto"):
    """``apt`` or ``dnf`` (``option`` when it is not ``auto``); DriverError on other distributions."""
    if option != "auto":
        return option
    distro = (get_distribution() or "").lower()
    if distro in APT_DISTROS:
        return "apt"
    if distro in DNF_DISTROS:
        return "dnf"
    raise DriverError(
        f"cannot tell the package manager of distribution {distro or 'unknown'} {get_distribution_version() or ''}: "
        "set package_manager: apt or dnf, or use method: runfile"
    )


def _parsed(parse, tool, out, err, *args):
    """``parse(out, *args)``; DriverError (with the output) when the package manager printed something unexpected."""
    try:
        return parse(out, *args)
    except ParseError as exc:
        raise DriverError(f"cannot read what {tool} says about the NVIDIA packages: {exc}", stdout=out, stderr=err) from exc


def _driver_version(version, package):
    """``version`` of ``package`` when it is a whole driver version: a package named like the driver at another version scheme is not it."""
    if not _version.is_driver_version(version):
        raise DriverError(
            f"package {package} is installed at version {version!r}, which is not an NVIDIA driver version: "
            "it is not NVIDIA's package (check the repository configuration), or use method: runfile"
        )
    return version


class Apt:
    name = "apt"

    def __init__(self, module, options, counter=None):
        self.module = module
        self.options = options
        self.counter = counter
        self.release = options.get("package_release") or "1"

    def tools_present(self):
        return all(t(self.module, counter=self.counter).available for t in (AptGet, AptMark, DpkgQuery))

    def driver_package(self, version, kernel_module):
        return "nvidia-driver-{}{}".format(branch(version), "-open" if kernel_module == "open" else "")

    def fabricmanager_package(self, version):
        return "nvidia-fabricmanager-" + branch(version)

    def spec(self, name, version):
        return f"{name}={version}-{self.release}"

    def installed(self):
        """``{"driver": (version, flavor) or None, "fabricmanager": version or None, "held": bool, "packages": [...]}``."""
        tool = DpkgQuery(self.module, counter=self.counter, required=True)
        # Exit status 1: no package matches one of the patterns (nothing of that kind is installed).
        _rc, out, err = tool.run(["-W", "-f=${Package} ${Version} ${db:Status-Abbrev}\\n", "nvidia-driver-*", "nvidia-fabricmanager-*"], ok_rcs=(0, 1))
        found = {"driver": None, "fabricmanager": None, "held": True, "packages": []}
        for package in _parsed(packages_parser.parse_dpkg_query, "dpkg-query", out, err):
            if not package["installed"]:
                continue  # listed but not installed (removed, config files only)
            name = package["name"]
            match = _APT_DRIVER.fullmatch(name)
            if match:
                found["driver"] = (_driver_version(package["upstream"], name), "open" if match.group("open") else "proprietary")
            elif _APT_FABRICMANAGER.fullmatch(name):
                found["fabricmanager"] = _driver_version(package["upstream"], name)
            else:
                continue
            found["packages"].append(name)
            found["held"] = found["held"] and package["held"]
        found["held"] = found["held"] and bool(found["packages"])
        return found

    def install(self, specs, allow_downgrade):
        args = ["install", "-y", "-q", "--allow-change-held-packages"]
        if allow_downgrade:
            args.append("--allow-downgrades")
        args += ["-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold", *specs]
        AptGet(self.module, counter=self.counter, required=True).run(args, timeout=self.options["timeout"])

    def hold(self, names):
        AptMark(self.module, counter=self.counter, required=True).run(["hold", *names])

    def remove(self, names):
        AptMark(self.module, counter=self.counter, required=True).run(["unhold", *names])
        AptGet(self.module, counter=self.counter, required=True).run(
            ["remove", "-y", "-q", "--allow-change-held-packages", *names], timeout=self.options["timeout"]
        )


class DnfBackend:
    name = "dnf"
    DRIVER = "nvidia-driver"
    KMOD = _KMOD
    FABRICMANAGER = "nvidia-fabricmanager"

    def __init__(self, module, options, counter=None):
        self.module = module
        self.options = options
        self.counter = counter
        self.release = options.get("package_release") or "1"

    def tools_present(self):
        return all(t(self.module, counter=self.counter).available for t in (Dnf, Rpm))

    def driver_specs(self, version, kernel_module):
        return [f"{self.DRIVER}-{version}", f"{self.KMOD[kernel_module]}-{version}"]

    def fabricmanager_spec(self, version):
        return f"{self.FABRICMANAGER}-{version}-{self.release}"

    def installed(self):
        names = [self.DRIVER, self.KMOD["open"], self.KMOD["proprietary"], self.FABRICMANAGER]
        # Exit status: the number of names not installed.
        _rc, out, err = Rpm(self.module, counter=self.counter, required=True).run(["-q", "--qf", "%{NAME} %{VERSION}\\n", *names], ok_rcs=None)
        versions = _parsed(packages_parser.parse_rpm_query, "rpm -q", out, err, names)
        flavor = "open" if self.KMOD["open"] in versions else ("proprietary" if self.KMOD["proprietary"] in versions else None)
        found = {
            "driver": (_driver_version(versions[self.DRIVER], self.DRIVER), flavor) if self.DRIVER in versions else None,
            "fabricmanager": _driver_version(versions[self.FABRICMANAGER], self.FABRICMANAGER) if self.FABRICMANAGER in versions else None,
            "packages": [n for n in names if n in versions],
            "held": False,
        }
        if found["packages"]:
            try:
                _rc, locks, err = Dnf(self.module, counter=self.counter, required=True).run(["versionlock", "list"])
            except ToolError as exc:
                raise DriverError.from_tool(
                    exc, f"cannot list the dnf version locks ({exc.msg}): install python3-dnf-plugin-versionlock (dnf 4), which holds the driver packages"
                ) from exc
            entries = _parsed(packages_parser.parse_versionlock_list, "dnf versionlock list", locks, err)
            found["held"] = all(packages_parser.is_locked(name, entries) for name in found["packages"])
        return found

    def install(self, specs, allow_downgrade, unlock=()):
        dnf = Dnf(self.module, counter=self.counter, required=True)
        if unlock:
            dnf.run(["versionlock", "delete", *unlock], ok_rcs=(0, 1))  # 1: nothing was locked
        # dnf install of an exact older version downgrades it (allow_downgrade is checked by the plan).
        dnf.run(["install", "-y", "--allowerasing", *specs], timeout=self.options["timeout"])

    def hold(self, specs):
        Dnf(self.module, counter=self.counter, required=True).run(["versionlock", "add", *specs])

    def remove(self, names):
        dnf = Dnf(self.module, counter=self.counter, required=True)
        dnf.run(["versionlock", "delete", *names], ok_rcs=(0, 1))
        dnf.run(["remove", "-y", *names], timeout=self.options["timeout"])


def backend(module, options, counter=None):
    manager = detect_package_manager(options.get("package_manager") or "auto")
    return (Apt if manager == "apt" else DnfBackend)(module, options, counter)


class PackageMethod:
    """Driver (and fabric manager) from the distribution's package manager, at an exact version, held."""

    name = "package"

    def __init__(self, module, options, counter=None, packages=None):
        self.module = module
        self.options = options
        self.packages = packages or backend(module, options, counter)
        self._installed = None
        self.signing_args = []  # unused: DKMS signs the packages' modules through its framework.conf drop-in

    def installed(self):
        if self._installed is None:
            self._installed = self.packages.installed()
        return self._installed

    def prepare(self):
        if not self.packages.tools_present():
            raise DriverError(f"the {self.packages.name} tools are not all installed on this node: use method: runfile or set package_manager")

    def install(self, version, kernel, with_fabricmanager=False):
        """Install the driver (and the fabric manager) at ``version`` and hold them."""
        allow_downgrade = self.options["allow_downgrade"]
        kernel_module = self.options["kernel_module"]
        try:
            if self.packages.name == "apt":
                names = [self.packages.driver_package(version, kernel_module)]
                if with_fabricmanager:
                    names.append(self.packages.fabricmanager_package(version))
                self.packages.install([self.packages.spec(n, version) for n in names], allow_downgrade)
                self.packages.hold(names)
            else:
                specs = self.packages.driver_specs(version, kernel_module)
                if with_fabricmanager:
                    specs.append(self.packages.fabricmanager_spec(version))
                self.packages.install(specs, allow_downgrade, unlock=self.installed()["packages"])
                self.packages.hold(specs)
        except ToolError as exc:
            raise DriverError.from_tool(exc, self._explain(exc, kernel)) from exc
        self._installed = None

    def hold(self, version):
        """Hold what is installed at ``version`` (the plan found it unheld)."""
        found = self.installed()
        try:
            if self.packages.name == "apt":
                self.packages.hold(found["packages"])
            else:
                specs = self.packages.driver_specs(version, (found["driver"] or (None, self.options["kernel_module"]))[1] or self.options["kernel_module"])
                if found["fabricmanager"]:
                    specs.append(self.packages.fabricmanager_spec(found["fabricmanager"]))
                self.packages.hold(specs)
        except ToolError as exc:
            raise DriverError.from_tool(exc, f"cannot hold the driver packages: {exc.msg}") from exc

    def _explain(self, exc, kernel):
        text = (exc.stdout or "") + (exc.stderr or "")
        if re.search(r"dkms|Bad return status for module build", text, re.IGNORECASE):
            return (
                f"the driver package's DKMS build failed for kernel {kernel}: install the headers for `uname -r` "
                f"(linux-headers-{kernel} or kernel-devel-{kernel}) and retry. {exc.msg}"
            )
        if re.search(r"versionlock", text) and "No such command" in text:
            return "dnf has no versionlock command: install python3-dnf-plugin-versionlock (dnf 4) or dnf5-plugins"
        return f"{self.packages.name} could not install the driver packages: {exc.msg}. Check the repository configuration and package_release"

    def remove(self):
        names = self.installed()["packages"]
        if names:
            try:
                self.packages.remove(names)
            except ToolError as exc:
                raise DriverError.from_tool(exc, f"cannot remove the driver packages: {exc.msg}") from exc


class FabricManagerPackage:
    """The fabric manager package at the driver's version (used by the runfile method; the package method installs it with the driver)."""

    def __init__(self, module, options, counter=None, packages=None):
        self.options = options
        self.packages = packages or backend(module, options, counter)

    def prepare(self):
        if not self.packages.tools_present():
            raise DriverError(
                f"the fabric manager must follow the driver but the {self.packages.name} tools are missing: install them, "
                "or set fabricmanager: skip and install nvidia-fabricmanager at the driver version yourself"
            )

    def install(self, version):
        if self.packages.name == "apt":
            name = self.packages.fabricmanager_package(version)
            self.packages.install([self.packages.spec(name, version)], self.options["allow_downgrade"])
            self.packages.hold([name])
        else:
            spec = self.packages.fabricmanager_spec(version)
            self.packages.install([spec], self.options["allow_downgrade"], unlock=[self.packages.FABRICMANAGER])
            self.packages.hold([spec])

    def remove(self):
        found = self.packages.installed()
        names = [n for n in found["packages"] if "fabricmanager" in n]
        if names:
            self.packages.remove(names)


__all__ = ["Apt", "DnfBackend", "FabricManagerPackage", "PackageMethod", "backend", "detect_package_manager"]
