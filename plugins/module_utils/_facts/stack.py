# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The software stack of a GPU node around the driver: gpu_facts' ``stack`` subset (private).

What it reads, each through its ``_tools`` wrapper with an argument list and the collector's timeout:
``ofed_info -s`` (absent: the inbox RDMA stack), ``ibstat`` (or ``ibv_devinfo`` where ibstat is absent),
``lsmod``, ``modinfo`` of nvidia, nvidia_peermem and mlx5_core, ``mokutil --sb-state`` (and
``--list-enrolled`` where Secure Boot is on), ``dkms status``, ``dcgmi --version`` and ``nv-hostengine
--version``; and, without a process, ``/sys/module/<module>/parameters``. A tool that is not installed
is reported as absent, never as an error; a tool that prints something unreadable is a FactsError.

The functions below that take parsed reads are pure (table-tested); StackReader runs the tools.
"""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import dcgm_version as dcgm_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import dkms as dkms_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import infiniband as ib_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import kmod as kmod_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import ofed as ofed_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import secureboot as sb_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import (
    Dcgmi,
    Dkms,
    Ibstat,
    IbvDevinfo,
    Lsmod,
    Modinfo,
    Mokutil,
    NvHostengine,
    OfedInfo,
    ToolError,
)

INBOX = "inbox"
# The modules whose version and signer the stack checks read (modinfo), and whose parameters it reads (/sys/module).
MODULES = ("nvidia", "nvidia_peermem", "mlx5_core")
PARAMETER_MODULES = ("nvidia", "nvidia_uvm", "nvidia_peermem", "mlx5_core", "ib_core")
MAX_PARAMETER_CHARS = 256  # a parameter's value as /sys shows it; longer is cut (and said so)
# Exit statuses of a wrapper whose program is gone (a dangling alternatives link): not installed.
NOT_INSTALLED_RCS = (126, 127)


class StackFactsError(ToolError):
    """A stack tool printed something gpu_facts cannot trust."""


def ofed_facts(parsed):
    """``{"installed", "flavor", "version", "release"}`` from parse_ofed_info's result; None (no ofed_info): the inbox stack."""
    if parsed is None:
        return {"installed": False, "flavor": INBOX, "version": None, "release": None}
    return {"installed": True, **parsed}


def module_facts(loaded_modules, name, info):
    """One kernel module: ``{"loaded", "installed", "version", "signer", "signed", "filename", "vermagic"}``.

    ``loaded_modules``: parse_lsmod's result (None: lsmod absent, ``loaded`` unknown); ``info``:
    parse_modinfo's result (None: modinfo found no such module, so it is not installed for this kernel).
    """
    facts = {
        "loaded": None if loaded_modules is None else name in loaded_modules,
        "installed": info is not None,
        "version": None,
        "signer": None,
        "signed": None,
        "filename": None,
        "vermagic": None,
    }
    if info is not None:
        facts.update({key: info[key] for key in ("version", "signer", "signed", "filename", "vermagic")})
    return facts


def dkms_facts(status, kernel, module="nvidia"):
    """``{"installed", "entries", "errors", "<module>": {"versions", "kernels", "built_for_running_kernel"}}``.

    ``status``: parse_status' result, None when dkms is not installed. ``built_for_running_kernel`` is
    None where DKMS holds no such module (a runfile without DKMS, a distribution's precompiled modules),
    False where it holds one only for other kernels (a kernel update that DKMS did not build for).
    """
    if status is None:
        return {"installed": False, "entries": [], "errors": [], module: None}
    kernels = dkms_parser.kernels_of(status, module)
    built = None
    if kernels["versions"]:
        built = kernel in kernels["installed"]
    return {
        "installed": True,
        "entries": status["modules"],
        "errors": status["errors"],
        module: {"versions": kernels["versions"], "kernels": kernels["installed"], "built_for_running_kernel": built},
    }


def secure_boot_facts(state, enrolled=None, enrolled_error=None):
    """``{"state", "enforcing", "setup_mode", "enrolled_keys", "enrolled_error"}``; ``state`` None: mokutil is not installed."""
    if state is None:
        return {"state": None, "enforcing": None, "setup_mode": None, "enrolled_keys": None, "enrolled_error": None}
    return {
        "state": state["state"],
        "enforcing": state["enforcing"],
        "setup_mode": state["setup_mode"],
        "enrolled_keys": enrolled,
        "enrolled_error": enrolled_error,
    }


def stack_problems(facts):
    """What is wrong with a node's stack whatever its BOM says, as sentences: DKMS errors, an NVIDIA DKMS module
    built only for other kernels, a port ibstat could not read, a loaded peermem whose module is gone."""
    problems = []
    dkms = facts.get("dkms") or {}
    for error in dkms.get("errors") or []:
        problems.append(f"dkms status reports an error: {error[:300]} (repair or remove that DKMS entry)")
    nvidia = dkms.get("nvidia") or {}
    if nvidia.get("built_for_running_kernel") is False:
        problems.append(
            f"the NVIDIA DKMS module ({', '.join(nvidia['versions'])}) is installed for {', '.join(nvidia['kernels']) or 'no kernel'} "
            f"but not for the running kernel {facts.get('kernel')}: run 'dkms autoinstall' for it (the driver will not load after a reboot)"
        )
    for error in (facts.get("rdma") or {}).get("errors") or []:
        problems.append(f"{(facts.get('rdma') or {}).get('source')}: {error[:300]}")
    return problems


