# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The nvidia_driver module's logic: read, plan, act, re-read (private).

Acting follows one order for both install methods: verify the runfile, record the last known good
version, clear GPU processes, stop the services that hold the GPU, unload the modules, install,
load the modules, start the services again (on every exit path), verify.
"""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _state
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.imex_package import SERVICE as IMEX_SERVICE
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.imex_package import ImexPackage
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.node import DEFAULT_LOAD, DriverError, Node
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.package import FabricManagerPackage, PackageMethod
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.plan import check_options, diff, plan, predict_reboot
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.runfile import RunfileMethod
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.signing import ModuleSigning
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import CommandCounter, ToolError

INSTALL_ACTIONS = ("install", "upgrade", "downgrade", "reinstall")
_TOOL_DETAILS = ("cmd", "rc", "stdout", "stderr")


def _extra(exc):
    """The details of ``exc`` besides the command's (``node_state``, ``gpu_processes``...)."""
    return {key: value for key, value in exc.details.items() if key not in _TOOL_DETAILS}


class DriverManager:
    def __init__(self, module, node=None, method=None, fabricmanager=None, imex=None):
        self.module = module
        # Every option is checked before the first command runs (and before a tool is even looked up).
        self.options = check_options(module.params)
        self.counter = CommandCounter()
        self.node = node or Node(module, counter=self.counter)
        self.method = method or self._method()
        self.signing = ModuleSigning(module, self.options, self.node.host, self.counter)
        self._fm = fabricmanager
        self._imex = imex
        self.reboot_required = False
        self.notes = []

    def _method(self):
        if self.options["method"] == "package":
            return PackageMethod(self.module, self.options, self.counter)
        return RunfileMethod(self.module, self.options, self.counter)

    @property
    def fabricmanager(self):
        if self._fm is None:
            if isinstance(self.method, PackageMethod):
                self._fm = FabricManagerPackage(self.module, self.options, packages=self.method.packages)
            else:
                self._fm = FabricManagerPackage(self.module, self.options, self.counter)
        return self._fm

    @property
    def imex(self):
        if self._imex is None:
            packages = self.method.packages if isinstance(self.method, PackageMethod) else None
            self._imex = ImexPackage(self.module, self.options, self.counter, packages=packages)
        return self._imex

    # -- reading -------------------------------------------------------------
    def read_current(self):
        current = self._read_driver()
        current["imex"] = self._read_imex()
        return current

    def _read_imex(self):
        """``{"version", "held", "package", "present", "service"}`` of nvidia-imex; only ``present`` (False) where it is left alone."""
        option = self.options.get("imex") or "skip"
        if option == "skip" or (option == "auto" and not self.imex.present_on_node()):
            return {"version": None, "held": None, "package": None, "present": False, "service": None}
        found = self.imex.installed()
        found["present"] = True
        found["service"] = self.node.systemctl.is_active([IMEX_SERVICE])[IMEX_SERVICE] if self.node.systemctl.available else None
        return found

    def _read_driver(self):
        if isinstance(self.method, PackageMethod):
            self.method._installed = None
            found = self.method.installed()
            current = self.node.read(installed=found["driver"] or (None, None))
            current["driver"]["held"] = found["held"] if found["packages"] else None
            if not current["fabricmanager"]["version"] and found["fabricmanager"]:
                current["fabricmanager"] = {"installed": True, "version": found["fabricmanager"]}
            return current
        current = self.node.read()
        current["driver"]["held"] = None
        return current

    # -- the run ---------------------------------------------------------------
    def run(self):
        try:
            before = self.read_current()
        except (DriverError, ToolError) as exc:
            raise DriverError.from_tool(exc, f"{exc.msg}. Nothing was changed", **_extra(exc)) from exc
        the_plan = plan(before, self.options)
        if the_plan["imex"]["action"] in INSTALL_ACTIONS:
            # Read only: a tray whose IMEX cannot follow the driver is refused before anything changes (check mode too).
            self.imex.check_available(the_plan["imex"]["after"])
        # Read only: Secure Boot enforced without a key, or with a key not enrolled, is refused here (check mode too).
        signing = self.signing.check(the_plan)
        result = {"changed": the_plan["changed"], "plan": the_plan, "diff": diff(the_plan), "reboot_required": False, "before": before,
                  "module_signing": signing}
        if not the_plan["changed"] or self.module.check_mode:
            result["after"] = before
            result["reboot_required"] = bool(self.module.check_mode and predict_reboot(before, the_plan))
            result["commands_run"] = len(self.counter)
            return result

        self._prepare(the_plan)
        if getattr(self.method, "artifact", None):
            result["runfile"] = self.method.artifact  # what was verified and installed; URLs without their secrets
        self._record_start(before, the_plan)
        try:
            result["gpu_processes_killed"] = self._act(before, the_plan)
            after = self.read_current()
            self._verify(after, the_plan)
        except DriverError as exc:
            self._failed(the_plan, exc)
            raise
        except (ToolError, ValueError) as exc:
            # An unexpected tool failure or unreadable output (ParseError is a ValueError): still a failed
            # change in the history, and a message with what the node is left with, not a traceback.
            error = self._unexpected(exc)
            self._failed(the_plan, error)
            raise error from exc
        self._record_end(the_plan, "reboot_required" if self.reboot_required else "ok")
        result.update(after=after, reboot_required=self.reboot_required, commands_run=len(self.counter))
        if self.notes:
            result["warnings_text"] = self.notes
        return result

    def _failed(self, the_plan, exc):
        self._record_end(the_plan, "failed", exc.msg)
        exc.extra.setdefault("node_state", self._describe_node())

    @staticmethod
    def _unexpected(exc):
        if isinstance(exc, ToolError):
            return DriverError.from_tool(exc, f"changing the driver failed: {exc.msg}. See node_state for what the node is left with")
        return DriverError(f"changing the driver failed on output that does not read as expected: {exc}. See node_state for what the node is left with")

    def _prepare(self, the_plan):
        """Everything that can fail before the node is touched: runfile checksum, tools present."""
        if the_plan["driver"]["action"] in INSTALL_ACTIONS or the_plan["driver"]["action"] == "hold" or the_plan["driver"]["action"] == "remove":
            self.method.prepare()
        if the_plan["fabricmanager"]["action"] != "none" and not isinstance(self.method, PackageMethod):
            self.fabricmanager.prepare()

    # -- the node state file ----------------------------------------------------------------
    def _record_start(self, before, the_plan):
        path = self.options["state_file"]
        rollout = self.options.get("rollout_id")

        def change(doc):
            drv = before["driver"]
            working = drv["loaded_version"] and drv["nvidia_smi"] == "ok" and drv["loaded_version"] == drv["installed_version"]
            if self.options["record_last_known_good"] and working:
                _state.record_last_known_good(
                    doc, "driver", drv["loaded_version"], {"kernel_module": drv["flavor"], "method": self.options["method"]}
                )
                fm = before["fabricmanager"].get("version")
                if fm and fm == drv["loaded_version"]:
                    _state.record_last_known_good(doc, "fabricmanager", fm)
            _state.append_history(
                doc, "driver", the_plan["driver"]["action"], before=the_plan["driver"]["before"], after=the_plan["driver"]["after"],
                result="started", rollout_id=rollout, details={"fabricmanager": the_plan["fabricmanager"]["action"], "method": self.options["method"]},
            )
            return True

        try:
            _state.update(path, change)
        except _state.StateFileError as exc:
            raise DriverError(exc.msg + ". Nothing was changed") from exc

    def _record_end(self, the_plan, outcome, message=None):
        def change(doc):
            details = {"message": message[:500]} if message else None
            _state.append_history(
                doc, "driver", the_plan["driver"]["action"], before=the_plan["driver"]["before"], after=the_plan["driver"]["after"],
                result=outcome, rollout_id=self.options.get("rollout_id"), details=details,
            )
            return True

        try:
            _state.update(self.options["state_file"], change)
        except _state.StateFileError as exc:
            self.notes.append(exc.msg)

    # -- acting ---------------------------------------------------------------------------
    def _act(self, before, the_plan):
        drv_action = the_plan["driver"]["action"]
        fm_action = the_plan["fabricmanager"]["action"]
        if drv_action == "hold":
            self.method.hold(the_plan["driver"]["after"])
            drv_action = "none"
        imex_action = the_plan["imex"]["action"]
        if imex_action == "hold":
            self.imex.hold(the_plan["imex"]["after"])
            imex_action = "none"
        if drv_action == "none" and fm_action == "none" and imex_action == "none":
            return []
        killed = self.node.clear_gpu_processes(self.options["gpu_processes"], self.options["timeout"])
        services = dict(before.get("services") or {}, **{IMEX_SERVICE: (before.get("imex") or {}).get("service")})
        # IMEX first: it holds the GPUs' memory exported to the other trays of the NVLink domain.
        running = [u for u in (IMEX_SERVICE, "nvidia-dcgm", "nvidia-fabricmanager", "nvidia-persistenced") if services.get(u) == "active"]
        stopped = []  # what was stopped so far: started again on every exit path, a failure to stop included
        services_stopped = False
        succeeded = False
        unloaded = []
        reload_done = drv_action == "none"  # a fabric manager change alone keeps the modules
        try:
            for unit in running:
                self.node.stop([unit])
                stopped.append(unit)
            services_stopped = True
            if drv_action != "none":
                loaded = self.node.loaded_modules()
                unloaded, error = self.node.unload(loaded)
                if error is not None:
                    partly, unloaded = unloaded, []
                    self._unload_failed(error, partly, drv_action)
            self._install(the_plan, drv_action, fm_action)
            if drv_action not in ("none", "remove") and not self.reboot_required:
                error = self.node.load(unloaded or DEFAULT_LOAD)
                refused = self.signing.load_refused(error) if error is not None else None
                if refused:
                    # Not a reboot's matter: the new modules will never load with this signature. Fail: the role rolls back.
                    raise DriverError.from_tool(error, refused)
                if error is not None:
                    self.reboot_required = True
                    self.notes.append(f"the new kernel modules could not be loaded in place ({error.msg}): reboot the node")
            reload_done = True
            succeeded = True
        finally:
            if not reload_done and unloaded:
                # Something failed after the old modules were unloaded: put them back.
                self.node.load(unloaded)
            if services_stopped:
                self._restart(stopped, drv_action, the_plan, succeeded)
            else:
                # A unit would not stop: nothing else was touched, start again exactly what was stopped.
                self._note_start_failures(self.node.start(stopped))
        return killed

    def _unload_failed(self, error, unloaded, drv_action):
        if unloaded:
            self.node.load(unloaded)
        package = isinstance(self.method, PackageMethod) and drv_action != "remove"
        if package and self.options.get("busy_modules") == "reboot":
            # Chosen by the user: packages install beside the loaded modules, the new ones load at the next boot.
            self.reboot_required = True
            self.notes.append(f"the nvidia modules could not be unloaded ({error.msg}): the new driver is active after a reboot")
            return
        hint = " (method: package can install beside them with busy_modules: reboot, and the node must then reboot)" if package else ""
        raise DriverError.from_tool(
            error,
            f"cannot unload the nvidia kernel modules ({error.msg}); nothing was installed and the previous driver is still loaded. "
            "Something else holds the GPU (a process outside nvidia-smi's view, a display server): stop it, or reboot and retry" + hint,
        )

    def _install(self, the_plan, drv_action, fm_action):
        version = the_plan["driver"]["after"]
        kernel = self.node.host.kernel_release()
        package = isinstance(self.method, PackageMethod)
        fm_with_driver = package and fm_action in ("install", "upgrade", "downgrade")
        if drv_action in INSTALL_ACTIONS:
            with self.signing.applied(self.method):  # the key is on the node for this call only
                if package:
                    self.method.install(version, kernel, with_fabricmanager=fm_with_driver)
                else:
                    self.method.install(version, kernel)
        elif drv_action == "remove":
            self.method.remove()
        if fm_action == "remove":
            self._fm_call(self.fabricmanager.remove)
        elif fm_action != "none" and not (fm_with_driver and drv_action in INSTALL_ACTIONS):
            self._fm_call(self.fabricmanager.install, version)
        imex = the_plan["imex"]
        if imex["action"] in INSTALL_ACTIONS:
            self.imex.install(imex["after"], bool(self.options["allow_downgrade"]) or drv_action == "downgrade")
        elif imex["action"] == "remove" and imex["package"]:
            self.imex.remove(imex["package"])

    def _fm_call(self, func, *args):
        try:
            func(*args)
        except ToolError as exc:
            raise DriverError.from_tool(
                exc,
                f"the driver is changed but the fabric manager could not follow: {exc.msg}. NVLink does not work until "
                "nvidia-fabricmanager matches the driver: fix the package repository and rerun, or roll back",
            ) from exc

    def _restart(self, stopped, drv_action, the_plan, succeeded=False):
        if drv_action == "remove":
            return
        units = [u for u in ("nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm") if u in stopped]
        if IMEX_SERVICE in stopped and not succeeded:
            # The change failed and the previous driver is back: so is the IMEX that matches it. After a change IMEX
            # stays stopped until every tray of the NVLink domain runs the new driver: the role's verify starts it.
            units.append(IMEX_SERVICE)
        if self.options["persistenced"] and "nvidia-persistenced" not in units and drv_action != "none":
            units.insert(0, "nvidia-persistenced")
        if the_plan["fabricmanager"]["action"] in ("install", "upgrade", "downgrade") and "nvidia-fabricmanager" not in units:
            units.append("nvidia-fabricmanager")
        if self.reboot_required:
            # The old modules stay loaded until the reboot: bring back what runs on them (persistence,
            # DCGM monitoring), but not the fabric manager, which is already the new version.
            units = [u for u in units if u != "nvidia-fabricmanager"]
        self._note_start_failures(self.node.start(units), skip=("nvidia-fabricmanager",))  # the fabric manager is judged by _verify

    def _note_start_failures(self, failures, skip=()):
        for unit, message in failures.items():
            if unit not in skip:
                self.notes.append(f"{unit} did not start again: {message}")

    # -- after -------------------------------------------------------------------------------------
    def _verify(self, after, the_plan):
        drv = after["driver"]
        target = the_plan["driver"]["after"]
        if self.options["state"] == "present":
            if drv["installed_version"] != target:
                raise DriverError(
                    f"the installer finished but driver {drv['installed_version']} is installed, not {target}: see /var/log/nvidia-installer.log",
                    node_state=self._describe_node(after),
                )
            if not self.reboot_required and (drv["loaded_version"] != target or drv["nvidia_smi"] != "ok" or drv["nvidia_smi_version"] != target):
                raise DriverError(
                    f"driver {target} is installed but nvidia-smi answers {drv['nvidia_smi_version'] or drv['nvidia_smi']} "
                    f"(loaded module: {drv['loaded_version']}): reboot the node, then check dmesg for NVRM errors",
                    node_state=self._describe_node(after),
                )
            if self.signing.must_verify() and not self.reboot_required:
                problems = self.signing.verify()
                if problems:
                    raise DriverError(
                        f"driver {target} is loaded but its modules are not all signed by the module signing key: {'; '.join(problems)}. "
                        "Roll back, and check that the installer signed them (/var/log/nvidia-installer.log, DKMS's framework.conf)",
                        node_state=self._describe_node(after), module_signing=self.signing.summary(problems),
                    )
            if the_plan["fabricmanager"]["managed"] and the_plan["fabricmanager"]["after"]:
                fm = after["fabricmanager"].get("version")
                if fm != target:
                    raise DriverError(
                        f"driver {target} is installed but nvidia-fabricmanager is {fm}: install the matching fabric manager "
                        "(nvidia-fabricmanager-<branch> at the driver version) or set fabricmanager: skip",
                        node_state=self._describe_node(after),
                    )
                state = (after.get("services") or {}).get("nvidia-fabricmanager")
                if not self.reboot_required and after.get("nvswitch") and state != "active":
                    raise DriverError(
                        f"nvidia-fabricmanager {fm} is installed but the service is {state}: see journalctl -u nvidia-fabricmanager",
                        node_state=self._describe_node(after),
                    )
            if the_plan["imex"]["managed"] and the_plan["imex"]["after"] and (after.get("imex") or {}).get("version") != target:
                raise DriverError(
                    f"driver {target} is installed but nvidia-imex is {(after.get('imex') or {}).get('version')}: IMEX refuses to start "
                    f"at another version. Install nvidia-imex at {target} (held) and rerun, or set imex: skip",
                    node_state=self._describe_node(after),
                )

    def _describe_node(self, current=None):
        try:
            current = current or self.read_current()
        except (DriverError, ToolError, ValueError) as exc:  # ValueError: a parser's ParseError
            return {"error": f"could not read the node after the failure: {exc}"}
        drv = current["driver"]
        return {
            "driver_installed": drv["installed_version"],
            "driver_loaded": drv["loaded_version"],
            "nvidia_smi": drv["nvidia_smi"],
            "fabricmanager": current["fabricmanager"].get("version"),
            "imex": (current.get("imex") or {}).get("version"),
            "services": current.get("services"),
            "reboot_required": self.reboot_required,
        }


__all__ = ["DriverManager"]
