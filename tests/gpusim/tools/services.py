"""Simulated systemctl (multi-call: also shutdown / reboot / poweroff) and nv-fabricmanager.

Only the node's simulated units exist (nvidia-fabricmanager, nvidia-persistenced, nvidia-dcgm; nvidia-imex on a
GB200 / GB300 tray);
reboots are requests in NODE_DIR/reboot.request that the fleet supervisor (gpusim.supervisor) carries out.
"""

from __future__ import annotations

import time

from .. import state as st
from ._common import ToolExit, err, fail, hostname, load, node_dir, out, update

TYPE_CHECKING = False  # typing is not imported at run time: 4 ms of every simulated tool's start-up
if TYPE_CHECKING:
    from typing import Any

UNITS = {
    "nvidia-fabricmanager": ("NVIDIA fabric manager service", "/usr/bin/nvidia-fabricmanager-start.sh --mode start",
                             "nv-fabricmanage", "/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg"),
    "nvidia-persistenced": ("NVIDIA Persistence Daemon", "/usr/bin/nvidia-persistenced --user nvidia-persistenced",
                            "nvidia-persiste", "/usr/bin/nvidia-persistenced --user nvidia-persistenced"),
    "nvidia-imex": ("NVIDIA IMEX service", "/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg",
                    "nvidia-imex", "/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg"),
    "nvidia-dcgm": ("NVIDIA DCGM service", "/usr/bin/nv-hostengine -n --service-account nvidia-dcgm",
                    "nv-hostengine", "/usr/bin/nv-hostengine -n --service-account nvidia-dcgm"),
    # MLNX_OFED's subnet manager (a node with ofed: {opensm: true}, gpusim/ofed.py): it holds the RDMA stack.
    "opensmd": ("LSB: Manage OpenSM", "/etc/init.d/opensmd start", "opensm", "/usr/sbin/opensm --daemon"),
}


def _unit(name: str) -> str | None:
    base = name[:-8] if name.endswith(".service") else name
    return base if base in UNITS else None


