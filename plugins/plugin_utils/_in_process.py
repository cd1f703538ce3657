# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Action plugins that run a controller-side module's own code in the controller's worker (private).

``fleet_report`` and ``bmc_inventory`` run on the controller (``hosts: localhost`` or ``delegate_to: localhost``). As
modules, every run starts a Python process, imports ``ansible.module_utils.basic`` and gets its arguments as JSON: the
fleet's records (3.6 KB a node) go out, and come back in the result with the report and the ``invocation`` echo. That
costs the controller more than the work itself: over 1,000 nodes the report task took 8.1 s through the module
(docs/performance.md). Run in the worker the action plugin already is, the same code gets the arguments as they are.

The task runs so only where that is the same as running the module: on the local connection, without become (the
module would run as the become user), and with SELinux off on the controller (the module labels the files it writes).
Anywhere else the action runs the module, as Ansible would without the action plugin. Either way the arguments are
checked against the module's own argument spec, and the values marked ``no_log`` there are removed from the result.
"""

from __future__ import annotations

import json

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

try:  # a ctypes binding of libselinux: ImportError where the library is absent
    from ansible.module_utils.compat import selinux
except ImportError:
    selinux = None


def controller_selinux_enabled():
    """Whether SELinux enforces labels on the controller (False where libselinux is absent)."""
    if selinux is None:
        return False
    try:
        return selinux.is_selinux_enabled() == 1
    except OSError:
        return False


def without_no_log_values(result, no_log_values):
    """``result`` with every ``no_log`` value masked as a module's result is (``remove_values``).

    ``remove_values`` copies the whole result, which for a fleet's report costs more than building it (0.8 s for 1,000
    nodes); the report is usually clean already (``build_report`` masks the secrets it is given). So the result is
    first searched as JSON text: a value found in no string, number or key of it is in none of them, as JSON escapes a
    string character by character. Only a result in which one is found, or that is not plain JSON, is copied masked.
    """
    if not no_log_values:
        return result
    try:
        text = json.dumps(result)
    except (TypeError, ValueError):
        return remove_values(result, no_log_values)
    if any(str(value) in text or json.dumps(str(value))[1:-1] in text for value in no_log_values):
        return remove_values(result, no_log_values)
    return result


class InProcessAction(ActionBase):
    """Subclasses set ``MODULE`` (the module's full name), ``ARGUMENT_SPEC`` (the module's) and ``run_task``."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    MODULE = ""
    ARGUMENT_SPEC = None

    def run_task(self, params, check_mode):
        """The module's result for validated ``params``; raises GpufleetError for a refusal."""
        raise NotImplementedError

    def masked(self, outcome, params, no_log_values):
        """``outcome`` as the module would return it: its no_log values masked (a subclass may mask it its own way)."""
        del params
        return without_no_log_values(outcome, no_log_values)

    def in_process(self):
        """Whether running the code here is the same as running the module: the local connection, no become, no SELinux."""
        return self._connection.transport == "local" and not self._play_context.become and not controller_selinux_enabled()

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = self.module_args() if self.in_process() else None
        if args is None:
            result.update(self._execute_module(module_name=self.MODULE, module_args=self._task.args, task_vars=task_vars))
            return result
        # Checked as AnsibleModule checks them, with the same messages.
        validation = ArgumentSpecValidator(self.ARGUMENT_SPEC).validate(args)
        if validation.error_messages:
            msg = validation.errors.msg
            if isinstance(validation.errors[0], UnsupportedError):
                msg = f"Unsupported parameters for ({self.MODULE}) module: {msg}"
            # A message can quote a value (a password given as a port, a secret as a format): masked as the result is.
            result.update(self.masked({"msg": msg}, validation.validated_parameters, validation._no_log_values), failed=True, changed=False)
            return result
        try:
            outcome = self.run_task(validation.validated_parameters, self._task.check_mode)
        except GpufleetError as exc:
            outcome = dict(exc.fail_kwargs(), failed=True, changed=False)
        result.update(self.masked(outcome, validation.validated_parameters, validation._no_log_values))
        return result

    def module_args(self):
        """The task's arguments as the module would get them: plain JSON values (Ansible's own string and container types
        would show in messages), or None when they are not plain JSON (the module is run then, with Ansible's encoder)."""
        try:
            return json.loads(json.dumps(self._task.args))
        except (TypeError, ValueError):
            return None
