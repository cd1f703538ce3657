# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The sliding window's filters: admission_order, admission_stop, admission_waiters and gate_stop (gpufleet.lifecycle).

Documentation in the adjacent admission_order.yml, admission_stop.yml, admission_waiters.yml and gate_stop.yml; the logic is in
plugins/module_utils/_rollout/window.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_window = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.window")


def admission_order(hosts, job_ends=None, held=None, names=None):
    """Hosts held or finished by this rollout first, then idle ones, then by their jobs' end time (stable)."""
    try:
        return _window.admission_order(hosts, job_ends, held, names)
    except _window.WindowError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.admission_order: {exc}") from exc


def admission_stop(stop_file_present, failed=None, failure_budget=0, stop_file="the stop file", earlier=""):
    """Why no new node may be admitted: an earlier stop, the stop file, or the failure budget spent ('' when one may)."""
    try:
        return _window.stop_before_admission(bool(stop_file_present), failed, int(failure_budget), stop_file, earlier or "")
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.admission_stop: failure_budget must be a whole number: {exc}") from exc


def gate_stop(failed, gate, size, max_fail_percentage=0):
    """Why the rollout stops after a canary or gate ('' when it goes on): a canary failure, or a gate over its percentage."""
    try:
        return _window.gate_verdict(gate, size, failed, max_fail_percentage)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.gate_stop: gate, size and max_fail_percentage must be whole numbers: {exc}") from exc


def admission_waiters(forks, budget):
    """How many nodes may wait for capacity at once (the forks left when every slot of the budget runs a node, at least 1)."""
    try:
        return _window.waiters_allowed(forks, budget)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.admission_waiters: forks and budget must be whole numbers: {exc}") from exc


class FilterModule:
    """gpufleet.lifecycle sliding window filters."""

    def filters(self):
        return {"admission_order": admission_order, "admission_stop": admission_stop, "admission_waiters": admission_waiters,
                "gate_stop": gate_stop}
