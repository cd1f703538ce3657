"""The node's software stack around the driver: ofed_info, ibstat, mokutil, dkms, nv-hostengine (issue 24).

Each prints the real tool's format (../shared/fixtures/real/stack/) from the node state's ``stack`` mapping:

    stack:
      ofed: {flavor: doca-ofed, version: 24.10-1.1.4.0.200}     # absent: the inbox stack (no ofed_info)
      ports: [{device: mlx5_0, ca_type: MT4129, fw: 28.39.1002, state: Active, physical_state: LinkUp,
               rate: 400, link_layer: InfiniBand}]             # absent: no ibstat (infiniband-diags not installed)
      secure_boot: {enabled: true, keys: [{sha1: <40 hex>, cn: DKMS module signing key}]}   # absent: no mokutil
      dkms: {kernel: 6.8.0-90-generic}                           # the NVIDIA module built for that kernel; absent: no dkms

A node without a ``stack`` (every spec so far) has none of these tools: each answers as the shell does for a
program that is not installed (exit 127), which gpu_facts reports as absent.
"""

from __future__ import annotations

from .. import catalog
from ._common import ToolExit, err, load, out

# ibstat prints the rate a port that is not Active last had, or its lowest (Rate: 10 on a Down / Disabled port).
DOWN_RATE = 10


def _stack(tool: str, part: str) -> dict:
    stack = load().get("stack") or {}
    if stack.get(part) is None:
        err(f"bash: {tool}: command not found")
        raise ToolExit(127)
    return stack


def ofed_info_main(argv: list[str]) -> int:
    ofed = _stack("ofed_info", "ofed")["ofed"]
    name = "MLNX_OFED_LINUX" if ofed.get("flavor") == "mlnx-ofed" else "OFED-internal"
    if "-n" in argv:
        out(ofed["version"])
    elif "-s" in argv:
        out(f"{name}-{ofed['version']}:")
    else:
        upstream = ofed["version"].rsplit(".", 1)[0]
        out(f"{name}-{ofed['version']} (OFED-{upstream}):\n")
    return 0


def ibstat_main(argv: list[str]) -> int:
    ports = _stack("ibstat", "ports")["ports"]
    lines = []
    for port in ports:
        active = port.get("state", "Active") == "Active"
        guid = "0x" + port["device"].encode().hex()[-16:].rjust(16, "0")
        lines += [
            f"CA '{port['device']}'",
            f"\tCA type: {port.get('ca_type', 'MT4129')}",
            "\tNumber of ports: 1",
            f"\tFirmware version: {port.get('fw', '28.39.1002')}",
            "\tHardware version: 0",
            f"\tNode GUID: {guid}",
            f"\tSystem image GUID: {guid}",
            "\tPort 1:",
            f"\t\tState: {port.get('state', 'Active')}",
            f"\t\tPhysical state: {port.get('physical_state', 'LinkUp')}",
            f"\t\tRate: {port.get('rate', 400) if active else DOWN_RATE}",
            f"\t\tBase lid: {port.get('lid', 1) if active else 65535}",
            "\t\tLMC: 0",
            f"\t\tSM lid: {1 if active else 0}",
            "\t\tCapability mask: 0xa751e848",
            f"\t\tPort GUID: {guid}",
            f"\t\tLink layer: {port.get('link_layer', 'InfiniBand')}",
        ]
    out("\n".join(lines))
    return 0


def mokutil_main(argv: list[str]) -> int:
    secure_boot = _stack("mokutil", "secure_boot")["secure_boot"]
    if "--sb-state" in argv:
        if secure_boot.get("enabled"):
            out("SecureBoot enabled")
            return 0
        out("SecureBoot disabled")
        return 1
    if "--list-enrolled" in argv:
        keys = secure_boot.get("keys") or []
        if not keys:
            out("MokListRT is empty")
            return 1
        for index, key in enumerate(keys, 1):
            pairs = ":".join(key["sha1"][i : i + 2] for i in range(0, 40, 2))
            out(f"[key {index}]\nSHA1 Fingerprint: {pairs}\nCertificate:\n    Data:\n        Subject: CN={key.get('cn', 'DKMS module signing key')}")
        return 0
    err("Usage: mokutil [--sb-state | --list-enrolled]")
    return 1


def dkms_main(argv: list[str]) -> int:
    state = load()
    dkms = _stack("dkms", "dkms")["dkms"]
    if argv[:1] in (["build"], ["install"]):
        from . import ofed  # rebuilding the NVIDIA modules against a new OFED (issue 24)

        return ofed.dkms_main(argv)
    if argv[:1] != ["status"]:
        err(f"Error! Unknown action: {' '.join(argv)}")
        return 1
    version = (state.get("driver") or {}).get("version")
    if version:
        out(f"nvidia/{version}, {dkms.get('kernel') or state['kernel']}, x86_64: installed")
    return 0


def hostengine_main(argv: list[str]) -> int:
    if "--version" not in argv:
        err("nv-hostengine: only --version is simulated")
        return 1
    version = catalog.DCGM_VERSION
    out(f"Version : {version}\nBuild ID : 1\nBuild Date : 2026-01-01\nBuild Type : RelWithDebInfo\nCommit ID : 0\nBranch Name : v{version}\nCPU Arch : x86_64")
    return 0
