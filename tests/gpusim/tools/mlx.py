"""Simulated NVIDIA/Mellanox firmware tools: mlxfwmanager, mlxfwreset, flint / mstflint.

NIC images are files written by artifacts.write_mlx_image (a JSON header line with psid, fw,
type, part_number). A burn stages the image; it runs after mlxfwreset level 3+ or a reboot."""

from __future__ import annotations

import json
import sys

from .. import catalog
from .. import state as st
from ._common import fail, load, out, scaled_sleep, update
from ._xml import quoteattr

TYPE_CHECKING = False  # typing is not imported at run time: 4 ms of every simulated tool's start-up
if TYPE_CHECKING:
    from typing import Any


def read_image(path: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.readline().decode())
        return data if isinstance(data, dict) and "psid" in data and "fw" in data else None
    except (OSError, ValueError):
        return None


def _find(state: dict[str, Any], dev: str) -> tuple[int, dict[str, Any]] | None:
    d = dev.lower()
    for i, nic in enumerate(state["nics"]):
        if d in (nic["mst"].lower(), nic["pci"].lower(), nic["pci"][5:].lower(), nic["mst"].rsplit("/", 1)[-1]):
            return i, nic
    return None


def _type_name(nic: dict[str, Any]) -> str:
    return nic["type"].replace("-", "").replace(" ", "")


def _flash_fw(nic: dict[str, Any]) -> str:
    return nic.get("staged_fw") or nic["fw"]


def _device_block(n: int, nic: dict[str, Any], avail: str, status: str) -> list[str]:
    _dev, desc, _fam = catalog.nic_info(nic["type"])
    lines = [f"Device #{n}:", "----------", "", f"  Device Type:      {_type_name(nic)}",
             f"  Part Number:      {nic['part_number']}", f"  Description:      {desc}",
             f"  PSID:             {nic['psid']}", f"  PCI Device Name:  {nic['mst']}",
             f"  Base MAC:         {nic['mac']}", f"  Versions:         {'Current':<15}{'Available':<14}",
             f"     {'FW':<16}{_flash_fw(nic):<15}{avail:<14}"]
    if nic.get("staged_fw"):
        lines.append(f"     {'FW (Running)':<16}{nic['fw']:<15}{'N/A':<14}")
    lines += [f"     {'PXE':<16}{nic['pxe']:<15}{'N/A':<14}", f"     {'UEFI':<16}{nic['uefi']:<15}{'N/A':<14}", "",
              f"  Status:           {status}", ""]
    return lines


def _unopenable(state: dict[str, Any], idx: int) -> bool:
    f = st.fault(state, "nic_unopenable")
    return bool(f) and int(f.get("nic", 0)) == idx


