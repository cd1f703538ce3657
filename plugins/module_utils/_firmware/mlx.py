# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The mlxfw module's logic: ConnectX / BlueField firmware by PSID (private: may change without notice).

Read, plan, act, re-read. Every option is checked and every image's sha256 verified before the first
command, on a private copy of the image (``_artifact.private_copy``) that every later command reads and
burns: the file at the operator's path may be swapped after the check, the copy cannot. Then each image
is read (``flint -i IMG q``: PSID, version) and verified (``flint -i IMG v``), the devices are queried
(``mlxfwmanager --query --query-format XML``, or ``flint -d DEV q`` per named device where MFT is
absent) and each device gets the image of its PSID. A downgrade needs ``allow_downgrade``; a device
without an image of its PSID fails the run unless ``unmatched=skip``; a device the tool cannot open is
reported with its status and never flashed. The new firmware is activated with ``mlxfwreset`` at level
3 when the device supports it, else the result says a reboot is needed.
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _state
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._artifact import ArtifactError, parse_checksum, private_copy
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import mlx as parse
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.ids import rollout_id_problem
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._tools import (
    CommandCounter,
    Flint,
    MlxFwManager,
    Mlxfwreset,
    Mstflint,
    ToolError,
    check_timeout,
)

COMPONENT = "nic_firmware"
RESETS = ("none", "mlxfwreset", "reboot")
UNMATCHED = ("fail", "skip")
ACTIONS = ("upgrade", "downgrade", "activate")
# mlxfwreset levels: 3 restarts the driver and resets the PCI device (the new firmware runs after it);
# 4 and 5 are a warm and a cold reboot, which a module must not do under its own SSH session.
RESET_LEVEL = 3
_PCI = re.compile(r"(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_MST = re.compile(r"/dev/mst/[A-Za-z0-9_.:-]{1,64}")
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,254}")
_VERSION = re.compile(r"[0-9]{1,5}(?:\.[0-9]{1,6}){1,3}")


class MlxFwError(GpufleetError):
    """A refusal or failure of the mlxfw module; ``details`` go to ``fail_json``."""


def _version_key(version, where):
    if not isinstance(version, str) or _VERSION.fullmatch(version) is None:
        raise MlxFwError(f"{where}: {version!r} is not a firmware version (for example 28.43.1014): the tool's output may be cut short")
    return tuple(int(part) for part in version.split("."))


# -- options ---------------------------------------------------------------------------------------------


