"""The simulated node's state: one JSON file per node plus the files derived from it.

Layout of NODE_DIR (made by gpusim.fleet, filled here):
  state.json              the state (written atomically under an fcntl lock on state.lock)
  proc_driver/nvidia/version   /proc/driver/nvidia/version (folder exists only while loaded)
  boot_id                 /proc/sys/kernel/random/boot_id (rewritten in place: bind-mount target)
  reboot.request          written by shutdown/reboot and the BMC's resets, consumed by the supervisor
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import time
from pathlib import Path

from . import catalog, firmware, ofed, secureboot

TYPE_CHECKING = False  # typing is not imported at run time: 4 ms of every simulated tool's start-up
if TYPE_CHECKING:
    from typing import Any, Callable

STATE_FILE = "state.json"
LOCK_FILE = "state.lock"
REBOOT_REQUEST = "reboot.request"
DEFAULT_NODE_DIR = "/var/lib/gpusim"

DEFAULT_TIMING = {"reboot": 5.0, "flash": 2.0, "diag": {"1": 1.0, "2": 3.0, "3": 6.0, "4": 10.0},
                  "burn": 1.0, "nccl": 1.0, "bmc_reset": 3.0, "aux_power_cycle": 6.0}
DEFAULT_PERF = {"nccl_busbw_gbps": None}  # None: derived from the GPU model and NVLink count

DRIVER_MODULES = ("nvidia", "nvidia_modeset", "nvidia_uvm", "nvidia_drm")
ALL_MODULES = (*DRIVER_MODULES, "nvidia_peermem")
# module -> modules that use it (rmmod refuses while any of these is loaded)
MODULE_USERS = {"nvidia": ("nvidia_modeset", "nvidia_uvm", "nvidia_peermem"),
                "nvidia_modeset": ("nvidia_drm",), "nvidia_uvm": (), "nvidia_drm": (), "nvidia_peermem": ()}

FAULT_KINDS = (
    "dkms_fail", "no_return", "gpu_missing", "xid79", "xid48", "xid119", "ecc_dbe", "fm_mismatch",
    "fm_inactive", "dcgm_fail", "nccl_low", "thermal_slowdown", "flash_fail", "psid_mismatch",
    "gpu_process", "headers_missing", "modules_busy", "bmc_unresponsive", "nic_no_live_reset",
    "nic_unopenable", "reboot_lost", "fabric_insufficient_resources", "fabric_unhealthy", "fabric_in_progress",
)
# Kinds that describe a lasting condition the tools consult (kept in state["faults"]).
_STANDING = {"dkms_fail", "no_return", "dcgm_fail", "nccl_low", "thermal_slowdown", "flash_fail",
             "headers_missing", "modules_busy", "bmc_unresponsive", "nic_no_live_reset",
             "nic_unopenable", "reboot_lost", "fabric_insufficient_resources", "fabric_unhealthy", "fabric_in_progress"}
# Standing kinds that a reboot ends (modules_busy: the process holding /dev/nvidia* dies with the node).
_CLEARED_AT_BOOT = {"modules_busy"}
# Kinds whose default trigger is the next boot rather than now.
_DEFAULT_WHEN = {"no_return": "boot"}


def node_dir_from_env() -> Path:
    return Path(os.environ.get("GPUSIM_NODE_DIR", DEFAULT_NODE_DIR))


# --- creation ----------------------------------------------------------------------------------

def _gpu(node: str, model: catalog.GpuModel, index: int, vbios: str) -> dict[str, Any]:
    return {
        "index": index, "uuid": catalog.gpu_uuid(node, index), "serial": catalog.gpu_serial(node, index),
        "pci_bus_id": catalog.pci_bus_id(index, model), "vbios": vbios, "present": True, "fell_off": False,
        "ecc": {"volatile_sbe": 0, "volatile_dbe": 0, "aggregate_sbe": 0, "aggregate_dbe": 0},
        "remapped": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "retired": {"sbe": 0, "dbe": 0, "pending": False},
        "temp_c": 30 + (index * 3) % 8, "thermal_slowdown": False,
    }


def new_node_state(node_spec: dict[str, Any], nodes_root: Path | str | None = None) -> dict[str, Any]:
    """Build the initial state of a node from its node spec (gpusim.spec: Fleet.nodes[i].spec).

    nodes_root: the folder holding every node's NODE_DIR (the fleet's workdir/nodes): a multi-node NVLink tray reads
    the other trays of its domain there (nvidia-imex-ctl -N)."""
    name = node_spec["name"]
    model = catalog.gpu_model(node_spec.get("gpu_model") or "NVIDIA H100 80GB HBM3")
    count = int(node_spec.get("gpu_count", 8))
    vbios = node_spec.get("vbios") or model.vbios
    driver = node_spec.get("driver")
    flavor = node_spec.get("kernel_module") or "open"
    nvswitch = bool(node_spec.get("nvswitch", count == 8 and model.nvlinks > 0))
    fm = node_spec.get("fabricmanager")
    timing = copy.deepcopy(DEFAULT_TIMING)
    for k, v in (node_spec.get("timing") or {}).items():
        if k == "diag" and isinstance(v, dict):
            timing["diag"].update({str(a): float(b) for a, b in v.items()})
        else:
            timing[k] = v
    perf = dict(DEFAULT_PERF)
    perf.update(node_spec.get("perf") or {})
    nics = []
    for i, nic in enumerate(node_spec.get("nics") or []):
        bus = catalog.NIC_BUSES[i] if i < len(catalog.NIC_BUSES) else f"{0xE8 + i:02X}"
        dev_id, _desc, _fam = catalog.nic_info(nic.get("type", "ConnectX-7"))
        nics.append({
            "type": nic.get("type", "ConnectX-7"), "psid": nic["psid"], "part_number": nic["part_number"],
            "fw": nic["fw"], "staged_fw": None, "pci": f"0000:{bus}:00.0", "mst": f"/dev/mst/mt{dev_id}_pciconf{i}",
            "guid": catalog.nic_guid(name, i), "mac": catalog.nic_mac(name, i),
            "pxe": "3.7.0300", "uefi": "14.33.0010",
        })
    state: dict[str, Any] = {
        "schema": 1,
        "name": name,
        "sku": node_spec.get("sku", ""),
        "kernel": node_spec.get("kernel") or "5.15.0-119-generic",
        "kernel_headers": True,
        "gpu_model": model.name,
        "nvswitch": nvswitch,
        "gpus": [_gpu(name, model, i, vbios) for i in range(count)],
        "driver": {
            "version": driver, "flavor": flavor, "loaded": bool(driver), "staged": None,
            "method": "runfile" if driver else None, "dkms": False, "build_date": _build_date(driver),
            # The version of the nvidia module loaded last: a load of another version is an upgrade
            # (faults "when: upgrade" fire then, however the new driver was activated).
            "last_loaded": driver,
        },
        "modules": list(DRIVER_MODULES) if driver else [],
        "fabricmanager": {"version": fm, "staged": None} if fm else None,
        "services": {
            "nvidia-fabricmanager": {"enabled": bool(fm), "active": bool(fm and nvswitch and fm == driver),
                                     "since": time.time(), "pid": 4000 + len(name), "failed_reason": None},
            "nvidia-persistenced": {"enabled": bool(driver), "active": bool(driver), "since": time.time(),
                                    "pid": 3100, "failed_reason": None},
            "nvidia-dcgm": {"enabled": True, "active": True, "since": time.time(), "pid": 3200,
                            "failed_reason": None},
        },
        "gpu_firmware": {},
        "nics": nics,
        "faults": [],
        "pending_faults": [],
        "kernel_log": [],
        "processes": [],
        "timing": timing,
        "perf": perf,
        "boot_id": _new_boot_id(),
        "booted_at": time.time(),
        "boot_count": 0,
        "down": False,
        "installer_log": None,
    }
    state["gpu_firmware"] = firmware.init(state, node_spec.get("gpu_firmware") or "HGX-22.10-1", nvswitch,
                                          node_spec.get("bmc_firmware"), node_spec.get("bios"), tray=model.mnnvl)
    if model.mnnvl:
        _init_mnnvl(state, node_spec, nodes_root)
    if driver:
        _log_driver_load(state)
    if fm:
        _fm_check(state)
    for fault in node_spec.get("faults") or []:
        params = {k: v for k, v in fault.items() if k != "kind"}
        apply_fault(state, fault["kind"], **params)
    if node_spec.get("secure_boot"):
        secureboot.init(state, node_spec["secure_boot"])
    if node_spec.get("ofed"):
        ofed.init(state, node_spec["ofed"])  # MLNX_OFED / DOCA-OFED (gpusim/ofed.py)
    return state


def _init_mnnvl(state: dict[str, Any], node_spec: dict[str, Any], nodes_root: Path | str | None) -> None:
    """A GB200 / GB300 NVL72 compute tray: its NVLink domain, IMEX pinned to the driver, CDMM (issue 23).

    node_spec["nvlink"]: {"domain", "clique_id", "members": [{"name", "address"}]} (gpusim.spec); a tray outside any
    domain spec is a domain of its own. No fabric manager runs on the tray (NMX-C runs it on the switch trays).
    """
    link = dict(node_spec.get("nvlink") or {})
    domain = link.get("domain") or state["name"]
    members = link.get("members") or [{"name": state["name"], "address": "127.0.0.1"}]
    state["nvlink"] = {
        "domain": domain, "cluster_uuid": catalog.cluster_uuid(domain), "clique_id": int(link.get("clique_id", 1)),
        "members": [dict(m) for m in members], "nodes_root": str(nodes_root) if nodes_root else None,
    }
    imex = node_spec.get("imex", state["driver"]["version"])  # the package installed with the driver, held at it
    state["imex"] = {"version": imex}
    state["driver"]["cdmm_mode"] = node_spec.get("cdmm")  # NVreg_CoherentGPUMemoryMode of the loaded module
    state["services"]["nvidia-imex"] = {"enabled": bool(imex), "active": False, "since": time.time(), "pid": 5100,
                                        "failed_reason": None}
    imex_check(state)


def imex_check(state: dict[str, Any]) -> bool:
    """Start or fail nvidia-imex: it refuses to run unless its version is the loaded driver's (NVIDIA's docs)."""
    svc = state["services"].get("nvidia-imex")
    if svc is None:
        return False
    version = (state.get("imex") or {}).get("version")
    ok = bool(svc["enabled"] and version and driver_loaded(state) and version == state["driver"]["version"])
    state["imex"]["running"] = version if ok else None  # what the daemon runs until its next start
    svc.update(active=ok, since=time.time(),
               failed_reason=None if ok else ("nodriver" if not driver_loaded(state) else "version" if version else "absent"))
    return ok


def node_modprobe_option(state: dict[str, Any], name: str) -> str | None:
    """The value of `options nvidia <name>=<v>` in the node's own /etc/modprobe.d (its overlay), None when unset."""
    link = state.get("nvlink") or {}
    if not link.get("nodes_root"):
        return None
    folder = Path(link["nodes_root"]) / state["name"] / "disk" / "etc" / "upper" / "modprobe.d"
    value = None
    for conf in sorted(folder.glob("*.conf")) if folder.is_dir() else ():
        for line in conf.read_text(errors="replace").splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) >= 3 and words[0] == "options" and words[1] == "nvidia":
                for word in words[2:]:
                    key, _sep, val = word.partition("=")
                    if key == name:
                        value = val
    return value


