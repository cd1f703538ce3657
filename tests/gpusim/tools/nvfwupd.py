"""Simulated NVIDIA `nvfwupd` (open-nvfwupd CLI): show_version, update_fw, force_update,
show_update_progress, against the node's simulated HGX baseboard (the BMC is the node itself).

A staged update is activated by the next boot (state.boot)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from .. import state as st
from ._common import fail, load, out, scaled_sleep, update

SEP = "-" * 120
SEP_UPD = "-" * 83
COMMANDS = ("show_version", "update_fw", "force_update", "show_update_progress", "show_pkg_version", "activate_fw")


def read_fwpkg(path: str) -> dict[str, Any]:
    """The JSON header line of a package written by artifacts.write_fwpkg."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline()
        data = json.loads(first.decode())
        if not isinstance(data, dict) or "version" not in data:
            data = None
    except (OSError, ValueError):
        data = None
    if data is None:
        fail(f"Error: Unable to parse firmware package {path}. Please provide a valid .fwpkg file.\n{SEP}\nError Code: 1",
             1, "out")
    return data


def _devices(state: dict[str, Any], pkg: dict[str, Any] | None) -> list[dict[str, str]]:
    fw = state["gpu_firmware"]
    comps = dict(fw.get("components") or {})
    comps.setdefault("HGX_FW_BMC_0", fw["version"])
    comps.setdefault("HGX_FW_ERoT_BMC_0", "01.03.0250.0000_n04")
    for g in state["gpus"]:
        if g["present"]:
            comps[f"HGX_FW_GPU_{g['index']}"] = g["vbios"]
    if state["nvswitch"]:
        for i in range(4):
            comps.setdefault(f"HGX_FW_NVSwitch_{i}", "96.10.6D.00.01")
    for i, nic in enumerate(state["nics"]):
        comps[f"CX7_{i}"] = nic["fw"]
    want = (pkg or {}).get("components") or {}
    rows = []
    for ap in sorted(comps):
        family = ap.rsplit("_", 1)[0]
        pkg_v = want.get(ap) or want.get(family) or "N/A"
        rows.append({"AP Name": ap, "Sys Version": comps[ap], "Pkg Version": pkg_v,
                     "Up-To-Date": "Yes" if pkg_v != "N/A" and pkg_v == comps[ap] else "No"})
    return rows


def _header(state: dict[str, Any], pkg: dict[str, Any] | None) -> dict[str, Any]:
    return {"Connection Status": "Successful", "System Model": state.get("sku") or "DGXH100",
            "Part number": "965-24387-0002-001", "Serial number": state["gpus"][0]["serial"] if state["gpus"] else "N/A",
            "Packages": [pkg["package"]] if pkg else []}


def show_version(state: dict[str, Any], ip: str, pkg: dict[str, Any] | None, as_json: bool) -> int:
    head = _header(state, pkg)
    rows = _devices(state, pkg)
    if as_json:
        doc = dict(head)
        doc["System IP"] = ip
        doc["Firmware Devices"] = rows
        doc["Error Code"] = 0
        out(json.dumps(doc, indent=4))
        return 0
    lines = [f"System Model: {head['System Model']}", f"Part number: {head['Part number']}",
             f"Serial number: {head['Serial number']}", f"Packages: {head['Packages']}",
             f"Connection Status: {head['Connection Status']}", "", "Firmware Devices:",
             f"{'AP Name':<41}{'Sys Version':<31}{'Pkg Version':<31}Up-To-Date",
             f"{'-------':<41}{'-----------':<31}{'-----------':<31}----------"]
    lines += [f"{r['AP Name']:<41}{r['Sys Version']:<31}{r['Pkg Version']:<31}{r['Up-To-Date']:<10}" for r in rows]
    lines += [SEP, "Error Code: 0"]
    out("\n".join(lines))
    return 0


