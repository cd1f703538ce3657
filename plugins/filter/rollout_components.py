# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rollout's decisions about a node's components: components_to_change, component_activations, strongest_activation,
components_to_verify, component_next_phase and record_versions (gpufleet.lifecycle).

Documentation in the adjacent YAML file of each filter; the logic is in plugins/module_utils/_rollout/components.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_components = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.components")


def _call(name, func, *args):
    try:
        return func(*args)
    except _components.ComponentError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.{name}: {exc}") from exc


def _host(name, host):
    if not hasattr(host, "get"):
        raise AnsibleFilterError(f"gpufleet.lifecycle.{name}: the node's variables must be a mapping (hostvars[inventory_hostname])")
    return host


def components_in_bom(components, bom):
    """The components of gpufleet_components that the node's BOM names (docs: components_in_bom.yml)."""
    return _call("components_in_bom", _components.in_bom, components, bom)


def components_to_change(components, host):
    """The components whose plan entry point said they need a change (<role>_needs_change), in the given order."""
    return _call("components_to_change", _components.to_change, components, _host("components_to_change", host))


def component_activations(changed, host):
    """{component: activation kind it left pending (<role>_activation_pending)} of the changed components."""
    return _call("component_activations", _components.pending_activations, changed, _host("component_activations", host))


def strongest_activation(kinds, extra=None):
    """The one activation (power_cycle > reboot > gpu_reset > none) serving every kind given (a list, or a component_activations
    dict), plus extra."""
    kinds = list(kinds.values()) if isinstance(kinds, dict) else list(kinds or [])
    return _call("strongest_activation", _components.strongest_activation, kinds + list(extra or []))


def components_to_verify(changed, host, activation):
    """The changed components to verify after the node's one activation (all of them when the node was activated)."""
    pending = component_activations(changed, host)
    return _call("components_to_verify", _components.to_verify, changed, pending, activation)


def component_next_phase(changed, after=None):
    """The phase after ``after`` (a component; none: after the drain): the next changed component's phase, or activate."""
    return _call("component_next_phase", _components.next_phase, changed, after)


def components_changed_by_last_rollout(section, rollout_id=None):
    """The components the node's last rollout changed (docs: components_changed_by_last_rollout.yml)."""
    return _components.changed_by_last_rollout(section, rollout_id)


def record_versions(facts, gpu_firmware=None):
    """The versions of a node's record (driver, fabricmanager, gpu_firmware, nic_firmware per PSID) from a gpu_facts result."""
    return _components.record_versions(facts, gpu_firmware)


class FilterModule:
    """gpufleet.lifecycle rollout component filters."""

    def filters(self):
        return {"components_in_bom": components_in_bom, "components_to_change": components_to_change, "component_activations": component_activations,
                "strongest_activation": strongest_activation, "components_to_verify": components_to_verify,
                "component_next_phase": component_next_phase, "record_versions": record_versions,
                "components_changed_by_last_rollout": components_changed_by_last_rollout}