def _when(ts: float) -> str:
    return time.strftime("%a %Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _ago(ts: float) -> str:
    s = int(max(0, time.time() - ts))
    if s < 60:
        return f"{s}s ago"
    if s < 3600:
        return f"{s // 60}min {s % 60}s ago"
    return f"{s // 3600}h {(s % 3600) // 60}min ago"


def _journal(state: dict[str, Any], unit: str) -> list[str]:
    svc = state["services"][unit]
    desc = UNITS[unit][0]
    stamp = time.strftime("%b %d %H:%M:%S", time.localtime(svc["since"]))
    host = hostname(state)
    lines = [f"{stamp} {host} systemd[1]: Starting {desc}..."]
    reason = svc.get("failed_reason")
    pid = svc.get("pid", 4242)
    if reason == "mismatch":
        fm = state["fabricmanager"]["version"]
        drv = state["driver"]["version"]
        lines += [f"{stamp} {host} nv-fabricmanager[{pid}]: fabric manager NVIDIA GPU driver interface version {fm} "
                  f"don't match with driver version {drv}. Please update with matching NVIDIA driver package.",
                  f"{stamp} {host} systemd[1]: {unit}.service: Control process exited, code=exited, status=1/FAILURE",
                  f"{stamp} {host} systemd[1]: {unit}.service: Failed with result 'exit-code'.",
                  f"{stamp} {host} systemd[1]: Failed to start {desc}."]
    elif reason == "nothing_to_do":
        lines += [f"{stamp} {host} nvidia-fabricmanager-start.sh[{pid}]: Detected Pre-NVL5 system",
                  f"{stamp} {host} nv-fabricmanager[{pid}]: Connected to 1 node.",
                  f"{stamp} {host} nv-fabricmanager[{pid}]: request to query NVSwitch device information from NVSwitch "
                  "driver failed with error:NV_WARN_NOTHING_TO_DO",
                  f"{stamp} {host} systemd[1]: {unit}.service: Control process exited, code=exited, status=1/FAILURE",
                  f"{stamp} {host} systemd[1]: Failed to start {desc}."]
    elif reason:
        lines += [f"{stamp} {host} systemd[1]: {unit}.service: Control process exited, code=exited, status=1/FAILURE",
                  f"{stamp} {host} systemd[1]: Failed to start {desc}."]
    elif svc["active"]:
        lines.append(f"{stamp} {host} systemd[1]: Started {desc}.")
    else:
        lines += [f"{stamp} {host} systemd[1]: Stopping {desc}...",
                  f"{stamp} {host} systemd[1]: {unit}.service: Deactivated successfully.",
                  f"{stamp} {host} systemd[1]: Stopped {desc}."]
    return lines


def _status(state: dict[str, Any], unit: str) -> int:
    svc = state["services"][unit]
    desc, execstart, comm, cmd = UNITS[unit]
    enabled = "enabled" if svc["enabled"] else "disabled"
    failed = bool(svc.get("failed_reason"))
    dot = "●" if svc["active"] or not failed else "\u00d7"  # systemd prints U+00D7 for failed units
    lines = [f"{dot} {unit}.service - {desc}",
             f"     Loaded: loaded (/lib/systemd/system/{unit}.service; {enabled}; vendor preset: enabled)"]
    if svc["active"]:
        lines += [f"     Active: active (running) since {_when(svc['since'])}; {_ago(svc['since'])}",
                  f"    Process: {svc['pid'] - 1} ExecStart={execstart} (code=exited, status=0/SUCCESS)",
                  f"   Main PID: {svc['pid']} ({comm})", "      Tasks: 18 (limit: 629145)", "     Memory: 12.4M",
                  "        CPU: 1.204s", f"     CGroup: /system.slice/{unit}.service",
                  f"             └─{svc['pid']} {cmd}"]
    elif failed:
        lines += [f"     Active: failed (Result: exit-code) since {_when(svc['since'])}; {_ago(svc['since'])}",
                  f"    Process: {svc.get('pid', 4242)} ExecStart={execstart} (code=exited, status=1/FAILURE)",
                  "        CPU: 21ms"]
    else:
        lines.append(f"     Active: inactive (dead) since {_when(svc['since'])}; {_ago(svc['since'])}")
    out("\n".join(lines) + "\n\n" + "\n".join(_journal(state, unit)))
    return 0 if svc["active"] else 3


def _active_word(svc: dict[str, Any]) -> str:
    if svc["active"]:
        return "active"
    return "failed" if svc.get("failed_reason") else "inactive"


def systemctl_main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("-")]
    opts = [a for a in argv if a.startswith("-")]
    quiet = "-q" in opts or "--quiet" in opts
    if not args:
        out("UNIT                          LOAD   ACTIVE SUB     DESCRIPTION")
        return 0
    verb, units = args[0], args[1:]
    if verb in ("reboot", "poweroff", "halt"):
        st.request_reboot(node_dir(), 0, "reboot" if verb == "reboot" else "poweroff")
        return 0
    if verb == "daemon-reload":
        return 0
    if verb not in ("status", "is-active", "is-enabled", "is-failed", "start", "stop", "restart", "enable",
                    "disable", "try-restart", "reload-or-restart", "show"):
        fail(f"Unknown command verb {verb}.", 1)
    if not units:
        fail("Too few arguments.", 1)
    state = load()
    rc = 0
    for raw in units:
        unit = _unit(raw)
        name = raw if raw.endswith(".service") else raw + ".service"
        if unit is None or (unit == "nvidia-fabricmanager" and not state.get("fabricmanager")) or (
                unit not in state["services"]):
            if verb == "status":
                err(f"Unit {name} could not be found.")
                rc = max(rc, 4)
            elif verb in ("is-active", "is-failed"):
                if not quiet:
                    out("inactive")
                rc = max(rc, 3)
            elif verb == "is-enabled":
                err(f"Failed to get unit file state for {name}: No such file or directory")
                rc = max(rc, 1)
            else:
                err(f"Failed to {verb} {name}: Unit {name} not found.")
                rc = max(rc, 5)
            continue
        svc = state["services"][unit]
        if verb == "status":
            rc = max(rc, _status(state, unit))
        elif verb == "show":
            out(f"LoadState=loaded\nActiveState={_active_word(svc)}\nUnitFileState={'enabled' if svc['enabled'] else 'disabled'}\n"
                f"MainPID={svc.get('pid', 0) if svc['active'] else 0}")
        elif verb == "is-active":
            if not quiet:
                out(_active_word(svc))
            rc = max(rc, 0 if svc["active"] else 3)
        elif verb == "is-failed":
            word = _active_word(svc)
            if not quiet:
                out(word)
            rc = max(rc, 0 if word == "failed" else 1)
        elif verb == "is-enabled":
            if not quiet:
                out("enabled" if svc["enabled"] else "disabled")
            rc = max(rc, 0 if svc["enabled"] else 1)
        elif verb in ("enable", "disable"):
            def _en(s: dict[str, Any], unit: str = unit, on: bool = verb == "enable") -> None:
                s["services"][unit]["enabled"] = on
            update(_en)
            if verb == "enable" and not svc["enabled"]:
                err(f"Created symlink /etc/systemd/system/multi-user.target.wants/{name} → /lib/systemd/system/{name}.")
            elif verb == "disable" and svc["enabled"]:
                err(f"Removed /etc/systemd/system/multi-user.target.wants/{name}.")
        elif verb == "stop":
            def _stop(s: dict[str, Any], unit: str = unit) -> None:
                sv = s["services"][unit]
                sv.update(active=False, failed_reason=None, since=time.time())
            update(_stop)
        else:  # start / restart / try-restart / reload-or-restart
            if verb == "try-restart" and not svc["active"]:
                continue
            ok = update(lambda s, unit=unit: st.start_service(s, unit))
            if not ok:
                err(f"Job for {name} failed because the control process exited with error code.\n"
                    f'See "systemctl status {name}" and "journalctl -xeu {name}" for details.')
                rc = max(rc, 1)
    return rc


