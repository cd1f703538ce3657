"""Firmware updates through the BMC: what an uploaded PLDM package would change, and the Redfish task
that flashes it (progress, messages, staged firmware, the resets the staged firmware needs).

A task lives in the node state (state["gpu_firmware"]["tasks"][id]) so that it survives a restart of
the BMC process. It is advanced by time: the task's components are flashed one after the other over
the node's timing.flash seconds; `advance()` stages each component whose slot has passed, and ends
the task (Completed, or Exception under a flash_fail fault). Messages use DMTF's Task Event and
Update registries, NVIDIA's ComponentUpdateSkipped and Base's ResetRequired (what
community.general's redfish_command PerformRequestedOperations acts on).
"""

from __future__ import annotations

import re
import time
from typing import Any

from .. import firmware, pldm
from .. import state as st

TASK_TYPE = "#Task.v1_4_3.Task"
DEFAULT_FLASH_S = 2.0
# Where each kind of reset is asked for (Base.ResetRequired: the action URI and its ResetType).
RESET_ACTIONS = {
    "host_reboot": ("/redfish/v1/Systems/System_0/Actions/ComputerSystem.Reset", "ForceRestart"),
    "ac_power_cycle": ("/redfish/v1/Chassis/HGX_Chassis_0/Actions/Chassis.Reset", "PowerCycle"),
    "bmc_reset": ("/redfish/v1/Managers/HGX_BMC_0/Actions/Manager.Reset", "ForceRestart"),
    "host_bmc_reset": ("/redfish/v1/Managers/BMC_0/Actions/Manager.Reset", "GracefulRestart"),
}
# A GB200 / GB300 compute tray's AC power cycle (NVIDIA's GB300 compute flow files).
TRAY_AC_CYCLE = ("/redfish/v1/Chassis/BMC_0/Actions/Oem/NvidiaChassis.AuxPowerReset", "AuxPowerCycle")
RESET_WORDS = {"gpu_reset": "a GPU reset or host reboot", "host_reboot": "a host reboot",
               "ac_power_cycle": "an AC power cycle", "bmc_reset": "a BMC reset", "host_bmc_reset": "a reset of the host BMC"}


class UpdateError(Exception):
    """The upload cannot start an update: HTTP status, Base message id, message."""

    def __init__(self, status: int, message_id: str, message: str):
        super().__init__(message)
        self.status = status
        self.message_id = message_id


def version_key(version: str) -> list[tuple[int, Any]]:
    """Order of firmware versions part by part: hex-digit parts as hex numbers (96.00.AF.00.01 after
    96.00.A5; decimal parts keep their order read as hex), others (HGX, rc80) as lower-case text."""
    return [(0, int(p, 16)) if re.fullmatch(r"[0-9A-Fa-f]+", p) else (1, p.lower())
            for p in re.split(r"[.\-_]", version) if p]


def now_iso(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() if t is None else t))


def message(message_id: str, text: str, args: list[str], severity: str = "OK", resolution: str = "None") -> dict:
    return {"@odata.type": "#Message.v1_1_1.Message", "MessageId": message_id, "Message": text,
            "MessageArgs": list(args), "MessageSeverity": severity, "Severity": severity, "Resolution": resolution}


