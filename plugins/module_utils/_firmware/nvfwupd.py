# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""GPU / HGX baseboard firmware through NVIDIA's nvfwupd and the node's BMC (private: may change without notice).

Read (``show_version -p PKG -s -j``, ``force_update status -j``), plan, act (``update_fw -b -j``, then
``show_update_progress -j`` until the task ends), read again. The BMC's credentials reach nvfwupd only
through a 0600 ``-c`` config file in a private 0700 folder (also nvfwupd's working folder: its log lands
there) inside the module's Ansible tmp dir (``AnsibleModule.tmpdir``): removed on every exit path, and by
Ansible with that tmp dir when the module process is killed. A downgrade runs between ``force_update
enable`` and ``force_update disable``; a record of it is written before the enable (force_update_record),
the disable runs on every exit path and is checked with ``force_update status``, and every run closes a
ForceUpdate that a killed earlier run left on. nvfwupd checks no BMC certificate (``verify=False``): the BMC's is
checked with the collection's own client (bmc_certificate) before the config file is written.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import ipaddress
import json
import math
import os
import re
import shutil
import stat
import tempfile
import time

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _artifact, _state
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._fileio import O_CLOEXEC
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware import bmc_certificate, force_update_record, nvfwupd_plan
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import nvfwupd as parsers
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.ids import rollout_id_problem  # the rollout's own rule
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import Nvfwupd, ToolError, check_timeout

COMPONENT = "gpu_firmware"
FLASH_ACTIONS = ("update", "downgrade", "replace_staged")
SERVERTYPES = ("HGX", "DGX", "HGXB100", "GB200", "GB300", "MGX-NVL")
STAGING_SERVERTYPES = ("GB200", "GB300")  # nvfwupd update_fw -u (StageOnly): its GB200 target only
FORCE_UPDATE_TIMEOUT = 120  # force_update disable runs after the update's deadline too
_HOSTNAME = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
_AP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# What reading a tool's output can raise besides a ParseError: json.loads raises RecursionError on deep nesting.
UNREADABLE = (ValueError, UnicodeError, RecursionError)
INVENTORY_URI = "/redfish/v1/UpdateService/FirmwareInventory/"


class NvfwupdError(GpufleetError):
    """nvfwupd refused, could not reach the BMC, or the update failed."""


class UnreadableOutput(NvfwupdError):
    """nvfwupd printed what cannot be read (the caller adds what to do next)."""


def check_rollout_id(value, option="rollout_id"):
    """``value`` when it is a rollout id (the rollout modules' rule: no newline can reach a flash or the state file)."""
    problem = rollout_id_problem(value, option, required=False)
    if problem:
        raise NvfwupdError(problem, option=option)
    return value


def _check_options(params):
    """Every option, before the first command. Returns the BMC dict with defaults filled in."""
    bmc = params.get("bmc") or {}
    state = params["state"]
    if state in ("present", "query"):
        address = bmc.get("address") or ""
        try:
            ipaddress.ip_address(address)
        except ValueError:
            if not _HOSTNAME.fullmatch(address):
                raise NvfwupdError(f"bmc.address {address!r} is not an IP address or a host name: give the BMC's management address") from None
        for key in ("user", "password"):
            value = bmc.get(key)
            if not value or _CONTROL.search(value):
                option = "bmc_password" if key == "password" else f"bmc.{key}"  # the password: the module's top-level no_log option
                raise NvfwupdError(f"{option} must be a non-empty string without control characters (newlines, tabs): give the BMC account's {key}")
        port = bmc.get("port")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise NvfwupdError("bmc.port must be a TCP port from 1 to 65535 (its value is not shown, in case it is a secret): check bmc_port")
    if state == "present" and not params.get("package"):
        raise NvfwupdError("package is required with state=present: give the path of the .fwpkg file")
    package = params.get("package")
    if package:
        if not os.path.isabs(package):
            raise NvfwupdError(f"package {package!r} must be an absolute path (on the host that runs nvfwupd)")
        if not params.get("checksum"):
            raise NvfwupdError("checksum is required with package: give sha256:<64 hex digits> of the .fwpkg (invariant: verified before use)")
        _artifact.parse_checksum(params["checksum"], "checksum")
    for target in params.get("targets") or []:
        if not _AP_NAME.fullmatch(target):
            raise NvfwupdError(f"targets entry {target!r} is not a firmware inventory name (for example HGX_FW_GPU_SXM_1)")
    if params.get("stage_only") and bmc.get("servertype") not in STAGING_SERVERTYPES:
        raise NvfwupdError(f"stage_only needs bmc.servertype {' or '.join(STAGING_SERVERTYPES)} (a GB200 / GB300 compute tray), "
                           f"not {bmc.get('servertype')}: other platforms have no staged update; leave stage_only false")
    check_timeout(params["timeout"], "timeout")
    interval = params["poll_interval"]
    if not 1 <= interval <= 300:
        raise NvfwupdError(f"poll_interval must be from 1 to 300 seconds, got {interval}")
    path, interpreter = params.get("nvfwupd_path"), params.get("nvfwupd_interpreter")
    if state in ("present", "query"):
        if interpreter and not path:
            raise NvfwupdError("nvfwupd_interpreter needs nvfwupd_path: the nvfwupd.py script that the interpreter runs")
        if path and not os.path.isfile(path):
            raise NvfwupdError(f"nvfwupd_path {path} is not a file on this host: install nvfwupd or correct the path")
        if path and path.endswith(".py") and not interpreter:
            raise NvfwupdError(f"nvfwupd_path {path} is a Python script: set nvfwupd_interpreter to the python of the virtualenv that holds its requirements")
        if interpreter and not os.access(interpreter, os.X_OK):
            raise NvfwupdError(f"nvfwupd_interpreter {interpreter} is not an executable file on this host")
    return bmc


