# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ofed module's logic: read, plan, act, re-read (private).

Acting follows one order: verify the bundle's sha256, record the last known good OFED, read the NICs' firmware,
install (firmware updater off), reload the stack (``openibd restart``, or a reboot left pending), rebuild and load
nvidia_peermem, read everything again and check that the NICs' firmware did not move.
"""

from __future__ import annotations

import contextlib
import os
import re
import types

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _artifact, _state
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.node import DriverError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.signing import ModuleSigning
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._host import Host
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._ofed import plan as planner
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._ofed.plan import INSTALL_ACTIONS, OfedError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._ofed.tools import (
    DkmsBuild,
    MlnxOfedInstall,
    OfedAptGet,
    OfedDnf,
    OfedDpkg,
    OfedRpm,
    Openibd,
    Tar,
)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import dkms as dkms_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import kmod as kmod_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import mlx as mlx_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import ofed as ofed_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import ofed_install as install_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import openibd as openibd_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import packages as packages_parser
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import (
    CommandCounter,
    Dkms,
    Dmesg,
    DpkgQuery,
    Lsmod,
    MlxFwManager,
    Modinfo,
    Modprobe,
    OfedInfo,
    Rpm,
    Systemctl,
    ToolError,
)

COMPONENT = "ofed"
OPENIB_CONF = "etc/infiniband/openib.conf"
NOT_INSTALLED_RCS = (126, 127)
PEERMEM = "nvidia_peermem"
# mlnxofedinstall's exit statuses (NVIDIA's adapter manuals, "mlnxofedinstall Return Codes").
INSTALLER_RCS = {
    1: "the installation failed",
    2: "no firmware was found for the adapter device",
    22: "an invalid parameter was given",
    28: "there is not enough free space",
    171: "not applicable to this system configuration (the required hardware is not present)",
    172: "prerequisites are not met (missing software, or hardware not configured correctly)",
    173: "the mst driver failed to start",
}
_ONBOOT = re.compile(r"^[ \t]*RUN_FW_UPDATER_ONBOOT[ \t]*=[ \t]*(?P<value>\w+)[ \t]*$", re.MULTILINE)
_UNKNOWN_SYMBOL = re.compile(r"nvidia_peermem: Unknown symbol \w+ \(err -?\d+\)")
_DPKG_FORMAT = "${Package} ${Version} ${db:Status-Abbrev}\\n"


def onboot_setting(text):
    """``RUN_FW_UPDATER_ONBOOT`` of openib.conf (the last assignment wins, as the shell reads it), lower-case; None when unset."""
    found = _ONBOOT.findall(text or "")
    return found[-1].lower() if found else None


def disable_onboot(text):
    """openib.conf with every ``RUN_FW_UPDATER_ONBOOT`` set to ``no`` (the firmware updater never runs at boot)."""
    return _ONBOOT.sub("RUN_FW_UPDATER_ONBOOT=no", text or "")


def nic_firmware(devices):
    """``{pci: flashed firmware}`` of mlxfwmanager's devices (the version on flash: what runs after the next reset)."""
    return {device["pci"]: device.get("fw_current") for device in devices or [] if device.get("pci")}


def firmware_moved(before, after):
    """The NICs whose flashed firmware changed: ``["PCI: 28.39.1002 -> 28.43.2026"]`` (a NIC gone or new counts too)."""
    if before is None or after is None:
        return []
    return [f"{pci}: {before.get(pci)} -> {after.get(pci)}" for pci in sorted(set(before) | set(after)) if before.get(pci) != after.get(pci)]


def history_action(the_plan):
    """The action a history entry names: the install's, else what changed besides it (nvidia_peermem, the firmware updater)."""
    if the_plan["action"] != "none":
        return the_plan["action"]
    if the_plan["peermem"] in ("load", "rebuild"):
        return f"peermem_{the_plan['peermem']}"
    return "fw_updater_" + "_".join(the_plan["fw_updater"]) if the_plan["fw_updater"] else "none"


def find_installer(folder):
    """The path of ``mlnxofedinstall`` in an extracted bundle (at its top or one folder down); None when absent."""
    direct = os.path.join(folder, "mlnxofedinstall")
    if os.path.isfile(direct):
        return direct
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        candidate = os.path.join(folder, name, "mlnxofedinstall")
        if os.path.isfile(candidate):
            return candidate
    return None


