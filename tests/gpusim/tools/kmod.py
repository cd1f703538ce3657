"""Simulated kernel-module tools (modprobe, rmmod, lsmod, modinfo), nvidia-uninstall and dmesg."""

from __future__ import annotations

import hashlib
import sys
import time

from .. import catalog, secureboot
from .. import state as st
from ._common import fail, load, out, update

TYPE_CHECKING = False  # typing is not imported at run time: 4 ms of every simulated tool's start-up
if TYPE_CHECKING:
    from typing import Any

SIZES = {"nvidia": 56823808, "nvidia_modeset": 1314816, "nvidia_uvm": 1789952, "nvidia_drm": 94208,
         "nvidia_peermem": 16384}


def _users(state: dict[str, Any], mod: str) -> list[str]:
    return [m for m in st.MODULE_USERS.get(mod, ()) if m in state["modules"]]


def _held(state: dict[str, Any], mod: str) -> int:
    """Open handles on the module from outside nvidia-smi's view (the modules_busy fault: e.g. Xorg on /dev/nvidia0)."""
    return sum(1 for f in state["faults"] if f["kind"] == "modules_busy" and f.get("module", "nvidia") == mod)


def _in_use(state: dict[str, Any], mod: str) -> str | None:
    """None if removable, else the rmmod error."""
    users = _users(state, mod)
    if users:
        return f"rmmod: ERROR: Module {mod} is in use by: {' '.join(users)}"
    if (mod in ("nvidia", "nvidia_uvm") and state["processes"]) or _held(state, mod):
        return f"rmmod: ERROR: Module {mod} is in use"
    if mod == "nvidia" and state["services"]["nvidia-persistenced"]["active"]:
        return f"rmmod: ERROR: Module {mod} is in use"
    return None


def lsmod_main(argv: list[str]) -> int:
    state = load()
    lines = ["Module                  Size  Used by"]
    for m in reversed(state["modules"]):
        users = _users(state, m)
        count = len(users) + (len(state["processes"]) if m in ("nvidia", "nvidia_uvm") else 0) + _held(state, m)
        lines.append(f"{m:<19}{SIZES.get(m, 16384):>11}  {count}" + (f" {','.join(users)}" if users else ""))
    lines += ["ib_core               409600  8 rdma_cm,ib_ipoib,iw_cm,ib_umad,rdma_ucm,ib_uverbs,mlx5_ib,ib_cm"]
    out("\n".join(lines))
    return 0


def _unload(mods: list[str]) -> int:
    for mod in mods:
        state = load()
        if mod not in state["modules"]:
            continue
        msg = _in_use(state, mod)
        if msg:
            return mod  # type: ignore[return-value]
        update(lambda s, mod=mod: s["modules"].remove(mod))
    return 0


def rmmod_main(argv: list[str]) -> int:
    mods = [a for a in argv if not a.startswith("-")]
    if not mods:
        fail("rmmod: ERROR: missing module name.", 1)
    for mod in mods:
        state = load()
        if mod not in state["modules"]:
            fail(f"rmmod: ERROR: Module {mod} is not currently loaded", 1)
        msg = _in_use(state, mod)
        if msg:
            fail(msg, 1)
        update(lambda s, mod=mod: s["modules"].remove(mod))
        if mod == "nvidia":
            update(lambda s: st._refresh_derived(st.node_dir_from_env(), s))
    return 0


