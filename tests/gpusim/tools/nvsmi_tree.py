"""Element layout of `nvidia-smi -q` / `-q -x`, per output variant.

One line per element: `tag | text label | value | condition`, nesting by two-space indent.
value: `$key` reads the per-GPU value dict, a literal otherwise, empty means N/A.
condition (optional, all must hold):
  `>=N`, `<N`, `N`  variant rank (0 v11 [R<520], 1 v12 R525, 2 v12 R535-545, 3 v12 R550-580, 4 v13 R590+)
  `remap`  / `!remap`    GPU reports remapped rows (Ampere and newer data centre parts)
  `legacy_ecc` / `!legacy_ecc`   single/double bit ECC layout (Volta and older)
  `tlimit` / `!tlimit`   T.Limit temperature names (Ada, Hopper, Blackwell on R535+)
  `mnnvl` / `!mnnvl`     a multi-node NVLink tray (GB200 / GB300 NVL72: the p6e-gb200 capture's Fabric health block)
  `xml`    element only in -q -x (not printed by plain -q)
The element names and their order follow the real nvsmi_qx_*.xml samples of each branch
(see catalog.VARIANTS for which sample each variant follows); the labels follow real -q output.
"""

from __future__ import annotations

LAYOUT = r"""
product_name|Product Name|$name|
product_brand|Product Brand|$brand|
product_architecture|Product Architecture|$arch|
display_mode|Display Mode|$display_mode|
display_attached|Display Attached|Yes|>=4
display_active|Display Active|Disabled|
persistence_mode|Persistence Mode|$persistence|
addressing_mode|Addressing Mode|$addressing|>=2
mig_mode|MIG Mode||
  current_mig|Current|$mig|
  pending_mig|Pending|$mig|
mig_devices||None|xml
accounting_mode|Accounting Mode|Disabled|
accounting_mode_buffer_size|Accounting Mode Buffer Size|4000|
driver_model|Driver Model||
  current_dm|Current||
  pending_dm|Pending||
serial|Serial Number|$serial|
uuid|GPU UUID|$uuid|
pdi|GPU PDI|$pdi|>=4
minor_number|Minor Number|$index|
vbios_version|VBIOS Version|$vbios|
multigpu_board|MultiGPU Board|No|
board_id|Board ID|$board_id|
board_part_number|Board Part Number|$board_part|>=1
gpu_part_number|GPU Part Number|$gpu_part|
gpu_fru_part_number|FRU Part Number||>=2
gpu_module_id|GPU Module ID|$module_id|<3
platformInfo|Platform Info||>=3
  chassis_serial_number|Chassis Serial Number||
  slot_number|Slot Number||
  tray_index|Tray Index||
  host_id|Host ID||
  peer_type|Peer Type||
  module_id|Module Id|$module_id|
  gpu_fabric_guid|GPU Fabric GUID||
inforom_version|Inforom Version||
  img_version|Image Version|$inforom_img|
  oem_object|OEM Object|2.1|
  ecc_object|ECC Object|7.16|
  pwr_object|Power Management Object||
inforom_bbx_flush|Inforom BBX Object Flush||>=3
  latest_timestamp|Latest Timestamp||
  latest_duration|Latest Duration||
gpu_operation_mode|GPU Operation Mode||
  current_gom|Current||
  pending_gom|Pending||
c2c_mode|GPU C2C Mode|Disabled|>=3
gpu_virtualization_mode|GPU Virtualization Mode||
  virtualization_mode|Virtualization Mode|None|
  host_vgpu_mode|Host VGPU Mode||
  vgpu_heterogeneous_mode|vGPU Heterogeneous Mode||>=3
gpu_reset_status|GPU Reset Status||2-3
  reset_required|Reset Required|$reset_required|
  drain_and_reset_recommended|Drain and Reset Recommended|$drain_recommended|
gpu_recovery_action|GPU Recovery Action|$recovery_action|>=3
gsp_firmware_version|GSP Firmware Version|$gsp|
ibmnpu|IBMNPU||
  relaxed_ordering_mode|Relaxed Ordering Mode||
pci|PCI||
  pci_bus|Bus|$pci_bus|
  pci_device|Device|$pci_device|
  pci_domain|Domain|$pci_domain|
  pci_base_class|Base Classcode|3|>=3
  pci_sub_class|Sub Classcode|2|>=3
  pci_device_id|Device Id|$pci_device_id|
  pci_bus_id|Bus Id|$pci_bus_id|
  pci_sub_system_id|Sub System Id|$pci_sub_system_id|
  pci_gpu_link_info|GPU Link Info||
    pcie_gen|PCIe Generation||
      max_link_gen|Max|$pcie_gen|
      current_link_gen|Current|$pcie_gen|
      device_current_link_gen|Device Current|$pcie_gen|>=1
      max_device_link_gen|Device Max|$pcie_gen|>=1
      max_host_link_gen|Host Max|$pcie_gen|>=1
    link_widths|Link Width||
      max_link_width|Max|$pcie_width|
      current_link_width|Current|$pcie_width|
  pci_bridge_chip|Bridge Chip||
    bridge_chip_type|Type||
    bridge_chip_fw|Firmware||
  replay_counter|Replays Since Reset|0|
  replay_rollover_counter|Replay Number Rollovers|0|
  tx_util|Tx Throughput|352 KB/s|
  rx_util|Rx Throughput|329 KB/s|
  atomic_caps_outbound|Atomic Caps Outbound||>=1
  atomic_caps_inbound|Atomic Caps Inbound||>=1
fan_speed|Fan Speed||
performance_state|Performance State|P0|
clocks_throttle_reasons|Clocks Throttle Reasons||<2
  clocks_throttle_reason_gpu_idle|Idle|$r_idle|
  clocks_throttle_reason_applications_clocks_setting|Applications Clocks Setting|Not Active|
  clocks_throttle_reason_sw_power_cap|SW Power Cap|Not Active|
  clocks_throttle_reason_hw_slowdown|HW Slowdown|$r_hw|
  clocks_throttle_reason_hw_thermal_slowdown|HW Thermal Slowdown|$r_thermal|
  clocks_throttle_reason_hw_power_brake_slowdown|HW Power Brake Slowdown|Not Active|
  clocks_throttle_reason_sync_boost|Sync Boost|Not Active|
  clocks_throttle_reason_sw_thermal_slowdown|SW Thermal Slowdown|Not Active|
  clocks_throttle_reason_display_clocks_setting|Display Clock Setting|Not Active|
clocks_event_reasons|Clocks Event Reasons||>=2
  clocks_event_reason_gpu_idle|Idle|$r_idle|
  clocks_event_reason_applications_clocks_setting|Applications Clocks Setting|Not Active|
  clocks_event_reason_sw_power_cap|SW Power Cap|Not Active|
  clocks_event_reason_hw_slowdown|HW Slowdown|$r_hw|
  clocks_event_reason_hw_thermal_slowdown|    HW Thermal Slowdown|$r_thermal|
  clocks_event_reason_hw_power_brake_slowdown|    HW Power Brake Slowdown|Not Active|
  clocks_event_reason_sync_boost|Sync Boost|Not Active|
  clocks_event_reason_sw_thermal_slowdown|SW Thermal Slowdown|Not Active|
  clocks_event_reason_display_clocks_setting|Display Clock Setting|Not Active|
clocks_event_reasons_counters|Clocks Event Reasons Counters||>=4
  clocks_event_reasons_counters_sw_power_cap|SW Power Capping|0 us|
  clocks_event_reasons_counters_sync_boost|Sync Boost|0 us|
  clocks_event_reasons_counters_sw_therm_slowdown|SW Thermal Slowdown|0 us|
  clocks_event_reasons_counters_hw_therm_slowdown|HW Thermal Slowdown|$thermal_us|
  clocks_event_reasons_counters_hw_power_brake|HW Power Braking|0 us|
sparse_operation_mode|Sparse Operation Mode|Disabled|>=3
fb_memory_usage|FB Memory Usage||
  total|Total|$mem_total|
  reserved|Reserved|$mem_reserved|
  used|Used|$mem_used|
  free|Free|$mem_free|
bar1_memory_usage|BAR1 Memory Usage||
  total|Total|131072 MiB|
  used|Used|1 MiB|
  free|Free|131071 MiB|
cc_protected_memory_usage|Conf Compute Protected Memory Usage||>=2
  total|Total|0 MiB|
  used|Used|0 MiB|
  free|Free|0 MiB|
compute_mode|Compute Mode|Default|
utilization|Utilization||
  gpu_util|GPU|$util|
  memory_util|Memory|$util|
  encoder_util|Encoder|0 %|
  decoder_util|Decoder|0 %|
  jpeg_util|JPEG|0 %|>=2
  ofa_util|OFA|0 %|>=2
encoder_stats|Encoder Stats||
  session_count|Active Sessions|0|
  average_fps|Average FPS|0|
  average_latency|Average Latency|0|
fbc_stats|FBC Stats||
  session_count|Active Sessions|0|
  average_fps|Average FPS|0|
  average_latency|Average Latency|0|
dram_encryption_mode|DRAM Encryption Mode||>=3
  current_dram_encryption|Current||
  pending_dram_encryption|Pending||
ecc_mode|ECC Mode||
  current_ecc|Current|Enabled|
  pending_ecc|Pending|Enabled|
ecc_errors|ECC Errors||
  volatile|Volatile||
    single_bit|Single Bit||legacy_ecc
      device_memory|Device Memory|$v_sbe|
      register_file|Register File|0|
      l1_cache|L1 Cache|0|
      l2_cache|L2 Cache|0|
      texture_memory|Texture Memory||
      texture_shm|Texture Shared||
      cbu|CBU||
      total|Total|$v_sbe|
    double_bit|Double Bit||legacy_ecc
      device_memory|Device Memory|$v_dbe|
      register_file|Register File|0|
      l1_cache|L1 Cache|0|
      l2_cache|L2 Cache|0|
      texture_memory|Texture Memory||
      texture_shm|Texture Shared||
      cbu|CBU|0|
      total|Total|$v_dbe|
    sram_correctable|SRAM Correctable|0|!legacy_ecc
    sram_uncorrectable|SRAM Uncorrectable|0|!legacy_ecc <3
    sram_uncorrectable_parity|SRAM Uncorrectable Parity|0|!legacy_ecc >=3
    sram_uncorrectable_secded|SRAM Uncorrectable SEC-DED|0|!legacy_ecc >=3
    dram_correctable|DRAM Correctable|$v_sbe|!legacy_ecc
    dram_uncorrectable|DRAM Uncorrectable|$v_dbe|!legacy_ecc
  aggregate|Aggregate||
    single_bit|Single Bit||legacy_ecc
      device_memory|Device Memory|$a_sbe|
      register_file|Register File|0|
      l1_cache|L1 Cache|0|
      l2_cache|L2 Cache|0|
      texture_memory|Texture Memory||
      texture_shm|Texture Shared||
      cbu|CBU||
      total|Total|$a_sbe|
    double_bit|Double Bit||legacy_ecc
      device_memory|Device Memory|$a_dbe|
      register_file|Register File|0|
      l1_cache|L1 Cache|0|
      l2_cache|L2 Cache|0|
      texture_memory|Texture Memory||
      texture_shm|Texture Shared||
      cbu|CBU|0|
      total|Total|$a_dbe|
    sram_correctable|SRAM Correctable|0|!legacy_ecc
    sram_uncorrectable|SRAM Uncorrectable|0|!legacy_ecc <3
    sram_uncorrectable_parity|SRAM Uncorrectable Parity|0|!legacy_ecc >=3
    sram_uncorrectable_secded|SRAM Uncorrectable SEC-DED|0|!legacy_ecc >=3
    dram_correctable|DRAM Correctable|$a_sbe|!legacy_ecc
    dram_uncorrectable|DRAM Uncorrectable|$a_dbe|!legacy_ecc
    sram_threshold_exceeded|SRAM Threshold Exceeded|No|!legacy_ecc >=3
  aggregate_uncorrectable_sram_sources|Aggregate Uncorrectable SRAM Sources||!legacy_ecc >=3
    sram_l2|SRAM L2|0|
    sram_sm|SRAM SM|0|
    sram_microcontroller|SRAM Microcontroller|0|
    sram_pcie|SRAM PCIE|0|
    sram_other|SRAM Other|0|
  channel_repair_pending|Channel Repair Pending|No|>=4
  tpc_repair_pending|TPC Repair Pending|No|>=4
  unrepairable_memory|Unrepairable Memory|No|>=4
retired_pages|Retired Pages||
  multiple_single_bit_retirement|Single Bit ECC||
    retired_count||$ret_sbe|
    retired_pagelist||$ret_list|xml
  double_bit_retirement|Double Bit ECC||
    retired_count||$ret_dbe|
    retired_pagelist||$ret_list|xml
  pending_blacklist|Pending Page Blacklist|$ret_pending|
  pending_retirement|Pending Page Retirement|$ret_pending|xml
remapped_rows|Remapped Rows|N/A|!remap
remapped_rows|Remapped Rows||remap
  remapped_row_corr|Correctable Error|$rr_corr|
  remapped_row_corr_inactive|Inactive Correctable Error|0|>=4
  remapped_row_unc|Uncorrectable Error|$rr_unc|
  remapped_row_unc_inactive|Inactive Uncorrectable Error|0|>=4
  remapped_row_pending|Pending|$rr_pending|
  remapped_row_failure|Remapping Failure Occurred|$rr_failure|
  row_remapper_histogram|Bank Remap Availability Histogram||
    row_remapper_histogram_max|Max|$rr_max|
    row_remapper_histogram_high|High|0 bank(s)|
    row_remapper_histogram_partial|Partial|$rr_partial|
    row_remapper_histogram_low|Low|0 bank(s)|
    row_remapper_histogram_none|None|0 bank(s)|
temperature|Temperature||
  gpu_temp|GPU Current Temp|$temp|
  gpu_temp_tlimit|GPU T.Limit Temp|$tlimit|>=1
  gpu_temp_max_threshold|GPU Shutdown Temp|92 C|!tlimit
  gpu_temp_slow_threshold|GPU Slowdown Temp|89 C|!tlimit
  gpu_temp_max_gpu_threshold|GPU Max Operating Temp|87 C|!tlimit
  gpu_temp_max_tlimit_threshold|GPU Shutdown T.Limit Temp|-8 C|tlimit
  gpu_temp_slow_tlimit_threshold|GPU Slowdown T.Limit Temp|-2 C|tlimit
  gpu_temp_max_gpu_tlimit_threshold|GPU Max Operating T.Limit Temp|0 C|tlimit
  gpu_target_temperature|GPU Target Temperature||
  memory_temp|Memory Current Temp|$mem_temp|
  gpu_temp_max_mem_threshold|Memory Max Operating Temp|95 C|!tlimit
  gpu_temp_max_mem_tlimit_threshold|Memory Max Operating T.Limit Temp|0 C|tlimit
supported_gpu_target_temp|Supported GPU Target Temp||xml
  gpu_target_temp_min|GPU Target Temp Min||
  gpu_target_temp_max|GPU Target Temp Max||
power_readings|Power Readings||<2
  power_state|Power State|P0|
  power_management|Power Management|Supported|
  power_draw|Power Draw|$power|
  power_limit|Power Limit|$plimit|
  default_power_limit|Default Power Limit|$plimit|
  enforced_power_limit|Enforced Power Limit|$plimit|
  min_power_limit|Min Power Limit|$pmin|
  max_power_limit|Max Power Limit|$plimit|
gpu_power_readings|GPU Power Readings||>=2
  power_state|Power State|P0|xml
  power_draw|Power Draw|$power|2
  average_power_draw|Average Power Draw|$power|>=3
  instant_power_draw|Instantaneous Power Draw|$power|>=3
  current_power_limit|Current Power Limit|$plimit|
  requested_power_limit|Requested Power Limit|$plimit|
  default_power_limit|Default Power Limit|$plimit|
  min_power_limit|Min Power Limit|$pmin|
  max_power_limit|Max Power Limit|$plimit|
gpu_memory_power_readings|GPU Memory Power Readings ||>=3
  average_power_draw|Average Power Draw|43.19 W|
  instant_power_draw|Instantaneous Power Draw||
module_power_readings|Module Power Readings||>=2
  power_state|Power State|P0|xml
  power_draw|Power Draw||2
  average_power_draw|Average Power Draw||>=3
  instant_power_draw|Instantaneous Power Draw||>=3
  current_power_limit|Current Power Limit||
  requested_power_limit|Requested Power Limit||
  default_power_limit|Default Power Limit||
  min_power_limit|Min Power Limit||
  max_power_limit|Max Power Limit||
power_smoothing|Power Smoothing||>=3
power_profiles|Workload Power Profiles||>=3
  power_profile_requested_profiles|Requested Profiles||
  power_profile_enforced_profiles|Enforced Profiles||
edpp_multiplier|EDPp Multiplier|100.00%|>=4
clocks|Clocks||
  graphics_clock|Graphics|$clk_gr|
  sm_clock|SM|$clk_gr|
  mem_clock|Memory|$clk_mem|
  video_clock|Video|765 MHz|
applications_clocks|Applications Clocks||
  graphics_clock|Graphics|$app_gr|
  mem_clock|Memory|$app_mem|
default_applications_clocks|Default Applications Clocks||
  graphics_clock|Graphics|$app_gr|
  mem_clock|Memory|$app_mem|
deferred_clocks|Deferred Clocks||>=1
  mem_clock|Memory||
max_clocks|Max Clocks||
  graphics_clock|Graphics|$max_gr|
  sm_clock|SM|$max_gr|
  mem_clock|Memory|$max_mem|
  video_clock|Video|1545 MHz|
max_customer_boost_clocks|Max Customer Boost Clocks||
  graphics_clock|Graphics|$max_gr|
clock_policy|Clock Policy||
  auto_boost|Auto Boost||
  auto_boost_default|Auto Boost Default||
voltage|Voltage||<4
  graphics_volt|Graphics||
fabric|Fabric||>=1
  state|State|$fabric_state|
  status|Status|$fabric_status|
  cliqueId|CliqueId|$clique|>=3
  clusterUuid|ClusterUUID|$cluster_uuid|>=3
  health|Health||>=3 !mnnvl
    summary|Summary||>=4
    bandwidth|Bandwidth||
    route_recovery_in_progress|Route Recovery in progress||
    route_unhealthy|Route Unhealthy||
    access_timeout_recovery|Access Timeout Recovery||
    incorrect_configuration|Incorrect Configuration||>=4
    partition_assigned|Partition Assigned||>=4 xml
  health|Health||>=3 mnnvl
    summary|Summary|$fabric_health|
    bandwidth|Bandwidth|$fabric_bandwidth|
    route_recovery_in_progress|Route Recovery in progress|$fabric_flag|
    route_unhealthy|Route Unhealthy|$fabric_flag|
    access_timeout_recovery|Access Timeout Recovery|$fabric_flag|
    incorrect_configuration|Incorrect Configuration||
    partition_assigned|Partition Assigned||xml
supported_clocks||@supported_clocks|xml
processes|Processes|@processes|
accounted_processes||@accounted|xml
capabilities|Capabilities||>=3
  egm|EGM|disabled|
"""


