# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # Tool paths and the read time limit shared by the modules of the gpufleet.lifecycle.gpu action group (gpu_facts, gpu_validate).
    DOCUMENTATION = r"""
options:
  nvidia_smi_path:
    description: Path of C(nvidia-smi). Searched in E(PATH) and the sbin and bin folders when not set.
    type: path
  fabricmanager_path:
    description: Path of C(nv-fabricmanager). Searched when not set.
    type: path
  command_timeout:
    description:
      - Time limit in seconds of each read of the node (C(nvidia-smi -q -x), C(nvidia-smi nvlink -s), C(nv-fabricmanager --version),
        C(systemctl is-active), C(dmesg), the Mellanox tools), from V(1) to V(3600).
      - A read that reaches it is stopped, and the task says which tool did not finish within how many seconds;
        C(nvidia-smi) on a GPU whose NVML hangs can otherwise block for ever.
    type: int
    default: 120
    version_added: 0.1.0
"""
