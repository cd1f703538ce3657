# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Unknown variables with the collection's prefixes: a typo refused before any node is touched (private).

A misspelt ``gpufleet_stop_flie`` would leave the stop switch on another file, ``gpufleet_target`` would roll out the
whole group, ``gpu_firmware_activte: false`` would leave activation on. Every host variable whose name starts with one
of ``PREFIXES`` must be a name the collection knows; an unknown one is refused naming the closest known one.

The known names are derived from the collection's own files (``known_variables``), never a hand copy:

- what a user can set: the options of every entry point in ``roles/*/meta/argument_specs.yml``, the keys of
  ``roles/*/defaults/main.yml`` and the playbook variables documented in each ``playbooks/*.yml`` header comment;
- what the roles and playbooks set themselves (a fact cache or a later batch brings them back into hostvars): the keys of
  ``roles/*/vars/main.yml``, and in every task file the keys of ``set_fact`` and of ``vars``, ``register`` and
  ``loop_var`` names.
"""

from __future__ import annotations

import difflib
import os
import re

PREFIXES = ("gpufleet_", "nvidia_driver_", "gpu_firmware_", "nic_firmware_", "ofed_", "node_maintenance_", "gpu_validate_", "preflight_", "rollout_")
SET_FACT = ("set_fact", "ansible.builtin.set_fact", "ansible.legacy.set_fact")
TASK_LISTS = ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always")
_NAME = re.compile(r"\b(?:" + "|".join(PREFIXES) + r")[a-z0-9_]*[a-z0-9]")
HOSTS_SHOWN = 3


class UnknownVariablesError(ValueError):
    """The collection's own files cannot be read (a broken install): the check cannot tell known names."""


def watched(name):
    return isinstance(name, str) and name.startswith(PREFIXES)


def collection_root():
    """The collection's folder (this file is plugins/module_utils/_rollout/variables.py in it)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _yaml_files(folder):
    for top, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            if name.endswith((".yml", ".yaml")):
                yield os.path.join(top, name)


def _keys(doc):
    return list(doc) if isinstance(doc, dict) else []


def _task_names(task):
    """The variable names a task or play sets (set_fact keys, vars keys, register, loop_var), and its nested tasks."""
    names = []
    if not isinstance(task, dict):
        return names
    for module in SET_FACT:
        names.extend(k for k in _keys(task.get(module)) if k not in ("cacheable",))
    names.extend(_keys(task.get("vars")))
    if isinstance(task.get("register"), str):
        names.append(task["register"])
    loop_control = task.get("loop_control")
    if isinstance(loop_control, dict) and isinstance(loop_control.get("loop_var"), str):
        names.append(loop_control["loop_var"])
    for key in TASK_LISTS:
        for inner in task.get(key) or []:
            names.extend(_task_names(inner))
    return names


def _documented(path):
    """The prefixed names in a playbook's leading comment block (its documented variables)."""
    names = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            stripped = line.strip()
            if stripped == "---" or not stripped:
                continue
            if not stripped.startswith("#"):
                break
            names.extend(_NAME.findall(stripped))
    return names


def known_variables(root, load):
    """``{name: where it is declared}`` for every prefixed variable the collection knows (first declaration wins).

    ``load(path)`` parses one YAML file (the filter passes a safe YAML loader; module_utils import no YAML library) and
    raises UnknownVariablesError when it cannot.
    """
    known = {}

    def add(names, where):
        for name in names:
            if watched(name):
                known.setdefault(name, where)

    roles = os.path.join(root, "roles")
    playbooks = os.path.join(root, "playbooks")
    if not os.path.isdir(roles):
        raise UnknownVariablesError(f"{roles} is missing: this collection's install is broken (reinstall it)")
    for role in sorted(os.listdir(roles)):
        base = os.path.join(roles, role)
        specs = os.path.join(base, "meta", "argument_specs.yml")
        if os.path.isfile(specs):
            entries = (load(specs) or {}).get("argument_specs") or {}
            for entry in entries.values():
                add(_keys((entry or {}).get("options")), os.path.relpath(specs, root))
        for kind in ("defaults", "vars"):
            path = os.path.join(base, kind, "main.yml")
            if os.path.isfile(path):
                add(_keys(load(path)), os.path.relpath(path, root))
        for kind in ("tasks", "handlers"):
            for path in _yaml_files(os.path.join(base, kind)):
                for task in load(path) or []:
                    add(_task_names(task), os.path.relpath(path, root))
    for path in _yaml_files(playbooks) if os.path.isdir(playbooks) else []:
        add(_documented(path), os.path.relpath(path, root))
        for play in load(path) or []:
            add(_task_names(play), os.path.relpath(path, root))
    return known


def unknown_variables(names_by_host, known):
    """``[{"variable", "hosts", "closest"}]``: each watched name no host may carry, with the hosts that carry it (sorted)."""
    hosts_of = {}
    for host, names in names_by_host.items():
        for name in names:
            if watched(name) and name not in known:
                hosts_of.setdefault(name, []).append(host)
    candidates = sorted(known)
    found = []
    for name in sorted(hosts_of):
        closest = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
        found.append({"variable": name, "hosts": sorted(hosts_of[name]), "closest": closest[0] if closest else None})
    return found


def describe(entry):
    """One line: the variable, where it is set, and the closest known name (never its value: it could be a secret)."""
    hosts = entry["hosts"]
    shown = ", ".join(hosts[:HOSTS_SHOWN]) + (f" and {len(hosts) - HOSTS_SHOWN} more" if len(hosts) > HOSTS_SHOWN else "")
    hint = f"did you mean {entry['closest']}?" if entry["closest"] else "no known variable is close; see docs/rollout.md and the roles' READMEs"
    return f"{entry['variable']} (set for {shown}) is not a variable of gpufleet.lifecycle: {hint}"