def update_fw(state: dict[str, Any], ip: str, pkg_path: str, yes: bool, background: bool, as_json: bool,
              targets: str | None) -> int:
    pkg = read_fwpkg(pkg_path)
    name = Path(pkg_path).name
    if not as_json:
        out(f"Updating ip address: ip={ip}")
        out(f"FW package: ['{name}']")
    if not yes:
        out("Ok to proceed with firmware update? <Y/N>")
        sys.stdout.flush()
        answer = sys.stdin.readline().strip()
        if answer.lower() not in ("y", "yes"):
            out(f"Firmware update aborted.\n{SEP_UPD}\nError Code: 0")
            return 0
    if targets:
        try:
            json.loads(Path(targets).read_text())
        except (OSError, ValueError):
            fail(f"Error: Unable to parse special targets file {targets}\n{SEP_UPD}\nError Code: 1", 1, "out")
    task = f"HGX_{len(state['gpu_firmware'].get('tasks') or {})}"
    f = st.fault(state, "flash_fail")
    failing = bool(f) and f.get("target", "gpu") in ("gpu", "any")
    task_json = {"@odata.id": f"/redfish/v1/TaskService/Tasks/{task}", "@odata.type": "#Task.v1_4_3.Task",
                 "Id": task, "TaskState": "Running", "TaskStatus": "OK"}
    total = float(state["timing"].get("flash", 0))
    start = time.time()
    log: list[str] = []

    def record(s: dict[str, Any], task_state: str, pct: int, status: str) -> None:
        s["gpu_firmware"].setdefault("tasks", {})[task] = {"TaskState": task_state, "PercentComplete": pct,
                                                           "TaskStatus": status}
        if task_state == "Completed":
            s["gpu_firmware"]["staged"] = {
                "version": pkg["version"], "vbios": (pkg.get("components") or {}).get("HGX_FW_GPU"),
                "components": pkg.get("components") or {}}
            if s["gpu_firmware"]["staged"]["vbios"] is None:
                s["gpu_firmware"]["staged"].pop("vbios")

    update(lambda s: record(s, "Running", 0, "OK"))
    if not as_json:
        out(json.dumps(task_json))
        out(f"FW update started, Task Id: {task}")
    if background:
        if not failing:
            update(lambda s: record(s, "Completed", 100, "OK"))
        else:
            update(lambda s: record(s, "Exception", int(f.get("percent", 40)), "Critical"))
        if as_json:
            out(json.dumps({"Error Code": 0, "Output": [task_json]}, indent=4))
        else:
            out(f"{SEP_UPD}\nError Code: 0")
        return 0
    if not as_json:
        out("Wait for Firmware Update to Start...")
    for pct in (20, 40, 60, 80, 100):
        scaled_sleep(total / 5)
        if failing and pct >= int(f.get("percent", 40)):
            update(lambda s, pct=pct: record(s, "Exception", pct, "Critical"))
            log += ["TaskState: Exception", f"PercentComplete: {pct}", "TaskStatus: Critical"]
            if not as_json:
                out("\n".join(log[-3:]))
                out(f"Firmware update failed! Task {task} ended with TaskState: Exception, "
                    "Message: Transfer of image to component failed.")
                out(f"{SEP_UPD}\nError Code: 1")
            else:
                out(json.dumps({"Error Code": 1, "Output": [dict(task_json, TaskState="Exception",
                                                                  TaskStatus="Critical", PercentComplete=pct)]}, indent=4))
            return 1
        done = pct == 100
        update(lambda s, pct=pct, done=done: record(s, "Completed" if done else "Running", pct, "OK"))
        log += [f"TaskState: {'Completed' if done else 'Running'}", f"PercentComplete: {pct}", "TaskStatus: OK"]
        if not as_json:
            out("\n".join(log[-3:]))
    took = int(time.time() - start)
    if as_json:
        out(json.dumps({"Error Code": 0, "Output": [dict(task_json, TaskState="Completed", PercentComplete=100)]},
                       indent=4))
    else:
        out("Firmware update successful!")
        out(f"Overall Time Taken: {took // 3600}:{took % 3600 // 60:02d}:{took % 60:02d}")
        out("Refer to 'NVIDIA Firmware Update Document' on activation steps for new firmware to take effect.")
        out(f"{SEP_UPD}\nError Code: 0")
    return 0


