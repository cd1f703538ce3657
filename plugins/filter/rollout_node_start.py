# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The preflight's verdict on a node: rollout_node_start (gpufleet.lifecycle).

Documentation in the adjacent rollout_node_start.yml; the logic is in plugins/module_utils/_rollout/node_start.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_node_start = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._rollout.node_start")


def rollout_node_start(read, rollout_id, run_nonce, slurm_name, unavailable=None, baseline=None):
    """done, resuming, prior_result, busy, held, skip_reason, skipped and result of one node at the preflight."""
    try:
        return _node_start.node_start(read, rollout_id, run_nonce, slurm_name, unavailable, baseline)
    except _node_start.NodeStartError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.rollout_node_start: {exc}") from exc


class FilterModule:
    """gpufleet.lifecycle preflight verdict filter."""

    def filters(self):
        return {"rollout_node_start": rollout_node_start}