def _parse_time(tok: str) -> float | None:
    if tok == "now":
        return 0.0
    if tok.startswith("+") and tok[1:].isdigit():
        return int(tok[1:]) * 60.0
    if tok.isdigit():
        return int(tok) * 60.0
    if ":" in tok:
        hh, _, mm = tok.partition(":")
        if hh.isdigit() and mm.isdigit():
            now = time.localtime()
            delta = (int(hh) * 60 + int(mm) - now.tm_hour * 60 - now.tm_min) % (24 * 60)
            return delta * 60.0
    return None


def shutdown_main(argv: list[str], default_action: str = "poweroff") -> int:
    action = default_action
    delay = None
    explicit_time = False
    for a in argv:
        if a in ("-r", "--reboot"):
            action = "reboot"
        elif a in ("-h", "-P", "--poweroff", "-H", "--halt"):
            action = "poweroff"
        elif a in ("-c",):
            try:
                (node_dir() / st.REBOOT_REQUEST).unlink()
            except FileNotFoundError:
                pass
            return 0
        elif a in ("-k", "--no-wall", "-f", "-F", "-n"):
            continue
        elif a.startswith("-"):
            fail(f"shutdown: invalid option -- '{a.lstrip('-')[:1]}'", 1)
        elif delay is None:
            delay = _parse_time(a)
            if delay is None:
                fail(f'Failed to parse time specification: {a}', 1)
            explicit_time = True
    delay = 60.0 if delay is None else delay  # shutdown with no time waits one minute, like systemd
    st.request_reboot(node_dir(), delay, action)
    if delay > 0 or not explicit_time:
        when = time.strftime("%a %Y-%m-%d %H:%M:%S UTC", time.gmtime(time.time() + delay))
        word = "Reboot" if action == "reboot" else "Shutdown"
        out(f"{word} scheduled for {when}, use 'shutdown -c' to cancel.")
    return 0


def reboot_main(argv: list[str]) -> int:
    st.request_reboot(node_dir(), 0, "reboot")
    return 0


def poweroff_main(argv: list[str]) -> int:
    st.request_reboot(node_dir(), 0, "poweroff")
    return 0


def fabricmanager_main(argv: list[str]) -> int:
    state = load()
    fm = state.get("fabricmanager")
    if not fm:
        fail("nv-fabricmanager: command not found", 127)
    if argv and argv[0] in ("-v", "--version"):
        out(f"Fabric Manager version is : {fm['version']}")
        return 0
    if argv and argv[0] in ("-h", "--help"):
        out("usage: nv-fabricmanager [options]\n  -c, --config <file>   Fabric Manager config file\n"
            "  -v, --version         Fabric Manager version")
        return 0
    if not st.driver_loaded(state) or fm["version"] != state["driver"]["version"]:
        fail(f"fabric manager NVIDIA GPU driver interface version {fm['version']} don't match with driver version "
             f"{state['driver']['version']}. Please update with matching NVIDIA driver package.", 1)
    raise ToolExit(0)