def modprobe_main(argv: list[str]) -> int:
    remove = any(a in ("-r", "--remove") for a in argv)
    mods = [a for a in argv if not a.startswith("-") and "=" not in a]
    if not mods:
        fail("modprobe: FATAL: Module name required.", 1)
    state = load()
    if remove:
        # modprobe -r removes the named modules and then their now-unused dependencies
        order = []
        for m in mods:
            order.append(m)
            if m in ("nvidia_drm",):
                order.append("nvidia_modeset")
            if m in ("nvidia_modeset", "nvidia_uvm", "nvidia_peermem"):
                order.append("nvidia")
        for m in order:
            state = load()
            if m not in state["modules"]:
                continue
            msg = _in_use(state, m)
            if msg:
                if m in mods:
                    fail(f"modprobe: FATAL: Module {m} is in use.", 1)
                continue
            update(lambda s, m=m: s["modules"].remove(m))
        return 0
    for m in mods:
        if m not in st.ALL_MODULES:
            fail(f"modprobe: FATAL: Module {m} not found in directory /lib/modules/{state['kernel']}", 1)
        if not state["driver"]["version"] or not state["driver"].get("built", True):
            fail(f"modprobe: FATAL: Module {m} not found in directory /lib/modules/{state['kernel']}", 1)
        # Each module's own signature is checked at its load (the driver's modules on disk share one signer).
        refused = secureboot.refusal(state) if m not in state["modules"] else None
        if refused:  # Secure Boot: the module's signature is not an enrolled key's (or there is none)
            update(lambda s, line=refused[1]: st.add_kernel_log(s, line))
            fail(f"modprobe: ERROR: could not insert '{m}': {refused[0]}", 1)
        if m == "nvidia_peermem" and m not in state["modules"]:
            from . import ofed  # built against another OFED than the kernel runs: its ib_* symbols do not resolve (issue 24)

            unresolved = ofed.peermem_refusal(state)
            if unresolved:
                update(lambda s, lines=unresolved: [st.add_kernel_log(s, line) for line in lines])
                fail(f"modprobe: ERROR: could not insert '{m}': Unknown symbol in module, or unknown parameter (see dmesg)", 1)
        deps = {"nvidia_drm": ("nvidia", "nvidia_modeset", "nvidia_drm"), "nvidia_modeset": ("nvidia", "nvidia_modeset"),
                "nvidia_uvm": ("nvidia", "nvidia_uvm"), "nvidia_peermem": ("nvidia", "nvidia_peermem")}.get(m, (m,))
        update(lambda s, deps=deps: st.load_modules(s, deps))
    return 0


def uninstall_main(argv: list[str]) -> int:
    state = load()
    if not state["driver"]["version"]:
        fail("ERROR: No NVIDIA driver is currently installed.", 1, "out")
    if state["processes"] or _held(state, "nvidia"):
        fail("ERROR: An NVIDIA kernel module 'nvidia' appears to be in use. Please exit any programs that may be "
             "using the GPU(s) before uninstalling the driver.", 1, "out")
    ver = state["driver"]["version"]

    def _remove(s: dict[str, Any]) -> None:
        s["modules"] = []
        s["driver"].update(version=None, loaded=False, method=None)
        s["services"]["nvidia-persistenced"].update(active=False)
        s["services"]["nvidia-fabricmanager"].update(active=False)

    update(_remove)
    out(f"Uninstalling NVIDIA Accelerated Graphics Driver for Linux-x86_64 ({ver}):\n\n"
        "WARNING: Your driver installation has been altered since it was initially installed; this may happen, for\n"
        "         example, if you have since installed the NVIDIA driver through a mechanism other than\n"
        "         nvidia-installer (such as your distribution's native package management system).\n\n"
        "Uninstallation of existing driver: NVIDIA Accelerated Graphics Driver for Linux-x86_64 "
        f"({ver}) is complete.")
    return 0


def dmesg_main(argv: list[str]) -> int:
    state = load()
    human = any(a in ("-T", "--ctime") for a in argv)
    lines = []
    for e in state["kernel_log"]:
        if human:
            stamp = time.strftime("%a %b %e %H:%M:%S %Y", time.localtime(e["t"]))
            lines.append(f"[{stamp}] {e['msg']}")
        else:
            lines.append(f"[{e['uptime']:12.6f}] {e['msg']}")
    if lines:
        out("\n".join(lines))
    return 0


# --- modinfo -----------------------------------------------------------------------------------

MODINFO_DEPENDS = {"nvidia": "", "nvidia_modeset": "nvidia", "nvidia_uvm": "nvidia",
                   "nvidia_drm": "nvidia-modeset,drm_kms_helper,drm", "nvidia_peermem": "nvidia,ib_core"}
