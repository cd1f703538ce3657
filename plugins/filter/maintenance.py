# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The drain and reboot decisions of the node_maintenance role, as filters.

Documentation of each filter in the adjacent <filter_name>.yml file; the logic is in
plugins/module_utils/_maintenance/kubernetes.py (pure functions over the Kubernetes API's JSON) and
plugins/module_utils/_maintenance/slurm.py (a Slurm reboot that never starts, the job ids given to scancel).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

kubernetes = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._maintenance.kubernetes")
slurm = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._maintenance.slurm")

_PREFIX = "gpufleet.lifecycle."


def _filter(name, module, function):
    """Wrap a decision (function, by name, of module: looked up when the filter runs, lazy_module) so that its errors name
    the filter's full name."""

    def wrapper(*args, **kwargs):
        try:
            return getattr(module, function)(*args, **kwargs)
        except (kubernetes.KubernetesMaintenanceError, slurm.SlurmArgumentError, TypeError) as exc:
            raise AnsibleFilterError(f"{_PREFIX}{name}: {exc}") from exc

    wrapper.__name__ = wrapper.__qualname__ = name
    return wrapper


class FilterModule:
    """gpufleet.lifecycle maintenance filters (Kubernetes drains, Slurm reboots)."""

    def filters(self):
        return {
            "k8s_cordon_plan": _filter("k8s_cordon_plan", kubernetes, "cordon_plan"),
            "k8s_uncordon_plan": _filter("k8s_uncordon_plan", kubernetes, "uncordon_plan"),
            "k8s_drain_blockers": _filter("k8s_drain_blockers", kubernetes, "drain_blockers"),
            "k8s_drain_outcome": _filter("k8s_drain_outcome", kubernetes, "drain_outcome"),
            "slurm_reboot_next": _filter("slurm_reboot_next", slurm, "reboot_next"),
            "slurm_scancel_ids": _filter("slurm_scancel_ids", slurm, "scancel_ids"),
        }
