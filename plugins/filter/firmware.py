# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The gpu_firmware role's filter: gpufleet.lifecycle.gpu_firmware_rollback_target.

Documentation in the adjacent gpu_firmware_rollback_target.yml; the logic is in plugins/module_utils/_firmware/rollback.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware.rollback import RollbackError, rollback_target


def gpu_firmware_rollback_target(state, packages=None, package="", checksum=""):
    """The package a GPU firmware rollback flashes: looked up by the node's version in the controller's packages."""
    try:
        return rollback_target(state, packages=packages, package=package, checksum=checksum)
    except RollbackError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.gpu_firmware_rollback_target: {exc}") from exc


class FilterModule:
    """gpufleet.lifecycle GPU firmware filter."""

    def filters(self):
        return {"gpu_firmware_rollback_target": gpu_firmware_rollback_target}