def plan(state: dict[str, Any], package: pldm.Package, image_name: str, targets: list[str] | None,
         force: bool) -> tuple[list[dict], list[dict]]:
    """(components to flash, messages about components skipped) for this package on this node.

    A component applies to inventory entries of the same record name (and, for GPUs, the same SKU);
    one at the version already there (or staged), or older, is skipped unless force (ForceUpdate)."""
    rows = [r for r in firmware.inventory(state) if r["updateable"]]
    wanted = {t.rstrip("/").rsplit("/", 1)[-1] for t in targets or []}
    if (firmware.is_hgx(state) or firmware.is_tray(state)) and "HGX_Chassis_0" in wanted:
        wanted = set()  # the baseboard as a whole (NVIDIA's "Targets": ["/redfish/v1/Chassis/HGX_Chassis_0"])
    if wanted:
        unknown = sorted(wanted - {r["id"] for r in rows})
        if unknown:
            raise UpdateError(400, "Base.1.16.0.PropertyValueNotInList",
                              f"The update targets {', '.join(unknown)} are not updatable firmware of this system")
        rows = [r for r in rows if r["id"] in wanted]
    work, skipped = [], []
    for comp in package.components:
        for row in rows:
            if row["record"].lower() != comp.name.lower():
                continue
            if row["record"] == firmware.GPU_RECORD and (comp.sku or "").lower() != row["sku"]:
                continue
            have = row["staged"] or row["version"]
            if not force and version_key(comp.version) <= version_key(have):
                why = "it is already at that version" if comp.version == have else f"{have} is newer (ForceUpdate is off)"
                skipped.append(message("NvidiaUpdate.1.0.ComponentUpdateSkipped",
                                       f"The update operation for the component {row['id']} is skipped because {why}.",
                                       [row["id"], why]))
                continue
            work.append({"id": row["id"], "from": row["version"], "to": comp.version, "reset": row["reset"],
                         "image": image_name})
    if not work and not skipped:
        have = sorted({r["record"] for r in rows})
        raise UpdateError(400, "Base.1.16.0.ActionParameterValueError",
                          f"The package {package.version} holds no firmware for this system (package components: "
                          f"{', '.join(sorted({c.name for c in package.components}))}; this system's: "
                          f"{', '.join(have) or 'none'})")
    return work, skipped


def create(state: dict[str, Any], package: pldm.Package, image_name: str, work: list[dict], skipped: list[dict],
           uri: str, activate: bool = False, option: str | None = None) -> dict[str, Any]:
    """Add a Running task to the state; returns it. option: the update's Oem.Nvidia.UpdateOption as asked;
    activate: StageAndActivate (a tray power-cycles itself once the task completes)."""
    fw = state["gpu_firmware"]
    tid = str(fw.get("next_task", 0))
    fw["next_task"] = int(tid) + 1
    t = time.time()
    msgs = [message("TaskEvent.1.0.TaskStarted", f"The task with Id '{tid}' has started.", [tid])]
    msgs += [message("Update.1.0.TargetDetermined", f"The target device '{w['id']}' will be updated with image "
                                                    f"'{image_name}'.", [w["id"], image_name]) for w in work]
    msgs += skipped
    task = {"id": tid, "state": "Running", "status": "OK", "start": t, "end": None,
            "duration": float(state["timing"].get("flash", DEFAULT_FLASH_S) or 0), "work": work, "done": 0,
            "messages": msgs, "package": package.version, "sha256": package.sha256, "uri": uri, "percent": 0,
            "activate": bool(activate and work), "option": option}
    fw["tasks"][tid] = task
    # Keep the last 32 tasks: the BMC's task service is bounded too.
    for old in sorted(fw["tasks"], key=int)[:-32]:
        if fw["tasks"][old]["state"] != "Running":
            del fw["tasks"][old]
    return task


def _percent(task: dict[str, Any], t: float) -> int:
    if task["state"] != "Running":
        return task["percent"]
    if not task["work"] or task["duration"] <= 0:
        return 99
    return max(0, min(99, int((t - task["start"]) / task["duration"] * 100)))


