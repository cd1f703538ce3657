# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvfwupd: the module, run as Ansible runs any module, with ``bmc.password`` given as ``bmc_password``.

AnsibleModule logs its arguments ("Invoked with", syslog or the journal) with a dict option written as ``str(dict)``,
whose escaping (a backslash, a tab, a quote, a newline) defeats the masking of a ``no_log`` sub-option: a password
holding one is logged in clear. A top-level ``no_log`` option is logged as ``NOT_LOGGING_PARAMETER``.
"""

from __future__ import annotations

from ansible.plugins.action.normal import ActionModule as NormalAction


def with_top_level_password(args):
    """The task's ``args`` with ``bmc.password`` moved to ``bmc_password`` (left as they are when both are given: the
    module refuses them)."""
    bmc = args.get("bmc")
    if not isinstance(bmc, dict) or "password" not in bmc or args.get("bmc_password") is not None:
        return args
    moved = dict(args, bmc={key: value for key, value in bmc.items() if key != "password"})
    moved["bmc_password"] = bmc["password"]
    return moved


class ActionModule(NormalAction):
    def run(self, tmp=None, task_vars=None):
        self._task.args = with_top_level_password(self._task.args)
        return super().run(tmp, task_vars)
