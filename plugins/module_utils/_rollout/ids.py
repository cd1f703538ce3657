# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rollout id: one rule and one message for every module and filter that takes one (private).

A rollout id goes into the node state file, Slurm drain reasons (``OWNER_TAG:ROLLOUT_ID: TEXT``), Kubernetes
annotations and file names of the evidence: letters, digits, ``.``, ``_`` and ``-``, 1 to 64, so no space, newline
or ``:`` can reach any of them.
"""

from __future__ import annotations

import re

ROLLOUT_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
ROLLOUT_ID_RULE = "letters, digits, '.', '_' and '-' (1 to 64)"
_SHOWN = 80


def rollout_id_problem(value, option="rollout_id", required=True):
    """None when ``value`` is a rollout id (or None and not required); else the one message for it, naming ``option``."""
    if value is None and not required:
        return None
    if isinstance(value, str) and ROLLOUT_ID.fullmatch(value):
        return None
    if not isinstance(value, str):
        shown = f"of type {type(value).__name__}"
    else:
        shown = repr(value) if len(value) <= _SHOWN else f"of {len(value)} characters"
    return f"{option} {shown} may hold only {ROLLOUT_ID_RULE}"
