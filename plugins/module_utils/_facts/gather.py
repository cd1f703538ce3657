# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What is on a GPU node: the logic behind the gpu_facts module (private).

One call reads /proc and /sys directly and starts at most five processes:
``nvidia-smi -q -x``, ``nv-fabricmanager --version``, ``systemctl is-active``,
``dmesg`` and ``mlxfwmanager --query`` (or ``mstflint q`` per ConnectX port
when only mstflint is installed); ``modinfo nvidia`` only when no driver is loaded.

The reads do not depend on each other, so they run at the same time, one thread
each (on a real node ``nvidia-smi -q -x`` and ``mlxfwmanager --query`` each take
seconds): a call costs its slowest read, not their sum. Every read still goes
through its ``_tools`` wrapper with its bounded timeout, and when reads fail the
error raised is the one the first failing read gives in the order above (driver
and GPUs, services, fabric manager, NICs, Xid), as when they ran one after another.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _version
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import nvlink, stack
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._host import (
    MELLANOX_VENDOR,
    NIC_CLASS_PREFIXES,
    Host,
    fabricmanager_version,
)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import imex as imex_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import mlx as mlx_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import nvsmi as nvsmi_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import procfs as procfs_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import xid as xid_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import (
    CommandCounter,
    Dmesg,
    FabricManager,
    Imex,
    ImexCtl,
    MlxFwManager,
    Modinfo,
    Mstflint,
    NvidiaSmi,
    Systemctl,
    ToolError,
)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._xid_catalog import DEFAULT_CRITICAL_XIDS

SUBSETS = ("driver", "gpus", "fabricmanager", "imex", "nics", "xid")
# Gathered only when named (not part of "all"): the stack subset starts about a dozen processes (_facts/stack.py).
OPT_IN_SUBSETS = ("stack",)
IMEX_SERVICE = "nvidia-imex"
IMEX_NODES_CONFIG = "etc/nvidia-imex/nodes_config.cfg"
SERVICES = ("nvidia-fabricmanager", "nvidia-persistenced")
# Limit of each read (nvidia-smi on a wedged GPU can block for ever); the gpu_tools command_timeout option.
DEFAULT_COMMAND_TIMEOUT = 120
MAX_COMMAND_TIMEOUT = 3600


class FactsError(ToolError):
    """A tool answered with something gpu_facts cannot trust."""


class OptionError(GpufleetError):
    """An option value outside its range: refused before the first command."""


