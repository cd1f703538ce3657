# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the rollout decides about a node's components (private): which change, the one activation, what to verify after it,
and the versions a node's record shows.

The component roles (ofed, nic_firmware, gpu_firmware, nvidia_driver) answer through documented facts: ``<role>_needs_change``
from their ``plan`` entry point and ``<role>_activation_pending`` after ``main``. The names are in ``COMPONENTS`` (a table,
not built by concatenation); these functions take a node's host variables and read only those names.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

# Strength of each activation kind: a node is activated once, with the strongest kind any component needs.
ACTIVATION_STRENGTH = {"none": 0, "gpu_reset": 1, "reboot": 2, "power_cycle": 3}

# Each component role: the facts it answers with, the phase its change is recorded as, and whether its main entry point
# verifies by itself when it leaves no activation pending (nvidia_driver and nic_firmware do; gpu_firmware never does:
# a flashed image runs only after an activation).
COMPONENTS = {
    # ofed (issue 24) goes before nvidia_driver in gpufleet_components: nvidia_peermem builds against OFED's symbols.
    "ofed": {"needs_change": "ofed_needs_change", "activation_pending": "ofed_activation_pending", "phase": "ofed", "verifies_itself": True},
    "nic_firmware": {"needs_change": "nic_firmware_needs_change", "activation_pending": "nic_firmware_activation_pending",
                     "phase": "nic_firmware", "verifies_itself": True},
    "gpu_firmware": {"needs_change": "gpu_firmware_needs_change", "activation_pending": "gpu_firmware_activation_pending",
                     "phase": "gpu_firmware", "verifies_itself": False},
    "nvidia_driver": {"needs_change": "nvidia_driver_needs_change", "activation_pending": "nvidia_driver_activation_pending",
                      "phase": "driver", "verifies_itself": True},
}

_TRUE = frozenset(("yes", "on", "1", "true", "y", "t"))


class ComponentError(GpufleetError, ValueError):
    """A component or activation kind the rollout does not know; the message names it and what to fix."""


def _component(name):
    if not isinstance(name, str) or name not in COMPONENTS:
        raise ComponentError(f"{name!r} is not a component role of the rollout: gpufleet_components may name {', '.join(COMPONENTS)}")
    return COMPONENTS[name]


