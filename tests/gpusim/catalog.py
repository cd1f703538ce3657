"""Static facts about the GPUs, drivers and NICs the simulator can play.

Values come from the real captures in ../shared/fixtures/real (nvidia-smi -q / default tables of
H100, H200, L40S, B200, A100, V100 nodes) and NVIDIA's public specifications. Everything that
varies per node (UUIDs, serials) is derived from the node name with a hash, so that the same fleet
spec always gives the same identities.
"""

from __future__ import annotations

from collections import namedtuple

# Immutable records are namedtuples, not dataclasses: every simulated tool imports this module, and dataclasses cost
# each tool's start-up 11 ms (they import inspect, ast, dis and tokenize); tools/_xml.py is there for the same reason.

# One GPU model. name: the exact nvidia-smi product name; arch: product_architecture as nvidia-smi prints it;
# memory_mib: FB total as nvidia-smi prints it; device_id: the PCI device id (vendor 10DE appended by nvidia-smi);
# nvlink_gbps: the per-link speed printed by `nvidia-smi nvlink -s`; tflops_fp32: gpu_burn's float/tensor throughput
# basis (Gflop/s / 1000). mnnvl: a compute tray of a multi-node NVLink domain (GB200 / GB300 NVL72): the Fabric block
# carries the domain's ClusterUUID and CliqueId, addressing is ATS, no local fabric manager, IMEX runs on the tray.
GpuModel = namedtuple(
    "GpuModel",
    ("name", "arch", "memory_mib", "reserved_mib", "vbios", "device_id", "subsys_id", "power_limit_w", "min_power_w",
     "pcie_gen", "pcie_width", "nvlinks", "nvlink_gbps", "compute_cap", "board_part", "gpu_part", "inforom_img",
     "max_graphics_mhz", "max_mem_mhz", "idle_power_w", "tflops_fp32", "brand", "mnnvl"),
    defaults=("NVIDIA", False),
)


GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        GpuModel("Tesla V100-SXM2-32GB", "Volta", 32768, 0, "88.00.80.00.01", 0x1DB5, 0x124910DE, 300,
                 150, 3, 16, 6, 25.781, "7.0", "692-2G503-0201-000", "1DB5-895-A1", "G503.0201.00.04",
                 1530, 877, 44, 14.0, "Tesla"),
        GpuModel("NVIDIA A100-SXM4-80GB", "Ampere", 81920, 669, "92.00.45.00.06", 0x20B2, 0x147F10DE, 400,
                 100, 4, 16, 12, 25.0, "8.0", "692-2G506-0210-002", "20B2-895-A1", "G506.0210.00.03",
                 1410, 1593, 62, 19.5),
        GpuModel("NVIDIA H100 80GB HBM3", "Hopper", 81559, 479, "96.00.A5.00.01", 0x2330, 0x16C110DE, 700,
                 200, 5, 16, 18, 26.562, "9.0", "692-2G520-0200-000", "2330-885-A1", "G520.0200.00.05",
                 1980, 2619, 69, 51.0),
        GpuModel("NVIDIA H200", "Hopper", 143771, 595, "96.00.A5.00.03", 0x2335, 0x18BE10DE, 700,
                 200, 5, 16, 18, 26.562, "9.0", "695-2G520-0280-001", "2335-895-A1", "G520.0280.02.02",
                 1980, 3201, 120, 51.0),
        GpuModel("NVIDIA L40S", "Ada Lovelace", 46068, 581, "95.02.66.00.02", 0x26B9, 0x185110DE, 350,
                 100, 4, 16, 0, 0.0, "8.9", "900-2G133-0080-000", "26B9-896-A1", "G133.0242.00.03",
                 2520, 9001, 36, 91.6),
        GpuModel("NVIDIA B200", "Blackwell", 183359, 1024, "97.00.7D.00.0F", 0x2901, 0x199910DE, 1000,
                 200, 5, 16, 18, 53.125, "10.0", "692-2G525-0220-000", "2901-886-A1", "G525.0220.00.02",
                 1965, 3996, 141, 75.0),
        # From the real GB200 tray captures in ../shared/fixtures/real/gb200/nvidia-smi (-q -x of p6e-gb200, default table
        # of a bare-metal tray): 189471 MiB, 742 reserved, 1200 W / 200 W, device 2941, subsystem 2046, NV18 links.
        GpuModel("NVIDIA GB200", "Blackwell", 189471, 742, "97.00.B9.00.69", 0x2941, 0x204610DE, 1200,
                 200, 5, 16, 18, 50.0, "10.0", "900-2G548-A801-000", "2941-892-A1", "G548.0201.00.06",
                 2062, 3996, 160, 80.0, "NVIDIA", True),
    )
}


