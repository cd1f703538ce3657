# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The GPU firmware rollback's filters: gpufleet.lifecycle.gpu_firmware_rollback_target and gpu_firmware_rollback_problem.

Documentation in the adjacent gpu_firmware_rollback_target.yml and gpu_firmware_rollback_problem.yml; the logic is in
plugins/module_utils/_firmware/rollback.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_rollback = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._firmware.rollback")


def gpu_firmware_rollback_target(state, packages=None, package="", checksum=""):
    """The package a GPU firmware rollback flashes: looked up by the node's version in the controller's packages."""
    try:
        return _rollback.rollback_target(state, packages=packages, package=package, checksum=checksum)
    except _rollback.RollbackError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.gpu_firmware_rollback_target: {exc}") from exc


def gpu_firmware_rollback_problem(nodes):
    """'' when every node whose GPU firmware a rollout changes could be rolled back; else the refusal (the rollout's preflight)."""
    if not isinstance(nodes, (list, tuple)) or not all(isinstance(node, dict) for node in nodes):
        raise AnsibleFilterError("gpufleet.lifecycle.gpu_firmware_rollback_problem: the input must be a list of {node, version, packages, package, checksum}")
    try:
        return _rollback.preflight_problem(nodes)
    except _rollback.RollbackError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.gpu_firmware_rollback_problem: {exc}") from exc


class FilterModule:
    """gpufleet.lifecycle GPU firmware rollback filters."""

    def filters(self):
        return {"gpu_firmware_rollback_target": gpu_firmware_rollback_target, "gpu_firmware_rollback_problem": gpu_firmware_rollback_problem}