def _unopenable_block(n: int, nic: dict[str, Any]) -> list[str]:
    return [f"Device #{n}:", "----------", "", f"  Device Type:      {_type_name(nic)}", "  Part Number:      --",
            "  Description:      --", "  PSID:             ", f"  PCI Device Name:  {nic['mst']}", "  Base MAC:         --",
            f"  Versions:         {'Current':<15}{'Available':<14}", f"     {'FW':<16}{'--':<15}{'--':<14}", "",
            "  Status:           Failed to open device", ""]


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def fwmanager_main(argv: list[str]) -> int:
    state = load()
    dev = img = img_dir = None
    fmt = "text"
    do_update = yes = force = False
    i = 0
    while i < len(argv):
        a = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if a in ("-d", "--dev"):
            dev, i = nxt, i + 1
        elif a in ("-i", "--image"):
            img, i = nxt, i + 1
        elif a in ("-D", "--image-dir"):
            img_dir, i = nxt, i + 1
        elif a == "--query-format":
            fmt, i = (nxt or "").lower(), i + 1
        elif a in ("--query", "-q"):
            pass
        elif a in ("-u", "--update"):
            do_update = True
        elif a in ("-y", "--yes"):
            yes = True
        elif a in ("-f", "--force"):
            force = True
        elif a in ("--online", "--no-fw-ctrl", "--nofs"):
            pass
        elif a in ("-h", "--help"):
            out("Usage: mlxfwmanager [-d <device>] [-i <image>] [-D <dir>] [-u] [-y] [-f] [--query] "
                "[--query-format XML|Text] [--online]")
            return 0
        else:
            fail(f"-E- Unknown option: {a}. Run mlxfwmanager -h for usage.", 1, "out")
        i += 1
    nics = list(enumerate(state["nics"]))
    if dev:
        found = _find(state, dev)
        if not found:
            fail(f"-E- Failed to open device: {dev}, No such file or directory", 1, "out")
        nics = [found]
    images = []
    if img:
        image = read_image(img)
        if image is None:
            fail(f"-E- Failed to open image file: {img}", 1, "out")
        images.append((img, image))
    if img_dir:
        from pathlib import Path

        for p in sorted(Path(img_dir).glob("*.bin")):
            image = read_image(str(p))
            if image:
                images.append((str(p), image))
    plan = []
    for idx, nic in nics:
        if _unopenable(state, idx):
            plan.append((idx, nic, "--", "Failed to open device", None))
            continue
        match = [(p, im) for p, im in images if im["psid"] == nic["psid"]]
        avail = match[0][1]["fw"] if match else "N/A"
        if not match:
            status = "No matching image found"
        elif _vkey(avail) > _vkey(_flash_fw(nic)) or (force and avail != _flash_fw(nic)):
            status = "Update required"
        elif avail == _flash_fw(nic):
            status = "Up to date"
        else:
            status = "Forced update required" if force else "Up to date"
        plan.append((idx, nic, avail, status, match[0][0] if match else None))
    if fmt == "xml":
        lines = ['<?xml version="1.0" encoding="UTF-8" ?>', "<Devices>"]
        for _idx, nic, avail, status, _p in plan:
            _dev, desc, _fam = catalog.nic_info(nic["type"])
            if status == "Failed to open device":
                lines += [f"    <Device pciName={quoteattr(nic['mst'])} type={quoteattr(_type_name(nic))} psid=\"\" partNumber=\"--\">",
                          "      <Versions>", '        <FW current="--" available="--"/>', "      </Versions>",
                          '      <MACs Base_Mac="--" />', f"      <Status>{status}</Status>", "      <Description>--</Description>",
                          "    </Device>"]
                continue
            lines += [f"    <Device pciName={quoteattr(nic['mst'])} type={quoteattr(_type_name(nic))} "
                      f"psid={quoteattr(nic['psid'])} partNumber={quoteattr(nic['part_number'])}>",
                      "      <Versions>",
                      f'        <FW current="{_flash_fw(nic)}" available="{avail}"/>',
                      f'        <PXE current="{nic["pxe"]}" available="N/A"/>',
                      f'        <UEFI current="{nic["uefi"]}" available="N/A"/>',
                      "      </Versions>", f'      <MACs Base_Mac="{nic["mac"]}" />',
                      f"      <Status> {status} </Status>", f"      <Description>{desc}</Description>",
                      "    </Device>"]
        lines.append("</Devices>")
        out("\n".join(lines))
        return 0
    lines = ["Querying Mellanox devices firmware ...", ""]
    for n, (_idx, nic, avail, status, _p) in enumerate(plan, 1):
        lines += _unopenable_block(n, nic) if status == "Failed to open device" else _device_block(n, nic, avail, status)
    out("\n".join(lines).rstrip("\n"))
    if not do_update:
        return 0
    todo = [p for p in plan if p[3] in ("Update required", "Forced update required")]
    if not todo:
        out("\n---------\nFound 0 device(s) requiring firmware update...")
        return 0
    out(f"\n---------\nFound {len(todo)} device(s) requiring firmware update...\n")
    if not yes:
        out("Perform FW update? [y/N]: ", end="")
        sys.stdout.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            out("-I- Aborting...")
            return 0
    f = st.fault(state, "flash_fail")
    rc = 0
    for n, (idx, _nic, avail, _status, _p) in enumerate(todo, 1):
        out(f"Device #{n}: Updating FW ...     ")
        scaled_sleep(state["timing"].get("flash", 0))
        if f and f.get("target", "gpu") in ("nic", "any"):
            out("FSMST_INITIALIZE -   OK\nWriting Boot image component -   40%\n-E- Burning FS4 image failed: "
                "Failed to write to flash\nFailed")
            rc = 1
            continue
        update(lambda s, idx=idx, avail=avail: s["nics"][idx].__setitem__("staged_fw", avail))
        out("FSMST_INITIALIZE -   OK\nWriting Boot image component -   OK\nDone")
    out("\nRestart needed for updates to take effect.")
    return rc