def gpu_model(name: str) -> GpuModel:
    try:
        return GPU_MODELS[name]
    except KeyError:
        raise KeyError(f"gpusim: unknown GPU model {name!r}; known: {', '.join(GPU_MODELS)}") from None


# PCI bus numbers of the 8-GPU HGX baseboard (as on DGX/HGX H100/H200/B200 nodes).
HGX_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
# NIC buses next to the GPUs (ConnectX-7 on HGX).
NIC_BUSES = ("1A", "3C", "4D", "5E", "9C", "BC", "CC", "DC")


# PCI addresses of the 4 GPUs of a bare-metal GB200 compute tray (the rhel4nv-demo and OCI runbook captures).
GB200_BUS_IDS = ("00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0", "00000019:01:00.0")
ZERO_CLUSTER_UUID = "00000000-0000-0000-0000-000000000000"


def pci_bus_id(index: int, model: GpuModel | None = None) -> str:
    if model is not None and model.mnnvl and index < len(GB200_BUS_IDS):
        return GB200_BUS_IDS[index]
    bus = HGX_BUSES[index] if index < len(HGX_BUSES) else f"{0xE0 + index:02X}"
    return f"00000000:{bus}:00.0"


def cluster_uuid(fleet_domain: str) -> str:
    """The ClusterUUID NVIDIA's fabric gives an NVLink domain, derived from its name (same spec, same UUID)."""
    h = _digest("cluster", fleet_domain).hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def imex_short_version(version: str | None) -> str | None:
    """What `nvidia-imex-ctl -N` prints as a node's version: the first two parts (570.172 of 570.172.08, AWS capture)."""
    return ".".join(str(version).split(".")[:2]) if version else None


def _digest(*parts: object) -> bytes:
    import hashlib  # here, not at the top: a simulated tool's start-up does without it (tools/_xml.py)

    return hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()


def gpu_uuid(node: str, index: int) -> str:
    h = _digest("uuid", node, index).hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def gpu_serial(node: str, index: int) -> str:
    return "1" + str(int.from_bytes(_digest("serial", node, index)[:8], "big"))[:12].zfill(12)


def board_serial(node: str) -> str:
    return "1" + str(int.from_bytes(_digest("board", node)[:8], "big"))[:12].zfill(12)


def nic_guid(node: str, index: int) -> str:
    return _digest("guid", node, index).hex()[:16]


def nic_mac(node: str, index: int) -> str:
    return "b8cef6" + _digest("mac", node, index).hex()[:6]


# --- driver branches -------------------------------------------------------------------------

def branch(version: str | None) -> int:
    """Driver branch (major number) of a version string, 0 for None."""
    if not version:
        return 0
    return int(str(version).split(".")[0])


def cuda_version(driver: str) -> str:
    """CUDA version nvidia-smi reports for a driver (Table 3 of the CUDA release notes)."""
    b = branch(driver)
    table = ((590, "13.1"), (580, "13.0"), (575, "12.9"), (570, "12.8"), (565, "12.7"), (560, "12.6"),
             (555, "12.5"), (550, "12.4"), (545, "12.3"), (535, "12.2"), (530, "12.1"), (525, "12.0"),
             (520, "11.8"), (515, "11.7"), (510, "11.6"), (495, "11.5"), (470, "11.4"), (465, "11.3"),
             (460, "11.2"), (455, "11.1"), (450, "11.0"), (0, "10.2"))
    for lo, cuda in table:
        if b >= lo:
            return cuda
    return "10.2"


