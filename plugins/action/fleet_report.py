# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""fleet_report: on the controller itself, written by the controller's worker without a module run (see
plugin_utils._in_process); anywhere else, the module."""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.files import ControllerFiles
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._report.fleet_task import ARGUMENT_SPEC, run
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._in_process import InProcessAction


class ActionModule(InProcessAction):
    MODULE = "gpufleet.lifecycle.fleet_report"
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run_task(self, params, check_mode):
        return run(params, ControllerFiles(check_mode))