def fwreset_main(argv: list[str]) -> int:
    state = load()
    dev = None
    level = 3
    yes = False
    cmd = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-d", "--device"):
            dev = argv[i + 1] if i + 1 < len(argv) else None
            i += 1
        elif a in ("-l", "--level"):
            level = int(argv[i + 1])
            i += 1
        elif a in ("-y", "--yes"):
            yes = True
        elif a in ("q", "query", "r", "reset"):
            cmd = "query" if a.startswith("q") else "reset"
        elif a in ("--sync", "-t", "--type"):
            i += 1
        else:
            fail(f"-E- Unknown argument: {a}", 1, "out")
        i += 1
    if not dev or not cmd:
        fail("-E- Missing device (-d) or command (query|reset)", 1, "out")
    found = _find(state, dev)
    if not found:
        fail(f"-E- Failed to open device: {dev}", 1, "out")
    idx, _nic = found
    if _unopenable(state, idx):
        fail(f"-E- Failed to open device: {dev}, Input/output error", 1, "out")
    no_live = st.fault(state, "nic_no_live_reset")
    live = not (no_live and int(no_live.get("nic", idx)) == idx)
    level3 = "-Supported" if live else "-Not Supported"
    if cmd == "query":
        out("Reset-levels:\n"
            "0: Driver, PCI link, network link will remain up (\"live-Patch\")  -Supported     (default)\n"
            "1: Only ARM side will not remain up (\"Immediate reset\").         -Not Supported\n"
            f"3: Driver restart and PCI reset                                  {level3}\n"
            "4: Warm Reboot                                                   -Supported\n")
        return 0
    names = {0: "Driver, PCI link, network link will remain up (\"live-Patch\")", 4: "Warm Reboot"}
    if live:
        names[3] = "Driver restart and PCI reset"
    if level not in names:
        fail(f"-E- Reset level {level} is not supported for device {dev}", 1, "out")
    out(f"\nThe reset level for device, {dev} is:\n\n{level}: {names[level]}")
    if not yes:
        out("Continue with reset?[y/N] ", end="")
        sys.stdout.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            out("-E- Aborted by user")
            return 1
    else:
        out("Continue with reset?[y/N] y")
    out("-I- Sending Reset Command To Fw             -Done\n-I- Stopping Driver                         -Done\n"
        "-I- Resetting PCI                           -Done\n-I- Starting Driver                         -Done\n"
        "-I- Restarting MST                          -Done")
    if level >= 3:
        def _act(s: dict[str, Any]) -> None:
            n = s["nics"][idx]
            if n.get("staged_fw"):
                n["fw"], n["staged_fw"] = n["staged_fw"], None
        update(_act)
    out("-I- FW was loaded successfully.")
    return 0


def _flint_query(psid: str, fw: str, running: str | None, guid: str, mac: str) -> str:
    lines = ["Image type:            FS4", f"FW Version:            {fw}"]
    if running and running != fw:
        lines.append(f"FW Version(Running):   {running}")
    lines += ["FW Release Date:       7.11.2024", f"Product Version:       {fw}",
              "Rom Info:              type=UEFI version=14.36.16 cpu=AMD64,AARCH64",
              "                       type=PXE version=3.7.500 cpu=AMD64",
              "Description:           UID                GuidsNumber",
              f"Base GUID:             {guid}        16", f"Base MAC:              {mac}            16",
              "Image VSD:             N/A", "Device VSD:            N/A", f"PSID:                  {psid}",
              "Security Attributes:   secure-fw"]
    return "\n".join(lines)


