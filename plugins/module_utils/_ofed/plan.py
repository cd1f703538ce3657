# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ofed module's decisions (private, pure): its options, the install's argument lists, and the plan.

The rules this file keeps (each has a table test):

- the OFED installer never runs its firmware updater: ``mlnxofedinstall`` always gets ``--without-fw-update`` and
  no option that flashes (``--fw-image-dir``, ``--force-fw-update``...); DOCA-OFED's packages are installed with
  ``mlnx-fw-updater`` kept out (apt's ``mlnx-fw-updater-``, dnf's ``--exclude``). NIC firmware is the nic_firmware
  role's, with its PSID checks and rollback;
- the new stack is loaded with ``openibd restart`` unless opensm or nvme-rdma holds it (openibd refuses then, or
  fails half-way): the activation is then a reboot;
- nvidia_peermem, built against OFED's symbols, is rebuilt (DKMS) and loaded again after an OFED change; a driver
  installed without DKMS cannot be rebuilt here: refused before anything changes;
- a downgrade only with ``allow_downgrade`` (the rollback sets it).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers.ofed import VERSION_PATTERN

FLAVORS = ("doca-ofed", "mlnx-ofed")
METHODS = ("installer", "package")
RELOADS = ("auto", "reboot")
PEERMEM_MODES = ("auto", "required", "skip")
PACKAGE_MANAGERS = ("auto", "apt", "dnf")
FW_UPDATER = "mlnx-fw-updater"
DEFAULT_PACKAGES = {"doca-ofed": ["doca-ofed"], "mlnx-ofed": ["mlnx-ofed-all"]}
# The only firmware option the installer gets; every other one that names firmware is refused.
WITHOUT_FW_UPDATE = "--without-fw-update"
# mlnxofedinstall asks "Do you want to continue?[y/N]:" unless forced.
NON_INTERACTIVE = "--force"
# Processes and kernel modules that hold the RDMA stack: openibd restart refuses (opensm on umad0/issm0) or fails
# half-way (mlx_compat in use by nvme_core / nvme_fabrics) while they run.
STACK_HOLDER_UNITS = ("opensmd", "opensm")
NVME_RDMA_MODULES = ("nvme_rdma", "nvmet_rdma")
ACTIONS = ("none", "install", "upgrade", "downgrade", "replace")
INSTALL_ACTIONS = ("install", "upgrade", "downgrade", "replace")

_VERSION = re.compile(VERSION_PATTERN)
_PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9+._-]{0,127}(?:=[A-Za-z0-9][A-Za-z0-9.+~:_-]{0,127})?")
_INSTALLER_ARG = re.compile(r"--[a-z0-9][a-z0-9-]*(?:=[A-Za-z0-9_./,:+-]+)?")
_SHA256 = re.compile(r"(?:sha256:)?[0-9a-fA-F]{64}")


class OfedError(GpufleetError):
    """A refusal or a failed step of the OFED component; the message names the field or step and what to do."""

    def __init__(self, msg, cmd=None, rc=None, stdout="", stderr="", **extra):
        super().__init__(msg, cmd=cmd, rc=rc, stdout=stdout, stderr=stderr, **extra)
        self.extra = self.details


def _fail(msg):
    raise OfedError(msg + ". Nothing was changed")


