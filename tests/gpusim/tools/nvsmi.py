"""Simulated `nvidia-smi`: -q [-x], -L, -r (GPU reset), --query-gpu / --query-compute-apps, nvlink -s, topo -m,
-i selection and the default table, shaped per driver branch (catalog.variant)."""

from __future__ import annotations

import time

from .. import catalog, firmware
from .. import state as st
from . import nvsmi_tree
from ._common import ToolExit, err, fail, load, out, update
from ._xml import escape

TYPE_CHECKING = False  # typing is not imported at run time: 4 ms of every simulated tool's start-up
if TYPE_CHECKING:
    from typing import Any

NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.\n")
INVALID_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
DEPRECATED = "Requested functionality has been deprecated"
RANKS = {"v11": 0, "v12_525": 1, "v12_535": 2, "v12_570": 3, "v13": 4}


# --- per-GPU values ------------------------------------------------------------------------------

def _flags(model: catalog.GpuModel, rank: int) -> set[str]:
    flags = set()
    if model.arch == "Volta":
        flags.add("legacy_ecc")
    else:
        flags.add("remap")
    if model.arch in ("Ada Lovelace", "Hopper", "Blackwell") and rank >= 2:
        flags.add("tlimit")
    if model.mnnvl:
        flags.add("mnnvl")
    return flags


def _busy(state: dict[str, Any], gpu: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in state["processes"] if p["gpu"] == gpu["index"]]


def gpu_values(state: dict[str, Any], gpu: dict[str, Any], rank: int) -> dict[str, str]:
    model = catalog.gpu_model(state["gpu_model"])
    procs = _busy(state, gpu)
    used = sum(p["mem_mib"] for p in procs)
    thermal = bool(gpu.get("thermal_slowdown"))
    dom, bus, _devfn = gpu["pci_bus_id"].split(":")
    e, rr, ret = gpu["ecc"], gpu["remapped"], gpu["retired"]
    drv = state["driver"]["version"]
    new_clocks = rank >= 3
    return {
        "name": model.name, "brand": model.brand, "arch": model.arch,
        "display_mode": DEPRECATED if rank >= 4 else "Disabled",
        "persistence": "Enabled" if state["services"]["nvidia-persistenced"]["active"] else "Disabled",
        "mig": "Disabled", "serial": gpu["serial"], "uuid": gpu["uuid"],
        "pdi": "0x" + gpu["uuid"][4:12] + gpu["uuid"][-8:], "index": str(gpu["index"]),
        "vbios": gpu["vbios"], "board_id": f"0x{int(bus, 16) << 8:x}", "board_part": model.board_part,
        "gpu_part": model.gpu_part, "module_id": str(gpu["index"] + 1), "inforom_img": model.inforom_img,
        "reset_required": "No", "drain_recommended": "No",
        "recovery_action": "Reset" if rr["pending"] else "None",
        "gsp": drv if model.arch != "Volta" else "N/A",
        "pci_bus": bus if rank < 4 else f"0x{bus}", "pci_device": "00" if rank < 4 else "0x00",
        "pci_domain": dom[-4:] if rank < 4 else f"0x{dom[-4:]}",
        "pci_device_id": f"{model.device_id:04X}10DE" if rank < 4 else f"0x{model.device_id:04X}10DE",
        "pci_bus_id": gpu["pci_bus_id"],
        "pci_sub_system_id": f"{model.subsys_id:08X}" if rank < 4 else f"0x{model.subsys_id:08X}",
        "pcie_gen": str(model.pcie_gen), "pcie_width": f"{model.pcie_width}x",
        "r_idle": "Not Active" if procs else "Active", "r_hw": "Active" if thermal else "Not Active",
        "r_thermal": "Active" if thermal else "Not Active", "thermal_us": f"{123456789 if thermal else 0} us",
        "mem_total": f"{model.memory_mib} MiB", "mem_reserved": f"{model.reserved_mib} MiB",
        "mem_used": f"{used} MiB", "mem_free": f"{model.memory_mib - model.reserved_mib - used} MiB",
        "util": "100 %" if procs else "0 %",
        "v_sbe": str(e["volatile_sbe"]), "v_dbe": str(e["volatile_dbe"]),
        "a_sbe": str(e["aggregate_sbe"]), "a_dbe": str(e["aggregate_dbe"]),
        "ret_sbe": str(ret["sbe"]) if model.arch == "Volta" else "N/A",
        "ret_dbe": str(ret["dbe"]) if model.arch == "Volta" else "N/A",
        "ret_list": "" if model.arch == "Volta" else "N/A",
        "ret_pending": ("Yes" if ret["pending"] else "No") if model.arch == "Volta" else "N/A",
        "rr_corr": str(rr["correctable"]), "rr_unc": str(rr["uncorrectable"]),
        "rr_pending": "Yes" if rr["pending"] else "No", "rr_failure": "Yes" if rr["failure"] else "No",
        "rr_max": f"{2560 - rr['uncorrectable']} bank(s)", "rr_partial": f"{rr['uncorrectable']} bank(s)",
        "temp": f"{gpu['temp_c']} C", "tlimit": f"{max(0, 87 - gpu['temp_c'])} C",
        "mem_temp": f"{gpu['temp_c'] + 7} C",
        "power": f"{model.idle_power_w + (350 if procs else 0) + gpu['index'] % 3:.2f} W",
        "plimit": f"{model.power_limit_w:.2f} W", "pmin": f"{model.min_power_w:.2f} W",
        "clk_gr": f"{model.max_graphics_mhz if procs else 345} MHz", "clk_mem": f"{model.max_mem_mhz} MHz",
        "app_gr": DEPRECATED if new_clocks else f"{model.max_graphics_mhz} MHz",
        "app_mem": DEPRECATED if new_clocks else f"{model.max_mem_mhz} MHz",
        "max_gr": f"{model.max_graphics_mhz} MHz", "max_mem": f"{model.max_mem_mhz} MHz",
        "fabric_state": "Completed" if state["nvswitch"] else "N/A",
        "fabric_status": "Success" if state["nvswitch"] else "N/A",
        "clique": "0" if state["nvswitch"] else "N/A",
        "cluster_uuid": "00000000-0000-0000-0000-000000000000" if state["nvswitch"] else "N/A",
        "addressing": "None",
        **(_mnnvl_values(state) if model.mnnvl else {}),
    }