class StackReader:
    """Runs the stack's tools for GpuFactsCollector: ``tool(cls, option)`` makes a bounded wrapper, ``host`` reads /sys."""

    def __init__(self, tool, host, kernel):
        self.tool = tool
        self.host = host
        self.kernel = kernel

    def _run(self, cls, args):
        """``(rc, stdout, stderr)``, or None when the tool is not installed (not found, or its program gone)."""
        wrapper = self.tool(cls, None)
        if not wrapper.available:
            return None
        rc, out, err = wrapper.run(args, ok_rcs=None)
        if rc in NOT_INSTALLED_RCS or ib_parser.command_missing(err):
            return None
        return rc, out, err

    def _parse(self, parse, what, result, text=None):
        rc, out, err = result
        try:
            return parse(out if text is None else text)
        except ParseError as exc:
            raise StackFactsError(f"{what} printed unexpected output (exit status {rc}): {exc}", rc=rc, stdout=out, stderr=err) from exc

    def read(self):
        facts = {"kernel": self.kernel}
        facts["ofed"] = ofed_facts(self._ofed())
        facts["rdma"] = self._rdma()
        loaded = self._lsmod()
        facts["modules"] = {name: module_facts(loaded, name, self._modinfo(name)) for name in MODULES}
        facts["secure_boot"] = self._secure_boot()
        facts["dkms"] = dkms_facts(self._dkms(), self.kernel)
        facts["dcgm"] = self._dcgm()
        facts["module_parameters"] = self._module_parameters()
        facts["problems"] = stack_problems(facts)
        return facts

    # Single reads for gpu_validate's stack checks (_validate/stack.py): the same tools and parsing as read(), one at a time.
    def rdma(self):
        """``{"source", "ports", "errors"}`` from ibstat (or ibv_devinfo); ``ports`` None when neither is installed."""
        return self._rdma()

    def loaded_modules(self):
        """parse_lsmod's result; None when lsmod is not installed."""
        return self._lsmod()

    def module_info(self, name):
        """parse_modinfo's result for ``name``; None when modinfo finds no such module for the running kernel (or is absent)."""
        return self._modinfo(name)

    def _ofed(self):
        result = self._run(OfedInfo, ["-s"])
        if result is None:
            return None
        return self._parse(ofed_parser.parse_ofed_info, "ofed_info -s", result)

    def _rdma(self):
        for cls, parse, source in ((Ibstat, ib_parser.parse_ibstat, "ibstat"), (IbvDevinfo, ib_parser.parse_ibv_devinfo, "ibv_devinfo")):
            result = self._run(cls, [])
            if result is None:
                continue
            rc, out, err = result
            if not out.strip():
                # No RDMA device registered (the driver is not loaded, no adapter): a state, not a failed task.
                return {"source": source, "ports": [], "errors": [(err.strip() or f"{source} listed no device (exit status {rc})")[:300]]}
            parsed = self._parse(parse, source, result, out + ("\n" + err if "ibpanic" in err else ""))
            return {"source": source, **parsed}
        return {"source": None, "ports": None, "errors": []}

    def _lsmod(self):
        result = self._run(Lsmod, [])
        if result is None:
            return None
        rc, out, err = result
        if rc != 0 or not kmod_parser.lsmod_has_header(out):
            raise StackFactsError(f"lsmod printed no module list (exit status {rc}): {(err or out).strip()[:300]}", rc=rc, stdout=out, stderr=err)
        return kmod_parser.parse_lsmod(out)

    def _modinfo(self, name):
        result = self._run(Modinfo, [name])
        if result is None:
            return None
        if result[0] != 0:
            return None  # "modinfo: ERROR: Module nvidia_peermem not found.": not installed for this kernel
        return self._parse(kmod_parser.parse_modinfo, f"modinfo {name}", result)

    def _secure_boot(self):
        result = self._run(Mokutil, ["--sb-state"])
        if result is None:
            return secure_boot_facts(None)
        _rc, out, err = result
        state = self._parse(sb_parser.parse_sb_state, "mokutil --sb-state", result, f"{out}\n{err}\n")
        if state["state"] != sb_parser.ENABLED:
            return secure_boot_facts(state)
        listed = self._run(Mokutil, ["--list-enrolled"])
        if listed is None or listed[0] != 0:
            why = "mokutil is gone" if listed is None else f"exit status {listed[0]}: {(listed[2] or listed[1]).strip()[:200]}"
            return secure_boot_facts(state, enrolled_error=f"mokutil --list-enrolled gave no key list ({why})")
        return secure_boot_facts(state, self._parse(sb_parser.parse_list_enrolled, "mokutil --list-enrolled", listed))

    def _dkms(self):
        result = self._run(Dkms, ["status"])
        if result is None:
            return None
        _rc, out, err = result
        return self._parse(dkms_parser.parse_status, "dkms status", result, f"{out}\n{err}\n" if err.strip() else out)

    def _dcgm(self):
        facts = {"installed": False, "version": None, "hostengine_version": None}
        result = self._run(Dcgmi, ["--version"])
        if result is not None:
            facts.update(installed=True, version=self._parse(dcgm_parser.parse_dcgmi_version, "dcgmi --version", result))
        result = self._run(NvHostengine, ["--version"])
        if result is not None:
            info = self._parse(dcgm_parser.parse_build_info, "nv-hostengine --version", result)
            facts.update(installed=True, hostengine_version=info["hostengine"]["version"])
        return facts

    def _module_parameters(self):
        """``{module: {parameter: value}}`` from /sys/module/<module>/parameters, for the loaded modules among PARAMETER_MODULES."""
        parameters = {}
        for module in PARAMETER_MODULES:
            names = self.host.listdir("sys/module", module, "parameters")
            values = {}
            for name in names:
                text = self.host.read("sys/module", module, "parameters", name)
                if text is not None:
                    values[name] = text.rstrip("\n")[:MAX_PARAMETER_CHARS]
            if values:
                parameters[module] = values
        return parameters
