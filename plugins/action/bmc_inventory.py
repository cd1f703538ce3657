# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""bmc_inventory: on the controller itself, the BMCs are read by the controller's worker without a module run (see
plugin_utils._in_process); anywhere else, the module."""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._redfish.inventory import ARGUMENT_SPEC, run, warnings
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._redfish.secrets import masked
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._in_process import InProcessAction


class ActionModule(InProcessAction):
    MODULE = "gpufleet.lifecycle.bmc_inventory"
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run_task(self, params, check_mode):
        result = run(params)
        if warnings(params):
            result["warnings"] = warnings(params)
        return result

    def masked(self, outcome, params, no_log_values):
        # Each BMC's entry with its own password, the rest with every one: linear in the fleet (_redfish.secrets).
        del no_log_values
        return masked(params, outcome)
