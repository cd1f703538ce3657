# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # Tool paths shared by the modules of the gpufleet.lifecycle.gpu action group (gpu_facts, gpu_validate).
    DOCUMENTATION = r"""
options:
  nvidia_smi_path:
    description: Path of C(nvidia-smi). Searched in E(PATH) and the sbin and bin folders when not set.
    type: path
  fabricmanager_path:
    description: Path of C(nv-fabricmanager). Searched when not set.
    type: path
"""
