# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the driver decides on a GB200 / GB300 NVL72 compute tray: IMEX pinned to the driver, the IMEX domain's
nodes_config.cfg, the kernel module parameters (CDMM) and the checks after activation (private, pure).

IMEX (``nvidia-imex``) refuses to start unless its version is the loaded driver's: NVIDIA's driver container installs
``nvidia-imex=<driver version>`` and holds it. The package is ``nvidia-imex-<branch>`` before R580 (``nvidia-imex-570``,
gpu-driver-container PR 200) and ``nvidia-imex`` from R580 on. ``nodes_config.cfg`` must be the same on every tray of
the domain (a difference shows as ``!M!``, node-map mismatch).
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _version
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

IMEX_OPTIONS = ("auto", "present", "absent", "skip")
IMEX_ACTIONS = ("none", "install", "upgrade", "downgrade", "hold", "remove")
UNVERSIONED_FROM = 580  # nvidia-imex (no branch in the name) from R580 on
CDMM_FROM = 580  # NVreg_CoherentGPUMemoryMode exists from R580 on
CDMM_PARAM = "NVreg_CoherentGPUMemoryMode"
NODES_CONFIG = "/etc/nvidia-imex/nodes_config.cfg"
_PARAM_NAME = re.compile(r"NVreg_[A-Za-z0-9_]{1,64}")
_PARAM_VALUE = re.compile(r"[A-Za-z0-9_.,:;=+-]{1,256}")
_HOST_NAME = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\Z")


class ImexError(GpufleetError):
    """A refusal: the message names the option or variable and what to change."""


def _major(version, what):
    try:
        return int(_version.major(_version.check_driver_version(version, what)))
    except _version.VersionError as exc:
        raise ImexError(str(exc)) from exc


def imex_wanted(option, installed):
    """True when IMEX must follow the driver, False when it must go, None when it is left alone.

    ``auto`` follows the driver on a tray where IMEX is installed (a GB200 / GB300 NVL72 compute tray) and leaves
    every other node alone.
    """
    if option not in IMEX_OPTIONS:
        raise ImexError(f"imex must be one of {', '.join(IMEX_OPTIONS)}, got {option!r}")
    if option == "present" or (option == "auto" and installed):
        return True
    if option == "absent":
        return False
    return None


def imex_package(driver_version):
    """The IMEX package that goes with ``driver_version``: ``nvidia-imex-570`` before R580, ``nvidia-imex`` after."""
    major = _major(driver_version, "driver version")
    return "nvidia-imex" if major >= UNVERSIONED_FROM else f"nvidia-imex-{major}"


def plan_imex(installed, target, wanted, allow_downgrade=False):
    """IMEX's part of the driver plan: ``{"action", "before", "after", "package", "managed"}``.

    ``installed``: ``{"version", "held", "package"}`` read on the node (``version`` None: not installed);
    ``target``: the driver version the node will run (None when the driver is removed); ``wanted``: imex_wanted's
    answer. IMEX goes to exactly ``target``; an IMEX newer than the target needs ``allow_downgrade`` unless the driver
    itself goes down with it (the caller passes that as ``allow_downgrade``).
    """
    installed = installed or {}
    before = installed.get("version")
    result = {"action": "none", "before": before, "after": before, "package": installed.get("package"), "managed": wanted is not None}
    if wanted is None:
        return result
    if wanted is False or target is None:
        if before:
            result.update(action="remove", after=None)
        return result
    package = imex_package(target)
    result.update(after=target, package=package)
    if before is None:
        result["action"] = "install"
    elif before != target or installed.get("package") not in (None, package):
        newer = _version.version_key(before, "the installed nvidia-imex version") > _version.version_key(target, "version")
        if newer and not allow_downgrade:
            raise ImexError(
                f"nvidia-imex {before} is newer than driver {target}: IMEX runs only at the driver's version. Set "
                f"allow_downgrade: true to bring it to {target}, or imex: skip to leave it (IMEX will not start)"
            )
        result["action"] = "downgrade" if newer else "upgrade"
    elif installed.get("held") is False:
        result["action"] = "hold"
    return result


def unavailable_message(package, version, manager):
    """The refusal when the repositories do not offer IMEX at exactly the driver's version."""
    return (
        f"{package} {version} (the IMEX package at exactly the driver's version) is not available from the {manager} "
        f"repositories of this node: IMEX refuses to start at any other version, so the driver is not changed. Add "
        f"NVIDIA's repository that carries {package}={version}, choose a driver version that has one, or set "
        "nvidia_driver_imex: false (imex: skip) to manage IMEX yourself. Nothing was changed"
    )


# -- nodes_config.cfg -------------------------------------------------------------------------------

def _is_address(entry):
    try:
        ipaddress.ip_address(entry)
    except ValueError:
        return _HOST_NAME.match(entry) is not None
    return True


