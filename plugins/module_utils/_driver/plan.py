# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the nvidia_driver module would change: pure functions, current state and options in, a plan out (private)."""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _version
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

_VERSION = re.compile(r"^\d+(\.\d+){1,3}$")
_SHA256 = re.compile(r"^(?:sha256:)?([0-9a-fA-F]{64})$")

DRIVER_ACTIONS = ("none", "install", "upgrade", "downgrade", "reinstall", "activate", "hold", "remove")
FM_ACTIONS = ("none", "install", "upgrade", "downgrade", "remove")


class PlanError(GpufleetError):
    """The options ask for something the module refuses to do; the message says what to change."""


def version_key(version):
    """``"550.90.07"`` -> ``(550, 90, 7)``; PlanError for anything else."""
    if not version or not _VERSION.match(str(version)):
        raise PlanError(f"{version!r} is not an NVIDIA driver version (expected for example 550.90.07)")
    return tuple(int(part) for part in str(version).split("."))


def branch(version):
    """``"550.90.07"`` -> ``"550"``: the major that distribution packages are named after (see ``_version``)."""
    return _version.major(str(version))


def parse_checksum(checksum):
    """``sha256:<hex>`` or bare hex -> lower-case hex; PlanError otherwise."""
    match = _SHA256.match((checksum or "").strip())
    if not match:
        raise PlanError(
            f"checksum {checksum!r} is not a sha256: give sha256:<64 hex digits> or the 64 hex digits "
            "(NVIDIA publishes them beside each runfile; or run sha256sum on the file you trust)"
        )
    return match.group(1).lower()


def _direction(before, after):
    if before is None:
        return "install"
    if before == after:
        return "none"
    return "upgrade" if version_key(after) > version_key(before) else "downgrade"


def fabricmanager_wanted(option, nvswitch_present):
    """True when the fabric manager must follow the driver, False when it must go, None when it is left alone."""
    if option == "present" or (option == "auto" and nvswitch_present):
        return True
    if option == "absent":
        return False
    return None


def plan(current, options):
    """The plan for ``options`` (the module's parameters) against ``current`` (see ``_driver.read_current``).

    Returns ``{"driver": {"action", "before", "after", "kernel_module_before", "kernel_module_after"},
    "fabricmanager": {"action", "before", "after", "managed"}, "changed"}``.
    Raises PlanError for a downgrade without ``allow_downgrade``.
    """
    driver = current["driver"]
    installed = driver.get("installed_version")
    loaded = driver.get("loaded_version")
    flavor = driver.get("flavor")
    fm_version = (current.get("fabricmanager") or {}).get("version")
    wanted_fm = fabricmanager_wanted(options["fabricmanager"], current.get("nvswitch", False))

    result = {
        "driver": {"action": "none", "before": installed, "after": installed, "kernel_module_before": flavor, "kernel_module_after": flavor},
        "fabricmanager": {"action": "none", "before": fm_version, "after": fm_version, "managed": wanted_fm is not None},
    }
    if options["state"] == "absent":
        if installed or loaded:
            result["driver"].update(action="remove", after=None, kernel_module_after=None)
        if fm_version and wanted_fm is not None:
            result["fabricmanager"].update(action="remove", after=None)
    else:
        target = options["version"]
        version_key(target)
        action = _direction(installed, target)
        if action == "downgrade" and not options.get("allow_downgrade"):
            raise PlanError(
                f"driver {installed} is installed and {target} is older: refusing to downgrade. "
                "Set allow_downgrade: true to downgrade (or use the rollback entry point of the nvidia_driver role)",
                before=installed,
                after=target,
            )
        wanted_flavor = options["kernel_module"]
        if action == "none" and flavor and flavor != wanted_flavor:
            action = "reinstall"
        if action == "none" and loaded != target:
            action = "activate"  # installed but not (or another version) loaded: reload or reboot
        if action == "none" and driver.get("held") is False:
            action = "hold"  # package method: someone released the hold; unattended upgrades could move it
        result["driver"].update(action=action, after=target, kernel_module_after=wanted_flavor)
        if wanted_fm is True:
            fm_action = _direction(fm_version, target)
            if fm_action == "downgrade" and action != "downgrade" and not options.get("allow_downgrade"):
                raise PlanError(
                    f"fabric manager {fm_version} is newer than driver {target}: set allow_downgrade: true to bring it back to "
                    f"{target}, or fabricmanager: skip to leave it (NVLink will not work while they differ)",
                    before=fm_version,
                    after=target,
                )
            result["fabricmanager"].update(action=fm_action, after=target)
        elif wanted_fm is False and fm_version:
            result["fabricmanager"].update(action="remove", after=None)
    result["changed"] = result["driver"]["action"] != "none" or result["fabricmanager"]["action"] != "none"
    return result


def predict_reboot(current, plan_result):
    """Check mode's ``reboot_required``: whether the plan would need a reboot, as far as reading the node can tell.

    True for ``activate`` (the installed driver is not the loaded one: the modules must be swapped and a
    reboot does it when a reload cannot), and for any driver change while nvidia-smi says a GPU fell off the
    bus (``gpu_lost``: only a reset or a reboot brings it back). Whether ``rmmod`` will succeed, or the new
    modules will load, is known only by trying: a real run can still return ``reboot_required`` where this is False.
    """
    action = plan_result["driver"]["action"]
    if action == "activate":
        return True
    driver_change = action not in ("none", "hold", "remove")
    return driver_change and (current.get("driver") or {}).get("nvidia_smi") == "gpu_lost"


def diff(plan_result):
    """``{before, after}`` of the small version dict for ``--diff``."""
    drv, fm = plan_result["driver"], plan_result["fabricmanager"]
    before = {"driver": drv["before"], "kernel_module": drv["kernel_module_before"]}
    after = {"driver": drv["after"], "kernel_module": drv["kernel_module_after"]}
    if fm["managed"]:
        before["fabricmanager"] = fm["before"]
        after["fabricmanager"] = fm["after"]
    return {"before": before, "after": after}


__all__ = ["PlanError", "branch", "diff", "fabricmanager_wanted", "parse_checksum", "plan", "predict_reboot", "version_key"]