def _config_document(bmc, targets, stage_only=False):
    doc = {
        "TargetPlatform": bmc["servertype"],
        "BMC_IP": bmc["address"],
        "RF_USERNAME": bmc["user"],
        "RF_PASSWORD": bmc["password"],
        "SANITIZE_LOG": True,
    }
    if bmc["port"] != 443:
        doc["TUNNEL_TCP_PORT"] = str(bmc["port"])
    if targets:
        # Multipart: the targets go with this one update (HttpPushUriTargets would stay on the BMC).
        doc["FwUpdateMethod"] = "MultipartHttpPushUri"
        doc["UpdateParametersTargets"] = [INVENTORY_URI + target for target in targets]
        if stage_only:
            # nvfwupd's -u adds StageOnly on its GB200 target's own path only; the config's multipart path takes the
            # update parameters from MultipartOptions (the Targets are added to them).
            doc["MultipartOptions"] = {"Oem": {"Nvidia": {"UpdateOption": "StageOnly"}}}
    return doc


CONFIG_PREFIX = "gpufleet-nvfwupd-"
_CONFIG_LOCK = "lock"  # held (flock) by the run that uses the folder: a folder whose lock is free is an orphan


def remove_orphaned_configs(tmpdir):
    """Remove config folders that killed runs left in Ansible tmp dirs beside ``tmpdir``; their names.

    Ansible removes a task's tmp dir after the module, even a killed one; with pipelining the module makes its own
    (``ansible-moduletmp-*``, removed only at a normal exit), and a killed controller removes nothing. A folder is
    removed only when it is this user's, no link, and no live run holds its lock.
    """
    removed = []
    pattern = os.path.join(glob.escape(os.path.dirname(os.path.abspath(tmpdir))), "ansible-*tmp-*", CONFIG_PREFIX + "*")
    for folder in glob.glob(pattern):
        try:
            info = os.lstat(folder)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            fd = os.open(os.path.join(folder, _CONFIG_LOCK), os.O_RDONLY | os.O_NOFOLLOW | O_CLOEXEC)
        except OSError:
            continue  # no lock file yet: a folder being made right now
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a live run's
        finally:
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