def check_command_timeout(value, what="command_timeout"):
    """``value`` when it is a whole number of seconds in 1..MAX_COMMAND_TIMEOUT, else OptionError with the range."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COMMAND_TIMEOUT:
        raise OptionError(
            f"{what} must be a whole number of seconds from 1 to {MAX_COMMAND_TIMEOUT}, got {value!r}: "
            f"it bounds every read (nvidia-smi, nv-fabricmanager, systemctl, dmesg, mlxfwmanager); the default is {DEFAULT_COMMAND_TIMEOUT}"
        )
    return value


def driver_branch(version):
    """The release branch (``R570`` for 570.x and 572.x), None when the version is not whole."""
    if not _version.is_driver_version(version):
        return None
    return _version.driver_branch(version)


# What mlxfwmanager prints on a host where it finds no adapter (or mst is stopped).
_NO_DEVICES = "No devices found"


def run_reads(reads):
    """``{name: result}`` of the independent reads ``reads`` (an ordered ``{name: callable}``), run at the same time.

    Each read runs in a thread of its own and is waited for (each is bounded by its tool's timeout). When reads
    raise, the exception of the first one in ``reads``' order is raised, traceback and all: the error a sequential
    run would have stopped at. A single read runs in the caller's thread.
    """
    if len(reads) <= 1:
        return {name: read() for name, read in reads.items()}
    with ThreadPoolExecutor(max_workers=len(reads), thread_name_prefix="gpu_facts") as pool:
        futures = {name: pool.submit(read) for name, read in reads.items()}
    # Leaving the with block waited for every read: none is still running when the first error is raised.
    for future in futures.values():
        error = future.exception()
        if error is not None:
            raise error
    return {name: future.result() for name, future in futures.items()}


class GpuFactsCollector:
    """Gathers ansible_facts.gpufleet; raises FactsError / ToolError on untrustworthy output."""

    def __init__(self, module, host=None, gather_subset=SUBSETS, paths=None, critical_xids=DEFAULT_CRITICAL_XIDS, command_timeout=DEFAULT_COMMAND_TIMEOUT):
        self.module = module
        self.host = host or Host()
        self.subset = set(gather_subset)
        self.paths = paths or {}
        self.critical_xids = set(critical_xids)
        self.counter = CommandCounter()
        self.command_timeout = check_command_timeout(command_timeout)

    def _tool(self, cls, option):
        tool = cls(self.module, path=self.paths.get(option), counter=self.counter)
        # Every read of this collector is bounded by command_timeout, whichever wrapper method runs it.
        tool.default_timeout = self.command_timeout
        return tool

    def collect(self):
        facts = {
            "kernel": self.host.kernel_release(),
            "boot_id": self.host.boot_id(),
        }
        nvswitches = self.host.nvswitches()
        # The independent reads, in the order their errors take precedence (see run_reads).
        reads = {"driver_and_gpus": self._driver_and_gpus, "services": self._services}
        if "fabricmanager" in self.subset:
            reads["fabricmanager"] = self._fabricmanager_installed
        if "imex" in self.subset:
            reads["imex"] = self._imex_reads
        if "nics" in self.subset:
            reads["nics"] = self._nics
        if "xid" in self.subset:
            reads["xid"] = self._xid
        if "stack" in self.subset:
            reads["stack"] = self._stack
        results = run_reads(reads)
        driver, smi = results["driver_and_gpus"]
        services = results["services"]
        facts["driver"] = driver
        if "gpus" in self.subset or "driver" in self.subset:
            facts.update(smi)
            facts["nvlink"] = nvlink.nvlink_domain(smi["gpus"])
        facts["cdmm"] = self._cdmm()
        facts["nvswitch"] = {"present": bool(nvswitches), "count": len(nvswitches), "devices": nvswitches}
        facts["persistenced"] = {"running": services.get("nvidia-persistenced") == "active", "state": services.get("nvidia-persistenced")}
        if "fabricmanager" in self.subset:
            facts["fabricmanager"] = self._fabricmanager(driver, services, bool(nvswitches), results["fabricmanager"])
        if "imex" in self.subset:
            facts["imex"] = nvlink.imex_facts(driver_version=driver.get("version"), **results["imex"])
        if "nics" in self.subset:
            facts["nics"] = results["nics"]
        if "xid" in self.subset:
            facts["xid"] = results["xid"]
        if "stack" in self.subset:
            facts["stack"] = results["stack"]
        facts["commands_run"] = len(self.counter)
        return facts

    # -- driver and GPUs -------------------------------------------------
    def _driver_and_gpus(self):
        driver = {"installed": False, "loaded": False, "version": None, "flavor": None, "branch": None, "arch": None}
        pci_gpus = self.host.gpus()
        smi_facts = {"cuda_version": None, "gpu_count": 0, "pci_gpu_count": len(pci_gpus), "gpus": [], "gpu_processes": [], "nvidia_smi": "absent"}

        proc_text = self.host.read("proc/driver/nvidia/version")
        if proc_text is not None:
            try:
                proc = procfs_parser.parse_driver_version(proc_text)
            except ParseError as exc:
                raise FactsError(
                    f"/proc/driver/nvidia/version does not read as an NVIDIA driver version file: {exc}",
                    stdout=proc_text,
                ) from exc
            driver.update(installed=True, loaded=True, version=proc["version"], flavor=proc["flavor"], arch=proc.get("arch"))

        smi = self._tool(NvidiaSmi, "nvidia_smi_path")
        if smi.available:
            driver["installed"] = True
            rc, out, err = smi.run(["-q", "-x"], ok_rcs=None)  # bounded by command_timeout (_tool)
            # With a GPU fallen off the bus nvidia-smi exits 15 and still reports the healthy GPUs.
            lost_but_answering = rc == NvidiaSmi.RC_GPU_LOST and "<nvidia_smi_log" in out
            if rc == 0 or lost_but_answering:
                smi_facts["nvidia_smi"] = "gpu_lost" if lost_but_answering else "ok"
                if lost_but_answering:
                    smi_facts["nvidia_smi_message"] = err.strip()
                try:
                    parsed = nvsmi_parser.parse_xml(out)
                except ParseError as exc:
                    raise FactsError(
                        f"nvidia-smi -q -x printed output that is not the expected XML: {exc}. "
                        "Check that nvidia-smi belongs to the loaded driver.",
                        cmd=[smi.path, "-q", "-x"],
                        rc=rc,
                        stdout=out,
                        stderr=err,
                    ) from exc
                smi_facts["cuda_version"] = parsed.get("cuda_version")
                smi_facts["gpus"] = parsed["gpus"]
                smi_facts["gpu_count"] = len(parsed["gpus"])
                smi_facts["gpu_processes"] = [
                    dict(process, gpu_uuid=gpu.get("uuid"), gpu_index=gpu.get("index")) for gpu in parsed["gpus"] for process in (gpu.get("processes") or [])
                ]
                if not driver["version"]:
                    driver["version"] = parsed.get("driver_version")
                    driver["loaded"] = True
                elif parsed.get("driver_version") and parsed["driver_version"] != driver["version"] and not lost_but_answering:
                    smi_facts["nvidia_smi"] = "version_mismatch"
            elif "version mismatch" in (out + err).lower():
                # "Failed to initialize NVML: Driver/library version mismatch": the user-space driver was replaced
                # beside the loaded kernel module and waits for a reboot (or module reload) to match it.
                smi_facts["nvidia_smi"] = "version_mismatch"
                smi_facts["nvidia_smi_message"] = (out or err).strip()
            elif rc in (NvidiaSmi.RC_NO_DRIVER, NvidiaSmi.RC_NO_DEVICE, NvidiaSmi.RC_GPU_LOST):
                smi_facts["nvidia_smi"] = {NvidiaSmi.RC_NO_DRIVER: "no_driver", NvidiaSmi.RC_NO_DEVICE: "no_devices", NvidiaSmi.RC_GPU_LOST: "gpu_lost"}[rc]
                smi_facts["nvidia_smi_message"] = (out or err).strip()
            else:
                raise FactsError(
                    f"nvidia-smi -q -x failed with exit status {rc}: {(err or out).strip()[:300]}",
                    cmd=[smi.path, "-q", "-x"],
                    rc=rc,
                    stdout=out,
                    stderr=err,
                )

        if driver["installed"] and not driver["loaded"]:
            module_found, driver["version"] = self._installed_module_version()
            if module_found is False:
                # nvidia-smi without an nvidia kernel module for the running kernel is no driver (a leftover
                # user space, or a package whose module never built): say "not installed", not "not loaded".
                driver["installed"] = False
        driver["branch"] = driver_branch(driver["version"])
        return driver, smi_facts

    def _installed_module_version(self):
        """(module found: True / False / None when modinfo is absent, version or None)."""
        modinfo = self._tool(Modinfo, "modinfo_path")
        if not modinfo.available:
            return None, None
        rc, out, err = modinfo.module_info("nvidia")
        if rc != 0:
            return (False if "not found" in (err + out).lower() else None), None
        try:
            return True, procfs_parser.parse_modinfo(out).get("version")
        except ParseError:
            return True, None

    # -- NVSwitch and fabric manager --------------------------------------
    def _services(self):
        systemctl = self._tool(Systemctl, "systemctl_path")
        if not systemctl.available:
            return {}
        return systemctl.is_active(SERVICES)

    def _fabricmanager_installed(self):
        return fabricmanager_version(self._tool(FabricManager, "fabricmanager_path"))

    def _fabricmanager(self, driver, services, nvswitch_present, installed):
        """The fabric manager facts from its ``fabricmanager_version`` read (``installed``), the driver and the services."""
        facts = {
            "installed": False,
            "version": None,
            "running": None,
            "state": services.get("nvidia-fabricmanager"),
            "matches_driver": None,
            "required": nvswitch_present,
        }
        if facts["state"] is not None:
            facts["running"] = facts["state"] == "active"
        # One rule with nvidia_driver (_host): a wrapper whose program is gone is not installed; a version that
        # does not read fails the task (HostError) rather than pass as "no fabric manager".
        facts.update(installed)
        if facts["installed"] and driver.get("version"):
            facts["matches_driver"] = facts["version"] == driver["version"]
        return facts

    # -- CDMM and IMEX (GB200 / GB300 NVL72) ----------------------------------
    def _cdmm(self):
        """``{"mode", "enabled"}`` from /proc/driver/nvidia/params (no process); both None without a loaded driver or before R580."""
        text = self.host.read("proc/driver/nvidia/params")
        if text is None:
            return {"mode": None, "enabled": None}
        try:
            params = procfs_parser.parse_nvidia_params(text if text.endswith("\n") or not text else text + "\n")  # a file read whole is not cut
        except ParseError as exc:
            raise FactsError(f"/proc/driver/nvidia/params does not read as the driver's parameter file: {exc}", stdout=text) from exc
        return {"mode": params["cdmm_mode"], "enabled": params["cdmm"]}

    def _imex_reads(self):
        """The keyword arguments of nvlink.imex_facts but the driver: three processes (four where an IMEX of R580+ refuses -j), none without nvidia-imex."""
        reads = {"version": None, "service_state": None, "nodes_config": None, "domain": None, "domain_error": None}
        text = self.host.read(IMEX_NODES_CONFIG)
        if text is not None:
            try:
                reads["nodes_config"] = imex_parser.parse_nodes_config(text if text.endswith("\n") or not text else text + "\n")
            except ParseError as exc:
                raise FactsError(f"/{IMEX_NODES_CONFIG} cannot be read: {exc}. Write one IP address or host name a line.", stdout=text) from exc
        daemon = self._tool(Imex, "imex_path")
        if not daemon.available:
            return reads
        rc, out, err = daemon.run(["--version"], ok_rcs=None)
        if rc in (126, 127):
            return reads  # a wrapper whose program is gone: not installed
        try:
            reads["version"] = imex_parser.parse_version(out + "\n" + err)
        except ParseError as exc:
            raise FactsError(
                f"nvidia-imex --version printed no whole version (exit status {rc}; {exc}): reinstall the nvidia-imex package",
                cmd=[daemon.path, "--version"],
                rc=rc,
                stdout=out,
                stderr=err,
            ) from exc
        systemctl = self._tool(Systemctl, "systemctl_path")
        if systemctl.available:
            reads["service_state"] = systemctl.is_active([IMEX_SERVICE])[IMEX_SERVICE]
        ctl = self._tool(ImexCtl, "imex_ctl_path")
        if not ctl.available:
            reads["domain_error"] = "nvidia-imex-ctl is not installed"
            return reads
        args = nvlink.imex_ctl_nodes_args(reads["version"])
        rc, out, err = ctl.run(args, ok_rcs=None)
        if rc != 0 and args != ["-N"] and nvlink.imex_ctl_lacks_json(out, err):
            args = ["-N"]
            rc, out, err = ctl.run(args, ok_rcs=None)
        if rc != 0:
            # The daemon is down or not configured: a state to report, not a failed task.
            reads["domain_error"] = f"exit status {rc}: {(err or out).strip()[:300]}"
            return reads
        parse = imex_parser.parse_ctl_nodes_json if "-j" in args else imex_parser.parse_ctl_nodes
        try:
            reads["domain"] = parse(out)
        except ParseError as exc:
            raise FactsError(f"nvidia-imex-ctl {' '.join(args)} printed unexpected output: {exc}", cmd=[ctl.path, *args], rc=rc, stdout=out,
                             stderr=err) from exc
        return reads

    # -- ConnectX NICs ------------------------------------------------------
    def _no_mellanox_device(self, manager, rc, out, err):
        """mlxfwmanager saw no device: true only when the PCI bus lists no Mellanox adapter either."""
        adapters = self.host.pci_devices(MELLANOX_VENDOR, NIC_CLASS_PREFIXES)
        if not adapters:
            return []
        raise FactsError(
            f"mlxfwmanager found no device, but the PCI bus lists {len(adapters)} Mellanox adapter(s) ({', '.join(adapters[:4])}): "
            "run 'mst start' (or check that the MFT kernel modules load), then retry",
            cmd=[manager.path, "--query", "--query-format", "XML"],
            rc=rc,
            stdout=out,
            stderr=err,
        )

    def _nics(self):
        manager = self._tool(MlxFwManager, "mlxfwmanager_path")
        if manager.available:
            rc, out, err = manager.run(["--query", "--query-format", "XML"], ok_rcs=None)
            if _NO_DEVICES in out + err or (rc == 0 and "<Device " not in out and "<Devices" in out):
                return self._no_mellanox_device(manager, rc, out, err)
            if "<Devices" not in out and rc != 0:
                raise FactsError(
                    f"mlxfwmanager --query failed with exit status {rc} and printed no device list: {(err or out).strip()[:300]}",
                    cmd=[manager.path, "--query", "--query-format", "XML"],
                    rc=rc,
                    stdout=out,
                    stderr=err,
                )
            try:
                return mlx_parser.parse_fwmanager_xml(out)
            except ParseError as exc:
                raise FactsError(f"mlxfwmanager --query-format XML printed unexpected output: {exc}", rc=rc, stdout=out, stderr=err) from exc
        flint = self._tool(Mstflint, "mstflint_path")
        if not flint.available:
            return []
        nics = []
        for address in self.host.pci_devices(MELLANOX_VENDOR, NIC_CLASS_PREFIXES):
            if not address.endswith(".0"):
                continue  # one query per adapter: its first function
            out = flint.query(address)
            try:
                info = mlx_parser.parse_flint_query(out)
            except ParseError as exc:
                raise FactsError(f"mstflint -d {address} q printed unexpected output: {exc}", stdout=out) from exc
            nics.append(
                {
                    "pci": address,
                    "type": None,
                    "psid": info.get("psid"),
                    "part_number": info.get("part_number"),
                    "description": info.get("description"),
                    "fw_current": info.get("fw_version"),
                    "fw_available": None,
                    "status": None,
                    "query_failed": False,
                }
            )
        return nics

    # -- the software stack (OFED, RDMA ports, peermem, Secure Boot, DKMS, DCGM) --
    def _stack(self):
        return stack.StackReader(self._tool, self.host, self.host.kernel_release()).read()

    # -- Xid events ----------------------------------------------------------
    def _xid(self):
        dmesg = self._tool(Dmesg, "dmesg_path")
        if not dmesg.available:
            return {"source": None, "events": [], "counts": {}, "critical": []}
        rc, out, err = dmesg.run([], ok_rcs=None)
        if rc != 0:
            # Unprivileged dmesg is refused on hardened kernels: say so, do not fail the node.
            return {"source": "dmesg", "error": (err or out).strip()[:300], "events": [], "counts": {}, "critical": []}
        try:
            events = xid_parser.parse_kernel_log(out)
        except ParseError as exc:
            raise FactsError(f"dmesg printed a kernel log that cannot be read: {exc}", cmd=[dmesg.path], rc=rc, stdout=out, stderr=err) from exc
        counts = xid_parser.summarize(events)
        critical = sorted(code for code in counts if code in self.critical_xids)
        return {"source": "dmesg", "events": events, "counts": counts, "critical": critical}


# Xid codes are small positive integers (NVIDIA's catalog ends below 200); 0, negatives or huge numbers are typos.
MAX_XID = 999


def check_options(params):
    """The collector's keyword arguments from gpu_facts' options; OptionError naming the option and its range."""
    subset = params.get("gather_subset") or ["all"]
    if "all" in subset:
        subset = (*SUBSETS, *(name for name in OPT_IN_SUBSETS if name in subset))
    critical = params.get("critical_xids")
    for code in critical or []:
        if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= MAX_XID:
            raise OptionError(f"critical_xids: {code!r} is not an Xid code (a whole number from 1 to {MAX_XID}); remove it or fix the typo")
    paths = {name: params.get(name) for name in ("nvidia_smi_path", "fabricmanager_path", "mlxfwmanager_path", "mstflint_path")}
    return {
        "gather_subset": tuple(subset),
        "paths": paths,
        "critical_xids": DEFAULT_CRITICAL_XIDS if critical is None else tuple(critical),
        "command_timeout": check_command_timeout(DEFAULT_COMMAND_TIMEOUT if params.get("command_timeout") is None else params["command_timeout"]),
    }


def gather(module, **kwargs):
    """Collect the facts; typed errors (GpufleetError: ToolError, FactsError, HostError) propagate to the module."""
    return GpuFactsCollector(module, **kwargs).collect()


__all__ = [
    "DEFAULT_COMMAND_TIMEOUT",
    "MAX_COMMAND_TIMEOUT",
    "OPT_IN_SUBSETS",
    "SUBSETS",
    "FactsError",
    "GpuFactsCollector",
    "OptionError",
    "ToolError",
    "check_command_timeout",
    "check_options",
    "gather",
    "run_reads",
]
