# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the node simulator (tests/gpusim, not shipped in the collection) can play (private).

The collection cannot import gpusim, so the converter keeps these names as data; tests/unit/test_rehearsal.py checks
them against gpusim's own catalog (GPU models, NIC types, the fixed NVSwitch firmware, the BMC's member names), so
the two cannot drift apart unseen.
"""

from __future__ import annotations

# gpusim.catalog.GPU_MODELS: the exact nvidia-smi names.
GPU_MODELS = (
    "Tesla V100-SXM2-32GB",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H200",
    "NVIDIA L40S",
    "NVIDIA B200",
    "NVIDIA GB200",
)

# gpusim.catalog.NIC_TYPES: spec name by the name mlxfwmanager prints (the spec name without '-' and ' ').
NIC_TYPES = {name.replace("-", "").replace(" ", "").lower(): name
             for name in ("ConnectX-7", "ConnectX-6 Dx", "ConnectX-6", "ConnectX-6 Lx", "BlueField-3")}

# gpusim.firmware.NVSWITCH: every simulated NVSwitch runs this firmware (a spec cannot set it).
NVSWITCH_FIRMWARE = "96.10.6D.00.01"

# The BMC's FirmwareInventory members the simulator serves (gpusim.firmware).
HGX_BUNDLE_ID = "HGX_FW_BMC_0"
HOST_BMC_ID = "HostBMC_0"
HOST_BIOS_ID = "HostBIOS_0"
NVSWITCH_ID_PREFIX = "HGX_FW_NVSwitch_"
GPU_ID_PREFIXES = ("HGX_FW_GPU_SXM_", "GPU_")  # an HGX baseboard's GPUs, PCIe GPUs

# Scaled time for the copy (seconds); gpusim's spec format, tests/gpusim/README.md.
TIMING = {"reboot": 3, "flash": 2, "diag": {1: 1, 2: 3, 3: 6}, "burn": 2, "nccl": 1}