def main(argv: list[str]) -> int:
    args = list(argv)
    target: dict[str, str] = {}
    cfg = None
    i = 0
    while i < len(args) and args[i] not in COMMANDS:
        a = args[i]
        if a in ("-t", "--target"):
            i += 1
            while i < len(args) and "=" in args[i] and not args[i].startswith("-"):
                k, _, v = args[i].partition("=")
                target[k] = v
                i += 1
            continue
        if a in ("-c", "--config"):
            cfg = args[i + 1] if i + 1 < len(args) else None
            i += 2
            continue
        if a in ("-v", "--verbose"):
            i += 1
            continue
        if a in ("-h", "--help"):
            out("usage: nvfwupd.py [-h] [-t TARGET [TARGET ...]] [-c CONFIG] [-v] {" + ",".join(COMMANDS) + "} ...")
            return 0
        if a == "--version":
            out("nvfwupd.py - Version 2.0.7")
            return 0
        fail(f"nvfwupd.py: error: unrecognized arguments: {a}", 2)
    if i >= len(args):
        fail("nvfwupd.py: error: the following arguments are required: command", 2)
    cmd, rest = args[i], args[i + 1:]
    if cfg:
        try:
            for line in Path(cfg).read_text().splitlines():
                if ":" in line:
                    k, _, v = line.partition(":")
                    target.setdefault(k.strip().lower().replace("bmc_ip", "ip"), v.strip().strip("'\""))
        except OSError:
            fail(f"Error: Unable to read config file {cfg}", 1, "out")
    if cmd != "show_pkg_version" and not target.get("ip"):
        fail("Error: Target IP address is required. Use -t ip=<BMC IP> user=<user> password=<password> or -c <config>",
             1, "out")
    opts: dict[str, Any] = {"-p": None, "-s": None, "-i": None, "-t": None}
    flags = set()
    j = 0
    while j < len(rest):
        a = rest[j]
        if a in ("-p", "--package", "-s", "--special", "-i", "--id", "-t", "--timeout"):
            key = {"--package": "-p", "--special": "-s", "--id": "-i", "--timeout": "-t"}.get(a, a)
            if j + 1 >= len(rest):
                fail(f"nvfwupd.py {cmd}: error: argument {a}: expected one argument", 2)
            opts[key] = rest[j + 1]
            j += 2
            continue
        if a in ("-y", "--yes", "-b", "--background", "-j", "--json", "-d", "--details", "-a", "--staged"):
            flags.add({"--yes": "-y", "--background": "-b", "--json": "-j", "--details": "-d"}.get(a, a))
        elif cmd == "force_update" and a in ("enable", "disable", "status"):
            opts["action"] = a
        else:
            fail(f"nvfwupd.py: error: unrecognized arguments: {a}", 2)
        j += 1
    state = load()
    ip = target.get("ip", "")
    as_json = "-j" in flags
    if cmd == "show_version":
        pkg = read_fwpkg(opts["-p"]) if opts["-p"] else None
        return show_version(state, ip, pkg, as_json)
    if cmd == "update_fw":
        if not opts["-p"]:
            fail("nvfwupd.py update_fw: error: the following arguments are required: -p/--package", 2)
        return update_fw(state, ip, opts["-p"], "-y" in flags, "-b" in flags, as_json, opts["-s"])
    if cmd == "force_update":
        action = opts.get("action")
        if action is None:
            fail("nvfwupd.py force_update: error: argument action: invalid choice (choose from 'enable', 'disable', "
                 "'status')", 2)
        if action != "status":
            update(lambda s: s["gpu_firmware"].__setitem__("force_update", action == "enable"))
            state = load()
        on = state["gpu_firmware"].get("force_update", False)
        if as_json:
            out(json.dumps({"Error Code": 0, "Output": [{} if action != "status" else
                                                        {"HttpPushUriOptions": {"ForceUpdate": on}}]}, indent=4))
        else:
            out(f"Force update status: {'Enabled' if on else 'Disabled'}\n{SEP_UPD}\nError Code: 0")
        return 0
    if cmd == "show_update_progress":
        task = (state["gpu_firmware"].get("tasks") or {}).get(opts["-i"] or "")
        if task is None:
            fail(f"Error: Task {opts['-i']} not found\n{SEP_UPD}\nError Code: 1", 1, "out")
        if as_json:
            out(json.dumps({"Error Code": 0, "Output": [dict(task, Id=opts["-i"])]}, indent=4))
        else:
            out(f"TaskState: {task['TaskState']}\nPercentComplete: {task['PercentComplete']}\n"
                f"TaskStatus: {task['TaskStatus']}\n{SEP_UPD}\nError Code: 0")
        return 0
    if cmd == "show_pkg_version":
        pkg = read_fwpkg(opts["-p"]) if opts["-p"] else None
        out(f"Packages: [{pkg['package'] if pkg else ''}]")
        return 0
    fail(f"Error: {cmd} is not supported on this platform\n{SEP_UPD}\nError Code: 1", 1, "out")
    return 1