def _mnnvl_values(state: dict[str, Any]) -> dict[str, str]:
    """The Fabric block of a GB200 / GB300 NVL72 tray (the p6e-gb200 capture): the domain's ClusterUUID and CliqueId,
    Completed / Success / Healthy; the failure shapes of the real captures as faults."""
    link = state.get("nvlink") or {}
    values = {"addressing": "ATS", "fabric_state": "Completed", "fabric_status": "Success",
              "clique": str(link.get("clique_id", 1)), "cluster_uuid": link.get("cluster_uuid") or catalog.ZERO_CLUSTER_UUID,
              "fabric_health": "Healthy", "fabric_bandwidth": "Full", "fabric_flag": "False"}
    if st.fault(state, "fabric_insufficient_resources"):  # azhpc-images PR 506: a tray that did not join its domain
        values.update(fabric_status="Insufficient Resources", clique="0", cluster_uuid=catalog.ZERO_CLUSTER_UUID)
    if st.fault(state, "fabric_unhealthy"):
        values.update(fabric_health="Unhealthy", fabric_bandwidth="Degraded")
    if st.fault(state, "fabric_in_progress"):
        values.update(fabric_state="In Progress", fabric_status="N/A", clique="0", cluster_uuid=catalog.ZERO_CLUSTER_UUID,
                      fabric_health="N/A", fabric_bandwidth="N/A")
    return values


def _value(raw: str, values: dict[str, str]) -> str:
    if raw.startswith("$"):
        return values[raw[1:]]
    return raw or "N/A"


# --- -q -x and -q --------------------------------------------------------------------------------

def _timestamp() -> str:
    t = time.localtime()
    return time.strftime("%a %b ", t) + str(t.tm_mday) + time.strftime(" %H:%M:%S %Y", t)