def nodes_config_text(nodes, what="nvidia_driver_imex_nodes"):
    """The text of nodes_config.cfg for ``nodes`` (IMEX peers' addresses, in order: IMEX node ids are positions).

    ImexError naming ``what`` for an empty list, an entry that is not an IP address or host name, or one listed twice.
    """
    if not isinstance(nodes, (list, tuple)) or not nodes:
        raise ImexError(
            f"{what} is empty: IMEX needs the addresses of every tray of the NVLink domain (set it, or give each tray the "
            "inventory variable nvlink_domain and an address)"
        )
    seen = []
    for position, node in enumerate(nodes):
        entry = str(node).strip() if isinstance(node, str) else None
        if not entry or not _is_address(entry):
            raise ImexError(f"{what}[{position}] {str(node)[:80]!r} is not an IP address or host name")
        if entry in seen:
            raise ImexError(f"{what}[{position}] repeats {entry}: every IMEX node is listed once")
        seen.append(entry)
    return "".join(entry + "\n" for entry in seen)


def domain_nodes(hostvars, hosts, domain, domain_var="nvlink_domain"):
    """The addresses of the hosts of ``hosts`` (inventory order) whose ``domain_var`` is ``domain``.

    The address is ``ansible_host``, else the inventory name. The same inventory gives every tray the same list, in
    the same order: nodes_config.cfg is identical on every tray.
    """
    if not domain:
        raise ImexError(f"{domain_var} is not set on this host: set it to the tray's NVLink domain, or set nvidia_driver_imex_nodes")
    found = []
    for host in hosts or []:
        values = hostvars.get(host) or {}
        if values.get(domain_var) == domain:
            found.append(str(values.get("ansible_host") or host))
    return found


# -- kernel module parameters -------------------------------------------------------------------------

def module_params(driver_version, cdmm, params=None):
    """The nvidia module's parameters to set: ``{name: value}`` (sorted), CDMM's ``NVreg_CoherentGPUMemoryMode=driver`` added
    when ``cdmm``.

    ImexError for CDMM on a branch before R580 (the driver has no such parameter and would refuse to load with it), a
    name that is not ``NVreg_<Name>``, or a value that does not fit on a modprobe options line.
    """
    wanted = {}
    for name, value in (params or {}).items():
        if not isinstance(name, str) or not _PARAM_NAME.fullmatch(name):
            raise ImexError(f"nvidia_driver_module_params: {str(name)[:80]!r} is not an NVreg_<Name> parameter of the nvidia module")
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if isinstance(value, bool) or not _PARAM_VALUE.fullmatch(text):
            raise ImexError(
                f"nvidia_driver_module_params: the value of {name} must be a number or a word (letters, digits, _.,:;=+-), got {str(value)[:80]!r}"
            )
        wanted[name] = text
    if cdmm:
        major = _major(driver_version, "nvidia_driver_version")
        if major < CDMM_FROM:
            raise ImexError(
                f"nvidia_driver_cdmm is on but driver {driver_version} is R{major}: CDMM ({CDMM_PARAM}=driver) needs R580 or later. "
                "Upgrade the BOM's driver or turn nvidia_driver_cdmm off. Nothing was changed"
            )
        if wanted.get(CDMM_PARAM, "driver") != "driver":
            raise ImexError(f"nvidia_driver_cdmm is on but nvidia_driver_module_params sets {CDMM_PARAM}={wanted[CDMM_PARAM]}: set one of them")
        wanted[CDMM_PARAM] = "driver"
    return dict(sorted(wanted.items()))


def modprobe_conf_text(params):
    """The modprobe options file for ``params`` (module_params' result); empty when there is none."""
    if not params:
        return ""
    options = " ".join(f"{name}={value}" for name, value in params.items())
    return f"# Managed by gpufleet.lifecycle.nvidia_driver: read when the nvidia module loads.\noptions nvidia {options}\n"


def param_problems(wanted, loaded):
    """Why the loaded module's parameters (``/proc/driver/nvidia/params`` as ``{Name: value}``, without ``NVreg_``) are not
    ``wanted`` (``{NVreg_Name: value}``), as sentences; [] when each one reads back."""
    problems = []
    for name, value in (wanted or {}).items():
        short = name[len("NVreg_"):]
        found = (loaded or {}).get(short)
        if found is None or str(found).strip('"').lower() != str(value).lower():
            problems.append(
                f"module parameter {name}={value} does not read back from /proc/driver/nvidia/params ({short}: {found!r}): "
                "the nvidia module was loaded without it. Check /etc/modprobe.d for a conflicting options line, then reload or reboot"
            )
    return problems


# -- the checks after activation -------------------------------------------------------------------------