class OfedManager:
    def __init__(self, module, host=None):
        self.module = module
        self.options = planner.check_options(module.params)  # before any tool is looked up
        self.counter = CommandCounter()
        self.host = host or Host()
        self.reboot_required = False
        self.notes = []
        self.install_report = None
        self.signing = None  # ModuleSigning, where the plan rebuilds the NVIDIA modules (nvidia_peermem) with DKMS

    def tool(self, cls, path=None):
        return cls(self.module, path=path, counter=self.counter)

    # -- reading -----------------------------------------------------------------------------------
    def _optional(self, cls, args):
        """``(rc, out, err)`` of a read-only tool, None when it is not installed."""
        wrapper = self.tool(cls)
        if not wrapper.available:
            return None
        result = wrapper.run(args, ok_rcs=None)
        return None if result[0] in NOT_INSTALLED_RCS else result

    def _parsed(self, parse, what, result):
        rc, out, err = result
        try:
            return parse(out)
        except ParseError as exc:
            raise OfedError(f"{what} printed unexpected output (exit status {rc}): {exc}. Nothing was changed", rc=rc, stdout=out, stderr=err) from exc

    def read_current(self):
        kernel = self.host.kernel_release()
        result = self._optional(OfedInfo, ["-s"])
        ofed = {"installed": False, "flavor": "inbox", "version": None, "release": None}
        if result is not None:
            ofed = {"installed": True, **self._parsed(ofed_parser.parse_ofed_info, "ofed_info -s", result)}
        lsmod = self._optional(Lsmod, [])
        modules = None
        if lsmod is not None:
            if lsmod[0] != 0 or not kmod_parser.lsmod_has_header(lsmod[1]):
                raise OfedError(f"lsmod printed no module list (exit status {lsmod[0]}). Nothing was changed", rc=lsmod[0], stdout=lsmod[1], stderr=lsmod[2])
            modules = kmod_parser.parse_lsmod(lsmod[1])
        driver = self._modinfo("nvidia")
        peermem = self._modinfo(PEERMEM)
        systemctl = self.tool(Systemctl)
        units = systemctl.is_active(list(planner.STACK_HOLDER_UNITS)) if systemctl.available else {}
        return {
            "kernel": kernel,
            "ofed": ofed,
            "modules": modules,
            "opensm_units": units,
            "driver": {"version": (driver or {}).get("version"), "dkms": self._driver_dkms((driver or {}).get("version"), kernel)},
            "peermem": {"installed": peermem is not None, "loaded": None if modules is None else PEERMEM in modules},
            "fw_updater": {"installed": self._fw_updater_installed(), "onboot": onboot_setting(self.host.read(OPENIB_CONF))},
        }

    def _modinfo(self, name):
        result = self._optional(Modinfo, [name])
        if result is None or result[0] != 0:
            return None
        return self._parsed(kmod_parser.parse_modinfo, f"modinfo {name}", result)

    def _driver_dkms(self, version, kernel):
        """True when DKMS holds NVIDIA driver ``version`` built for ``kernel`` (so nvidia_peermem can be rebuilt)."""
        if not version:
            return False
        result = self._optional(Dkms, ["status"])
        if result is None:
            return False
        rc, out, err = result
        if not out.strip():
            return False  # DKMS holds no module at all
        status = self._parsed(dkms_parser.parse_status, "dkms status", (rc, f"{out}\n{err}\n" if err.strip() else out, err))
        kernels = dkms_parser.kernels_of(status, "nvidia")
        return version in kernels["versions"] and kernel in kernels["installed"]

    def package_manager(self):
        chosen = self.options.get("package_manager") or "auto"
        if chosen != "auto":
            return chosen
        if self.tool(OfedAptGet).available:
            return "apt"
        if self.tool(OfedDnf).available:
            return "dnf"
        return None

    def _fw_updater_installed(self):
        manager = self.package_manager() if self.options["method"] == "package" else None
        if manager == "apt":
            result = self._optional(DpkgQuery, ["-W", "-f", _DPKG_FORMAT, planner.FW_UPDATER])
            if result is None or result[0] != 0:
                return False  # "no packages found matching mlnx-fw-updater"
            packages = self._parsed(packages_parser.parse_dpkg_query, "dpkg-query", result)
            return any(package["name"] == planner.FW_UPDATER and package["installed"] for package in packages)
        if manager == "dnf":
            result = self._optional(Rpm, ["-q", "--qf", "%{NAME} %{VERSION}\\n", planner.FW_UPDATER])
            if result is None:
                return False
            try:
                return planner.FW_UPDATER in packages_parser.parse_rpm_query(result[1], [planner.FW_UPDATER])
            except ParseError as exc:
                raise OfedError(f"rpm -q printed unexpected output: {exc}. Nothing was changed", rc=result[0], stdout=result[1], stderr=result[2]) from exc
        return None

    def read_nic_firmware(self):
        """``{pci: flashed firmware}`` of every NIC (None when mlxfwmanager is not installed: the guard is off)."""
        tool = self.tool(MlxFwManager)
        if not tool.available:
            return None
        rc, out, err = tool.query()
        try:
            return nic_firmware(mlx_parser.parse_fwmanager_xml(out))
        except ParseError as exc:
            raise OfedError(f"mlxfwmanager --query printed unexpected output (exit status {rc}): {exc}", rc=rc, stdout=out, stderr=err) from exc

    # -- the run ---------------------------------------------------------------------------------------
    def run(self):
        try:
            before = self.read_current()
        except ToolError as exc:
            raise OfedError(f"{exc.msg}. Nothing was changed", cmd=exc.cmd, rc=exc.rc, stdout=exc.stdout, stderr=exc.stderr) from exc
        the_plan = planner.plan(before, self.options)
        result = {"changed": the_plan["changed"], "plan": the_plan, "diff": planner.diff(the_plan), "before": before,
                  "reboot_required": False, "activation": "none"}
        if the_plan["peermem"] == "rebuild":
            result["module_signing"] = self._check_signing(before)  # refuses before the first change, in check mode too
        if not the_plan["changed"] or self.module.check_mode:
            predicted = bool(self.module.check_mode and the_plan["reload"] == "reboot")
            result.update(after=before, reboot_required=predicted, activation="reboot" if predicted else "none", commands_run=len(self.counter))
            return result
        if self.options.get("source"):
            try:
                result["sha256"] = _artifact.verify(self.options["source"], self.options["checksum"])
            except _artifact.ArtifactError as exc:
                raise OfedError(exc.msg) from exc
        self._record_start(before, the_plan)
        try:
            firmware_before = self.read_nic_firmware()
            self._act(before, the_plan)
            after = self.read_current()
            firmware_after = self.read_nic_firmware()
            self._verify(after, the_plan, firmware_before, firmware_after)
        except OfedError as exc:
            self._record_end(the_plan, "failed", exc.msg)
            raise
        except (ToolError, ValueError) as exc:
            msg = f"changing OFED failed: {getattr(exc, 'msg', str(exc))}. Read ofed_info -s and lsmod for what the node is left with"
            self._record_end(the_plan, "failed", msg)
            raise OfedError(msg, cmd=getattr(exc, "cmd", None), rc=getattr(exc, "rc", None), stdout=getattr(exc, "stdout", ""),
                            stderr=getattr(exc, "stderr", "")) from exc
        self._record_end(the_plan, "reboot_required" if self.reboot_required else "ok")
        result.update(after=after, reboot_required=self.reboot_required, activation="reboot" if self.reboot_required else "none",
                      nic_firmware={"before": firmware_before, "after": firmware_after}, commands_run=len(self.counter))
        if self.install_report is not None:
            result["install"] = self.install_report
        if self.notes:
            result["notes"] = self.notes
        return result

    # -- the node state file -------------------------------------------------------------------------------
    def _record_start(self, before, the_plan):
        ofed = before["ofed"]

        def change(doc):
            if self.options.get("record_last_known_good", True) and ofed.get("installed") and ofed.get("version"):
                _state.record_last_known_good(doc, COMPONENT, ofed["version"], {"flavor": ofed["flavor"], "install_method": self.options["method"]})
            _state.append_history(doc, COMPONENT, history_action(the_plan), before=planner.diff(the_plan)["before"]["ofed"],
                                  after=planner.diff(the_plan)["after"]["ofed"], result="started", rollout_id=self.options.get("rollout_id"),
                                  details={"method": self.options["method"], "reload": the_plan["reload"], "peermem": the_plan["peermem"]})
            return True

        try:
            _state.update(self.options["state_file"], change)
        except _state.StateFileError as exc:
            raise OfedError(exc.msg + ". Nothing was changed") from exc

    def _record_end(self, the_plan, outcome, message=None):
        def change(doc):
            _state.append_history(doc, COMPONENT, history_action(the_plan), before=planner.diff(the_plan)["before"]["ofed"],
                                  after=planner.diff(the_plan)["after"]["ofed"], result=outcome, rollout_id=self.options.get("rollout_id"),
                                  details={"message": message[:500]} if message else None)
            return True

        try:
            _state.update(self.options["state_file"], change)
        except _state.StateFileError as exc:
            self.notes.append(exc.msg)

    # -- acting ------------------------------------------------------------------------------------------------
    def _act(self, before, the_plan):
        if "disable_onboot" in the_plan["fw_updater"]:
            self._disable_onboot()
        if the_plan["action"] in INSTALL_ACTIONS:
            self._install()
        elif "remove" in the_plan["fw_updater"]:
            self._remove_fw_updater()
        restarted = False
        if the_plan["reload"] == "restart":
            restarted = self._restart(before)
        elif the_plan["reload"] == "reboot":
            self.reboot_required = True
            self.notes.append(f"the new OFED stack is loaded at the next boot ({'; '.join(the_plan['holders']) or 'reload: reboot'})")
        if the_plan["peermem"] == "rebuild":
            self._rebuild_peermem(before)
        peermem_wanted = the_plan["peermem"] in ("rebuild", "load") or (the_plan["peermem"] != "skip" and before["peermem"].get("loaded"))
        if peermem_wanted and not self.reboot_required and (restarted or the_plan["peermem"] == "load" or the_plan["reload"] == "none"):
            self._load_peermem()

    def _disable_onboot(self):
        path = self.host.path(OPENIB_CONF)
        text = self.host.read(OPENIB_CONF) or ""
        with open(path, "w") as handle:  # the file stays: only the assignment changes
            handle.write(disable_onboot(text))

    def _install(self):
        if self.options["method"] == "installer":
            rc, out, err, cmd = self._run_installer()
        else:
            rc, out, err, cmd = self._run_packages()
        try:
            report = install_parser.parse_install_output(f"{out}\n{err}\n")
        except ParseError:
            report = None  # a package manager's own lines only: no firmware step ran
        self.install_report = {"firmware": report["firmware"] if report else "not_run", "logs_dir": (report or {}).get("logs_dir")}
        if rc != 0:
            why = INSTALLER_RCS.get(rc, f"exit status {rc}") if self.options["method"] == "installer" else f"exit status {rc}"
            hint = f": install the missing packages ({report['missing_packages']}) and rerun" if report and report.get("missing_packages") else ""
            raise OfedError(f"the OFED install failed ({why}){hint}. The previous stack may be partly replaced: see "
                            f"{(report or {}).get('logs_dir') or 'the installer log'}, rerun, or roll back", cmd=cmd, rc=rc, stdout=out, stderr=err)
        if report and install_parser.firmware_attempted(report):
            raise OfedError(f"the OFED install ran its firmware updater (firmware step: {report['firmware']}) although it was told not to: "
                            "NIC firmware may have changed outside the nic_firmware role. Check each NIC with 'mlxfwmanager --query' and "
                            "bring it back with the nic_firmware role", cmd=cmd, rc=rc, stdout=out, stderr=err)

    def _run_installer(self):
        folder = os.path.join(self.options["work_dir"], self.options["version"])
        os.makedirs(folder, mode=0o700, exist_ok=True)
        self.tool(Tar).extract(self.options["source"], folder)
        path = find_installer(folder)
        if path is None:
            raise OfedError(f"{self.options['source']} holds no mlnxofedinstall (at its top or one folder down): give the "
                            "MLNX_OFED_LINUX-<version>-<distro>-<arch>.tgz bundle. Nothing was installed")
        tool = self.tool(MlnxOfedInstall, path)
        args = planner.installer_args(self.options)
        rc, out, err = tool.run(args, ok_rcs=None, timeout=self.options["timeout"])
        return rc, out, err, [path, *args]

    def _run_packages(self):
        manager = self.package_manager()
        if manager not in ("apt", "dnf"):
            raise OfedError("method package needs apt-get or dnf on the node (or package_manager set): neither was found. Nothing was installed")
        source = self.options.get("source")
        if manager == "apt":
            if source:
                self.tool(OfedDpkg).run(["-i", source])
            self.tool(OfedAptGet).run(["update"])
            tool = self.tool(OfedAptGet)
        else:
            if source:
                self.tool(OfedRpm).run(["-Uvh", "--replacepkgs", source])
            tool = self.tool(OfedDnf)
        args = planner.package_install_args(manager, self.options["packages"])
        rc, out, err = tool.run(args, ok_rcs=None, timeout=self.options["timeout"])
        return rc, out, err, [tool.path, *args]

    def _remove_fw_updater(self):
        manager = self.package_manager()
        if manager == "apt":
            self.tool(OfedAptGet).run(["remove", "-y", planner.FW_UPDATER])
        elif manager == "dnf":
            self.tool(OfedDnf).run(["remove", "-y", planner.FW_UPDATER])

    def _restart(self, before):
        """``openibd restart``; True when the new stack runs. A refusal leaves the activation to a reboot."""
        modules = before.get("modules") or {}
        if PEERMEM in modules:
            # nvidia_peermem holds ib_core: openibd cannot unload the stack under it.
            rc, out, err = self.tool(Modprobe).run(["-r", PEERMEM], ok_rcs=None)
            if rc != 0:
                self.reboot_required = True
                self.notes.append(f"nvidia_peermem could not be unloaded ({(err or out).strip()[:200]}): the new stack is loaded at the next boot")
                return False
        tool = self.tool(Openibd)
        if not tool.available:
            self.reboot_required = True
            self.notes.append("openibd was not found (/etc/init.d/openibd): the new stack is loaded at the next boot")
            return False
        rc, out, err = tool.restart()
        try:
            parsed = openibd_parser.parse_restart(f"{out}\n{err}\n")
        except ParseError:
            parsed = None
        if rc == 0 and (parsed is None or parsed["ok"]):
            return True
        held = []
        for holder in (parsed or {}).get("holders") or []:
            name = f"{holder['process']}({holder['pid']})" if holder.get("pid") else holder["process"]
            if name not in held:
                held.append(name)
        held += [f"{item['module']} in use by {' '.join(item['users'])}" for item in (parsed or {}).get("in_use") or []]
        self.reboot_required = True
        self.notes.append(f"openibd restart did not reload the stack (exit status {rc}{': ' + ', '.join(held) if held else ''}): "
                          "the new stack is loaded at the next boot")
        return False

    def _check_signing(self, before):
        """Secure Boot before a DKMS rebuild of the NVIDIA modules: ``dkms install --force`` reinstalls nvidia.ko too, signed
        with DKMS's configured pair (or one it generates): on a node that enforces Secure Boot the fleet's enrolled key must
        sign them, else the kernel refuses nvidia_peermem now and nvidia at the next boot. The driver's own rules
        (_driver/secureboot.py): refused without a key, with a key not enrolled, or with another key than the BOM's."""
        options = {
            "module_signing_key": self.options.get("module_signing_key"),
            "module_signing_certificate": self.options.get("module_signing_certificate"),
            "module_signing_certificate_sha1": self.options.get("module_signing_certificate_sha1"),
            "secure_boot": self.options.get("secure_boot") or "any",
            "method": "package",  # DKMS builds: the drop-in, never the runfile's options
            "dkms": True,
            "state": "present",
        }
        try:
            self.signing = ModuleSigning(self.module, options, self.host, self.counter)
            return self.signing.check({"driver": {"action": "reinstall"}})
        except DriverError as exc:
            raise OfedError(f"this OFED change rebuilds nvidia_peermem with DKMS, which reinstalls the driver's modules "
                            f"({before['driver']['version']}) signed: {exc.msg}") from exc

    def _rebuild_peermem(self, before):
        try:
            with self.signing.applied(types.SimpleNamespace(signing_args=[])) if self.signing else contextlib.nullcontext():
                self.tool(DkmsBuild).rebuild("nvidia", before["driver"]["version"], before["kernel"])
        except DriverError as exc:
            raise OfedError(f"OFED is installed, but the NVIDIA modules were not rebuilt: {exc.msg}") from exc
        except ToolError as exc:
            raise OfedError(f"OFED is installed, but rebuilding the NVIDIA DKMS modules (nvidia_peermem) against it failed: {exc.msg}. "
                            f"See /var/lib/dkms/nvidia/{before['driver']['version']}/build/make.log; roll back or reinstall the driver",
                            cmd=exc.cmd, rc=exc.rc, stdout=exc.stdout, stderr=exc.stderr) from exc

    def _load_peermem(self):
        rc, out, err = self.tool(Modprobe).run([PEERMEM], ok_rcs=None)
        if rc == 0:
            self._verify_signatures()
            return
        refused = self.signing.load_refused(types.SimpleNamespace(stdout=out, stderr=err, msg="")) if self.signing else None
        if refused:
            raise OfedError(f"nvidia_peermem does not load after its DKMS rebuild: {refused}", rc=rc, stdout=out, stderr=err)
        dmesg = self.tool(Dmesg)
        log = dmesg.kernel_log() if dmesg.available else ""
        symbols = _UNKNOWN_SYMBOL.findall(log)
        raise OfedError(
            f"nvidia_peermem does not load after the OFED change ({(err or out).strip()[:200]}"
            f"{'; the kernel says ' + symbols[-1] if symbols else ''}): it was built against another OFED. Reinstall the driver "
            "(or 'dkms install -m nvidia -v <version> --force') so that it builds against this OFED's symbols",
            rc=rc, stdout=out, stderr=err,
        )

    def _verify_signatures(self):
        """After a signed rebuild: every NVIDIA module loaded is signed by the fleet's certificate (modinfo)."""
        if not (self.signing and self.signing.must_verify()):
            return
        problems = self.signing.verify()
        if problems:
            raise OfedError("the NVIDIA modules rebuilt by DKMS are not all signed with module_signing_certificate: " + "; ".join(problems)
                            + ". Check DKMS's framework.conf (mok_signing_key, mok_certificate) and roll back")

    # -- after -------------------------------------------------------------------------------------------------
    def _verify(self, after, the_plan, firmware_before, firmware_after):
        moved = firmware_moved(firmware_before, firmware_after)
        if moved:
            raise OfedError(
                f"the NICs' firmware changed during the OFED install ({'; '.join(moved)}): NIC firmware belongs to the nic_firmware "
                "role. Bring it back with the nic_firmware role (its rollback entry point), and report the installer's log",
                nic_firmware={"before": firmware_before, "after": firmware_after},
            )
        if firmware_before is None:
            self.notes.append("mlxfwmanager is not installed: the NICs' firmware was not compared before and after the install")
        ofed = after["ofed"]
        wanted = the_plan["after"]
        if the_plan["action"] in INSTALL_ACTIONS and (ofed.get("flavor") != wanted["flavor"] or ofed.get("version") != wanted["version"]):
            raise OfedError(
                f"the install finished but ofed_info -s says {ofed.get('release') or 'nothing (inbox)'}, not {wanted['flavor']} {wanted['version']}: "
                "the bundle or package repository holds another release; fix source (or the repository) and rerun"
            )
        wanted_peermem = the_plan["peermem"] in ("rebuild", "load")
        if wanted_peermem and not self.reboot_required and not after["peermem"].get("loaded"):
            raise OfedError("nvidia_peermem is not loaded after the OFED change: run 'modprobe nvidia_peermem' and read dmesg")


__all__ = ["OfedManager", "disable_onboot", "find_installer", "firmware_moved", "history_action", "nic_firmware", "onboot_setting"]