NVIDIA_PARMS = ("NvSwitchRegDwords:NvSwitch regkey (charp)", "NvSwitchBlacklist:NvSwitchBlacklist=uuid[,uuid...] (charp)",
                "NVreg_ResmanDebugLevel:int", "NVreg_RmLogonRC:int", "NVreg_ModifyDeviceFiles:int",
                "NVreg_DeviceFileUID:int", "NVreg_DeviceFileGID:int", "NVreg_DeviceFileMode:int")


def installed_module(state: dict[str, Any]) -> dict[str, Any] | None:
    """The nvidia module on disk for the running kernel: the staged one (installed, loaded at the next boot) or the
    current one; None when no driver is installed or its module was never built."""
    drv = dict(state["driver"])
    drv.update(drv.get("staged") or {})
    if not drv.get("version") or not drv.get("built", True):
        return None
    return drv


def modinfo_lines(state: dict[str, Any], mod: str, drv: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, value) lines of `modinfo MOD` in the order modinfo prints them (real 590.44.01 open sample)."""
    ver = drv["version"]
    kernel = state["kernel"]
    where = "updates/dkms" if drv.get("dkms") or drv.get("method") == "package" else "kernel/drivers/video"
    src = hashlib.md5(f"{mod}/{ver}/{drv['flavor']}".encode()).hexdigest()[:23].upper()  # noqa: S324 - an id, not security
    lines = [("filename", f"/lib/modules/{kernel}/{where}/{mod.replace('_', '-')}.ko")]
    if mod == "nvidia":
        lines += [("import_ns", "DMA_BUF"), ("alias", "char-major-195-*")]
    lines += [("version", ver), ("supported", "external"),
              ("license", "Dual MIT/GPL" if drv["flavor"] == "open" else "NVIDIA")]
    if mod == "nvidia":
        b = catalog.branch(ver)
        if b >= 525:
            lines += [("firmware", f"nvidia/{ver}/gsp_tu10x.bin"), ("firmware", f"nvidia/{ver}/gsp_ga10x.bin")]
        elif b >= 510:
            lines.append(("firmware", f"nvidia/{ver}/gsp.bin"))
    lines.append(("srcversion", src))
    if mod == "nvidia":
        lines += [("alias", "pci:v000010DEd*sv*sd*bc06sc80i00*"), ("alias", "pci:v000010DEd*sv*sd*bc03sc02i00*"),
                  ("alias", "pci:v000010DEd*sv*sd*bc03sc00i00*")]
    lines += [("depends", MODINFO_DEPENDS[mod]), ("retpoline", "Y"), ("name", mod),
              ("vermagic", f"{kernel} SMP preempt mod_unload modversions")]
    lines += secureboot.modinfo_lines(drv.get("signature"))
    if mod == "nvidia":
        lines += [("parm", p) for p in NVIDIA_PARMS]
    return lines


def modinfo_main(argv: list[str]) -> int:
    field = None
    mods: list[str] = []
    it = iter(argv)
    for a in it:
        if a in ("-F", "--field"):
            field = next(it, None)
        elif a.startswith("--field="):
            field = a.split("=", 1)[1]
        elif a in ("-k", "--set-version", "-b", "--basedir"):
            next(it, None)
        elif a.startswith("-"):
            continue
        else:
            mods.append(a)
    if not mods:
        fail("modinfo: ERROR: missing module or filename.", 1)
    state = load()
    drv = installed_module(state)
    rc = 0
    for mod in mods:
        name = mod.replace("-", "_")
        if drv is None or name not in MODINFO_DEPENDS:
            sys.stderr.write(f"modinfo: ERROR: Module {mod} not found.\n")
            rc = 1
            continue
        for key, value in modinfo_lines(state, name, drv):
            if field is None:
                out(f"{key + ':':<16}{value}")
            elif key == field:
                out(value)
    return rc