def check_options(params):
    """The options, checked and normalised; MlxFwError naming the option otherwise. Runs no command."""
    image, image_dir, listed = params.get("image"), params.get("image_dir"), params.get("images")
    if sum(1 for given in (image, image_dir, listed) if given) != 1:
        raise MlxFwError(
            "give exactly one of image (one firmware image file), image_dir (a folder of images, with checksums) and images (a list of path and checksum)"
        )
    images = []
    if image:
        if not os.path.isabs(image):
            raise MlxFwError(f"image must be an absolute path on the node, got {image!r}")
        if params.get("checksums"):
            raise MlxFwError("checksums goes with image_dir; with image give checksum")
        if not params.get("checksum"):
            raise MlxFwError("checksum is required with image: the sha256 of the image (sha256:<hex> or the 64 hex digits)")
        images.append({"path": image, "checksum": parse_checksum(params["checksum"], "checksum")})
    elif image_dir:
        if not os.path.isabs(image_dir):
            raise MlxFwError(f"image_dir must be an absolute path on the node, got {image_dir!r}")
        if params.get("checksum"):
            raise MlxFwError("checksum goes with image; with image_dir give checksums (file name: sha256 for each image to use)")
        checksums = params.get("checksums")
        if not checksums:
            raise MlxFwError("checksums is required with image_dir: a dict of image file name -> sha256; only the images named there are used")
        for name in sorted(checksums):
            if not isinstance(name, str) or _FILE_NAME.fullmatch(name) is None or name in (".", ".."):
                raise MlxFwError(f"checksums: {name!r} is not a plain file name in image_dir (letters, digits and . _ + -, no /)")
            images.append({"path": os.path.join(image_dir, name), "checksum": parse_checksum(checksums[name], f"checksums[{name}]")})
    else:
        if params.get("checksum") or params.get("checksums"):
            raise MlxFwError("images carries each image's checksum: leave checksum and checksums out")
        for number, entry in enumerate(listed):
            path = entry.get("path")
            if not isinstance(path, str) or not os.path.isabs(path):
                raise MlxFwError(f"images[{number}].path must be an absolute path on the node, got {path!r}")
            if path in (known["path"] for known in images):
                raise MlxFwError(f"images[{number}].path {path} is listed twice")
            images.append({"path": path, "checksum": parse_checksum(entry.get("checksum"), f"images[{number}].checksum")})
    devices = params.get("devices") or []
    for device in devices:
        if not isinstance(device, str) or not (_PCI.fullmatch(device) or _MST.fullmatch(device)):
            raise MlxFwError(f"devices: {device!r} is neither a PCI address (0000:17:00.0 or 17:00.0) nor an MST device (/dev/mst/mt4129_pciconf0)")
    if params.get("reset") not in RESETS:
        raise MlxFwError(f"reset must be one of {', '.join(RESETS)}, got {params.get('reset')!r}")
    if params.get("unmatched") not in UNMATCHED:
        raise MlxFwError(f"unmatched must be one of {', '.join(UNMATCHED)}, got {params.get('unmatched')!r}")
    try:
        timeout = check_timeout(params.get("timeout"), "timeout")
    except ToolError as exc:
        raise MlxFwError(exc.msg) from exc
    rollout_id = params.get("rollout_id")
    problem = rollout_id_problem(rollout_id, "rollout_id", required=False)  # the rule of every module that takes one
    if problem:
        raise MlxFwError(problem)
    state_file = params.get("state_file")
    if not state_file or not os.path.isabs(state_file):
        raise MlxFwError(f"state_file must be an absolute path, got {state_file!r}")
    return {
        "images": images,
        "devices": list(devices),
        "allow_downgrade": bool(params.get("allow_downgrade")),
        "reset": params["reset"],
        "unmatched": params["unmatched"],
        "timeout": timeout,
        "state_file": state_file,
        "record_last_known_good": bool(params.get("record_last_known_good", True)),
        "rollout_id": rollout_id,
    }


def _same_device(name, device):
    """True when ``name`` (an option value) names the queried ``device``."""
    wanted = name.lower()
    candidates = {(device.get("pci") or "").lower(), (device.get("pci_address") or "").lower()}
    address = device.get("pci_address")
    if address:
        candidates.add(address[5:].lower())
    return wanted in candidates


# -- the run ---------------------------------------------------------------------------------------------


