"""A node's firmware components: what the BMC's FirmwareInventory lists, what is staged, and which
reset makes staged firmware the running one.

One source of truth, so that nvidia-smi, Redfish and nvfwupd agree: a GPU's firmware version is
state["gpus"][i]["vbios"] (what `nvidia-smi -q -x` prints as vbios_version), its staged version
gpus[i]["staged_vbios"]; every other component lives in state["gpu_firmware"]["components"].
HGX nodes (an NVSwitch baseboard) have the HGX components NVIDIA's HMC lists (HGX_FW_BMC_0 is the
HMC itself; its version is the HGX bundle name, state["gpu_firmware"]["version"]); other nodes list
their GPUs only, not updatable through the BMC.
A GB200 / GB300 NVL72 compute tray (state "tray") has the HMC's components of NVIDIA's GB300 compute flow files
(FactoryMode/FactoryFlowYAMLFiles/GB300Flow: HGX_FW_BMC_0, HGX_FW_CPLD_0, HGX_FW_FPGA_0/1, the ERoTs, the Grace CPUs
HGX_FW_CPU_0/1 and the GPUs HGX_FW_GPU_0..3), every one of them activated by the tray's AC power cycle
(Chassis/BMC_0 Oem NvidiaChassis.AuxPowerReset, ResetType AuxPowerCycle): a GPU reset or a host reboot activates
none of them.
Every node also has the host's own BMC (HostBMC_0, what Managers/BMC_0 reports as FirmwareVersion) and
BIOS (HostBIOS_0, what Systems/System_0 reports as BiosVersion), both updatable through the BMC; their
images are PLDM packages with a HostBMC or HostBIOS component (gpusim.artifacts.write_host_image).

Resets (what activates what):
  gpu_reset       a GPU reset (nvidia-smi -r) activates that GPU's staged VBIOS
  host_reboot     a host reboot (ComputerSystem.Reset, shutdown -r) activates GPUs and the PCIe switch
  ac_power_cycle  Chassis.Reset PowerCycle on HGX_Chassis_0 activates everything
  bmc_reset       Manager.Reset on HGX_BMC_0 activates the HMC firmware
  host_bmc_reset  Manager.Reset on BMC_0 activates the host BMC firmware (the BIOS waits for a host reboot)
"""

from __future__ import annotations

from . import catalog

TYPE_CHECKING = False  # typing is not imported at run time: 4 ms of every simulated tool's start-up
if TYPE_CHECKING:
    from typing import Any