@contextlib.contextmanager
def private_config(bmc, targets, tmpdir=None, stage_only=False):
    """A 0700 folder (in ``tmpdir``) holding the 0600 config file; yields ``(folder, config path)``; removed on every exit path.

    The folder's lock file stays locked while it is in use (see remove_orphaned_configs).
    """
    folder = tempfile.mkdtemp(prefix=CONFIG_PREFIX, dir=tmpdir)
    lock = None
    try:
        lock = os.open(os.path.join(folder, _CONFIG_LOCK), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | O_CLOEXEC, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = os.path.join(folder, "target.yaml")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(_config_document(bmc, targets, stage_only), handle, ensure_ascii=False)  # JSON is YAML: no quoting to get wrong
        yield folder, path
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if lock is not None:
            os.close(lock)


def _short(value):
    """A JSON value of tool output as short text (whatever its type or depth)."""
    if isinstance(value, str):
        return value[:500]
    try:
        return json.dumps(value)[:500]
    except UNREADABLE:
        return f"(a {type(value).__name__} too deep to show)"


def _json_error(text, what, bmc):
    """Raise when nvfwupd's -j document reports an error (it exits 0 even when it cannot connect).

    Returns the document, or None when the output is not one JSON document (the parser judges it);
    ``UnreadableOutput`` when it is nested too deeply to read.
    """
    try:
        document = json.loads(text)
    except RecursionError:
        raise UnreadableOutput(f"nvfwupd {what} printed JSON nested too deeply to read") from None
    except UNREADABLE:
        return None
    if isinstance(document, dict) and document.get("Error Code") not in (None, 0):
        errors = document.get("Error")
        errors = [_short(e) for e in (errors if isinstance(errors, list) else [errors] if errors else [])]
        code = document.get("Error Code")
        code = code if isinstance(code, int) else _short(code)
        raise NvfwupdError(
            f"nvfwupd {what} failed (Error Code {code}) against the BMC at {bmc['address']}:{bmc['port']}: "
            f"{'; '.join(errors)[:500] or 'no error text'}. Check that the BMC answers over HTTPS there and that "
            "bmc.user and bmc.password are its account",
            error_code=code,
            errors=errors,
        )
    return document


class FirmwareUpdater:
    def __init__(self, module, sleep=time.sleep, clock=time.monotonic):
        self.module = module
        self.params = module.params
        self.sleep = sleep
        self.clock = clock
        self.commands = 0
        self.tool = None
        self.config = None
        # The verified private copy of the package (_artifact.private_copy) that nvfwupd reads; the operator's path
        # (params["package"]) is what results and records name.
        self.package = None
        # found_on: what force_update status said at the start; stale_record: a killed run of ours had turned it on;
        # turned_off: that ForceUpdate was turned off (and checked) by this run (None: not needed, or check mode).
        self.force_update = {"enabled": False, "disabled_after": None, "found_on": None, "stale_record": False, "turned_off": None}
        self.record = None  # force_update_record.ForceUpdateRecord of the BMC, from the status read on
        self.task_ids = []
        # The BMC task's last known status: None before update_fw, "unknown" from when it runs until nvfwupd's answer is read.
        self.task_result = None

    @property
    def tray(self):
        """A GB200 / GB300 compute tray (bmc.servertype): its every component activates with the tray's AC power cycle."""
        return (self.params.get("bmc") or {}).get("servertype") in STAGING_SERVERTYPES

    # -- commands -------------------------------------------------------------------------------------

    def _run(self, args, what, timeout=None):
        limit = timeout or max(1, math.ceil(self.deadline - self.clock()))
        self.commands += 1
        try:
            _rc, out, _err = self.tool.run(["-c", self.config, *args], timeout=limit)
        except ToolError as exc:
            if exc.rc in (124, 137):
                exc.msg = (
                    f"nvfwupd {what} did not finish within {limit} s: the BMC at {self.bmc['address']}:{self.bmc['port']} "
                    "does not answer (check that it is up, or raise timeout)"
                )
            raise
        try:
            _json_error(out, what, self.bmc)
        except UnreadableOutput as exc:
            raise self._unreadable(str(exc), out, what) from None
        return out

    def _next_step(self, what):
        """What the user does after nvfwupd ``what`` printed what cannot be read, from what this run knows."""
        if self.task_result in ("unknown", "running"):
            return (
                f"an update was started on the BMC at {self.bmc['address']} and its outcome is unknown: follow it with "
                f"nvfwupd show_update_progress -i {' '.join(self.task_ids) or 'TASK_ID (see the BMC task list)'} and read the firmware "
                "with nvfwupd show_version before running this again"
            )
        if self.task_result is not None:
            return f"the BMC's update task ended {self.task_result}: read the firmware with nvfwupd show_version before running this again"
        wanted = ", and run this again once it lists each component once with readable versions" if what == "show_version" else ""
        return (
            f"nothing was flashed. See what nvfwupd {what} -j prints against the BMC at {self.bmc['address']}{wanted} "
            "(and check that nvfwupd_path is NVIDIA's nvfwupd)"
        )

    def _unreadable(self, why, text, what):
        return NvfwupdError(f"{why}: {self._next_step(what)}", stdout=text[-4000:])

    def _parse(self, parser, text, what):
        """``parser(text)``; output it cannot read (deep nesting included) is an NvfwupdError that says what to do."""
        try:
            return parser(text)
        except UNREADABLE as exc:
            if isinstance(exc, ParseError):
                why = str(exc)  # it names the tool and what was missing
            elif isinstance(exc, RecursionError):
                why = f"nvfwupd {what} printed JSON nested too deeply to read"
            else:
                why = f"nvfwupd {what} printed output that cannot be read ({str(exc)[:200]})"
            raise self._unreadable(why, text, what) from None

    def _show_version(self):
        args = ["show_version", "-s", "-j"]
        if self.params.get("package"):
            args[1:1] = ["-p", self.package]
        return self._parse(parsers.parse_show_version_full, self._run(args, "show_version"), "show_version")

    def _force_update(self, action):
        return self._run(["force_update", action, "-j"], f"force_update {action}", timeout=FORCE_UPDATE_TIMEOUT)

    def _force_update_state(self):
        text = self._force_update("status")
        document = self._parse(json.loads, text, "force_update status")
        outputs = document.get("Output") if isinstance(document, dict) else None
        options = [o.get("HttpPushUriOptions") for o in outputs if isinstance(o, dict)] if isinstance(outputs, list) else []
        values = [o.get("ForceUpdate") for o in options if isinstance(o, dict)]
        if len(values) != 1 or not isinstance(values[0], bool):
            raise NvfwupdError("nvfwupd force_update status -j did not report HttpPushUriOptions.ForceUpdate as true or false", stdout=text[-4000:])
        return values[0]

    # -- the update ----------------------------------------------------------------------------------

    def _flash(self):
        self.task_result = "unknown"  # from here on the BMC may be flashing
        try:
            staged = ["-u"] if self.params.get("stage_only") else []
            out = self._run(["update_fw", "-p", self.package, *staged, "-y", "-b", "-j"], "update_fw")
        except NvfwupdError as exc:
            if exc.details.get("error_code") is not None:
                self.task_result = "failed"  # nvfwupd's own Error Code: it says the update failed
            raise
        started = self._parse(parsers.parse_update_fw, out, "update_fw")
        task_ids = [t["task_id"] for t in started["tasks"] if t["task_id"] is not None]
        if started["status"] == "failed" or not task_ids:
            self.task_result = "failed"
            raise NvfwupdError(f"nvfwupd update_fw started no update task: {'; '.join(started['errors']) or started['status']}", update=started)
        self.task_ids = task_ids
        while True:
            out = self._run(["show_update_progress", "-i", *task_ids, "-j"], "show_update_progress")
            progress = self._parse(parsers.parse_update_progress, out, "show_update_progress")
            self.task_result = progress["status"]
            if progress["status"] != "running":
                return progress
            if self.clock() + self.params["poll_interval"] >= self.deadline:
                raise NvfwupdError(
                    f"the firmware update (task {', '.join(task_ids)}) was still running after {self.params['timeout']} s: "
                    "the BMC goes on flashing; follow it with nvfwupd show_update_progress and raise timeout",
                    task_ids=task_ids,
                    progress=progress,
                )
            self.sleep(self.params["poll_interval"])

    def _disable_force_update(self):
        """``force_update disable``, checked with ``force_update status``: None when it is off, else why not."""
        try:
            self._force_update("disable")
            if self._force_update_state() is not False:
                return "force_update status still says true after force_update disable"
        except (GpufleetError, ValueError) as exc:
            return str(exc)
        return None

    def _close_earlier_force_update(self, to_flash):
        """Every run reads ``force_update status``. A ForceUpdate that a killed run of ours left on (its record says so)
        is turned off; one that no record of ours explains is someone else's: reported, and no flash runs through it.
        True when the BMC changes (or would, in check mode)."""
        where = f"{self.bmc['address']}:{self.bmc['port']}"
        self.record = force_update_record.ForceUpdateRecord(self.bmc["address"], self.bmc["port"])
        try:
            stale = self.record.read()
        except force_update_record.RecordBusy:
            raise NvfwupdError(
                f"another run is between force_update enable and disable on the BMC at {where} now (it holds {self.record.path}): "
                "nothing was done. Let it finish, then run this again"
            ) from None
        found_on = self._force_update_state()
        self.force_update.update(found_on=found_on, stale_record=stale is not None)
        action = nvfwupd_plan.force_update_action(found_on, stale is not None, to_flash)
        if action == "forget" and not self.module.check_mode:
            self.record.remove()
        elif action == "turn_off":
            if self.module.check_mode:
                return True
            failure = self._disable_force_update()
            self.force_update["turned_off"] = failure is None
            if failure:
                raise NvfwupdError(
                    f"ForceUpdate was left on at the BMC at {where} by an earlier run that was stopped (since {str(stale.get('since', 'unknown'))[:40]}) "
                    f"and could not be turned off: {failure}. Nothing was flashed. Run nvfwupd force_update disable against it "
                    "before any other update",
                    force_update=self.force_update,
                )
            self.record.remove()
            return True
        elif action in ("refuse", "report"):
            why = (
                f"ForceUpdate is on at the BMC at {where} and no record of this collection says a run of it turned it on: another "
                "update (a manual downgrade?) may be under way"
            )
            if action == "refuse":
                raise NvfwupdError(
                    f"{why}, and an update now would flash every component of the package again, older versions included. "
                    "Nothing was flashed. Once nobody updates this BMC, run nvfwupd force_update disable against it, then run this again",
                    force_update=self.force_update,
                )
            self.module.warn(f"{why}. Nothing needed flashing; turn it off with nvfwupd force_update disable once nobody updates this BMC")
        return False

    def _flash_with_force(self):
        # Recorded (fsynced, locked) before the enable: a run killed from here on leaves the record that the next run acts on.
        self.record.write(bmc=f"{self.bmc['address']}:{self.bmc['port']}", rollout_id=self.params.get("rollout_id"), package=self.params["package"])
        self.force_update["enabled"] = True
        try:
            # Inside the try: an enable that the tool reports as failed may still have reached the BMC.
            self._force_update("enable")
            return self._flash()
        finally:
            # Every exit path: a BMC left with ForceUpdate on would let anyone's next update downgrade.
            failure = self._disable_force_update()
            self.force_update["disabled_after"] = failure is None
            if failure:
                self.record.release()  # kept: the next run turns it off
                self.force_update_failure = (
                    f"ForceUpdate could not be turned off again on the BMC at {self.bmc['address']}: {failure}. "
                    "Run nvfwupd force_update disable against it before any other update"
                )
            else:
                self.record.remove()

    def _outcome(self, rows, progress, after_rows):
        after = {row["component"]: row for row in after_rows}
        results = {r["target"]: r for r in (progress or {}).get("results", [])}
        finished, unfinished = [], []
        for row in rows:
            if row["action"] not in FLASH_ACTIONS:
                continue
            now = after.get(row["component"], {})
            result = results.get(row["component"], {})
            if row["action"] == "replace_staged":
                flashed = now.get("staged") in (None, row["package"]) and result.get("status") != "failed"
            else:
                flashed = row["package"] in (now.get("installed"), now.get("staged")) and result.get("status") != "failed"
            (finished if flashed else unfinished).append(row["component"])
        return finished, unfinished

    def _record(self, action, result, before, after, finished, unfinished, package_version):
        return {
            "component": COMPONENT,
            "action": action,
            "result": result,
            "before": before,
            "after": after,
            "package_version": package_version,
            "package": self.params.get("package"),
            "checksum": self.params.get("checksum"),
            "finished": finished,
            "unfinished": unfinished,
            "rollout_id": self.params.get("rollout_id"),
            "task_ids": list(self.task_ids),
            "task_result": self.task_result,
            "force_update": dict(self.force_update),  # into the node's history: whether the BMC's ForceUpdate was (left) on
        }

    def run(self):
        check_rollout_id(self.params.get("rollout_id"))  # before anything: it goes into state_record and the state file
        if self.params["state"] == "record":
            return record(self.params, self.module.check_mode)
        self.bmc = _check_options(self.params)
        if self.params.get("package"):
            # Verified and then flashed as one private copy: a package in a folder a job user can write cannot be
            # swapped between the check and update_fw.
            self.package = _artifact.private_copy(self.params["package"], self.params["checksum"], self.module.tmpdir)[0]
        self.deadline = self.clock() + self.params["timeout"]
        self.tool = Nvfwupd(self.module, path=self.params.get("nvfwupd_path"), interpreter=self.params.get("nvfwupd_interpreter"))
        if not self.tool.available:
            raise NvfwupdError("nvfwupd was not found on this host: install it, or set nvfwupd_path (and nvfwupd_interpreter for nvfwupd.py)")
        self._check_bmc_certificate()
        here = os.getcwd()
        # In the module's Ansible tmp dir: removed by Ansible with it even when this process is killed (SIGKILL).
        tmpdir = self.module.tmpdir
        remove_orphaned_configs(tmpdir)
        with private_config(self.bmc, self.params.get("targets"), tmpdir, bool(self.params.get("stage_only"))) as (folder, self.config):
            os.chdir(folder)  # nvfwupd writes nvfwupd_log.txt into its working folder
            try:
                return self._run_with_config()
            finally:
                os.chdir(here)
                if self.record is not None:
                    self.record.release()

    def _check_bmc_certificate(self):
        """Before the config file holds the password: nvfwupd checks no certificate (verify=False), so the collection does."""
        address, port = self.bmc["address"], self.bmc["port"]
        if not self.bmc.get("validate_certs", True):
            self.module.warn(bmc_certificate.insecure_warning(bmc_certificate.where(address, port)))
            return
        left = max(1, math.ceil(self.deadline - self.clock()))
        bmc_certificate.check(address, port, self.bmc.get("ca_path"), timeout=min(bmc_certificate.CHECK_TIMEOUT, left))

    def _run_with_config(self):
        system = self._show_version()
        result = {"changed": False, "commands_run": 0, "system": {k: v for k, v in system["system"].items() if k != "bmc_ip"}}
        if self.params["state"] == "query":
            rows = nvfwupd_plan.plan(system["components"], None, self.tray) if self.params.get("package") else []
            result.update(components=system["components"], plan=rows, activation_required=nvfwupd_plan.activations([r for r in rows if r["action"] != "none"]))
            result["commands_run"] = self.commands
            return result
        rows = nvfwupd_plan.plan(system["components"], self.params.get("targets"), self.tray)
        packages = system["system"].get("packages") or []
        package_version = packages[0] if len(packages) == 1 else None
        to_flash = [r for r in rows if r["action"] in FLASH_ACTIONS]
        downgrades = [r for r in to_flash if r["action"] == "downgrade"]
        needs_force = downgrades or [r for r in to_flash if r["action"] == "replace_staged"]
        before = nvfwupd_plan.versions(rows, "installed")
        pending = [r for r in rows if r["action"] != "none"]
        door_closed = self._close_earlier_force_update(bool(to_flash))
        result.update(
            plan=rows,
            package_version=package_version,
            before=before,
            activation_required=nvfwupd_plan.activations(pending),
            diff={"before": {"installed": before}, "after": {"installed": before, "staged": {r["component"]: r["package"] for r in to_flash}}},
            changed=bool(to_flash) or door_closed,
            task_ids=[],
            force_update=self.force_update,
        )
        if downgrades and not self.params["allow_downgrade"]:
            raise NvfwupdError(
                "the package would downgrade "
                + ", ".join(f"{r['component']} ({r['installed']} -> {r['package']})" for r in downgrades)
                + ": nothing was flashed. Set allow_downgrade: true to downgrade (for a rollback), or give a newer package",
                plan=rows,
            )
        if not to_flash or self.module.check_mode:
            result["after"] = before
            planned = "none" if not to_flash else ("downgrade" if downgrades else "update")
            result["state_record"] = self._record(planned, "planned" if to_flash else "ok", before, before, [], [], package_version)
            result["commands_run"] = self.commands
            return result
        action = "downgrade" if downgrades else "update"
        self.task_ids, self.task_result, progress, failure, self.force_update_failure = [], None, None, None, None
        try:
            progress = self._flash_with_force() if needs_force else self._flash()
        except (GpufleetError, ValueError) as exc:
            failure = exc
        after_rows = []
        try:
            # the plan inside: a target that the read after the flash no longer lists is a failure with the record too
            after_rows = nvfwupd_plan.plan(self._show_version()["components"], self.params.get("targets"), self.tray)
        except (GpufleetError, ValueError) as exc:
            failure = failure or exc
        after_view = {r["component"]: {"installed": r["installed"], "staged": r["staged"]} for r in after_rows}
        finished, unfinished = self._outcome(rows, progress, [{"component": k, **v} for k, v in after_view.items()])
        if progress is not None and progress["status"] == "failed" and not unfinished:
            unfinished = [r["component"] for r in to_flash if r["component"] not in finished] or ["(the task failed)"]
        after = {k: v["installed"] for k, v in after_view.items()} or None
        outcome = "ok" if not (failure or unfinished or self.force_update_failure) else ("partial" if finished else "failed")
        done_rows = [r for r in rows if r["component"] in finished]
        result.update(
            after=after,
            staged={k: v["staged"] for k, v in after_view.items()},
            task_ids=self.task_ids,
            finished=finished,
            unfinished=unfinished,
            progress=progress,
            activation_required=nvfwupd_plan.activations(done_rows + [r for r in rows if r["action"] == "activate"]),
            state_record=self._record(action, outcome, before, after, finished, unfinished, package_version),
        )
        result["diff"]["after"] = {"installed": after, "staged": result["staged"]}
        result["commands_run"] = self.commands
        if outcome != "ok":
            reasons = []
            if failure:
                reasons.append(str(failure))
            if progress is not None and progress["status"] == "failed":
                failed = [r["target"] for r in progress["results"] if r["status"] == "failed"]
                reasons.append(f"the BMC's update task ended failed{' at ' + ', '.join(failed) if failed else ''}")
            if self.force_update_failure:
                reasons.append(self.force_update_failure)
            msg = (
                f"the firmware update {'partly ' if finished else ''}failed: finished {', '.join(finished) or 'none'}; "
                f"not finished {', '.join(unfinished) or 'none'}. " + " ".join(reasons)
            )
            raise NvfwupdError(msg, **{k: v for k, v in result.items() if k != "diff"})
        return result


# -- state: record (on the node) ----------------------------------------------------------------------

RECORD_RESULTS = ("ok", "partial", "failed", "planned")
RECORD_ACTIONS = ("none", "update", "downgrade")


def record(params, check_mode=False):
    """Write a ``state_record`` of an earlier call into the node state file (locked).

    A history entry for every update or downgrade; the package becomes the last known good
    ``gpu_firmware`` when every component finished, keeping the one before as ``previous`` (what a
    rollback of this flash goes back to). An ``action: none`` record changes nothing.
    """
    entry = params.get("record")
    if not isinstance(entry, dict) or entry.get("component") != COMPONENT:
        raise NvfwupdError("record must be the state_record that an earlier nvfwupd call returned (component gpu_firmware)")
    if entry.get("action") not in RECORD_ACTIONS or entry.get("result") not in RECORD_RESULTS:
        raise NvfwupdError(f"record.action must be one of {', '.join(RECORD_ACTIONS)} and record.result one of {', '.join(RECORD_RESULTS)}")
    check_rollout_id(entry.get("rollout_id"), "record.rollout_id")
    if entry["action"] == "none" or entry["result"] == "planned":
        return {"changed": False, "state_file": params["state_file"]}
    if check_mode:
        return {"changed": True, "state_file": params["state_file"]}

    def change(doc):
        known = _state.last_known_good(doc, COMPONENT) or {}
        _state.append_history(
            doc,
            COMPONENT,
            entry["action"],
            before=known.get("version"),
            after=entry.get("package_version") if entry["result"] == "ok" else None,
            result=entry["result"],
            rollout_id=entry.get("rollout_id"),
            details={
                "finished": entry.get("finished") or [],
                "unfinished": entry.get("unfinished") or [],
                "before": entry.get("before"),
                "after": entry.get("after"),
                # which BMC task flashed, and its last known status ("unknown": started, outcome not read)
                "task_ids": entry.get("task_ids") or [],
                "task_result": entry.get("task_result"),
                "force_update": entry.get("force_update") if isinstance(entry.get("force_update"), dict) else None,
            },
        )
        if entry["result"] == "ok" and entry.get("package_version"):
            details = {"package": entry.get("package"), "checksum": entry.get("checksum")}
            if known and known.get("version") != entry["package_version"]:
                # the package that worked before: what a rollback of this flash goes back to
                details["previous"] = {k: known.get(k) for k in ("version", "package", "checksum")}
            elif known.get("previous"):
                details["previous"] = known["previous"]
            _state.record_last_known_good(doc, COMPONENT, entry["package_version"], details)
        return True

    _changed, _doc = _state.update(params["state_file"], change, purpose="nvfwupd: recording a firmware update")
    return {"changed": True, "state_file": params["state_file"]}