# How one driver branch shapes nvidia-smi output. sample: the real nvsmi_qx_*.xml whose element structure this variant
# follows (the conformance test compares against it); events: clocks_event_reasons (True) or clocks_throttle_reasons
# (False); table_sep_plus: the default table's rule under the header is '+---' (590+) or '|---'.
OutputVariant = namedtuple("OutputVariant", ("key", "dtd", "events", "sample", "table_sep_plus"))


VARIANTS = {
    "v11": OutputVariant("v11", "nvsmi_device_v11.dtd", False, "nvsmi_qx_a10g_515.105.01_telegraf.xml", False),
    "v12_525": OutputVariant("v12_525", "nvsmi_device_v12.dtd", False,
                             "nvsmi_qx_rtx-3090_525.147.05_telegraf.xml", False),
    "v12_535": OutputVariant("v12_535", "nvsmi_device_v12.dtd", True,
                             "nvsmi_qx_rtx-4090_535.86.05_netdata.xml", False),
    "v12_570": OutputVariant("v12_570", "nvsmi_device_v12.dtd", True,
                             "nvsmi_qx_rtx-3060_570.124.04_telegraf.xml", False),
    "v13": OutputVariant("v13", "nvsmi_device_v13.dtd", True,
                         "nvsmi_qx_rtx-4000-sff-ada_595.84_telegraf.xml", True),
}


def variant(driver: str) -> OutputVariant:
    """Output variant of a driver branch.

    R<520: DTD v11; R525: v12 with clocks_throttle_reasons; R535-R545: v12 with clocks_event_reasons
    (the 535.86.05 sample); R550-R580: v12 with the 570 additions (platformInfo, power readings
    split into average/instant...); R590+: v13.
    """
    b = branch(driver)
    if b < 520:
        return VARIANTS["v11"]
    if b < 530:
        return VARIANTS["v12_525"]
    if b < 550:
        return VARIANTS["v12_535"]
    if b < 590:
        return VARIANTS["v12_570"]
    return VARIANTS["v13"]


SUPPORTED_BRANCHES = {  # a representative version per variant, used by tests
    "v11": "515.105.01", "v12_525": "525.147.05", "v12_535": "535.161.08",
    "v12_570": "570.124.06", "v13": "590.48.01",
}


# --- NICs --------------------------------------------------------------------------------------

NIC_TYPES = {
    # type: (device id for /dev/mst/mt<ID>_pciconf<N>, description, fw family prefix)
    "ConnectX-7": (4129, "NVIDIA ConnectX-7 HHHL Adapter Card; 400GbE / NDR IB (default mode); Single-port OSFP; "
                   "PCIe 5.0 x16; Crypto Disabled; Secure Boot Enabled", "28"),
    "ConnectX-6 Dx": (4125, "ConnectX-6 Dx EN adapter card; 100GbE; Dual-port QSFP56; PCIe 4.0 x16; No Crypto", "22"),
    "ConnectX-6": (4123, "ConnectX-6 VPI adapter card; HDR IB (200Gb/s) and 200GbE; single-port QSFP56", "20"),
    "ConnectX-6 Lx": (4127, "ConnectX-6 Lx EN adapter card; 25GbE; Dual-port SFP28; PCIe 4.0 x8; No Crypto", "26"),
    "BlueField-3": (41692, "NVIDIA BlueField-3 B3220 P-Series DPU; 200GbE / HDR IB", "32"),
}


def nic_info(nic_type: str) -> tuple[int, str, str]:
    return NIC_TYPES.get(nic_type, NIC_TYPES["ConnectX-7"])


# Fabric manager / DCGM / tool versions printed by the simulator.
DCGM_VERSION = "3.3.9"
MFT_VERSION = "4.30.0-139"
NVFWUPD_VERSION = "2.0.7"