def render_xml(state: dict[str, Any], gpus: list[dict[str, Any]]) -> str:
    drv = state["driver"]["version"]
    var = catalog.variant(drv)
    rank = RANKS[var.key]
    model = catalog.gpu_model(state["gpu_model"])
    tree = nvsmi_tree.select(rank, _flags(model, rank), xml=True)
    lines = ['<?xml version="1.0" ?>', f'<!DOCTYPE nvidia_smi_log SYSTEM "{var.dtd}">', "<nvidia_smi_log>",
             f"\t<timestamp>{_timestamp()}</timestamp>", f"\t<driver_version>{drv}</driver_version>",
             f"\t<cuda_version>{catalog.cuda_version(drv)}</cuda_version>",
             f"\t<attached_gpus>{len(gpus)}</attached_gpus>"]
    for gpu in gpus:
        values = gpu_values(state, gpu, rank)
        lines.append(f'\t<gpu id="{gpu["pci_bus_id"]}">')

        def emit(nodes: list[nvsmi_tree.Node], depth: int, values: dict[str, str] = values,
                 gpu: dict[str, Any] = gpu) -> None:
            ind = "\t" * depth
            for n in nodes:
                if n.value.startswith("@"):
                    lines.extend(_xml_special(n.value[1:], state, gpu, ind))
                elif n.children:
                    lines.append(f"{ind}<{n.tag}>")
                    emit(n.children, depth + 1)
                    lines.append(f"{ind}</{n.tag}>")
                else:
                    lines.append(f"{ind}<{n.tag}>{escape(_value(n.value, values))}</{n.tag}>")

        emit(tree, 2)
        lines.append("\t</gpu>")
    lines.append("")
    lines.append("</nvidia_smi_log>")
    return "\n".join(lines) + "\n"


def _xml_special(kind: str, state: dict[str, Any], gpu: dict[str, Any], ind: str) -> list[str]:
    model = catalog.gpu_model(state["gpu_model"])
    i2 = ind + "\t"
    i3 = i2 + "\t"
    if kind == "supported_clocks":
        return [f"{ind}<supported_clocks>", f"{i2}<supported_mem_clock>",
                f"{i3}<value>{model.max_mem_mhz} MHz</value>",
                f"{i3}<supported_graphics_clock>{model.max_graphics_mhz} MHz</supported_graphics_clock>",
                f"{i2}</supported_mem_clock>", f"{ind}</supported_clocks>"]
    if kind == "accounted":
        return [f"{ind}<accounted_processes>", f"{ind}</accounted_processes>"]
    lines = [f"{ind}<processes>"]
    for p in _busy(state, gpu):
        lines += [f"{i2}<process_info>", f"{i3}<gpu_instance_id>N/A</gpu_instance_id>",
                  f"{i3}<compute_instance_id>N/A</compute_instance_id>", f"{i3}<pid>{p['pid']}</pid>",
                  f"{i3}<type>C</type>", f"{i3}<process_name>{escape(p['name'])}</process_name>",
                  f"{i3}<used_memory>{p['mem_mib']} MiB</used_memory>", f"{i2}</process_info>"]
    lines.append(f"{ind}</processes>")
    return lines


def _kv(label: str, value: str, depth: int) -> str:
    return f"{('    ' * depth + label).ljust(55)}: {value}"


