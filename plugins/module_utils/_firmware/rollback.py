# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Which GPU firmware package the gpu_firmware role's rollback flashes (private: may change without notice).

A node's state file is written by root on that node: it says which *version* worked before, never which file the
controller flashes. The package and its checksum come from the controller's inventory (``gpu_firmware_packages``, by
version), as the driver's and the NIC's rollbacks take theirs from ``nvidia_driver_runfiles`` and
``nic_firmware_images``; a version the inventory lacks is refused, and nothing changes.
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

COMPONENT = "gpu_firmware"
PACKAGES = "gpu_firmware_packages"
_CHECKSUM = re.compile(r"(?:sha256:)?[0-9a-fA-F]{64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_VERSION = 128
NOTHING_CHANGED = "Nothing was changed"


class RollbackError(GpufleetError):
    """The controller's own rollback variables are wrong (the operator fixes them)."""


def _shown(value):
    """A value read from a node, short and on one line, for a message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_entry(where, entry):
    if not isinstance(entry, dict):
        raise RollbackError(f"{where} must be a mapping {{package, checksum}}: give the package's path and its sha256")
    package, checksum = entry.get("package"), entry.get("checksum")
    if not isinstance(package, str) or not os.path.isabs(package) or _CONTROL.search(package):
        raise RollbackError(f"{where}.package must be the absolute path of the .fwpkg on gpu_firmware_delegate_to")
    if not isinstance(checksum, str) or not _CHECKSUM.fullmatch(checksum):
        raise RollbackError(f"{where}.checksum must be the package's sha256 (64 hex digits, optionally after sha256:)")
    return {"package": package, "checksum": checksum}


def check_packages(packages):
    """``{version: {package, checksum}}`` as given, every entry checked (None counts as none given)."""
    if packages is None:
        return {}
    if not isinstance(packages, dict):
        raise RollbackError(f"{PACKAGES} must be a mapping of version to {{package, checksum}}, not a {type(packages).__name__}")
    checked = {}
    for version, entry in packages.items():
        if not isinstance(version, str) or not version.strip():
            raise RollbackError(f"{PACKAGES} has the key {version!r}: each key is a firmware package version string (quote it in YAML)")
        checked[version] = _check_entry(f"{PACKAGES}[{version!r}]", entry)
    return checked


def _wanted_version(state):
    """The version the node state file says to go back to (the last known good one, or the one before it after a
    flash that finished), and where in the file it is; (None, where) when the file records none."""
    state = state if isinstance(state, dict) else {}
    known = state.get("last_known_good")
    lkg = known.get(COMPONENT) if isinstance(known, dict) else None
    lkg = lkg if isinstance(lkg, dict) else {}
    history = state.get("history")
    runs = [h for h in history if isinstance(h, dict) and h.get("component") == COMPONENT] if isinstance(history, list) else []
    where = f"last_known_good.{COMPONENT}.version"
    if runs and runs[-1].get("result") == "ok":
        # the last flash finished: its package is the last known good one, the rollback goes to the one before it
        lkg = lkg.get("previous") if isinstance(lkg.get("previous"), dict) else {}
        where = f"last_known_good.{COMPONENT}.previous.version"
    return lkg.get("version"), where


def rollback_target(state, packages=None, package="", checksum=""):
    """The package to flash back to: ``{version, package, checksum, source}``, or ``{"refused": message}``.

    ``state`` is a gpufleet.lifecycle.node_state result (only its versions are read); ``packages`` the controller's
    ``gpu_firmware_packages``; ``package`` and ``checksum`` the operator's gpu_firmware_rollback_package and
    gpu_firmware_rollback_checksum, which win when given.
    """
    known = check_packages(packages)
    if package or checksum:
        entry = _check_entry("gpu_firmware_rollback_package / gpu_firmware_rollback_checksum", {"package": package, "checksum": checksum})
        return {"version": None, "source": "gpu_firmware_rollback_package", **entry}
    version, where = _wanted_version(state)
    if version is None or version == "":
        return {"refused": (
            f"no firmware package to roll back to: the node state file records none ({where}); set gpu_firmware_rollback_package and "
            f"gpu_firmware_rollback_checksum. {NOTHING_CHANGED}"
        )}
    if not isinstance(version, str) or len(version) > MAX_VERSION or _CONTROL.search(version) or version != version.strip():
        return {"refused": (
            f"the node state file's {where} is {_shown(version)}, not a firmware version: repair the file (or remove the entry) "
            f"or set gpu_firmware_rollback_package and gpu_firmware_rollback_checksum. {NOTHING_CHANGED}"
        )}
    if version not in known:
        listed = sorted(known)
        have = f"it has {', '.join(listed[:10])}{' and more' if len(listed) > 10 else ''}" if listed else "it is empty"
        return {"refused": (
            f"the node state file says the firmware to roll back to is {version}, but {PACKAGES} on the controller has no package "
            f"for that version ({have}): add {version!r}: {{package: <its .fwpkg on gpu_firmware_delegate_to>, checksum: sha256:<hex>}} "
            f"to {PACKAGES}, or set gpu_firmware_rollback_package and gpu_firmware_rollback_checksum. A package path in the node's "
            f"own file is never flashed. {NOTHING_CHANGED}"
        )}
    return {"version": version, "source": PACKAGES, **known[version]}


NODES_SHOWN = 3


def _nodes(names):
    shown = ", ".join(names[:NODES_SHOWN])
    return shown + (f" and {len(names) - NODES_SHOWN} more" if len(names) > NODES_SHOWN else "")


def preflight_problem(nodes):
    """'' when every node whose GPU firmware a rollout changes could be rolled back; else the refusal, before any flash.

    ``nodes``: one ``{node, version, packages, package, checksum}`` per such node: ``version`` the firmware package
    version it runs now (the gpu_firmware plan's ``gpu_firmware_before.bundle``, the last known good one of its state
    file), which a rollback of this rollout's flash goes back to; the others its ``gpu_firmware_packages``,
    ``gpu_firmware_rollback_package`` and ``gpu_firmware_rollback_checksum``. A malformed entry raises RollbackError.
    """
    unlisted, unknown = {}, []
    for node in nodes or []:
        name = str(node.get("node"))
        known = check_packages(node.get("packages"))
        package, checksum = node.get("package") or "", node.get("checksum") or ""
        if package or checksum:
            _check_entry(f"{name}: gpu_firmware_rollback_package / gpu_firmware_rollback_checksum", {"package": package, "checksum": checksum})
            continue
        version = node.get("version")
        if version is None or version == "":
            unknown.append(name)
        elif not isinstance(version, str) or version not in known:
            unlisted.setdefault(_shown(version) if not isinstance(version, str) or _CONTROL.search(version) else version, []).append(name)
    problems = [
        f"{_nodes(names)} run{'s' if len(names) == 1 else ''} GPU firmware {version}, which {PACKAGES} on the controller lacks: add "
        f"{version!r}: {{package: <its .fwpkg on gpu_firmware_delegate_to>, checksum: sha256:<hex>}} to {PACKAGES} (or set "
        f"gpu_firmware_rollback_package and gpu_firmware_rollback_checksum)"
        for version, names in sorted(unlisted.items())
    ]
    if unknown:
        problems.append(
            f"the node state file of {_nodes(unknown)} records no GPU firmware version (no flash through gpufleet finished there yet): "
            f"set gpu_firmware_rollback_package and gpu_firmware_rollback_checksum to the package {'it runs' if len(unknown) == 1 else 'they run'} now"
        )
    if not problems:
        return ""
    return (
        "a node that fails after its GPU firmware flash could not be rolled back, since a rollback flashes only a package the "
        "controller lists for the version the node ran before: " + "; ".join(problems)
    )