class Node:
    __slots__ = ("children", "cond", "label", "tag", "value")

    def __init__(self, tag: str, label: str, value: str, cond: list[str]):
        self.tag, self.label, self.value, self.cond = tag, label, value, cond
        self.children: list[Node] = []


def _parse() -> list[Node]:
    roots: list[Node] = []
    stack: list[tuple[int, Node]] = []
    for raw in LAYOUT.strip("\n").splitlines():
        depth = (len(raw) - len(raw.lstrip(" "))) // 2
        tag, label, value, cond = (raw.strip().split("|") + [""] * 4)[:4]
        node = Node(tag, label, value, cond.split())
        while stack and stack[-1][0] >= depth:
            stack.pop()
        (stack[-1][1].children if stack else roots).append(node)
        stack.append((depth, node))
    return roots


TREE = _parse()


def _cond_ok(cond: list[str], rank: int, flags: set[str], xml: bool) -> bool:
    for c in cond:
        if c == "xml":
            if not xml:
                return False
        elif c.startswith(">="):
            if rank < int(c[2:]):
                return False
        elif c.startswith("<"):
            if rank >= int(c[1:]):
                return False
        elif c[0].isdigit():
            lo, _, hi = c.partition("-")
            if not int(lo) <= rank <= int(hi or lo):
                return False
        elif c.startswith("!"):
            if c[1:] in flags:
                return False
        elif c not in flags:
            return False
    return True


def select(rank: int, flags: set[str], xml: bool) -> list[Node]:
    """The layout filtered for one variant (a fresh tree of the kept nodes)."""

    def walk(nodes: list[Node]) -> list[Node]:
        out = []
        for n in nodes:
            if _cond_ok(n.cond, rank, flags, xml):
                m = Node(n.tag, n.label, n.value, [])
                m.children = walk(n.children)
                out.append(m)
        return out

    return walk(TREE)