def flint_main(argv: list[str]) -> int:
    state = load()
    dev = img = None
    yes = False
    cmds = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-d", "--device"):
            dev = argv[i + 1] if i + 1 < len(argv) else None
            i += 1
        elif a in ("-i", "--image"):
            img = argv[i + 1] if i + 1 < len(argv) else None
            i += 1
        elif a in ("-y", "--yes"):
            yes = True
        elif a in ("q", "query", "v", "verify", "b", "burn"):
            cmds.append(a[0])
        elif a in ("full",):
            pass
        elif a in ("--allow_psid_change", "--use_fw", "--no_fw_ctrl"):
            pass
        else:
            fail(f"-E- Unknown argument: {a}", 1, "out")
        i += 1
    if not cmds:
        fail("-E- No command given. See flint -h for usage.", 1, "out")
    cmd = cmds[0]
    image = None
    if img:
        image = read_image(img)
        if image is None:
            fail(f"-E- Cannot open {img}: No such file or directory" if not _exists(img) else
                 f"-E- Cannot read image {img}: Invalid image format", 1, "out")
    if cmd in ("q", "v") and image and not dev:
        if cmd == "q":
            out(_flint_query(image["psid"], image["fw"], None, "N/A", "N/A"))
        else:
            out("\n     FS4 failsafe image\n\n     /0x00000000-0x0000001f (0x000020)/ (HW_POINTERS) - OK\n"
                "     /0x00001000-0x0000207f (0x001080)/ (BOOT2) - OK\n     /0x00500000-0x00dfffff (0x900000)/ "
                "(IMAGE) - OK\n\n-I- FW image verification succeeded. Image is bootable.")
        return 0
    if not dev:
        fail("-E- Missing device argument (-d).", 1, "out")
    found = _find(state, dev)
    if not found:
        fail(f"-E- Cannot open Device: {dev}. No such file or directory. MFE_CR_ERROR", 1, "out")
    idx, nic = found
    if _unopenable(state, idx):
        fail(f"-E- Cannot open Device: {dev}. Input/output error. MFE_CR_ERROR", 1, "out")
    if cmd == "q":
        out(_flint_query(nic["psid"], _flash_fw(nic), nic["fw"] if nic.get("staged_fw") else None,
                         nic["guid"], nic["mac"]))
        return 0
    if cmd == "v":
        out("\n     FS4 failsafe image\n\n-I- FW image verification succeeded. Image is bootable.")
        return 0
    if image is None:
        fail("-E- Burn command requires an image (-i).", 1, "out")
    if image["psid"] != nic["psid"]:
        fail(f"\n    Current FW version on flash:  {_flash_fw(nic)}\n    New FW version:               {image['fw']}\n\n"
             f"-E- PSID mismatch. The PSID on flash ({nic['psid']}) differs from the PSID in the given image "
             f"({image['psid']}).", 1, "out")
    out(f"\n    Current FW version on flash:  {_flash_fw(nic)}\n    New FW version:               {image['fw']}\n")
    if not yes:
        out(" Do you want to continue ? (y/n) [n] : ", end="")
        sys.stdout.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            fail("-E- Aborted by user", 1, "out")
    else:
        out(" Do you want to continue ? (y/n) [n] : y")
    scaled_sleep(state["timing"].get("flash", 0))
    f = st.fault(state, "flash_fail")
    if f and f.get("target", "gpu") in ("nic", "any"):
        fail("Burning FS4 image failed: Failed to write to flash -   40%\n-E- Burning FS4 image failed", 1, "out")
    update(lambda s: s["nics"][idx].__setitem__("staged_fw", image["fw"]))
    out("Burning FS4 FW image without signatures - OK\nRestoring signature                     - OK\n"
        "-I- To load new FW run mlxfwreset or reboot machine.")
    return 0


def _exists(path: str) -> bool:
    import os

    return os.path.exists(path)
