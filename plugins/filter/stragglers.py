# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The gpufleet.lifecycle.stragglers filter: nodes slower than the fleet's median in the same run.

Documentation in the adjacent stragglers.yml; the logic is in plugins/module_utils/_validate/stragglers.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._lazy import lazy_module

_stragglers = lazy_module("ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate.stragglers")


def stragglers(nodes, tolerance_pct=10, metrics=None, min_nodes=3):
    """Nodes more than tolerance_pct percent below the fleet median of a gpu_validate measurement."""
    try:
        # metrics as given (a string is refused there, not split into letters); None means the defaults.
        return _stragglers.find_stragglers(nodes, tolerance_pct=tolerance_pct, min_nodes=min_nodes,
                                           metrics=_stragglers.DEFAULT_METRICS if metrics is None else metrics)
    except _stragglers.StragglerError as exc:
        raise AnsibleFilterError(f"gpufleet.lifecycle.stragglers: {exc}") from exc


class FilterModule:
    """gpufleet.lifecycle straggler filter."""

    def filters(self):
        return {"stragglers": stragglers}