def check_options(params):
    """The module's options, checked before the first command runs; OfedError naming the option otherwise."""
    options = dict(params)
    flavor = options.get("flavor")
    if flavor == "inbox":
        _fail("flavor inbox is the distribution's own RDMA stack: the ofed module installs doca-ofed or mlnx-ofed; "
              "leave ofed out of gpufleet_components for an inbox node")
    if flavor not in FLAVORS:
        _fail(f"flavor must be one of {', '.join(FLAVORS)}, got {flavor!r}")
    version = options.get("version")
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        _fail(f"version must be the exact release as 'ofed_info -s' prints it after the name (for example 24.10-1.1.4.0), got {version!r}")
    if options.get("method") not in METHODS:
        _fail(f"method must be one of {', '.join(METHODS)}, got {options.get('method')!r}")
    source, checksum = options.get("source"), options.get("checksum")
    if options["method"] == "installer" and not source:
        _fail("method installer needs source: the path on the node of the MLNX_OFED / DOCA-OFED bundle "
              "(MLNX_OFED_LINUX-<version>-<distro>-<arch>.tgz), with its checksum")
    if source is not None and (not isinstance(source, str) or not source.startswith("/")):
        _fail(f"source must be an absolute path on the node (the role downloads a URL there first), got {str(source)[:200]!r}")
    if source and not (isinstance(checksum, str) and _SHA256.fullmatch(checksum.strip())):
        _fail("checksum must be the sha256 of source (sha256:<64 hex digits>): every bundle is verified before use")
    if options.get("reload", "auto") not in RELOADS:
        _fail(f"reload must be one of {', '.join(RELOADS)}, got {options.get('reload')!r}")
    if options.get("peermem", "auto") not in PEERMEM_MODES:
        _fail(f"peermem must be one of {', '.join(PEERMEM_MODES)}, got {options.get('peermem')!r}")
    if options.get("package_manager", "auto") not in PACKAGE_MANAGERS:
        _fail(f"package_manager must be one of {', '.join(PACKAGE_MANAGERS)}, got {options.get('package_manager')!r}")
    if bool(options.get("module_signing_key")) != bool(options.get("module_signing_certificate")):
        _fail("module_signing_key and module_signing_certificate go together: give both (the key from your vault) or neither")
    sha1 = options.get("module_signing_certificate_sha1")
    if sha1 is not None and not (isinstance(sha1, str) and re.fullmatch(r"[0-9a-fA-F]{40}", sha1.replace(":", ""))):
        _fail(f"module_signing_certificate_sha1 must be a SHA1 fingerprint (40 hex digits, colons allowed), got {len(str(sha1))} characters")
    if options.get("secure_boot", "any") not in ("any", "enforced", "off"):
        _fail(f"secure_boot must be one of any, enforced, off, got {options.get('secure_boot')!r}")
    options["installer_args"] = check_installer_args(options.get("installer_args") or [])
    options["packages"] = check_packages(options.get("packages") or DEFAULT_PACKAGES[flavor])
    return options


def check_installer_args(args):
    """The extra mlnxofedinstall options, each ``--name`` or ``--name=value``; none that touches firmware."""
    kept = []
    for arg in args:
        if not isinstance(arg, str) or not _INSTALLER_ARG.fullmatch(arg):
            _fail(f"installer_args: {str(arg)[:80]!r} is not an option of the form --name or --name=value")
        if arg == WITHOUT_FW_UPDATE:
            continue  # always given
        if "fw" in arg.lower() or "firmware" in arg.lower():
            _fail(f"installer_args: {arg} would let the OFED installer touch NIC firmware; NIC firmware belongs to the "
                  "nic_firmware role (PSID checks, rollback): remove it")
        kept.append(arg)
    return kept


def check_packages(packages):
    """The packages that install the stack (package method), each ``name`` or ``name=version``; never the firmware updater."""
    if not isinstance(packages, list) or not packages:
        _fail(f"packages must be a list of package names, got {packages!r}"[:300])
    for name in packages:
        if not isinstance(name, str) or not _PACKAGE.fullmatch(name):
            _fail(f"packages: {str(name)[:80]!r} is not a package name (or name=version)")
        if name.split("=", 1)[0] == FW_UPDATER:
            _fail(f"packages: {FW_UPDATER} flashes every NIC older than its bundled image when it is installed; NIC "
                  "firmware belongs to the nic_firmware role: remove it")
    return list(packages)


def installer_args(options):
    """The argument list of ``mlnxofedinstall``: never without ``--without-fw-update``."""
    return [WITHOUT_FW_UPDATE, NON_INTERACTIVE, *options["installer_args"]]


def package_install_args(manager, packages):
    """The package manager's argument list that installs ``packages`` with the firmware updater kept out (and
    removed, where an earlier install left it: its next upgrade would flash again)."""
    if manager == "apt":
        return ["install", "-y", "--no-install-recommends", *packages, FW_UPDATER + "-"]
    if manager == "dnf":
        return ["install", "-y", "--exclude=" + FW_UPDATER, *packages]
    raise OfedError(f"package manager {manager!r} is not one the ofed module drives (apt, dnf)")


def version_key(version):
    """``24.10-1.1.4.0.200`` -> (24, 10, 1, 1, 4, 0, 200), for ordering releases."""
    return tuple(int(part) for part in re.findall(r"[0-9]+", version or ""))


