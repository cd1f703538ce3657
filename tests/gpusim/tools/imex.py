"""Simulated `nvidia-imex --version` and `nvidia-imex-ctl -N` of a GB200 / GB300 NVL72 tray (issue 23).

Formats from ../shared/fixtures/real/gb200/imex: `IMEX version is: <v>` (bottlerocket-kernel-kit PR 204) and the
newer `-N` legend with `Version:` per node, the 3-character connectivity columns and `Domain State:` (AWS
ParallelCluster's 18-node capture). The trays of a domain share the machine: each one's state is read from the
fleet's node folders. A node is READY when its nvidia-imex service runs (its version is its driver's); two READY
nodes on different IMEX versions see each other as `!V!`, two whose nodes_config.cfg differ as `!M!`, an unreachable
one as `I`. The domain is UP only when every node is READY and every pair Connected, DOWN otherwise.
Made up here (no real capture): the message and exit status 1 of `-N` when the local daemon does not run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from .. import catalog
from .. import state as st
from ._common import err, load, out

TYPE_CHECKING = False  # typing is not imported at run time: 4 ms of every simulated tool's start-up
if TYPE_CHECKING:
    from typing import Any

LEGEND = """Connectivity Table Legend:
I - Invalid - Node wasn't reachable, no connection status available
N - Never Connected
R - Recovering - Connection was lost, but clean up has not yet been triggered.
D - Disconnected - Connection was lost, and clean up has been triggreed.
A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.
!V! - Version mismatch, communication disabled.
!M! - Node map mismatch, communication disabled.
C - Connected - Ready for operation
"""
NODES_CONFIG = Path("nvidia-imex") / "nodes_config.cfg"  # under the tray's /etc overlay (upper)
USAGE = ("Usage: nvidia-imex-ctl [-i <IP> <PORT>|-u <unix domain socket path>|-c <nvidia-imex config.cfg path>] "
         "<-n|-N|-q|-s|-d|-m> [-t <timeout>]")


def nodes_config(root: str | None, name: str) -> str | None:
    """The tray's /etc/nvidia-imex/nodes_config.cfg (its own /etc overlay), None when absent."""
    if not root:
        return None
    path = Path(root) / name / "disk" / "etc" / "upper" / NODES_CONFIG
    try:
        return path.read_text()
    except OSError:
        return None


def _node(state: dict[str, Any], member: dict[str, str]) -> dict[str, Any]:
    peer = st.peer_state(state, member["name"])
    ready = bool(peer and not peer.get("down") and (peer["services"].get("nvidia-imex") or {}).get("active"))
    imex = (peer.get("imex") or {}) if peer else {}
    version = (imex.get("running") if ready else None) or imex.get("version")
    config = nodes_config(state["nvlink"].get("nodes_root"), member["name"])
    return {"address": member["address"], "ready": ready, "version": version, "config": config}


def _config_addresses(text: str | None) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip() and not line.strip().startswith("#")]


def domain(state: dict[str, Any]) -> dict[str, Any]:
    """The nodes, the connectivity marks and the domain state as the local IMEX daemon sees them.

    The daemon's node map is the tray's own nodes_config.cfg (node ids are its line numbers); an address that is no tray
    of the fleet never answers (UNAVAILABLE). Without the file, the domain's trays in fleet order."""
    members = state["nvlink"]["members"]
    by_address = {member["address"]: member for member in members}
    addresses = _config_addresses(nodes_config(state["nvlink"].get("nodes_root"), state["name"])) or [m["address"] for m in members]
    nodes = [_node(state, by_address[a]) if a in by_address else {"address": a, "ready": False, "version": None, "config": None}
             for a in addresses]
    matrix = []
    for a in nodes:
        row = []
        for b in nodes:
            if not (a["ready"] and b["ready"]):
                row.append("I")
            elif a["version"] != b["version"]:
                row.append("!V!")
            elif a["config"] != b["config"]:
                row.append("!M!")
            else:
                row.append("C")
        matrix.append(row)
    up = all(n["ready"] for n in nodes) and all(mark == "C" for row in matrix for mark in row)
    return {"nodes": nodes, "matrix": matrix, "state": "UP" if up else "DOWN"}


def _timestamp() -> str:
    now = time.time()
    t = time.localtime(now)
    return f"{t.tm_mon}/{t.tm_mday}/{t.tm_year} {time.strftime('%H:%M:%S', t)}.{int(now * 1000) % 1000:03d}"


def render_nodes(view: dict[str, Any]) -> str:
    lines = [LEGEND, _timestamp(), "Nodes:"]
    for i, node in enumerate(view["nodes"]):
        line = f"Node #{i:<3} - {node['address']:<15} - {'READY' if node['ready'] else 'UNAVAILABLE':<20}"
        if node["version"]:
            line += f" - Version: {catalog.imex_short_version(node['version'])}"
        lines.append(line)
    count = len(view["nodes"])
    lines += ["", (" Nodes From\\To  " + "".join(f"{i:<4}" for i in range(count))).rstrip()]
    for i, row in enumerate(view["matrix"]):
        lines.append((f"{i:>8}        " + "".join(f"{mark:<4}" for mark in row)).rstrip())
    lines += ["", f"Domain State: {view['state']}"]
    return "\n".join(lines) + "\n"


def imex_main(argv: list[str]) -> int:
    state = load()
    version = (state.get("imex") or {}).get("version")
    if not version:
        err("nvidia-imex: not installed")
        return 127
    if "--version" in argv or "-v" in argv:
        out(f"IMEX version is: {version}")
        return 0
    err("nvidia-imex: the daemon runs as the nvidia-imex service (systemctl start nvidia-imex)")
    return 1


def imex_ctl_main(argv: list[str]) -> int:
    state = load()
    if not (state.get("imex") or {}).get("version"):
        err("nvidia-imex-ctl: not installed")
        return 127
    if "-N" not in argv and "-q" not in argv:
        out(USAGE)
        return 1
    running = (state["services"].get("nvidia-imex") or {}).get("active")
    if "-q" in argv:
        out("READY" if running else "UNAVAILABLE")
        return 0 if running else 1
    if not running:
        err("Failed to connect to the IMEX daemon: is the nvidia-imex service running?")
        return 1
    if "-j" in argv:
        out(json.dumps(render_json(domain(state)), indent=2))
        return 0
    out(render_nodes(domain(state)), end="")
    return 0


_JSON_MARKS = {"C": "CONNECTED", "I": "INVALID", "N": "NEVER_CONNECTED", "!V!": "VERSION_MISMATCH", "!M!": "NODE_MAP_MISMATCH"}


def render_json(view: dict[str, Any]) -> dict[str, Any]:
    """`nvidia-imex-ctl -N -j`: the key names of NVIDIA's ai-cloud-validation docstring (an abridged shape, no capture)."""
    nodes = {}
    for i, node in enumerate(view["nodes"]):
        connections = {str(j): {"host": other["address"], "status": _JSON_MARKS[view["matrix"][i][j]], "changed": False}
                       for j, other in enumerate(view["nodes"])}
        entry = {"status": "READY" if node["ready"] else "UNAVAILABLE", "host": node["address"], "connections": connections, "changed": False}
        if node["version"]:
            entry["version"] = node["version"]
        nodes[str(i)] = entry
    return {"nodes": nodes, "timestamp": _timestamp(), "status": view["state"]}
