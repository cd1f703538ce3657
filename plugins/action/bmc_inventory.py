# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""bmc_inventory: on the controller itself, the BMCs are read by the controller's worker without a module run (see
plugin_utils._in_process); anywhere else, the module."""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._redfish.inventory import ARGUMENT_SPEC, run
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._in_process import InProcessAction


class ActionModule(InProcessAction):
    MODULE = "gpufleet.lifecycle.bmc_inventory"
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run_task(self, params, check_mode):
        return run(params)