def _fabric_problems(gpus):
    problems = []
    for gpu in gpus or []:
        fabric = gpu.get("fabric")
        name = f"GPU {gpu.get('index')}"
        if not fabric:
            problems.append(f"{name} reports no Fabric block: nvidia-smi -q shows no NVLink fabric state")
            continue
        state, status, health = fabric.get("state"), fabric.get("status"), fabric.get("health")
        if (state, status) != ("Completed", "Success") or health not in ("Healthy", None):
            problems.append(f"{name} fabric is {state}/{status}/{health}, not Completed/Success/Healthy")
    return problems


def verify_problems(facts, driver_version, nodes, check_domain=True):
    """What is wrong on an IMEX tray after activation, as ``[{"check", "problem", "fix"}]``; [] when it is ready.

    ``facts``: gpu_facts' ``ansible_facts.gpufleet`` (subsets driver, gpus, imex); ``driver_version``: the driver the tray
    should run; ``nodes``: the addresses written to nodes_config.cfg. Checks: every GPU's fabric Completed / Success /
    Healthy; IMEX installed at the driver's version and running; the IMEX domain UP with every node of ``nodes`` READY at
    that version and connected (``check_domain`` False skips the domain: a tray changed alone).
    """
    facts = facts or {}
    found = []

    def add(check, problem, fix):
        found.append({"check": check, "problem": problem, "fix": fix})

    for problem in _fabric_problems(facts.get("gpus")):
        add("fabric", problem, "check the NVLink switch trays (NMX-C fabric manager) and the tray's cabling; reboot the tray if it stays so")
    imex = facts.get("imex") or {}
    version = imex.get("version")
    if not imex.get("installed"):
        add("imex_version", "nvidia-imex is not installed", f"install nvidia-imex at {driver_version} (rerun the nvidia_driver role)")
        return found
    short_ok = version == driver_version or driver_version.startswith(f"{version}.")
    if not short_ok:
        add("imex_version", f"nvidia-imex is {version}, the driver is {driver_version}: IMEX refuses to start",
            f"install nvidia-imex={driver_version} (rerun the nvidia_driver role)")
    if not imex.get("running"):
        add("imex_service", f"the nvidia-imex service is {imex.get('service_state')!r}, not active",
            "see journalctl -u nvidia-imex (a version mismatch with the loaded driver, a bad nodes_config.cfg)")
    if not check_domain:
        return found
    domain = imex.get("domain")
    if domain is None:
        add("imex_domain", f"nvidia-imex-ctl -N gave no domain state: {imex.get('domain_error') or 'the daemon does not answer'}",
            "start nvidia-imex and check journalctl -u nvidia-imex")
        return found
    listed = {node.get("address"): node for node in domain.get("nodes") or []}
    missing = [address for address in nodes or [] if address not in listed]
    if missing:
        add("imex_domain", f"the IMEX daemon does not know {', '.join(missing)} of nodes_config.cfg",
            "restart nvidia-imex so that it reads /etc/nvidia-imex/nodes_config.cfg")
    not_ready = [f"{address} ({listed[address].get('state')})" for address in nodes or [] if address in listed and listed[address].get("state") != "READY"]
    if not_ready:
        add("imex_domain", f"IMEX nodes not READY: {', '.join(not_ready)}",
            "change every tray of the NVLink domain together (gpufleet_unit_by: nvlink_domain) and start nvidia-imex on each")
    ids = {node.get("id"): node.get("address") for node in domain.get("nodes") or []}
    marks = sorted({
        f"{ids.get(source)} -> {ids.get(target)} {mark}"
        for source, row in (domain.get("connectivity") or {}).items()
        for target, mark in row.items()
        if mark != "connected" and ids.get(source) in (nodes or []) and ids.get(target) in (nodes or [])
    })
    if marks:
        add("imex_domain", f"IMEX connections not Connected: {'; '.join(marks[:8])}{' ...' if len(marks) > 8 else ''}",
            "a version_mismatch (!V!) means a tray of the domain runs another driver/IMEX: change the whole domain together; "
            "a node_map_mismatch (!M!) means nodes_config.cfg differs between trays")
    if domain.get("domain_state") != "UP":
        add("imex_domain", f"the IMEX domain is {domain.get('domain_state')}, not UP",
            "wait for every tray of the NVLink domain to run the same driver and IMEX, then check nvidia-imex-ctl -N")
    return found


def describe(problems, tray):
    """One message for ``problems`` (verify_problems' result) on ``tray``: each check, what is wrong and what to do."""
    return f"{tray}: " + " | ".join(f"{p['check']}: {p['problem']}; {p['fix']}" for p in problems)


__all__ = [
    "CDMM_PARAM",
    "IMEX_ACTIONS",
    "IMEX_OPTIONS",
    "NODES_CONFIG",
    "ImexError",
    "describe",
    "domain_nodes",
    "imex_package",
    "imex_wanted",
    "modprobe_conf_text",
    "module_params",
    "nodes_config_text",
    "param_problems",
    "plan_imex",
    "unavailable_message",
    "verify_problems",
]