RESETS = ("gpu_reset", "host_reboot", "ac_power_cycle", "bmc_reset", "host_bmc_reset")
# Which staged components a reset activates.
ACTIVATES = {
    "gpu_reset": {"gpu_reset"},
    "host_reboot": {"gpu_reset", "host_reboot"},
    "ac_power_cycle": {"gpu_reset", "host_reboot", "ac_power_cycle", "bmc_reset", "host_bmc_reset"},
    "bmc_reset": {"bmc_reset"},
    "host_bmc_reset": {"host_bmc_reset"},
}
# PLDM RequestedComponentActivationMethod written for each (see pldm.ACTIVATION_BITS).
PLDM_ACTIVATION = {
    "gpu_reset": ("medium_specific_reset", "system_reboot"),
    "host_reboot": ("system_reboot",),
    "ac_power_cycle": ("ac_power_cycle",),
    "bmc_reset": ("medium_specific_reset",),
    "host_bmc_reset": ("medium_specific_reset",),
}
# HGX baseboard components other than the GPUs: inventory id -> (PLDM record name, reset, default version).
HGX_COMPONENTS = {
    "HGX_FW_BMC_0": ("HMC", "bmc_reset", None),  # None: the spec's gpu_firmware bundle name
    "HGX_FW_ERoT_BMC_0": ("ERoT", "ac_power_cycle", "01.03.0250.0000_n04"),
    "HGX_FW_FPGA_0": ("FPGA", "ac_power_cycle", "2.D0"),
    "HGX_FW_CPLD_0": ("CPLD", "ac_power_cycle", "0.1C"),
    "HGX_FW_PCIeSwitch_0": ("PCIeSwitch", "host_reboot", "1.7.5F"),
}
# A GB200 / GB300 compute tray's HMC components (the GB300 compute flow's expected_versions), all activated by the
# tray's AC power cycle: inventory id -> (PLDM record name, default version).
TRAY_COMPONENTS = {
    "HGX_FW_BMC_0": ("HMC", None),  # None: the spec's gpu_firmware bundle name
    "HGX_FW_CPLD_0": ("CPLD", "0.1F"),
    "HGX_FW_FPGA_0": ("FPGA", "1.62"),
    "HGX_FW_FPGA_1": ("FPGA", "1.62"),
    "HGX_FW_ERoT_BMC_0": ("ERoT", "01.04.0031.0000_n04"),
    "HGX_FW_ERoT_CPU_0": ("ERoT", "01.04.0031.0000_n04"),
    "HGX_FW_ERoT_CPU_1": ("ERoT", "01.04.0031.0000_n04"),
    "HGX_FW_ERoT_FPGA_0": ("ERoT", "01.04.0031.0000_n04"),
    "HGX_FW_ERoT_FPGA_1": ("ERoT", "01.04.0031.0000_n04"),
    "HGX_FW_CPU_0": ("CPU", "02.04.07"),
    "HGX_FW_CPU_1": ("CPU", "02.04.07"),
}
TRAY_RESET = "ac_power_cycle"
# The host's own BMC and BIOS (every node): inventory id -> (PLDM record name, reset, default version).
HOST_BMC_ID, HOST_BIOS_ID = "HostBMC_0", "HostBIOS_0"
DEFAULT_HOST_BMC, DEFAULT_BIOS = "24.01.1", "2.1.0"
HOST_COMPONENTS = {
    HOST_BMC_ID: ("HostBMC", "host_bmc_reset", DEFAULT_HOST_BMC),
    HOST_BIOS_ID: ("HostBIOS", "host_reboot", DEFAULT_BIOS),
}
NVSWITCH = ("NVSwitch", "ac_power_cycle", "96.10.6D.00.01")
NVSWITCH_COUNT = 4
GPU_RECORD = "GPU_SXM"
GPU_RESET = "gpu_reset"
# PLDM component identifiers NVIDIA-style packages use per record (any unique 16-bit value works).
COMPONENT_IDS = {"HMC": 0x0010, "ERoT": 0xFF00, "FPGA": 0x0020, "CPLD": 0x0030, "PCIeSwitch": 0x0040,
                 "NVSwitch": 0x0050, GPU_RECORD: 0x0060, "HostBMC": 0x0070, "HostBIOS": 0x0080, "CPU": 0x0090}
RECORDS = tuple(COMPONENT_IDS)


def gpu_sku(model_name: str) -> str:
    """The GPU's SKU as 8 hex digits: the Chassis SKU (0x...) and the package's APSKU descriptor."""
    model = catalog.gpu_model(model_name)
    return f"{model.device_id:04x}{model.subsys_id >> 16:04x}"


def gpu_inventory_id(state: dict[str, Any], index: int) -> str:
    if is_tray(state):
        return f"HGX_FW_GPU_{index}"
    return f"HGX_FW_GPU_SXM_{index + 1}" if is_hgx(state) else f"GPU_{index}"


def gpu_chassis_id(state: dict[str, Any], index: int) -> str:
    if is_tray(state):
        return f"HGX_GPU_{index}"
    return f"HGX_GPU_SXM_{index + 1}" if is_hgx(state) else f"GPU_{index}"


def is_hgx(state: dict[str, Any]) -> bool:
    return bool(state["gpu_firmware"].get("hgx"))


def is_tray(state: dict[str, Any]) -> bool:
    """A GB200 / GB300 NVL72 compute tray: its firmware activates only with the tray's AC power cycle."""
    return bool(state["gpu_firmware"].get("tray"))


def gpu_reset_kind(state: dict[str, Any]) -> str:
    """The reset that activates a GPU's staged firmware on this node."""
    return TRAY_RESET if is_tray(state) else GPU_RESET