def render_q(state: dict[str, Any], gpus: list[dict[str, Any]]) -> str:
    drv = state["driver"]["version"]
    var = catalog.variant(drv)
    rank = RANKS[var.key]
    model = catalog.gpu_model(state["gpu_model"])
    tree = nvsmi_tree.select(rank, _flags(model, rank), xml=False)
    lines = ["", "==============NVSMI LOG==============", "", _kv("Timestamp", time.strftime("%a %b %d %H:%M:%S %Y"), 0),
             _kv("Driver Version", drv, 0), _kv("CUDA Version", catalog.cuda_version(drv), 0), "",
             _kv("Attached GPUs", str(len(gpus)), 0)]
    for gpu in gpus:
        values = gpu_values(state, gpu, rank)
        lines.append(f"GPU {gpu['pci_bus_id']}")

        def emit(nodes: list[nvsmi_tree.Node], depth: int, values: dict[str, str] = values,
                 gpu: dict[str, Any] = gpu) -> None:
            for n in nodes:
                if n.value == "@processes":
                    procs = _busy(state, gpu)
                    if not procs:
                        lines.append(_kv("Processes", "None", depth))
                    lines.extend(["    " * depth + "Processes"] if procs else [])
                    for p in procs:
                        lines.extend([_kv("GPU instance ID", "N/A", depth + 1), _kv("Compute instance ID", "N/A", depth + 1),
                                  _kv("Process ID", str(p["pid"]), depth + 1), _kv("Type", "C", depth + 1),
                                  _kv("Name", p["name"], depth + 1), _kv("Used GPU Memory", f"{p['mem_mib']} MiB", depth + 1)])
                elif n.children and not n.children[0].label:
                    # XML groups printed as one line by -q (Retired Pages / Single Bit ECC).
                    lines.append(_kv(n.label, _value(n.children[0].value, values), depth))
                elif n.children:
                    lines.append("    " * depth + n.label)
                    emit(n.children, depth + 1)
                else:
                    lines.append(_kv(n.label, _value(n.value, values), depth))

        emit(tree, 1)
    return "\n".join(lines) + "\n"


# --- -L, default table, topo, nvlink ------------------------------------------------------------

def render_list(state: dict[str, Any], gpus: list[dict[str, Any]]) -> str:
    model = catalog.gpu_model(state["gpu_model"])
    return "".join(f"GPU {g['index']}: {model.name} (UUID: {g['uuid']})\n" for g in gpus)


def render_table(state: dict[str, Any], gpus: list[dict[str, Any]]) -> str:
    drv = state["driver"]["version"]
    var = catalog.variant(drv)
    model = catalog.gpu_model(state["gpu_model"])
    sep = "+-----------------------------------------+------------------------+----------------------+"
    wide = "+-----------------------------------------------------------------------------------------+"
    head = f"| NVIDIA-SMI {drv:<23}Driver Version: {drv:<15}CUDA Version: {catalog.cuda_version(drv):<9}|"
    lines = [time.strftime("%a %b %d %H:%M:%S %Y") + "       ", wide, head,
             sep if var.table_sep_plus else "|" + sep[1:],
             "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
             "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
             "|                                         |                        |               MIG M. |",
             "|=========================================+========================+======================|"]
    pers = "On" if state["services"]["nvidia-persistenced"]["active"] else "Off"
    for g in gpus:
        procs = _busy(state, g)
        used = sum(p["mem_mib"] for p in procs)
        power = model.idle_power_w + (350 if procs else 0) + g["index"] % 3
        name = model.name if len(model.name) <= 28 else model.name[:25] + "..."
        lines += [
            f"|{g['index']:>4}  {name:<29}{pers:>4}  |{g['pci_bus_id']:>19} Off |{g['ecc']['volatile_dbe']:>21} |",
            f"| N/A  {g['temp_c']:>3}C    P0 {power:>14}W / {model.power_limit_w:>4}W |"
            f"{used:>8}MiB / {model.memory_mib:>6}MiB |{100 if procs else 0:>7}%      Default |",
            f"|                                         |                        |{'Disabled':>21} |",
            sep]
    lines += ["", wide,
              "| Processes:                                                                              |",
              "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
              "|        ID   ID                                                               Usage      |",
              "|=========================================================================================|"]
    procs = [p for p in state["processes"] if any(p["gpu"] == g["index"] for g in gpus)]
    if not procs:
        lines.append("|  No running processes found                                                             |")
    for p in procs:
        lines.append(f"|  {p['gpu']:>3}   N/A  N/A  {p['pid']:>14}      C   {p['name']:<34}{p['mem_mib']:>9}MiB |")
    lines.append(wide)
    return "\n".join(lines) + "\n"


def render_nvlink_s(state: dict[str, Any], gpus: list[dict[str, Any]]) -> str:
    model = catalog.gpu_model(state["gpu_model"])
    lines = []
    for g in gpus:
        lines.append(f"GPU {g['index']}: {model.name} (UUID: {g['uuid']})")
        if model.nvlinks == 0:
            continue
        for link in range(model.nvlinks):
            lines.append(f"\t Link {link}: {model.nvlink_gbps:.3f} GB/s")
    return "\n".join(lines) + "\n"


LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def render_topo(state: dict[str, Any], gpus: list[dict[str, Any]]) -> str:
    model = catalog.gpu_model(state["gpu_model"])
    nics = state["nics"]
    names = [f"GPU{g['index']}" for g in gpus] + [f"NIC{i}" for i in range(len(nics))]
    half = max(1, len(gpus) // 2)
    lines = ["\t\x1b[4m" + "\t".join([*names, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\x1b[0m"]

    def numa(i: int) -> int:
        return 0 if i < half else 1

    for a, ga in enumerate(gpus):
        cells = []
        for b, _gb in enumerate(gpus):
            if a == b:
                cells.append(" X ")
            elif model.nvlinks and state["nvswitch"]:
                cells.append(f"NV{model.nvlinks}")
            else:
                cells.append("NODE" if numa(a) == numa(b) else "SYS")
        for n in range(len(nics)):
            cells.append("PIX" if n == a else ("NODE" if numa(n) == numa(a) else "SYS"))
        cpus = "0-55,112-167" if numa(a) == 0 else "56-111,168-223"
        lines.append(f"GPU{ga['index']}\t" + "\t".join(cells) + f"\t{cpus}\t{numa(a)}\t\tN/A")
    for n in range(len(nics)):
        cells = [("PIX" if n == a else ("NODE" if numa(n) == numa(a) else "SYS")) for a in range(len(gpus))]
        cells += [" X " if n == m else ("NODE" if numa(n) == numa(m) else "SYS") for m in range(len(nics))]
        lines.append(f"NIC{n}\t" + "\t".join(cells))
    text = "\n".join(lines) + "\n" + LEGEND
    if nics:
        text += "\nNIC Legend:\n\n" + "".join(f"  NIC{i}: mlx5_{i}\n" for i in range(len(nics)))
    return text


# --- --query-gpu / --query-compute-apps -----------------------------------------------------------

def _gpu_fields(state: dict[str, Any], g: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """field -> (unit for the header ('' none), value with unit)."""
    model = catalog.gpu_model(state["gpu_model"])
    v = gpu_values(state, g, RANKS[catalog.variant(state["driver"]["version"]).key])
    procs = _busy(state, g)
    used = sum(p["mem_mib"] for p in procs)
    ev = "clocks_event_reasons" if catalog.variant(state["driver"]["version"]).events else "clocks_throttle_reasons"
    thermal = bool(g.get("thermal_slowdown"))
    f: dict[str, tuple[str, str]] = {
        "timestamp": ("", time.strftime("%Y/%m/%d %H:%M:%S.000")),
        "driver_version": ("", state["driver"]["version"]),
        "count": ("", str(len(st.visible_gpus(state)))),
        "name": ("", model.name), "gpu_name": ("", model.name), "serial": ("", g["serial"]),
        "gpu_serial": ("", g["serial"]), "uuid": ("", g["uuid"]), "gpu_uuid": ("", g["uuid"]),
        "pci.bus_id": ("", g["pci_bus_id"]), "gpu_bus_id": ("", g["pci_bus_id"]),
        "pci.domain": ("", "0x0000"), "pci.bus": ("", "0x" + g["pci_bus_id"].split(":")[1]),
        "pci.device": ("", "0x00"), "pci.device_id": ("", f"0x{model.device_id:04X}10DE"),
        "pci.sub_device_id": ("", f"0x{model.subsys_id:08X}"),
        "pcie.link.gen.current": ("", str(model.pcie_gen)), "pcie.link.gen.max": ("", str(model.pcie_gen)),
        "pcie.link.width.current": ("", str(model.pcie_width)), "pcie.link.width.max": ("", str(model.pcie_width)),
        "index": ("", str(g["index"])), "persistence_mode": ("", v["persistence"]),
        "vbios_version": ("", g["vbios"]), "inforom.img": ("", model.inforom_img),
        "fan.speed": ("%", "[N/A]"), "pstate": ("", "P0"),
        "memory.total": ("MiB", f"{model.memory_mib} MiB"), "memory.reserved": ("MiB", f"{model.reserved_mib} MiB"),
        "memory.used": ("MiB", f"{used} MiB"),
        "memory.free": ("MiB", f"{model.memory_mib - model.reserved_mib - used} MiB"),
        "compute_mode": ("", "Default"), "compute_cap": ("", model.compute_cap),
        "utilization.gpu": ("%", v["util"]), "utilization.memory": ("%", v["util"]),
        "ecc.mode.current": ("", "Enabled"), "ecc.mode.pending": ("", "Enabled"),
        "ecc.errors.corrected.volatile.total": ("", str(g["ecc"]["volatile_sbe"])),
        "ecc.errors.corrected.aggregate.total": ("", str(g["ecc"]["aggregate_sbe"])),
        "ecc.errors.uncorrected.volatile.total": ("", str(g["ecc"]["volatile_dbe"])),
        "ecc.errors.uncorrected.aggregate.total": ("", str(g["ecc"]["aggregate_dbe"])),
        "ecc.errors.uncorrected.volatile.dram": ("", str(g["ecc"]["volatile_dbe"])),
        "ecc.errors.uncorrected.aggregate.dram": ("", str(g["ecc"]["aggregate_dbe"])),
        "ecc.errors.corrected.volatile.dram": ("", str(g["ecc"]["volatile_sbe"])),
        "ecc.errors.corrected.aggregate.dram": ("", str(g["ecc"]["aggregate_sbe"])),
        "retired_pages.single_bit_ecc.count": ("", v["ret_sbe"].replace("N/A", "[N/A]")),
        "retired_pages.double_bit.count": ("", v["ret_dbe"].replace("N/A", "[N/A]")),
        "retired_pages.pending": ("", v["ret_pending"].replace("N/A", "[N/A]")),
        "remapped_rows.correctable": ("", v["rr_corr"]), "remapped_rows.uncorrectable": ("", v["rr_unc"]),
        "remapped_rows.pending": ("", v["rr_pending"]), "remapped_rows.failure": ("", v["rr_failure"]),
        "temperature.gpu": ("", str(g["temp_c"])), "temperature.memory": ("", str(g["temp_c"] + 7)),
        "power.draw": ("W", v["power"]), "power.draw.average": ("W", v["power"]),
        "power.draw.instant": ("W", v["power"]), "power.limit": ("W", v["plimit"]),
        "enforced.power.limit": ("W", v["plimit"]), "power.default_limit": ("W", v["plimit"]),
        "power.min_limit": ("W", v["pmin"]), "power.max_limit": ("W", v["plimit"]),
        "clocks.current.graphics": ("MHz", v["clk_gr"]), "clocks.current.sm": ("MHz", v["clk_gr"]),
        "clocks.current.memory": ("MHz", v["clk_mem"]), "clocks.max.graphics": ("MHz", v["max_gr"]),
        "clocks.max.sm": ("MHz", v["max_gr"]), "clocks.max.memory": ("MHz", v["max_mem"]),
        "mig.mode.current": ("", "Disabled"), "mig.mode.pending": ("", "Disabled"),
        "fabric.state": ("", v["fabric_state"]), "fabric.status": ("", v["fabric_status"]),
        "gpu_recovery_action": ("", v["recovery_action"]),
        f"{ev}.active": ("", "0x0000000000000040" if thermal else ("0x0000000000000000" if _busy(state, g)
                                                                     else "0x0000000000000001")),
        f"{ev}.supported": ("", "0x00000000000001FF"),
        f"{ev}.gpu_idle": ("", v["r_idle"]), f"{ev}.hw_slowdown": ("", v["r_hw"]),
        f"{ev}.hw_thermal_slowdown": ("", v["r_thermal"]), f"{ev}.sw_power_cap": ("", "Not Active"),
        f"{ev}.sw_thermal_slowdown": ("", "Not Active"), f"{ev}.sync_boost": ("", "Not Active"),
        f"{ev}.applications_clocks_setting": ("", "Not Active"),
        f"{ev}.hw_power_brake_slowdown": ("", "Not Active"),
    }
    # The old name stays accepted as an alias on branches that renamed it (as real nvidia-smi does).
    if ev == "clocks_event_reasons":
        for k in list(f):
            if k.startswith("clocks_event_reasons."):
                f["clocks_throttle_reasons." + k.split(".", 1)[1]] = f[k]
    for alias, field in (("gpu_name", "name"), ("driver_version", "driver_version")):
        f.setdefault(alias, f[field])
    return f


def _csv(rows: list[list[tuple[str, str]]], header: list[str], fmt: set[str]) -> str:
    lines = []
    if "noheader" not in fmt:
        lines.append(", ".join(header))
    for row in rows:
        vals = []
        for unit, val in row:
            strip = "nounits" in fmt and unit and val.endswith(" " + unit)
            vals.append(val[: -len(unit) - 1] if strip else val)
        lines.append(", ".join(vals))
    return "\n".join(lines) + ("\n" if lines else "")


def query_gpu(state: dict[str, Any], gpus: list[dict[str, Any]], fields: list[str], fmt: set[str]) -> str:
    rows = []
    header: list[str] = []
    for i, g in enumerate(gpus):
        table = _gpu_fields(state, g)
        row = []
        for name in fields:
            if name not in table:
                fail(f'Field "{name}" is not a valid field to query.\n', 2, "out")
            unit, val = table[name]
            row.append((unit, val))
            if i == 0:
                header.append(f"{name} [{unit}]" if unit else name)
        rows.append(row)
    if not gpus:
        header = fields
    return _csv(rows, header, fmt)


APP_FIELDS = ("timestamp", "gpu_name", "gpu_bus_id", "gpu_serial", "gpu_uuid", "pid", "process_name",
              "used_gpu_memory", "used_memory", "name")


def query_apps(state: dict[str, Any], gpus: list[dict[str, Any]], fields: list[str], fmt: set[str]) -> str:
    for name in fields:
        if name not in APP_FIELDS:
            fail(f'Field "{name}" is not a valid field to query.\n', 2, "out")
    header = [f"{n} [MiB]" if n in ("used_gpu_memory", "used_memory") else n for n in fields]
    rows = []
    for g in gpus:
        base = _gpu_fields(state, g)
        for p in _busy(state, g):
            vals = {"pid": ("", str(p["pid"])), "process_name": ("", p["name"]), "name": ("", p["name"]),
                    "used_gpu_memory": ("MiB", f"{p['mem_mib']} MiB"), "used_memory": ("MiB", f"{p['mem_mib']} MiB")}
            rows.append([vals.get(n) or base[n] for n in fields])
    return _csv(rows, header, fmt)


# --- entry point -------------------------------------------------------------------------------

def _fell_off_lines(gpus: list[dict[str, Any]]) -> list[str]:
    return [f"Unable to determine the device handle for GPU{g['pci_bus_id'][4:]}: Unknown Error"
            for g in gpus if g["fell_off"]]


def gpu_reset(state: dict, gpus: list[dict]) -> int:
    """`nvidia-smi -r [-i N]`: reset GPUs nothing uses; a reset activates their staged VBIOS (firmware.activate)."""
    busy = {p["gpu"] for p in state["processes"]}
    refused = [g for g in gpus if g["index"] in busy]
    if refused:
        lines = ["The following GPUs could not be reset:"]
        lines += [f"  GPU {g['pci_bus_id']}: In use by another client" for g in refused]
        lines += ["", f"{len(refused)} device is currently being used by one or more other processes (e.g., Fabric "
                  "Manager, CUDA application, graphics application such as an X server, or a monitoring application "
                  "such as another instance of nvidia-smi). Please first kill all processes using this device and all "
                  "compute applications running in the system."]
        fail("\n".join(lines), 255, "out")
    indexes = {g["index"] for g in gpus}
    update(lambda s: firmware.activate(s, "gpu_reset", gpus=indexes))
    out("\n".join(f"GPU {g['pci_bus_id']} was successfully reset." for g in gpus) + "\nAll done.")
    return 0


def main(argv: list[str]) -> int:
    state = load()
    if not state["driver"]["version"]:
        fail(NO_DRIVER.rstrip("\n"), 9, "out")
    if not st.driver_loaded(state):
        if state["driver"].get("built", True):
            # Like nvidia-modprobe: running nvidia-smi as root loads the kernel module.
            update(st.load_modules)
            state = load()
        else:
            fail(NO_DRIVER.rstrip("\n"), 9, "out")
    args = list(argv)
    mode = "table"
    sub = None
    index = None
    fields: list[str] = []
    fmt: set[str] = set()
    xml = False
    if args and args[0] in ("nvlink", "topo"):
        sub = args.pop(0)
        rest = [a for a in args if a not in ("-i",)]
        if sub == "nvlink" and not ({"-s", "--status"} & set(rest)):
            fail(INVALID_ARGS, 2, "out")
        if sub == "topo" and not ({"-m", "--matrix"} & set(rest)):
            fail(INVALID_ARGS, 2, "out")
        mode = sub
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-q", "--query"):
            mode = "q"
        elif a in ("-x", "--xml-format"):
            xml = True
        elif a in ("-L", "--list-gpus"):
            mode = "list"
        elif a in ("-r", "--gpu-reset"):
            mode = "reset"
        elif a in ("-i", "--id"):
            i += 1
            if i >= len(args):
                fail(INVALID_ARGS, 2, "out")
            index = args[i]
        elif a.startswith("--id="):
            index = a.split("=", 1)[1]
        elif a.startswith("--query-gpu="):
            mode, fields = "query-gpu", [f.strip() for f in a.split("=", 1)[1].split(",") if f.strip()]
        elif a.startswith("--query-compute-apps="):
            mode, fields = "query-apps", [f.strip() for f in a.split("=", 1)[1].split(",") if f.strip()]
        elif a.startswith("--format="):
            fmt = {x.strip() for x in a.split("=", 1)[1].split(",")}
        elif a in ("-s", "--status", "-m", "--matrix") and sub:
            pass
        elif a in ("-h", "--help"):
            out("NVIDIA System Management Interface -- v" + state["driver"]["version"])
            return 0
        elif a == "--version":
            drv = state["driver"]["version"]
            out(f"NVIDIA-SMI version  : {drv}\nNVML version        : {drv.rsplit('.', 1)[0]}\n"
                f"DRIVER version      : {drv}\nCUDA Version        : {catalog.cuda_version(drv)}")
            return 0
        else:
            fail(INVALID_ARGS, 2, "out")
        i += 1
    if mode in ("query-gpu", "query-apps") and "csv" not in fmt:
        fail(INVALID_ARGS, 2, "out")
    if xml and mode != "q":
        fail(INVALID_ARGS, 2, "out")
    visible = st.visible_gpus(state)
    if index is not None:
        wanted = []
        for tok in index.split(","):
            match = [g for g in visible if str(g["index"]) == tok or g["uuid"] == tok
                     or (":" in tok and g["pci_bus_id"].lower().endswith(tok.lower()))]
            if not match:
                fail("No devices were found", 6, "out")
            wanted += match
        visible = wanted
    # Re-number the visible GPUs the way the driver enumerates them (a missing GPU shifts indices).
    gpus = []
    for n, g in enumerate(g for g in st.visible_gpus(state)):
        if g in visible:
            gpus.append(dict(g, index=n))
    lost = _fell_off_lines(gpus)
    healthy = [g for g in gpus if not g["fell_off"]]
    if mode == "reset":
        return gpu_reset(state, [g for g in state["gpus"] if g["present"] and g in visible])
    if mode == "q":
        out(render_xml(state, healthy) if xml else render_q(state, healthy), end="")
    elif mode == "list":
        out(render_list(state, healthy), end="")
    elif mode == "query-gpu":
        out(query_gpu(state, healthy, fields, fmt), end="")
    elif mode == "query-apps":
        out(query_apps(state, healthy, fields, fmt), end="")
    elif mode == "nvlink":
        out(render_nvlink_s(state, healthy), end="")
    elif mode == "topo":
        out(render_topo(state, healthy), end="")
    else:
        if lost:
            out("\n".join(lost))
            raise ToolExit(15)
        out(render_table(state, healthy), end="")
    if lost:
        if mode != "table":
            # -q -x keeps stdout valid XML: the handle error goes to stderr there.
            (err if xml else out)("\n".join(lost))
        raise ToolExit(15)
    return 0
