# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""bmc_inventory's passwords masked in time linear in the fleet (private: may change without notice).

ansible-core masks a result with every ``no_log`` value, one pass over the whole result per value
(``remove_values``): quadratic where each of thousands of BMCs has its own password (1,000 BMCs: 4.3 s, 4,000: about
70 s). Here a password is sent to its own BMC only, so only that BMC's entry can hold it: each entry is masked with
its own password. The rest (the summary, a message, the invocation) holds short strings - names, addresses, users -
each checked against every password with one set lookup per substring length, whatever their number.

``bmcs`` is ``no_log`` as a whole so that ansible-core logs ``bmcs=NOT_LOGGING_PARAMETER`` in the "Invoked with" line:
a password in ``str(bmcs)`` is escaped (``\\``, tab, quotes, newline) and escapes its substring masking. That makes
every leaf of ``bmcs`` (names, addresses, users, ports) a ``no_log`` value; :func:`finish` masks the passwords and
takes those values back out of ``module.no_log_values``, so that a host name or ``443`` is not masked in the result.
"""

from __future__ import annotations

import json

from ansible.module_utils.common.parameters import remove_values
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._no_log import masked_forms, no_log_leaves

MASKED = "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"  # what ansible-core puts in place of a no_log option's value


def forms(password):
    """The password as text can hold it: as given, and as Python's ``repr`` writes it (a message quoting with ``!r``)."""
    return masked_forms([password])


def mask_own(result, password):
    """One BMC's ``result`` with its own password masked as ``remove_values`` masks it (a copy only when it holds it).

    JSON escapes a string character by character, so a form found in no string of the result is absent from its text.
    """
    secret = forms(password)
    text = json.dumps(result)
    if any(json.dumps(form)[1:-1] in text for form in secret):
        return remove_values(result, secret)
    return result


class Secrets:
    """Every password of the call, to mask short strings in O(length x distinct password lengths) each."""

    def __init__(self, passwords):
        self.values = frozenset(form for password in passwords if password for form in forms(password))
        self.lengths = sorted({len(value) for value in self.values})

    def found_in(self, text):
        """The passwords (or their quoted forms) that ``text`` holds."""
        found = set()
        for length in self.lengths:
            if length > len(text):
                break
            found.update(self.values.intersection(text[i : i + length] for i in range(len(text) - length + 1)))
        return found

    def mask(self, value):
        """``value`` (short strings in dicts and lists) with every password masked as ``remove_values`` masks it."""
        if isinstance(value, str):
            found = self.found_in(value)
            return remove_values(value, found) if found else value
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, (int, float)):
            return MASKED if self.found_in(str(value)) else value
        if isinstance(value, dict):
            return {key: self.mask(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.mask(item) for item in value]
        return value


def passwords_of(params):
    """Every password the call was given (``bmcs[].password``)."""
    return [bmc["password"] for bmc in params.get("bmcs") or [] if isinstance(bmc, dict) and isinstance(bmc.get("password"), str)]


def invocation(params, secrets):
    """``module_args`` as ansible-core would echo them with only the passwords masked."""
    args = dict(params)
    args["bmcs"] = [dict(bmc, password=MASKED) if isinstance(bmc, dict) else bmc for bmc in params.get("bmcs") or []]
    return secrets.mask(args)


def masked(params, result):
    """bmc_inventory's ``result`` with every password masked: the inventories were masked BMC by BMC (:func:`mask_own`,
    in ``run``), the rest (the summary, a message) is masked here with every password."""
    secrets = Secrets(passwords_of(params))
    return {key: (value if key == "inventories" else secrets.mask(value)) for key, value in result.items()}


def finish(module, result):
    """``exit_json`` (``fail_json`` for a result with ``failed``) of bmc_inventory, with every password masked.

    The values ``bmcs`` registered as ``no_log`` are taken out of ``module.no_log_values`` once the result and the
    invocation are masked: ``exit_json`` would mask every host name and address, one pass over the result per value.
    """
    result = masked(module.params, result)
    result["invocation"] = {"module_args": invocation(module.params, Secrets(passwords_of(module.params)))}
    module.no_log_values.difference_update(no_log_leaves(module.params.get("bmcs")))
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)