def init(state: dict[str, Any], bundle: str, hgx: bool, host_bmc: str | None = None,
         bios: str | None = None, tray: bool = False) -> dict[str, Any]:
    """The gpu_firmware section of a new node state (host_bmc, bios: the host BMC's and BIOS's versions; tray: a
    GB200 / GB300 compute tray)."""
    comps: dict[str, Any] = {}
    for cid, (record, reset, default) in HOST_COMPONENTS.items():
        version = (host_bmc if cid == HOST_BMC_ID else bios) or default
        comps[cid] = {"record": record, "reset": reset, "version": version, "staged": None}
    if tray:
        for cid, (record, default) in TRAY_COMPONENTS.items():
            comps[cid] = {"record": record, "reset": TRAY_RESET, "version": default or bundle, "staged": None}
    elif hgx:
        for cid, (record, reset, default) in HGX_COMPONENTS.items():
            comps[cid] = {"record": record, "reset": reset, "version": default or bundle, "staged": None}
        if state.get("nvswitch"):
            for i in range(NVSWITCH_COUNT):
                comps[f"HGX_FW_NVSwitch_{i}"] = {"record": NVSWITCH[0], "reset": NVSWITCH[1], "version": NVSWITCH[2],
                                                 "staged": None}
    for g in state["gpus"]:
        g.setdefault("staged_vbios", None)
    doc = {"version": bundle, "hgx": hgx, "components": comps, "force_update": False, "push_targets": [],
           "tasks": {}, "next_task": 0}
    if tray:
        doc["tray"] = True
    return doc


def inventory(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Every firmware component: id, record, reset, version, staged, sku (GPUs), gpu (index), updateable."""
    hgx = is_hgx(state) or is_tray(state)
    gpu_reset = gpu_reset_kind(state)
    sku = gpu_sku(state["gpu_model"])
    rows = []
    fw = state["gpu_firmware"]
    for cid, comp in fw["components"].items():
        rows.append({"id": cid, "record": comp["record"], "reset": comp["reset"], "version": comp["version"],
                     "staged": comp["staged"], "sku": None, "gpu": None, "updateable": True})
    for g in state["gpus"]:
        if not g["present"]:
            continue  # a GPU that fell off the bus is gone from the HMC's inventory too
        rows.append({"id": gpu_inventory_id(state, g["index"]), "record": GPU_RECORD, "reset": gpu_reset,
                     "version": g["vbios"], "staged": g.get("staged_vbios"), "sku": sku, "gpu": g["index"],
                     "updateable": hgx})
    return rows


def find(state: dict[str, Any], cid: str) -> dict[str, Any] | None:
    return next((row for row in inventory(state) if row["id"] == cid), None)


def stage(state: dict[str, Any], cid: str, version: str) -> None:
    row = find(state, cid)
    if row is None:
        raise KeyError(cid)
    if row["gpu"] is not None:
        state["gpus"][row["gpu"]]["staged_vbios"] = version
    else:
        state["gpu_firmware"]["components"][cid]["staged"] = version


def activate(state: dict[str, Any], reset: str, gpus: set[int] | None = None) -> list[str]:
    """Make the staged firmware that `reset` activates the running one; return the ids activated.

    gpus limits a gpu_reset to those GPU indexes (nvidia-smi -r -i N)."""
    if reset not in ACTIVATES:
        raise ValueError(f"gpusim: unknown reset {reset!r}; known: {', '.join(RESETS)}")
    kinds = ACTIVATES[reset]
    done = []
    fw = state["gpu_firmware"]
    for cid, comp in fw["components"].items():
        if comp["staged"] and comp["reset"] in kinds:
            comp["version"], comp["staged"] = comp["staged"], None
            done.append(cid)
            if cid == "HGX_FW_BMC_0":
                fw["version"] = comp["version"]
    if gpu_reset_kind(state) in kinds:
        for g in state["gpus"]:
            if g.get("staged_vbios") and (gpus is None or g["index"] in gpus):
                g["vbios"], g["staged_vbios"] = g["staged_vbios"], None
                done.append(gpu_inventory_id(state, g["index"]))
    return done
