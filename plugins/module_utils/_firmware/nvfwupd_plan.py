# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The plan of an nvfwupd update (private: may change without notice): pure functions, no I/O.

Firmware versions are compared field by field (``.``, ``-`` and ``_`` separate fields): two
hexadecimal fields as numbers (``96.00.AF.00.01`` is newer than ``96.00.A5.00.01``; reading decimal
digits as hexadecimal keeps their order), anything else in natural order. Where the fields do not
line up the order is unknown, and nvfwupd's Up-To-Date decides (it says Yes when the system is the
same or newer than the package).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

# The activation each component's new firmware needs, by inventory name (first match wins).
# From NVIDIA's HGX firmware update guides: GPU firmware activates on a GPU reset (or a host
# reboot), the PCIe switch on a host reboot, the HMC on its own reset, the rest of the baseboard
# (NVSwitch, CPLD, FPGA, ERoT, retimers) on an AC power cycle.
ACTIVATION_RULES = (
    (re.compile(r"(?i).*GPU.*"), "gpu_reset"),
    (re.compile(r"(?i).*PCIeSwitch.*"), "reboot"),
    (re.compile(r"(?i)(HGX_FW_)?(BMC|HMC)_\d+"), "bmc_reset"),
)
DEFAULT_ACTIVATION = "ac_power_cycle"  # the strongest: what the table does not know
# An AC power cycle activates everything; a host reboot activates what a GPU reset does.
ACTIVATION_ORDER = ("none", "gpu_reset", "reboot", "bmc_reset", "ac_power_cycle")

_FIELD_SPLIT = re.compile(r"[.\-_]")
_HEX = re.compile(r"[0-9A-Fa-f]+")
_NATURAL = re.compile(r"\d+|\D+")


class PlanError(GpufleetError):
    """A plan that must not be carried out (a downgrade without allow_downgrade, a target not in the package)."""


def activation_for(component):
    for pattern, activation in ACTIVATION_RULES:
        if pattern.fullmatch(component):
            return activation
    return DEFAULT_ACTIVATION


def _field_key(field):
    if _HEX.fullmatch(field):
        return (0, int(field, 16), "")
    return (1, 0, tuple((0, int(part), "") if part.isdigit() else (1, 0, part.lower()) for part in _NATURAL.findall(field)))


def compare_versions(installed, package):
    """-1 when installed is older than package, 0 equal, 1 newer, None when the order is unknown."""
    if installed == package:
        return 0
    left, right = _FIELD_SPLIT.split(installed), _FIELD_SPLIT.split(package)
    if len(left) != len(right):
        return None
    for a, b in zip(left, right):
        ka, kb = _field_key(a), _field_key(b)
        if ka[0] != kb[0]:
            if a.lower() == b.lower():
                continue
            return None
        if ka[0] == 1 and [p[2] for p in ka[2] if p[0]] != [p[2] for p in kb[2] if p[0]]:
            return None  # other letters (GB200 and HGX): another product line, not an older or newer one
        if ka != kb:
            return -1 if ka < kb else 1
    return 0


def _action(component):
    installed, package, staged = component["sys_version"], component["pkg_version"], component.get("staged_version")
    if installed == package:
        if staged is not None and staged != package:
            # Another version waits for the next reset: flash the package again over it (the BMC skips a version
            # already installed unless ForceUpdate is on) or the next activation would move away from the package.
            return "replace_staged"
        return "none"
    if staged is not None and staged == package:
        return "activate"  # flashed already, waiting for its reset: flashing again changes nothing
    order = compare_versions(installed, package) if installed is not None else -1
    if order is None:
        order = 1 if component.get("up_to_date") is True else -1
    return "downgrade" if order > 0 else "update"


def plan(components, targets=None, tray=False):
    """``[{component, installed, staged, package, action, activation}]`` for what the package covers.

    ``tray``: a GB200 / GB300 NVL72 compute tray, whose every component activates with the tray's AC power cycle
    (the BMC's AuxPowerCycle, as NVIDIA's GB300 compute flow files do after flashing): ``ac_power_cycle`` for all.

    ``action``: ``none`` (at the package's version), ``activate`` (the package's version is staged),
    ``update``, ``downgrade``, ``replace_staged`` (at the package's version with another one staged).
    ``targets`` (inventory names) limits the plan; one the package does not cover raises PlanError.
    """
    covered = [c for c in components if c["pkg_version"] is not None]
    if targets:
        names = {c["ap"] for c in covered}
        missing = [t for t in targets if t not in names]
        if missing:
            raise PlanError(
                f"targets {', '.join(missing)} are not components that the package updates on this system "
                f"(it updates {', '.join(sorted(names)) or 'nothing here'}): correct targets or leave it empty",
                targets=list(targets),
            )
        covered = [c for c in covered if c["ap"] in targets]
    rows = []
    for component in covered:
        action = _action(component)
        rows.append(
            {
                "component": component["ap"],
                "installed": component["sys_version"],
                "staged": component.get("staged_version"),
                "package": component["pkg_version"],
                "action": action,
                "activation": "none" if action in ("none", "replace_staged") else
                DEFAULT_ACTIVATION if tray else activation_for(component["ap"]),
            }
        )
    return rows


def activations(rows):
    """The resets that the planned or flashed components need, weakest first, reduced to what is needed.

    An AC power cycle covers every other; a host reboot covers a GPU reset.
    """
    needed = {row["activation"] for row in rows} - {"none"}
    if "ac_power_cycle" in needed:
        return ["ac_power_cycle"]
    if "reboot" in needed:
        needed.discard("gpu_reset")
    return [name for name in ACTIVATION_ORDER if name in needed]


def versions(rows, key):
    return {row["component"]: row[key] for row in rows}


# What to do about the BMC's ForceUpdate before a run plans anything, from what ``force_update status`` says and
# whether this collection's record says an earlier run turned it on (and ended, killed, before turning it off).
FORCE_UPDATE_ACTIONS = {
    # (ForceUpdate on, our stale record, something to flash): action
    (False, False, False): "none",
    (False, False, True): "none",
    (False, True, False): "forget",  # the earlier run's disable got through: only its record is left
    (False, True, True): "forget",
    (True, True, False): "turn_off",  # ours, left open by a killed run: close it whatever this run does
    (True, True, True): "turn_off",
    (True, False, False): "report",  # someone else's (a manual downgrade?): not ours to close; nothing to flash either
    (True, False, True): "refuse",  # flashing now would re-flash every component at the package, downgrades included
}


def force_update_action(found_on, stale_record, to_flash):
    """``none``, ``forget`` (remove the record), ``turn_off`` (disable, check, remove the record), ``report`` or ``refuse``."""
    if not isinstance(found_on, bool):
        raise PlanError(f"force_update status must be true or false, got {found_on!r}")
    return FORCE_UPDATE_ACTIONS[(found_on, bool(stale_record), bool(to_flash))]