def stack_holders(opensm_units, modules):
    """What holds the RDMA stack so that ``openibd restart`` would refuse or fail half-way.

    ``opensm_units``: {unit: active-state} of STACK_HOLDER_UNITS; ``modules``: parse_lsmod's result (None: unknown).
    """
    holders = [f"{unit} is running" for unit in STACK_HOLDER_UNITS if (opensm_units or {}).get(unit) == "active"]
    for name in NVME_RDMA_MODULES:
        if modules and name in modules:
            holders.append(f"{name} is loaded")
    users = [user for user in ((modules or {}).get("mlx_compat") or {}).get("used_by") or [] if user.startswith("nvme")]
    if users:
        holders.append(f"mlx_compat is in use by {' '.join(users)}")
    return holders


def _direction(current, options):
    ofed = current["ofed"]
    if not ofed.get("installed"):
        return "install"
    if ofed.get("flavor") != options["flavor"]:
        return "replace"
    have, want = version_key(ofed.get("version")), version_key(options["version"])
    if have == want:
        return "none"
    return "upgrade" if have < want else "downgrade"


def _peermem(current, options, action):
    """What nvidia_peermem needs: none, load, rebuild (DKMS, then load), skip; OfedError where it cannot be rebuilt."""
    mode = options.get("peermem", "auto")
    driver = current.get("driver") or {}
    peermem = current.get("peermem") or {}
    if mode == "skip" or not driver.get("version"):
        return "skip" if mode == "skip" else "none"
    changing = action in INSTALL_ACTIONS
    if changing and mode == "auto" and not peermem.get("installed") and not peermem.get("loaded"):
        return "none"  # the driver has no nvidia_peermem for this kernel: nothing built against OFED to redo
    if changing:
        if not driver.get("dkms"):
            _fail(
                f"nvidia_peermem is built against OFED's symbols and must be rebuilt after OFED changes, but NVIDIA driver "
                f"{driver['version']} was not installed with DKMS for kernel {current.get('kernel')}: reinstall the driver "
                "with DKMS (nvidia_driver_dkms: true), change the driver in the same rollout after OFED, or set peermem: skip"
            )
        return "rebuild"
    if mode == "required" and not peermem.get("loaded"):
        return "load"
    return "none"


def plan(current, options):
    """What the module would do on a node read as ``current`` -> ``{"action", "before", "after", "fw_updater",
    "reload", "holders", "peermem", "changed"}``.

    ``current``: ``{"ofed": ofed_facts, "kernel", "fw_updater": {"installed", "onboot"}, "driver": {"version",
    "dkms"}, "peermem": {"installed", "loaded"}, "opensm_units": {unit: state}, "modules": lsmod}``.
    """
    ofed = current["ofed"]
    action = _direction(current, options)
    if action == "downgrade" and not options.get("allow_downgrade"):
        _fail(f"OFED {ofed.get('version')} is installed and {options['version']} is older: refusing to downgrade. Set "
              "allow_downgrade: true (the ofed role's rollback entry point does)")
    fw_updater = current.get("fw_updater") or {}
    fw_actions = []
    if fw_updater.get("onboot") == "yes":
        fw_actions.append("disable_onboot")  # openib.conf's RUN_FW_UPDATER_ONBOOT=yes flashes at every boot
    if options["method"] == "package" and fw_updater.get("installed"):
        fw_actions.append("remove")
    holders = stack_holders(current.get("opensm_units"), current.get("modules"))
    reload = "none"
    if action in INSTALL_ACTIONS:
        reload = "reboot" if options.get("reload", "auto") == "reboot" or holders else "restart"
    peermem = _peermem(current, options, action)
    before = {"flavor": ofed.get("flavor"), "version": ofed.get("version")}
    after = {"flavor": options["flavor"], "version": options["version"]}
    return {
        "action": action,
        "before": before,
        "after": after if action in INSTALL_ACTIONS or not ofed.get("installed") else before,
        "fw_updater": fw_actions,
        "reload": reload,
        "holders": holders,
        "peermem": peermem,
        "changed": action != "none" or bool(fw_actions) or peermem in ("load", "rebuild"),
    }


def diff(the_plan):
    """``{before, after}`` of small version dicts."""
    def text(part):
        return "inbox" if not part.get("version") else f"{part['flavor']} {part['version']}"

    return {"before": {"ofed": text(the_plan["before"])}, "after": {"ofed": text(the_plan["after"])}}
