# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What ansible-core registers for a ``no_log`` option, and the forms a secret takes in text (private).

Modules whose options hold free text or many passwords (rollout_report, bmc_inventory) make them ``no_log`` as a whole
so that the "Invoked with" line shows none of it, then take back out of ``no_log_values`` what that registered and
mask with their secrets only: the same two helpers for both.
"""

from __future__ import annotations

from collections.abc import Mapping


def no_log_leaves(value):
    """The strings AnsibleModule registers as ``no_log`` values for an option holding ``value``: every string and number
    at any depth, not the keys of a mapping (ansible-core's ``_return_datastructure_name``). A loop, not recursion."""
    leaves, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            if item:
                leaves.append(item if isinstance(item, str) else item.decode("utf-8", "surrogateescape"))
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif item is None or isinstance(item, bool):
            continue
        elif isinstance(item, (int, float)):
            leaves.append(str(item))
        else:
            try:
                stack.extend(item)
            except TypeError:
                continue
    return leaves


def masked_forms(values):
    """``values`` as a message can hold them: as given, and as Python's ``repr`` writes them (an error quoting with ``!r``
    doubles a backslash)."""
    return {form for value in values if value for form in (value, repr(value)[1:-1]) if form}