class NicFirmware:
    def __init__(self, module):
        self.module = module
        # Options first: nothing is looked up or run before they are all known good.
        self.options = check_options(module.params)
        self.counter = CommandCounter()
        self.notes = []
        self._flint = None
        self._reset_tool = None
        self.copies = {}  # image path as given -> its verified private copy, the file flint reads and burns

    # -- tools ---------------------------------------------------------------------------------------
    @property
    def flint(self):
        if self._flint is None:
            flint = Flint(self.module, counter=self.counter)
            if not flint.available:
                flint = Mstflint(self.module, counter=self.counter)
            if not flint.available:
                raise MlxFwError("neither flint (NVIDIA MFT) nor mstflint was found on the node: install one of them (the images are read and burnt with it)")
            self._flint = flint
        return self._flint

    # -- images --------------------------------------------------------------------------------------
    def read_images(self):
        """Each image verified (sha256 first, then ``flint -i IMG v``) with its PSID and version."""
        for image in self.options["images"]:
            try:
                self.copies[image["path"]], image["sha256"] = private_copy(image["path"], image["checksum"], self.module.tmpdir)
            except ArtifactError as exc:
                raise MlxFwError(exc.msg, image=image["path"], **exc.details) from exc
        images = []
        by_psid = {}
        for image in self.options["images"]:
            copy = self.copies[image["path"]]
            try:
                query = parse.parse_flint_query(self.flint.query_image(copy))
            except ToolError as exc:
                raise MlxFwError(
                    f"{self.flint.name} cannot read {image['path']} (-i IMG q): {exc.msg}. It is not a firmware image it knows. Nothing was changed",
                    cmd=exc.cmd,
                    rc=exc.rc,
                    stdout=exc.stdout,
                    stderr=exc.stderr,
                ) from exc
            except ValueError as exc:
                raise MlxFwError(f"{image['path']}: {exc}. Nothing was changed") from exc
            try:
                self.flint.verify_image(copy)
            except ToolError as exc:
                raise MlxFwError(
                    f"{image['path']} fails {self.flint.name}'s image verification (-i IMG v): it is damaged or not a firmware image. Nothing was changed",
                    cmd=exc.cmd,
                    rc=exc.rc,
                    stdout=exc.stdout,
                    stderr=exc.stderr,
                ) from exc
            _version_key(query["fw_version"], f"image {image['path']}")
            entry = {"path": image["path"], "sha256": image["sha256"], "psid": query["psid"], "version": query["fw_version"], "matched": False}
            if entry["psid"] in by_psid:
                raise MlxFwError(f"{by_psid[entry['psid']]['path']} and {entry['path']} are both images for PSID {entry['psid']}: give one image per PSID")
            by_psid[entry["psid"]] = entry
            images.append(entry)
        return images, by_psid

    # -- devices -------------------------------------------------------------------------------------
    def query_devices(self):
        """The NICs: mlxfwmanager's XML where MFT is installed, else ``flint -d DEV q`` for each of O(devices)."""
        manager = MlxFwManager(self.module, counter=self.counter)
        if manager.available:
            rc, out, err = manager.query()
            try:
                records = parse.parse_fwmanager_xml(out)
            except ValueError as exc:
                said = (err or out).strip()[-300:] or "nothing"
                raise MlxFwError(
                    f"mlxfwmanager --query printed no device report (exit status {rc}: {said}). Nothing was changed. "
                    f"Check that the NICs are visible (lspci -d 15b3:) and, with MFT, that mst is started ({exc})",
                    cmd=self.counter.commands[-1],
                    rc=rc,
                    stdout=out,
                    stderr=err,
                ) from exc
            devices = []
            seen = {}
            for index, record in enumerate(records):
                # One device listed twice would be planned, and burnt, twice in one run: the report contradicts itself.
                key = (record.get("pci_address") or record.get("pci") or "").lower()
                if key and key in seen:
                    raise MlxFwError(
                        f"mlxfwmanager --query lists device {record.get('pci_address') or record.get('pci')} twice (devices {seen[key] + 1} "
                        f"and {index + 1} of its report): the report is not trusted and nothing was changed. Run mlxfwmanager --query "
                        "on the node and check its MFT installation (mst status)",
                        cmd=self.counter.commands[-1], rc=rc, stdout=out, stderr=err,
                    )
                seen[key] = index
                readable = not record.get("query_failed") and record.get("psid") and record.get("fw_current")
                devices.append(
                    {
                        "pci": record["pci"],
                        "pci_address": record.get("pci_address"),
                        "type": record.get("type"),
                        "psid": record.get("psid"),
                        "part_number": record.get("part_number"),
                        "status": record.get("status"),
                        "readable": bool(readable),
                    }
                )
            return devices
        if not self.options["devices"]:
            raise MlxFwError(
                "mlxfwmanager (NVIDIA MFT) is not installed on the node, so the NICs cannot be listed: install MFT, "
                "or give devices (PCI addresses, from lspci -d 15b3:) to query them with flint or mstflint"
            )
        devices = []
        for name in self.options["devices"]:
            device = {"pci": name, "pci_address": name if _PCI.fullmatch(name) else None, "type": None, "psid": None, "part_number": None}
            try:
                query = parse.parse_flint_query(self.flint.query(name))
            except ToolError as exc:
                device.update(status=(exc.stdout or exc.stderr or exc.msg).strip()[-300:], readable=False)
            else:
                device.update(psid=query["psid"], status=None, readable=True, query=query)
            devices.append(device)
        return devices

    def read_running(self, device):
        """(firmware on flash, firmware running) from ``flint -d DEV q``."""
        query = device.pop("query", None) or parse.parse_flint_query(self.flint.query(device["pci"]))
        if query["psid"] != device["psid"]:
            raise MlxFwError(
                f"{device['pci']}: mlxfwmanager reports PSID {device['psid']} but flint reports {query['psid']}: "
                "the device changed under the module; query it by hand"
            )
        flash = query["fw_version"]
        running = (query["fields"].get("FW Version(Running)") or "").strip() or flash
        _version_key(flash, f"{device['pci']} FW Version")
        _version_key(running, f"{device['pci']} FW Version(Running)")
        return flash, running

    def read(self, by_psid):
        devices = self.query_devices()
        for device in devices:
            device["flash"] = device["running"] = None
            if device["readable"] and device["psid"] in by_psid:
                device["flash"], device["running"] = self.read_running(device)
        return devices

    # -- plan ----------------------------------------------------------------------------------------
    def plan(self, devices, by_psid):
        """Per device: ``action`` none | upgrade | downgrade | activate | skip | unreadable, with the image."""
        wanted = self.options["devices"]
        for name in wanted:
            if not any(_same_device(name, device) for device in devices):
                shown = ", ".join(device["pci"] or "?" for device in devices) or "none"
                raise MlxFwError(f"devices: {name} is not among the NICs the node reports ({shown}). Nothing was changed")
        planned = []
        for device in devices:
            selected = not wanted or any(_same_device(name, device) for name in wanted)
            entry = {
                "pci": device["pci"],
                "type": device["type"],
                "psid": device["psid"],
                "part_number": device["part_number"],
                "status": device["status"],
                "image": None,
                "before": device["flash"],
                "running_before": device["running"],
                "target": None,
                "action": "skip",
                "reason": None,
            }
            planned.append(entry)
            if not selected:
                entry["reason"] = "not in devices"
                continue
            if not device["readable"]:
                entry["action"] = "unreadable"
                entry["reason"] = f"the tool could not read this device (status: {device['status'] or 'none'}); it is not flashed"
                if wanted:
                    raise MlxFwError(
                        f"{device['pci']} cannot be read (status: {device['status'] or 'none'}): it is not flashed. Nothing was changed", devices=planned
                    )
                self.notes.append(f"mlxfw: {device['pci']} cannot be read (status: {device['status'] or 'none'}); it was not flashed")
                continue
            image = by_psid.get(device["psid"])
            if image is None:
                entry["reason"] = f"no image for PSID {device['psid']}"
                if self.options["unmatched"] == "fail":
                    psids = ", ".join(f"{psid} ({by_psid[psid]['path']})" for psid in sorted(by_psid))
                    raise MlxFwError(
                        f"PSID mismatch: {device['pci']} ({device['type'] or 'NIC'}) has PSID {device['psid']}, and no image is for it "
                        f"(the images are for {psids}). An image is only ever burnt onto a device of its own PSID. Give its image, "
                        "leave the device out of devices, or set unmatched: skip. Nothing was changed",
                        devices=planned,
                    )
                continue
            image["matched"] = True
            entry.update(image=image["path"], target=image["version"])
            have = _version_key(device["flash"], f"{device['pci']} firmware")
            new = _version_key(image["version"], f"image {image['path']}")
            if new > have:
                entry["action"] = "upgrade"
            elif new < have:
                if not self.options["allow_downgrade"]:
                    raise MlxFwError(
                        f"{device['pci']} runs firmware {device['flash']}, newer than {image['version']} in {image['path']}: "
                        "a downgrade needs allow_downgrade: true. Nothing was changed",
                        devices=planned,
                    )
                entry["action"] = "downgrade"
            elif device["running"] != device["flash"] and self.options["reset"] == "mlxfwreset" and self.live_reset(entry):
                entry["action"] = "activate"  # burnt before, never reset: the reset is what is left to do
            else:
                entry["action"] = "none"
            if entry["action"] in ("upgrade", "downgrade") and self.options["reset"] == "mlxfwreset":
                self.live_reset(entry)  # learnt before anything is burnt, so check mode can say whether a reboot follows
        return planned

    # -- acting --------------------------------------------------------------------------------------
    def _record_lkg(self, planned):
        if not self.options["record_last_known_good"]:
            return
        known = [entry for entry in planned if entry["running_before"]]
        if not known:
            return
        versions = []
        for entry in known:
            if entry["running_before"] not in versions:
                versions.append(entry["running_before"])
        details = {"devices": {entry["pci"]: {"psid": entry["psid"], "version": entry["running_before"]} for entry in known}}

        def change(doc):
            return _state.record_last_known_good(doc, COMPONENT, "+".join(versions), details)

        _state.update(self.options["state_file"], change, purpose="mlxfw: recording the last known good NIC firmware")

    def _record_history(self, planned, result, message=None):
        acted = [entry for entry in planned if entry["action"] in ACTIONS]
        actions = sorted({entry["action"] for entry in acted})
        details = {
            "devices": {
                entry["pci"]: {"psid": entry["psid"], "before": entry["before"], "after": entry.get("after"), "action": entry["action"]} for entry in acted
            }
        }
        if message:
            details["message"] = message[:500]

        def change(doc):
            _state.append_history(
                doc,
                COMPONENT,
                actions[0] if len(actions) == 1 else "update",
                before=",".join(f"{entry['pci']}={entry['before']}" for entry in acted),
                after=",".join(f"{entry['pci']}={entry.get('after')}" for entry in acted),
                result=result,
                rollout_id=self.options["rollout_id"],
                details=details,
            )
            return True

        _state.update(self.options["state_file"], change, purpose="mlxfw: recording the NIC firmware change")

    def _burn(self, entry):
        try:
            self.flint.burn(entry["pci"], self.copies[entry["image"]], timeout=self.options["timeout"])
        except ToolError as exc:
            raise MlxFwError(
                f"burning {entry['image']} onto {entry['pci']} failed: {exc.msg}. The device may hold a partly written image in its "
                "inactive flash bank (ConnectX flash is failsafe: the running firmware is untouched); query it with flint -d DEV q and burn again",
                cmd=exc.cmd,
                rc=exc.rc,
                stdout=exc.stdout,
                stderr=exc.stderr,
            ) from exc
        entry["burnt"] = True

    def live_reset(self, entry):
        """True when ``mlxfwreset query`` lists level 3 as supported for the device (cached); a note says why not otherwise.

        Read-only, so it runs in check mode too and before anything is burnt.
        """
        if "live_reset" in entry:
            return entry["live_reset"]
        entry["live_reset"] = False
        if self._reset_tool is None:
            self._reset_tool = Mlxfwreset(self.module, counter=self.counter)
        if not self._reset_tool.available:
            self.notes.append("mlxfw: mlxfwreset was not found on the node: reboot the node to run the new firmware")
            return False
        try:
            levels = parse.parse_fwreset_query(self._reset_tool.query(entry["pci"]))
        except (ToolError, ValueError) as exc:
            self.notes.append(f"mlxfw: mlxfwreset query failed on {entry['pci']} ({getattr(exc, 'msg', exc)}): reboot the node to run the new firmware")
            return False
        supported = sorted(row["level"] for row in levels["levels"] if row["supported"])
        entry["reset_levels"] = supported
        if RESET_LEVEL not in supported:
            self.notes.append(
                f"mlxfw: {entry['pci']} supports no live reset (mlxfwreset level 3 not supported; levels {supported}): reboot the node to run the new firmware"
            )
            return False
        entry["live_reset"] = True
        return True

    def _reset(self, entry):
        """Run mlxfwreset at level 3 (the plan saw the device list it); False when the node must reboot instead."""
        rc, out, err = self._reset_tool.reset(entry["pci"], RESET_LEVEL, timeout=self.options["timeout"])
        try:
            done = parse.parse_fwreset_reset(out)
        except ValueError:
            done = {"completed": False, "errors": [(err or out).strip()[-300:]]}
        if rc != 0 or not done["completed"]:
            self.notes.append(
                f"mlxfw: mlxfwreset level {RESET_LEVEL} on {entry['pci']} did not complete "
                f"(exit status {rc}: {'; '.join(done['errors']) or 'no error printed'}): "
                "reboot the node to run the new firmware"
            )
            return False
        entry["reset_level"] = RESET_LEVEL
        return True

    def run(self):
        images, by_psid = self.read_images()
        before = self.read(by_psid)
        planned = self.plan(before, by_psid)
        to_do = [entry for entry in planned if entry["action"] in ACTIONS]
        if not any(image["matched"] for image in images):
            self.notes.append("mlxfw: no device on the node has the PSID of an image (" + ", ".join(sorted(by_psid)) + ")")
        result = {
            "changed": bool(to_do),
            "images": images,
            "diff": {
                "before": {entry["pci"]: entry["running_before"] for entry in to_do},
                "after": {entry["pci"]: entry["target"] for entry in to_do},
            },
        }
        if not to_do or self.module.check_mode:
            for entry in planned:
                entry["after"] = entry["target"] if entry["action"] in ACTIONS else entry["before"]
                entry["running_after"] = entry["running_before"]
            result.update(devices=planned, reboot_required=self._pending(planned, predicted=bool(self.module.check_mode)), commands_run=len(self.counter))
            return self._finish(result)

        self._record_lkg(planned)
        try:
            for entry in to_do:
                if entry["action"] != "activate":
                    self._burn(entry)
            self._activate(to_do)
            after = {device["pci"]: device for device in self.read(by_psid)}
            self._verify(planned, after)
        except (MlxFwError, ToolError, ValueError) as exc:
            message = getattr(exc, "msg", None) or str(exc)
            self._read_after_failure(planned, by_psid)
            self._record_history(planned, "failed", message)
            details = dict(getattr(exc, "details", {}) or {})
            details["devices"] = planned
            raise MlxFwError(message, **details) from exc
        pending = self._pending(planned)
        self._record_history(planned, "reboot_required" if pending else "ok")
        result.update(devices=planned, reboot_required=pending, commands_run=len(self.counter))
        return self._finish(result)

    def _read_after_failure(self, planned, by_psid):
        """Best effort: what the devices report after a failure, so the result says what the node is left with."""
        try:
            after = {device["pci"]: device for device in self.read(by_psid)}
        except (GpufleetError, ValueError):
            return
        for entry in planned:
            device = after.get(entry["pci"]) or {}
            entry.setdefault("after", device.get("flash"))
            entry.setdefault("running_after", device.get("running"))

    def _activate(self, to_do):
        if self.options["reset"] != "mlxfwreset":
            return
        for entry in to_do:
            if entry.get("live_reset"):
                self._reset(entry)

    def _verify(self, planned, after):
        for entry in planned:
            device = after.get(entry["pci"])
            entry["after"] = device["flash"] if device else None
            entry["running_after"] = device["running"] if device else None
            if entry["action"] in ACTIONS and entry["after"] != entry["target"]:
                raise MlxFwError(
                    f"{entry['pci']} reports firmware {entry['after']} on flash after the burn, not {entry['target']} of {entry['image']}: "
                    "query it with flint -d DEV q before trying again"
                )

    def _pending(self, planned, predicted=False):
        """True when a device's new firmware is (or, in check mode, will be) on flash but not running."""
        for entry in planned:
            if not entry["target"] or entry["action"] in ("skip", "unreadable"):
                continue
            if predicted and entry["action"] in ACTIONS:
                # A device that lists level 3 is predicted to reset in place: whether the reset works is known only by trying.
                if not entry.get("live_reset"):
                    return True
                continue
            if entry["running_after"] != entry["target"]:
                return True
        return False

    def _finish(self, result):
        if self.notes:
            result["warnings_text"] = self.notes
        return result