def peer_state(state: dict[str, Any], name: str) -> dict[str, Any] | None:
    """Another tray's state (the simulated nodes share one machine), None when it cannot be read."""
    if name == state["name"]:
        return state
    root = (state.get("nvlink") or {}).get("nodes_root")
    if not root:
        return None
    try:
        return load(Path(root) / name)
    except (OSError, ValueError):
        return None


def _build_date(version: str | None) -> str | None:
    if not version:
        return None
    days = sum(int(p) for p in version.split(".")) % 27 + 1
    return f"Tue Jun {days:2d} 22:55:48 UTC 2024"


# --- persistence -------------------------------------------------------------------------------

@contextlib.contextmanager
def locked(node_dir: Path | str):
    node_dir = Path(node_dir)
    node_dir.mkdir(parents=True, exist_ok=True)
    with open(node_dir / LOCK_FILE, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def load(node_dir: Path | str) -> dict[str, Any]:
    with open(Path(node_dir) / STATE_FILE) as fh:
        return json.load(fh)


def _write(node_dir: Path, state: dict[str, Any]) -> None:
    tmp = node_dir / f".{STATE_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(tmp, node_dir / STATE_FILE)
    _refresh_derived(node_dir, state)


def save(node_dir: Path | str, state: dict[str, Any]) -> None:
    node_dir = Path(node_dir)
    with locked(node_dir):
        _write(node_dir, state)


def update(node_dir: Path | str, fn: Callable[[dict[str, Any]], Any]) -> Any:
    """Load, call fn(state) (which mutates it), save; all under the lock. Returns fn's result."""
    node_dir = Path(node_dir)
    with locked(node_dir):
        state = load(node_dir)
        result = fn(state)
        _write(node_dir, state)
    return result


def proc_version_text(state: dict[str, Any]) -> str:
    drv = state["driver"]
    ver = drv["version"]
    if drv["flavor"] == "open":
        head = f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {ver}  Release Build  (dvs-builder@U16-I3-B03-4-3)  {drv['build_date']}"
    else:
        head = f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {ver}  {drv['build_date']}"
    return head + "\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n"


# uuid and shutil are imported where they are used: every simulated tool imports this module, and the rollout tests
# run those tools thousands of times (tools/_xml.py says what their start-up costs).
def _new_boot_id() -> str:
    import uuid

    return str(uuid.uuid4())


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _refresh_derived(node_dir: Path, state: dict[str, Any]) -> None:
    proc = node_dir / "proc_driver"
    nv = proc / "nvidia"
    proc.mkdir(exist_ok=True)
    if driver_loaded(state):
        nv.mkdir(exist_ok=True)
        (nv / "version").write_text(proc_version_text(state))
    elif nv.exists():
        _rmtree(nv)
    params = nv / "params"
    if driver_loaded(state) and "imex" in state:
        params.write_text(params_text(state))
    # The nvidia module lists the NVSwitches it drives under /proc/driver/nvidia-nvswitch/devices.
    switches = proc / "nvidia-nvswitch"
    if driver_loaded(state) and state.get("nvswitch"):
        devices = switches / "devices"
        devices.mkdir(parents=True, exist_ok=True)
        for n in range(4):
            (devices / f"0000:{0x05 + n:02x}:00.0").mkdir(exist_ok=True)
    elif switches.exists():
        _rmtree(switches)
    # boot_id and osrelease are bind-mount targets: rewrite in place, never rename.
    _write_in_place(node_dir / "boot_id", state["boot_id"] + "\n")
    _write_in_place(node_dir / "osrelease", state["kernel"] + "\n")


def params_text(state: dict[str, Any]) -> str:
    """/proc/driver/nvidia/params of a tray: a few of the module's parameters in the driver's `Name: value` form, and
    CoherentGPUMemoryMode (`CoherentGPUMemoryMode: "driver"`, the stas00 GB300 capture) when the module option sets it."""
    lines = ["ResmanDebugLevel: 4294967295", "RmLogonRC: 1", "ModifyDeviceFiles: 1", "DeviceFileUID: 0", "DeviceFileGID: 0",
             "DeviceFileMode: 438", 'RegistryDwords: ""']
    mode = state["driver"].get("cdmm_mode")
    if mode:
        lines.append(f'CoherentGPUMemoryMode: "{mode}"')
    return "\n".join(lines) + "\n"


def _write_in_place(path: Path, text: str) -> None:
    with open(path, "a+") as fh:
        fh.seek(0)
        if fh.read() != text:
            fh.seek(0)
            fh.truncate()
            fh.write(text)


# --- queries used by the tools -----------------------------------------------------------------

def driver_loaded(state: dict[str, Any]) -> bool:
    return bool(state["driver"]["version"]) and "nvidia" in state["modules"]


def visible_gpus(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [g for g in state["gpus"] if g["present"]]


def fault(state: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for f in state["faults"]:
        if f["kind"] == kind:
            return f
    return None


def dkms_fails(state: dict[str, Any], version: str | None) -> bool:
    """Whether building the driver's kernel module fails for version: the dkms_fail fault, for every version or
    only the one its `version` names (so that the rollback to another one builds)."""
    f = fault(state, "dkms_fail")
    return bool(f) and (not f.get("version") or str(f["version"]) == str(version))


def now_kmsg_ts(state: dict[str, Any]) -> float:
    return max(0.0, time.time() - state["booted_at"]) + 5.0


def add_kernel_log(state: dict[str, Any], message: str) -> None:
    state["kernel_log"].append({"t": time.time(), "uptime": round(now_kmsg_ts(state), 6), "msg": message})


def _log_driver_load(state: dict[str, Any]) -> None:
    drv = state["driver"]
    if drv["flavor"] == "open":
        add_kernel_log(state, f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {drv['version']}  "
                              f"Release Build  (dvs-builder@U16-I3-B03-4-3)  {drv['build_date']}")
    else:
        add_kernel_log(state, f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {drv['version']}  {drv['build_date']}")


def load_modules(state: dict[str, Any], names: tuple[str, ...] = DRIVER_MODULES) -> None:
    """Load the driver's modules (modprobe, nvidia-smi's autoload, boot). When the nvidia module loads at a
    version other than the one loaded last (a new driver: installed in place and loaded, or staged and booted),
    the faults declared `when: upgrade` fire, once."""
    drv = state["driver"]
    if not drv["version"]:
        return
    refused = secureboot.refusal(state)
    if refused:  # Secure Boot: the kernel refuses modules no enrolled key signed (boot, modprobe, nvidia-smi's autoload)
        add_kernel_log(state, refused[1])
        return
    first = "nvidia" not in state["modules"]
    for m in names:
        if m not in state["modules"]:
            state["modules"].append(m)
    if first:
        if "imex" in state:
            state["driver"]["cdmm_mode"] = node_modprobe_option(state, "NVreg_CoherentGPUMemoryMode") or state["driver"].get("cdmm_mode")
        _log_driver_load(state)
        previous = drv.get("last_loaded", drv["version"])
        drv["last_loaded"] = drv["version"]
        if previous != drv["version"]:
            _fire_pending(state, "upgrade")


def take_lost_reboot(state: dict[str, Any]) -> bool:
    """Whether a reboot request from Slurm is to be dropped (fault reboot_lost); consumes one of its count."""
    f = fault(state, "reboot_lost")
    if f is None:
        return False
    left = int(f.get("count", 1)) - 1
    if left > 0:
        f["count"] = left
    else:
        state["faults"].remove(f)
    return True


def _fire_pending(state: dict[str, Any], when: str) -> None:
    """Activate the pending faults declared for `when` (boot | upgrade), in their order, once."""
    pending = []
    for f in state["pending_faults"]:
        if f["when"] == when:
            params = {k: v for k, v in f.items() if k not in ("kind", "when")}
            _activate_fault(state, f["kind"], params)
        else:
            pending.append(f)
    state["pending_faults"] = pending


def _xid_prefix(gpu: dict[str, Any]) -> str:
    # 00000000:18:00.0 -> PCI:0000:18:00 (the kernel prints the bus id lower-case)
    dom, bus, devfn = gpu["pci_bus_id"].split(":")
    return f"PCI:{dom[-4:]}:{bus.lower()}:{devfn.split('.')[0]}"


def _gpu_by_index(state: dict[str, Any], idx: Any) -> dict[str, Any]:
    if idx is None:
        idx = 0
    return state["gpus"][int(idx)]


# --- faults ------------------------------------------------------------------------------------

def apply_fault(state: dict[str, Any], kind: str, **params: Any) -> dict[str, Any]:
    """Inject a fault. params: `when` = now (default) | boot | upgrade; per-kind options.

    - gpu_missing(gpu=last), xid79(gpu=0), xid48(gpu=0), xid119(gpu=0), ecc_dbe(gpu=0, count=1)
    - fm_mismatch(version=<driver with patch-1>), fm_inactive()
    - dcgm_fail(test="Memory", gpu=0, level=2), nccl_low(factor=0.4), thermal_slowdown(gpu=last)
    - flash_fail(target="gpu"|"nic"|"any", percent=40), psid_mismatch(nic=0, psid=...), gpu_process(gpu=0,
      pid, name, mem_mib), dkms_fail(version=any: only installs of that driver version fail), headers_missing(),
      no_return() (when: boot by default; when: upgrade: the boot that loads a new driver does not come back)
    - modules_busy(module="nvidia", holder="Xorg", pid=2222): rmmod of that module refuses ("Module nvidia is in
      use") although nvidia-smi lists no GPU process (a /dev/nvidia* handle held by a non-CUDA process); ends at boot
    - flash_fail(percent=40): a BMC firmware update task ends in Exception at that percentage, the components
      before it staged, the one being flashed failed, the rest not touched
    - bmc_unresponsive(): the node's BMC stops answering (connections are not accepted) until the fault is cleared
    - nic_no_live_reset(nic=any): mlxfwreset query lists level 3 (driver restart and PCI reset) as Not Supported
      for that NIC (all NICs when nic is not given), as on a card whose driver or host cannot sync a live reset;
      only a reboot (level 4) runs new firmware there
    - nic_unopenable(nic=0): the NIC's configuration space cannot be opened (a wedged card, a VF passed through):
      mlxfwmanager lists it with "--" fields and Status "Failed to open device", flint -d and mlxfwreset -d fail
    - reboot_lost(count=1): the next `count` reboot requests Slurm sends the node (RebootProgram) are lost, as when
      REQUEST_REBOOT_NODES reaches a slurmd that is busy or restarting: slurmctld shows the reboot issued, the node
      never goes down, and Slurm would set it DOWN "reboot timed out" after ResumeTimeout. Reboots asked any other
      way (shutdown -r, the BMC) are not affected. `when: upgrade` drops the first ones after the new driver's boot.
    Returns the state.
    """
    if kind not in FAULT_KINDS:
        raise ValueError(f"gpusim: unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")
    when = params.pop("when", _DEFAULT_WHEN.get(kind, "now"))
    if when not in ("now", "boot", "upgrade"):
        raise ValueError(f"gpusim: fault 'when' must be now, boot or upgrade, not {when!r}")
    if when != "now":
        state["pending_faults"].append({"kind": kind, "when": when, **params})
        return state
    _activate_fault(state, kind, params)
    return state


def clear_faults(state: dict[str, Any], kind: str | None = None) -> dict[str, Any]:
    state["faults"] = [f for f in state["faults"] if kind and f["kind"] != kind]
    state["pending_faults"] = [f for f in state["pending_faults"] if kind and f["kind"] != kind]
    return state


def _activate_fault(state: dict[str, Any], kind: str, params: dict[str, Any]) -> None:
    gpus = state["gpus"]
    if kind in _STANDING:
        if kind == "thermal_slowdown":
            g = _gpu_by_index(state, params.get("gpu", len(gpus) - 1))
            g["thermal_slowdown"] = True
            g["temp_c"] = 87
            params = {"gpu": g["index"], **params}
        state["faults"] = [f for f in state["faults"] if f["kind"] != kind]
        state["faults"].append({"kind": kind, **params})
        return
    if kind == "gpu_missing":
        g = _gpu_by_index(state, params.get("gpu", len(gpus) - 1))
        g["present"] = False
    elif kind == "xid79":
        g = _gpu_by_index(state, params.get("gpu"))
        g["fell_off"] = True
        add_kernel_log(state, f"NVRM: GPU at PCI:{g['pci_bus_id'][4:].lower()[:-2]}: {g['uuid']}")
        add_kernel_log(state, f"NVRM: Xid ({_xid_prefix(g)}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
        add_kernel_log(state, f"NVRM: GPU {g['pci_bus_id'][4:].lower()}: GPU has fallen off the bus.")
    elif kind in ("xid48", "ecc_dbe"):
        g = _gpu_by_index(state, params.get("gpu"))
        n = int(params.get("count", 1))
        g["ecc"]["volatile_dbe"] += n
        g["ecc"]["aggregate_dbe"] += n
        model = catalog.gpu_model(state["gpu_model"])
        if model.arch == "Volta":
            g["retired"]["dbe"] += n
            g["retired"]["pending"] = True
        else:
            g["remapped"]["uncorrectable"] += n
            g["remapped"]["pending"] = True
        if kind == "xid48":
            add_kernel_log(state, f"NVRM: Xid ({_xid_prefix(g)}): 48, pid='<unknown>', name=<unknown>, An uncorrectable "
                                  "double bit error (DBE) has been detected on GPU in the framebuffer at physAddr "
                                  "0x18f31d80 partition 16, subpartition 3.")
            if model.arch != "Volta":
                add_kernel_log(state, f"NVRM: Xid ({_xid_prefix(g)}): 63, pid='<unknown>', name=<unknown>, Row Remapper: "
                                      "New row (0x0000000018f31d80) marked for remapping, reset gpu to activate.")
    elif kind == "xid119":
        g = _gpu_by_index(state, params.get("gpu"))
        add_kernel_log(state, f"NVRM: Xid ({_xid_prefix(g)}): 119, pid=3849, name=nvidia-smi, Timeout after 6s of "
                              f"waiting for RPC response from GPU{g['index']} GSP! Expected function 76 (GSP_RM_CONTROL) "
                              "(0x20802a02 0x8).")
    elif kind == "fm_mismatch":
        drv = state["driver"]["version"] or "550.90.07"
        parts = drv.split(".")
        parts[-1] = f"{max(0, int(parts[-1]) - 1):02d}"
        version = params.get("version") or ".".join(parts)
        if state["fabricmanager"] is None:
            state["fabricmanager"] = {"version": version, "staged": None}
        state["fabricmanager"]["version"] = version
        _fm_check(state)
    elif kind == "fm_inactive":
        svc = state["services"]["nvidia-fabricmanager"]
        svc["active"] = False
        svc["failed_reason"] = None
        svc["since"] = time.time()
    elif kind == "psid_mismatch":
        nic = state["nics"][int(params.get("nic", 0))]
        nic["psid"] = params.get("psid") or "MT_0000000999"
    elif kind == "gpu_process":
        g = _gpu_by_index(state, params.get("gpu"))
        state["processes"].append({
            "pid": int(params.get("pid", 424242)), "name": params.get("name", "python3"),
            "gpu": g["index"], "mem_mib": int(params.get("mem_mib", 30712)),
        })


def _fm_check(state: dict[str, Any]) -> None:
    """Start the fabric manager service the way its unit would: fail on a version mismatch."""
    svc = state["services"]["nvidia-fabricmanager"]
    fm = state["fabricmanager"]
    drv = state["driver"]["version"]
    svc["since"] = time.time()
    if not fm:
        svc["active"] = False
        svc["failed_reason"] = "notinstalled"
        return
    if not driver_loaded(state):
        svc["active"] = False
        svc["failed_reason"] = "nodriver"
    elif fm["version"] != drv:
        svc["active"] = False
        svc["failed_reason"] = "mismatch"
    elif not state["nvswitch"]:
        svc["active"] = False
        svc["failed_reason"] = "nothing_to_do"
    else:
        svc["active"] = True
        svc["failed_reason"] = None
        svc["pid"] = 4000 + int(time.time()) % 50000


def start_service(state: dict[str, Any], name: str) -> bool:
    svc = state["services"][name]
    if name == "nvidia-fabricmanager":
        _fm_check(state)
        return svc["active"]
    if name == "nvidia-imex":
        return imex_check(state)
    if name == "nvidia-persistenced" and not driver_loaded(state):
        svc["active"] = False
        svc["failed_reason"] = "nodriver"
        return False
    svc["active"] = True
    svc["failed_reason"] = None
    svc["since"] = time.time()
    svc["pid"] = 3000 + int(time.time()) % 50000
    return True


# --- boot --------------------------------------------------------------------------------------

def boot(node_dir: Path | str, power_cycle: bool = False) -> bool:
    """Simulate the node coming up after a reboot (an AC power cycle with power_cycle). False when the node
    must not come back. A reboot activates the staged firmware firmware.ACTIVATES["host_reboot"] names, a
    power cycle all staged firmware."""

    def _boot(state: dict[str, Any]) -> bool:
        drv = state["driver"]
        # This boot loads a new driver (a staged one, or one installed while unloaded) when its nvidia module
        # differs from the one loaded last: a no_return declared "when: upgrade" keeps it down then.
        next_version = (drv.get("staged") or {}).get("version") or drv["version"]
        upgrading = bool(next_version) and next_version != drv.get("last_loaded", drv["version"])
        if fault(state, "no_return") or any(
                f["kind"] == "no_return" and (f["when"] == "boot" or upgrading) for f in state["pending_faults"]):
            state["down"] = True
            return False
        if drv.get("staged"):
            drv.update(drv["staged"])
            drv["staged"] = None
        fm = state.get("fabricmanager")
        if fm and fm.get("staged"):
            fm["version"] = fm["staged"]
            fm["staged"] = None
        firmware.activate(state, "ac_power_cycle" if power_cycle else "host_reboot")
        for nic in state["nics"]:
            if nic.get("staged_fw"):
                nic["fw"] = nic["staged_fw"]
                nic["staged_fw"] = None
        ofed.boot(state)  # the installed OFED stack loads
        state["boot_id"] = _new_boot_id()
        state["booted_at"] = time.time()
        state["boot_count"] += 1
        state["down"] = False
        state["kernel_log"] = []
        state["processes"] = []
        state["modules"] = []
        state["faults"] = [f for f in state["faults"] if f["kind"] not in _CLEARED_AT_BOOT]
        for g in state["gpus"]:
            g["fell_off"] = False
            g["ecc"]["volatile_sbe"] = 0
            g["ecc"]["volatile_dbe"] = 0
            if g["remapped"]["pending"]:  # a reset activates the remapping
                g["remapped"]["pending"] = False
                g["remapped"]["correctable"] += 0
            g["retired"]["pending"] = False
        if drv["version"] and drv.get("built", True):
            load_modules(state)  # a new driver's first load fires the faults "when: upgrade"
        _fire_pending(state, "boot")
        for name in ("nvidia-persistenced", "nvidia-dcgm"):
            if state["services"][name]["enabled"]:
                start_service(state, name)
        svc = state["services"]["nvidia-fabricmanager"]
        if svc["enabled"]:
            _fm_check(state)
        else:
            svc["active"] = False
        if "nvidia-imex" in state["services"]:
            imex_check(state)
        return True

    node_dir = Path(node_dir)
    ok = update(node_dir, _boot)
    with contextlib.suppress(FileNotFoundError):
        (node_dir / REBOOT_REQUEST).unlink()
    return ok


def request_reboot(node_dir: Path | str, delay_s: float, action: str = "reboot") -> None:
    node_dir = Path(node_dir)
    tmp = node_dir / f".{REBOOT_REQUEST}.tmp"
    tmp.write_text(json.dumps({"requested_at": time.time(), "delay_s": delay_s, "action": action}))
    os.replace(tmp, node_dir / REBOOT_REQUEST)