def advance(state: dict[str, Any], tid: str, t: float | None = None) -> bool:
    """Stage what the task has flashed by time t, end it when done; True when the state changed."""
    task = state["gpu_firmware"]["tasks"].get(tid)
    if task is None or task["state"] != "Running":
        return False
    t = time.time() if t is None else t
    n = len(task["work"])
    pct = _percent(task, t)
    fail = st.fault(state, "flash_fail")
    failing = bool(fail) and fail.get("target", "gpu") in ("gpu", "any")
    fail_at = int(fail.get("percent", 40)) if failing else None
    changed = False
    while task["done"] < n:
        w = task["work"][task["done"]]
        slot_end = (task["done"] + 1) * 100 // n
        if fail_at is not None and pct >= fail_at and fail_at < slot_end:
            task["messages"].append(message("Update.1.0.ApplyFailed", f"Installation of image '{w['image']}' to "
                                            f"'{w['id']}' failed.", [w["image"], w["id"]], "Critical",
                                            "Retry the update; if it fails again, contact your service provider."))
            task["messages"].append(message("TaskEvent.1.0.TaskAborted", f"The task with Id '{tid}' has been aborted.",
                                            [tid], "Critical"))
            task.update(state="Exception", status="Critical", end=t, percent=max(pct, fail_at))
            return True
        if pct < slot_end and not (task["duration"] <= 0 or t - task["start"] >= task["duration"]):
            break
        firmware.stage(state, w["id"], w["to"])
        task["messages"] += [
            message("Update.1.0.TransferringToComponent", f"Image '{w['image']}' is being transferred to '{w['id']}'.",
                    [w["image"], w["id"]]),
            message("Update.1.0.InstallingOnComponent", f"Image '{w['image']}' is being installed on '{w['id']}'.",
                    [w["image"], w["id"]]),
            message("Update.1.0.UpdateSuccessful", f"Device '{w['id']}' successfully updated with image '{w['image']}'.",
                    [w["id"], w["image"]]),
            message("Update.1.0.AwaitToActivate", f"Awaiting for an action to proceed with activating image "
                                                  f"'{w['image']}' on '{w['id']}': {RESET_WORDS[w['reset']]}.",
                    [w["image"], w["id"]]),
        ]
        task["done"] += 1
        changed = True
    if task["done"] == n and (n == 0 or task["duration"] <= 0 or t - task["start"] >= task["duration"]):
        needed = [] if task.get("activate") else resets_needed({w["reset"] for w in task["work"]}, firmware.is_tray(state))
        for uri, reset_type in needed:
            task["messages"].append(message(
                "Base.1.16.0.ResetRequired", f"In order to complete the operation, a component reset is required with "
                f"the Reset action URI '{uri}' and ResetType '{reset_type}'.", [uri, reset_type], "Warning",
                "Perform the required Reset action on the specified component."))
        task["messages"].append(message("TaskEvent.1.0.TaskCompletedOK", f"The task with Id '{tid}' has completed.",
                                        [tid]))
        task.update(state="Completed", status="OK", end=t, percent=100)
        changed = True
    return changed


def resets_needed(kinds: set[str], tray: bool = False) -> list[tuple[str, str]]:
    """The reset actions that activate firmware needing `kinds` (an AC power cycle covers them all; on a tray it is
    the BMC's AuxPowerCycle)."""
    if tray and kinds:
        return [TRAY_AC_CYCLE]
    if "ac_power_cycle" in kinds:
        return [RESET_ACTIONS["ac_power_cycle"]]
    out = []
    if kinds & {"gpu_reset", "host_reboot"}:
        out.append(RESET_ACTIONS["host_reboot"])
    if "bmc_reset" in kinds:
        out.append(RESET_ACTIONS["bmc_reset"])
    if "host_bmc_reset" in kinds:
        out.append(RESET_ACTIONS["host_bmc_reset"])
    return out


def task_resource(task: dict[str, Any], t: float | None = None) -> dict[str, Any]:
    """The Redfish Task resource of a task."""
    tid = task["id"]
    uri = f"/redfish/v1/TaskService/Tasks/{tid}"
    doc = {
        "@odata.id": uri, "@odata.type": TASK_TYPE, "Id": tid, "Name": f"Task {tid}",
        "TaskState": task["state"], "TaskStatus": task["status"],
        "PercentComplete": _percent(task, time.time() if t is None else t),
        "StartTime": now_iso(task["start"]), "TaskMonitor": f"{uri}/Monitor",
        "Messages": list(task["messages"]),
        "Payload": {"HttpOperation": "POST", "TargetUri": task["uri"], "JsonBody": "",
                    "HttpHeaders": ["Content-Type: application/octet-stream"]},
    }
    if task["end"] is not None:
        doc["EndTime"] = now_iso(task["end"])
    return doc
