# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The node state file ``/etc/ansible/facts.d/gpufleet.fact`` (private: may change without notice).

A JSON document that Ansible also reads as ``ansible_local.gpufleet``::

    {
      "schema": 1,
      "last_known_good": {"driver": {"version": "550.90.07", "method": "runfile", ..., "recorded_at": "..."},
                          "fabricmanager": {"version": "550.90.07", ...}},
      "rollout": {"id": "2024-06-rollout", "phase": "driver", "updated_at": "..."},
      "history": [{"time", "component", "action", "before", "after", "result", "rollout_id", "details"}]
    }

The functions on documents (``record_last_known_good``, ``append_history``, ``set_phase``) are pure
(they change the dict they get and say whether anything changed); ``load`` and ``save`` do the I/O,
``save`` atomically (temporary file in the same folder, fsync, rename), so a node that loses power
mid-write keeps the previous document.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import tempfile

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

DEFAULT_PATH = "/etc/ansible/facts.d/gpufleet.fact"
SCHEMA = 1
HISTORY_LIMIT = 200
COMPONENTS = ("driver", "fabricmanager", "gpu_firmware", "nic_firmware")


class StateFileError(GpufleetError):
    """The state file exists but cannot be read or written."""

    def __init__(self, msg, path=None):
        super().__init__(msg, path=path)
        self.path = path


def now_iso():
    """UTC time stamp with seconds, as written into the document."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def empty():
    return {"schema": SCHEMA, "last_known_good": {}, "rollout": {"id": None, "phase": None, "updated_at": None}, "history": []}


def _normalise(data, path):
    if not isinstance(data, dict):
        raise StateFileError(f"{path} holds JSON but not an object: move it aside or delete it to start a new node state", path)
    doc = empty()
    doc.update(data)
    if not isinstance(doc.get("last_known_good"), dict):
        doc["last_known_good"] = {}
    if not isinstance(doc.get("history"), list):
        doc["history"] = []
    rollout = doc.get("rollout") if isinstance(doc.get("rollout"), dict) else {}
    doc["rollout"] = {"id": rollout.get("id"), "phase": rollout.get("phase"), "updated_at": rollout.get("updated_at")}
    return doc


def load(path=DEFAULT_PATH):
    """The document at ``path``; an empty document when the file does not exist yet."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return empty()
    except OSError as exc:
        raise StateFileError(f"cannot read the node state file {path}: {exc}", path) from exc
    if not text.strip():
        return empty()
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StateFileError(
            f"the node state file {path} is not valid JSON ({exc}): fix it, or move it aside to start a new node state "
            "(rollback then has no last known good version to return to)",
            path,
        ) from exc
    return _normalise(data, path)


def save(path, data):
    """Write ``data`` to ``path`` atomically (mode 0644, folder created when missing)."""
    folder = os.path.dirname(path) or "."
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".gpufleet.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(data, handle, indent=2, sort_keys=True)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise StateFileError(f"cannot write the node state file {path}: {exc}", path) from exc


def last_known_good(data, component):
    """The recorded entry for ``component`` (a dict with at least ``version``) or None."""
    entry = (data.get("last_known_good") or {}).get(component)
    return copy.deepcopy(entry) if entry else None


def record_last_known_good(data, component, version, details=None, now=None):
    """Record ``version`` (plus ``details``) as the last known good ``component``; True when that changed it."""
    if not version:
        raise ValueError("record_last_known_good needs a version")
    entry = {"version": version}
    entry.update(details or {})
    current = data.setdefault("last_known_good", {}).get(component) or {}
    if {k: v for k, v in current.items() if k != "recorded_at"} == entry:
        return False
    entry["recorded_at"] = now or now_iso()
    data["last_known_good"][component] = entry
    return True


def append_history(data, component, action, before=None, after=None, result="ok", rollout_id=None, details=None, now=None, limit=HISTORY_LIMIT):
    """Append one history entry (oldest entries dropped beyond ``limit``); returns the entry."""
    entry = {
        "time": now or now_iso(),
        "component": component,
        "action": action,
        "before": before,
        "after": after,
        "result": result,
        "rollout_id": rollout_id if rollout_id is not None else (data.get("rollout") or {}).get("id"),
    }
    if details:
        entry["details"] = details
    history = data.setdefault("history", [])
    history.append(entry)
    del history[: max(0, len(history) - limit)]
    return entry


def set_phase(data, rollout_id, phase, now=None):
    """Set the current rollout id and phase; True when either changed (the time stamp alone is no change)."""
    rollout = data.setdefault("rollout", {})
    if rollout.get("id") == rollout_id and rollout.get("phase") == phase:
        return False
    rollout.update(id=rollout_id, phase=phase, updated_at=now or now_iso())
    return True


def update(path, change):
    """Load, apply ``change(doc)`` (returns True when it changed something), save when it did; returns (changed, doc)."""
    doc = load(path)
    changed = bool(change(doc))
    if changed:
        save(path, doc)
    return changed, doc


__all__ = [
    "DEFAULT_PATH",
    "StateFileError",
    "append_history",
    "empty",
    "last_known_good",
    "load",
    "record_last_known_good",
    "save",
    "set_phase",
    "update",
]