def _as_bool(value):
    """Ansible's ``bool`` filter: true for True, 1 and 'yes'/'true'/'on'/'1'/'y'/'t' (any case), false otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value == 1
    if isinstance(value, str):
        return value.strip().lower() in _TRUE
    return False


def in_bom(components, bom):
    """The components (in the given order) that the node's BOM names, so that the rollout plans them: ``ofed`` where
    ``stack.ofed`` names a flavor other than ``inbox``, ``nic_firmware`` where ``nic_firmware`` has a PSID, ``gpu_firmware``
    where ``gpu_firmware.package`` is set, ``nvidia_driver`` where ``driver.version`` is set. A component the BOM does not
    name is left alone on that node (another SKU's BOM may name it)."""
    for name in components or []:
        _component(name)
    bom = bom if isinstance(bom, Mapping) else {}

    def part(value, key):
        value = value.get(key) if isinstance(value, Mapping) else None
        return value if isinstance(value, Mapping) else {}

    ofed_flavor = part(part(bom, "stack"), "ofed").get("flavor")
    named = {
        "ofed": isinstance(ofed_flavor, str) and ofed_flavor.strip() not in ("", "inbox"),
        "nic_firmware": len(part(bom, "nic_firmware")) > 0,
        "gpu_firmware": bool(part(bom, "gpu_firmware").get("package")),
        "nvidia_driver": bool(part(bom, "driver").get("version")),
    }
    return [name for name in components or [] if named[name]]


def to_change(components, host):
    """The components (in the given order) whose plan entry set ``<role>_needs_change`` true in ``host`` (its hostvars)."""
    return [name for name in components or [] if _as_bool(host.get(_component(name)["needs_change"], False))]


def pending_activations(changed, host):
    """{component: the activation kind it left pending} for the changed components; an unset or empty fact is ``none``.

    A kind the rollout does not know is refused, naming the role and its fact.
    """
    out = {}
    for name in changed or []:
        fact = _component(name)["activation_pending"]
        kind = host.get(fact)
        kind = "none" if kind is None or kind == "" else str(kind)
        if kind not in ACTIVATION_STRENGTH:
            raise ComponentError(f"the role {name} asked for the activation {kind!r} ({fact}); the rollout knows "
                                 f"{', '.join(ACTIVATION_STRENGTH)}: fix the role's {fact}")
        out[name] = kind
    return out


def strongest_activation(kinds):
    """The one activation that serves every kind in ``kinds`` (``none`` when there is none); an unknown kind is refused."""
    best = "none"
    for kind in kinds or []:
        if kind not in ACTIVATION_STRENGTH:
            raise ComponentError(f"activation {kind!r} is not one the rollout knows ({', '.join(ACTIVATION_STRENGTH)})")
        if ACTIVATION_STRENGTH[kind] > ACTIVATION_STRENGTH[best]:
            best = kind
    return best


def to_verify(changed, pending, activation):
    """The changed components to verify after the node's one activation.

    All of them when the node was activated (reset, rebooted or power-cycled: what runs now is new); otherwise those that
    left an activation pending or never verify themselves. A component whose main entry point verified it with nothing
    pending, on a node not activated since, is not verified twice.
    """
    if activation not in ACTIVATION_STRENGTH:
        raise ComponentError(f"activation {activation!r} is not one the rollout knows ({', '.join(ACTIVATION_STRENGTH)})")
    if activation != "none":
        return list(changed or [])
    return [name for name in changed or [] if pending.get(name, "none") != "none" or not _component(name)["verifies_itself"]]


def next_phase(changed, after=None):
    """The phase that follows: the next changed component's phase after ``after`` (a component, or None for the drain),
    or ``activate`` when none is left."""
    changed = list(changed or [])
    rest = changed if after is None else changed[changed.index(after) + 1:] if after in changed else []
    return _component(rest[0])["phase"] if rest else "activate"


def changed_by_last_rollout(section, rollout_id=None):
    """The components a node's last rollout changed, in the rollout's order (COMPONENTS): what an on-demand rollback
    restores when it is not told (gpufleet_rollback_components). [] when the state file names none.

    ``section``: the node state file's ``rollout`` section, read before the rollback takes its lock: the last rollout's
    (its phases closed ``ok``: ``ofed``, ``nic_firmware``, ``gpu_firmware``, ``driver``), or, for the same rollback run
    again (``rollout_id``), its own section, whose ``superseded`` keeps the rollout it took the node from.
    """
    if not isinstance(section, dict):
        return []
    if rollout_id and section.get("id") == rollout_id:
        section = section.get("superseded") if isinstance(section.get("superseded"), dict) else {}
    done = {phase.get("name") for phase in section.get("phases") or [] if isinstance(phase, dict) and phase.get("status") == "ok"}
    return [name for name, spec in COMPONENTS.items() if spec["phase"] in done]


def record_versions(facts, gpu_firmware=None):
    """The versions a node's record shows, from a gpu_facts result (``ansible_facts.gpufleet``): driver, fabric manager, the GPU
    firmware given, each NIC PSID's firmware (the distinct versions of its ports, joined by ``/``), and OFED where the
    result has the stack subset."""
    facts = facts if isinstance(facts, Mapping) else {}
    nics = {}
    for nic in facts.get("nics") or []:
        if not isinstance(nic, Mapping) or nic.get("psid") is None:
            continue
        versions = nics.setdefault(nic["psid"], [])
        if nic.get("fw_current") not in versions:
            versions.append(nic.get("fw_current"))

    def version_of(key):
        part = facts.get(key)
        return part.get("version") if isinstance(part, Mapping) else None

    versions = {"driver": version_of("driver"), "fabricmanager": version_of("fabricmanager"), "gpu_firmware": gpu_firmware,
                "nic_firmware": {psid: "/".join(str(v) for v in versions) for psid, versions in nics.items()}}
    # OFED where the read had the stack (the rollout reads it where ofed is a component): "<flavor> <release>", or the
    # inbox stack by name, so that an OFED change shows in the record as the driver's does.
    stack = facts.get("stack")
    ofed = stack.get("ofed") if isinstance(stack, Mapping) else None
    if isinstance(ofed, Mapping) and ofed.get("flavor"):
        versions["ofed"] = f"{ofed['flavor']} {ofed['version']}" if ofed.get("version") else str(ofed["flavor"])
    return versions
